//! A device whose wall clock steps while it acts: libfaketime's timestamp
//! file moves the probe's wall clock (never its monotonic one, as a real
//! `date -s` or NTP step does) forwards, then backwards, mid-run, while the
//! hub's broadcasts keep coming with a time to act.
//!
//! The clock model works on the monotonic clock, so a wall step neither
//! splits nor widens it: every offset the probe acted on holds its own
//! truth (whatever the wall clock said then), every action lands on the
//! agent's time within its bound, an action planned before a step and done
//! after it is on time too, the bound after each step is within twice the
//! bound before it, and the report names both steps and holds the true
//! action skew in its interval.

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{
    Reaped, count_of, json_report, probe_records, signal, start_agent, trigger_with_lead,
    wait_until,
};
use nix::sys::signal::Signal;
use skewscope_core::record::{MessageKey, ProbeRecord};

/// This process's wall clock against the raw monotonic clock the probe
/// stamps with, read at one moment: (raw, wall − raw), the real level then
/// (nothing shifts this process's clocks).
fn real_level() -> (i64, i64) {
    let s = skewscope_os::clock::now_raw();
    (s.mono_ns as i64, s.wall_ns as i64 - s.mono_ns as i64)
}

/// The real level at raw moment `raw`, between two readings: the host's
/// time daemon moves the wall clock against the raw one at its frequency
/// correction (a few ppm, steadily over a minute), so a level read once
/// would be tens of microseconds off at the run's other end.
fn level_at((raw0, level0): (i64, i64), (raw1, level1): (i64, i64), raw: i64) -> i64 {
    if raw1 == raw0 {
        return level0;
    }
    level0 + ((level1 - level0) as i128 * (raw - raw0) as i128 / (raw1 - raw0) as i128) as i64
}

#[test]
fn actions_across_wall_clock_steps_land_on_the_agents_time() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr, agent_log) = start_agent(dir.path());
    let level_before = real_level();
    let shift_file = dir.path().join("shift");
    std::fs::write(&shift_file, "+0\n").unwrap();
    let log = dir.path().join("stepping.sklog");
    let mut probe = Reaped(
        Command::new(common::sibling_binary("skewscope-probe"))
            .args(["--url", &format!("ws://{addr}/ws"), "--name", "stepping"])
            .args([
                "--connections",
                "3",
                "--duration",
                "120s",
                "--act-at",
                "/at_ns",
            ])
            .args(["--time-interval", "200ms", "--out", log.to_str().unwrap()])
            .env("LD_PRELOAD", common::faketime_lib())
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .env("FAKETIME_TIMESTAMP_FILE", &shift_file)
            .env("FAKETIME_NO_CACHE", "1")
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_until("probe connected", || {
        count_of(&log, |r| matches!(r, ProbeRecord::ConnectionOpened(_))) == 3
    });
    wait_until("time exchanges answered", || {
        count_of(&log, |r| matches!(r, ProbeRecord::TimeSample(_))) >= 8
    });
    // Four broadcasts on the first wall clock; a step 50 ms ahead right
    // after one is received (its action, 1 s later, comes after the step);
    // four more; a step 120 ms back the same way; four more.
    let mut sent = 0;
    for shift in [None, Some("+0.05\n"), Some("-0.07\n")] {
        for i in 0..4 {
            trigger_with_lead(&addr, "1s");
            sent += 1;
            if i == 0
                && let Some(spec) = shift
            {
                // Step once every copy is received (its action planned),
                // a second before its time to act.
                wait_until("the copies before the step", || {
                    count_of(&log, |r| matches!(r, ProbeRecord::Receipt(_))) >= 3 * sent
                });
                std::fs::write(&shift_file, spec).unwrap();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        wait_until("every action so far", || {
            count_of(&log, |r| matches!(r, ProbeRecord::Action(_))) >= 3 * sent
        });
        // Exchanges on the new wall clock before the next step.
        let before = count_of(&log, |r| matches!(r, ProbeRecord::TimeSample(_)));
        wait_until("exchanges after the step", || {
            count_of(&log, |r| matches!(r, ProbeRecord::TimeSample(_))) >= before + 4
        });
    }
    signal(&probe.0, Signal::SIGTERM);
    assert!(probe.0.wait().unwrap().success());
    signal(&agent.0, Signal::SIGTERM);
    assert!(agent.0.wait().unwrap().success());

    // The truth: the agent's clock is the real one; the probe's monotonic
    // (raw) clock is real, so an action's true moment is its monotonic
    // reading plus the real level then, and its wall clock's shift then is
    // what its own stamp says beyond that level.
    let level_after = real_level();
    let level = |raw: u64| level_at(level_before, level_after, raw as i64);
    // libfaketime reads its file on every wall-clock read (tens of µs), so
    // a stamp's wall and monotonic readings are that far apart: the same
    // slack collector/tests/faults.rs allows its stepped probe.
    let pairing = 100_000;
    let mut by_seq: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    let mut bounds: Vec<(i64, u64)> = Vec::new();
    let mut across = 0;
    let records = probe_records(&log);
    let received: BTreeMap<(u32, MessageKey), skewscope_core::Stamp> = records
        .iter()
        .filter_map(|r| match r {
            ProbeRecord::Receipt(r) => Some(((r.conn, r.key), r.at)),
            _ => None,
        })
        .collect();
    for r in records {
        let ProbeRecord::Action(a) = r else { continue };
        assert_eq!(a.late_ns, 0, "{a:?}");
        let shift_then =
            |s: skewscope_core::Stamp| s.wall_ns as i64 - s.mono_ns as i64 - level(s.mono_ns);
        let (theta, bound) = (a.offset_ns.unwrap(), a.offset_bound_ns.unwrap());
        // Agent minus device wall, at the target: minus the shift then.
        let truth = -shift_then(a.target);
        assert!(
            (theta - truth).unsigned_abs() <= bound + pairing as u64,
            "offset {theta} ± {bound}, truth {truth}: {a:?}"
        );
        let done_true = a.done.mono_ns as i64 + level(a.done.mono_ns);
        let missed = done_true - a.act_at_ns as i64;
        let timer = a.done.mono_ns as i64 - a.target.mono_ns as i64;
        assert!(
            missed >= -(bound as i64) - pairing && missed <= bound as i64 + timer.max(0) + pairing,
            "acted {missed} ns from its time (bound {bound}, timer {timer}): {a:?}"
        );
        // Received (and planned) on one wall clock, done on another.
        let receipt = received[&(a.conn, a.key)];
        if (shift_then(receipt) - shift_then(a.done)).abs() > 10_000_000 {
            across += 1;
        }
        bounds.push((shift_then(a.done), bound));
        if let MessageKey::Seq(seq) = a.key {
            by_seq.entry(seq).or_default().push(done_true);
        }
    }
    assert!(
        across >= 1,
        "no action was planned before a step and done after it"
    );
    assert_eq!(by_seq.len(), 12);
    assert!(by_seq.values().all(|v| v.len() == 3), "{by_seq:?}");
    // The bound around each step: the widest after it within twice the
    // widest acted on before it. On loopback these bounds are tens of µs
    // and a loaded host's round trips alone move them threefold (measured:
    // 36 µs, then 114 µs with the suite running beside it), so the rule is
    // held above a floor of 0.5 ms: what it catches here is a step that
    // widens the bound (the model before this one left 2.24 s after two
    // +50 ms steps). The exact 2x rule is the clock model's property test
    // (core/src/clock/device.rs), on streams where noise is the seed's.
    let epoch = |shift: i64| (shift / 25_000_000).signum();
    let widest = |e: i64| {
        bounds
            .iter()
            .filter(|(s, _)| epoch(*s) == e)
            .map(|b| b.1)
            .max()
            .unwrap()
    };
    const FLOOR_NS: u64 = 500_000;
    let (first, ahead, behind) = (widest(0), widest(1), widest(-1));
    assert!(ahead <= 2 * first.max(FLOOR_NS), "{first} then {ahead}");
    assert!(
        behind <= 2 * first.max(ahead).max(FLOOR_NS),
        "{first}, {ahead} then {behind}"
    );
    eprintln!(
        "bounds by wall clock: {first}, {ahead}, {behind} ns; {across} action(s) planned across a step"
    );

    // The report names both steps and holds the true action skew.
    let (text, json) = json_report(&[&agent_log, &log]);
    let steps = json["probes"][0]["clock_steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{text}");
    let sizes: Vec<i64> = steps
        .iter()
        .map(|s| s["size_ns"].as_i64().unwrap())
        .collect();
    assert!((sizes[0] - 50_000_000).abs() < 5_000_000, "{sizes:?}");
    assert!((sizes[1] + 120_000_000).abs() < 5_000_000, "{sizes:?}");
    let truth_max = by_seq
        .values()
        .map(|v| v.iter().max().unwrap() - v.iter().min().unwrap())
        .max()
        .unwrap();
    let hi = json["actions"]["action_skew_corrected_ns"]["hi"]["max"]
        .as_i64()
        .unwrap();
    let lo = json["actions"]["action_skew_corrected_ns"]["lo"]["max"]
        .as_i64()
        .unwrap();
    assert!(
        lo <= truth_max && truth_max <= hi,
        "{truth_max} in [{lo}, {hi}]: {text}"
    );
}
