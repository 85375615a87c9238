//! True time, with processes whose clocks are shifted by Debian's libfaketime
//! (the wall clock only; monotonic stays real). Every process shares one real
//! clock, so the truth is known: the offsets injected, and each receipt's real
//! arrival time.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{
    Reaped, count_of, json_report, probe_records, signal, start_agent, trigger, wait_until,
};
use nix::sys::signal::Signal;
use skewscope_core::record::{MessageKey, ProbeRecord};

/// How a probe's wall clock is shifted.
enum Shift<'a> {
    /// A fixed offset, like "+0.005" (seconds).
    Fixed(&'a str),
    /// Read from this file on every clock read, so the test can step it.
    File(&'a Path),
}

fn probe(url: &str, name: &str, count: u32, out: &Path, shift: Shift) -> Reaped {
    let mut cmd = Command::new(common::sibling_binary("skewscope-probe"));
    cmd.args(["--url", url, "--name", name, "--connections", "3"])
        .args(["--count", &count.to_string(), "--time-interval", "200ms"])
        .args(["--out", out.to_str().unwrap()])
        .env("LD_PRELOAD", common::faketime_lib())
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    match shift {
        Shift::Fixed(spec) => cmd.env("FAKETIME", spec),
        Shift::File(path) => cmd
            .env("FAKETIME_TIMESTAMP_FILE", path)
            .env("FAKETIME_NO_CACHE", "1"),
    };
    Reaped(cmd.spawn().unwrap())
}

/// Waits until every probe has 3 connections up and its first time burst done.
fn wait_ready(logs: &[&Path]) {
    for log in logs {
        wait_until("probe connected", || {
            count_of(log, |r| matches!(r, ProbeRecord::ConnectionOpened(_))) == 3
        });
        wait_until("time burst answered", || {
            count_of(log, |r| matches!(r, ProbeRecord::TimeSample(_))) >= 8
        });
    }
}

/// True arrival (ns, the one real clock) of every receipt, per test sequence,
/// given how each receipt's wall clock was shifted.
fn true_arrivals(
    logs: &[&Path],
    shift_of: impl Fn(usize, &skewscope_core::record::Receipt) -> i64,
) -> BTreeMap<u64, Vec<i64>> {
    let mut by_seq: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for (i, log) in logs.iter().enumerate() {
        for r in probe_records(log) {
            if let ProbeRecord::Receipt(r) = r {
                let MessageKey::Seq(seq) = r.key else {
                    continue;
                };
                let arrival = r.at.wall_ns as i64 - r.kernel_delay_ns.unwrap_or(0) as i64;
                by_seq
                    .entry(seq)
                    .or_default()
                    .push(arrival - shift_of(i, &r));
            }
        }
    }
    by_seq
}

fn true_skews(arrivals: &BTreeMap<u64, Vec<i64>>) -> Vec<i64> {
    arrivals
        .values()
        .map(|a| a.iter().max().unwrap() - a.iter().min().unwrap())
        .collect()
}

/// The corrected skew's bounds must bracket the truth (min and max are exact;
/// the median within the histogram's 0.1 % precision).
fn assert_brackets(json: &serde_json::Value, truth: &[i64]) {
    let c = &json["skew_corrected_ns"];
    let get = |part: &str, field: &str| {
        let v = if part.is_empty() {
            &c[field]
        } else {
            &c[part][field]
        };
        v.as_i64()
            .unwrap_or_else(|| panic!("{part}.{field} in {c}"))
    };
    let t = skewscope_core::analysis::stats::Summary::of(truth).unwrap();
    assert!(
        get("lo", "max") <= t.max && t.max <= get("hi", "max"),
        "max {t:?} vs {c}"
    );
    assert!(
        get("lo", "min") <= t.min && t.min <= get("hi", "min"),
        "min {t:?} vs {c}"
    );
    let slack = t.p50 / 500;
    assert!(
        get("lo", "p50") - slack <= t.p50 && t.p50 <= get("hi", "p50") + slack,
        "p50 {t:?} vs {c}"
    );
}

#[test]
fn offsets_of_shifted_probes_are_measured_and_corrected_skew_holds_the_truth() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr, agent_log) = start_agent(dir.path());
    let url = format!("ws://{addr}/ws");
    let (a_log, b_log) = (
        dir.path().join("ahead.sklog"),
        dir.path().join("behind.sklog"),
    );
    let broadcasts = 10;
    let mut a = probe(&url, "ahead", broadcasts, &a_log, Shift::Fixed("+0.005"));
    let mut b = probe(&url, "behind", broadcasts, &b_log, Shift::Fixed("-0.003"));
    wait_ready(&[&a_log, &b_log]);
    for _ in 0..broadcasts {
        trigger(&addr);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(a.0.wait().unwrap().success());
    assert!(b.0.wait().unwrap().success());
    signal(&agent.0, Signal::SIGTERM);
    assert!(agent.0.wait().unwrap().success());

    let (text, json) = json_report(&[&agent_log, &a_log, &b_log]);
    assert_eq!(json["receipts"], 60, "{text}");
    assert_eq!(json["clock_basis"], "corrected-to-agent", "{text}");
    // Offsets within ±0.3 ms of the injected ones.
    let offset = |i: usize| json["probes"][i]["offset_ns"].as_i64().unwrap();
    assert!((offset(0) - 5_000_000).abs() <= 300_000, "{text}");
    assert!((offset(1) + 3_000_000).abs() <= 300_000, "{text}");

    let truth = true_skews(&true_arrivals(&[&a_log, &b_log], |i, _| {
        if i == 0 { 5_000_000 } else { -3_000_000 }
    }));
    assert_eq!(truth.len(), broadcasts as usize);
    assert_brackets(&json, &truth);
    // Raw skew shows the 8 ms between the two clocks, give or take the true
    // skew (which a loaded machine widens).
    let truth_max = *truth.iter().max().unwrap();
    let raw_p50 = json["skew_ns"]["p50"].as_i64().unwrap();
    assert!(
        (raw_p50 - 8_000_000).abs() <= truth_max + truth_max / 500,
        "raw p50 {raw_p50}, true max {truth_max}: {text}"
    );
    // Within one device there is no clock error: never more than the truth.
    let intra_max = json["skew_intra_device_ns"]["max"].as_i64().unwrap();
    assert!(
        intra_max <= truth_max + truth_max / 500,
        "intra-device max {intra_max}, true max {truth_max}: {text}"
    );
}

#[test]
fn a_wall_clock_step_mid_run_is_detected_and_not_mixed() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr, agent_log) = start_agent(dir.path());
    let url = format!("ws://{addr}/ws");
    let shift_file = dir.path().join("shift");
    std::fs::write(&shift_file, "+0\n").unwrap();
    let (s_log, r_log) = (
        dir.path().join("stepped.sklog"),
        dir.path().join("steady.sklog"),
    );
    let broadcasts = 10;
    let mut stepped = probe(
        &url,
        "stepped",
        broadcasts,
        &s_log,
        Shift::File(&shift_file),
    );
    let mut steady = probe(&url, "steady", broadcasts, &r_log, Shift::Fixed("+0"));
    wait_ready(&[&s_log, &r_log]);
    for i in 0..broadcasts {
        if i == broadcasts / 2 {
            // The wall clock jumps 100 ms ahead; monotonic does not.
            std::fs::write(&shift_file, "+0.1\n").unwrap();
            // Let the stepped probe take time samples in its new epoch.
            let before = count_of(&s_log, |r| matches!(r, ProbeRecord::TimeSample(_)));
            wait_until("exchanges after the step", || {
                count_of(&s_log, |r| matches!(r, ProbeRecord::TimeSample(_))) >= before + 2
            });
        }
        trigger(&addr);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(stepped.0.wait().unwrap().success());
    assert!(steady.0.wait().unwrap().success());
    signal(&agent.0, Signal::SIGTERM);
    assert!(agent.0.wait().unwrap().success());

    let (text, json) = json_report(&[&agent_log, &s_log, &r_log]);
    let steps = json["probes"][0]["clock_steps"].as_array().unwrap();
    assert_eq!(steps.len(), 1, "{text}");
    let size = steps[0]["size_ns"].as_i64().unwrap();
    assert!((size - 100_000_000).abs() < 5_000_000, "{text}");
    assert!(
        json["probes"][1]["clock_steps"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{text}"
    );
    assert_ne!(json["clock_basis"], "single-host", "{text}");

    // Receipts after the step were shifted by 100 ms; the corrected figures,
    // estimated per epoch, still bracket the truth.
    let step_mono = probe_records(&s_log)
        .iter()
        .filter_map(|r| match r {
            ProbeRecord::Receipt(r) => Some(r.at),
            _ => None,
        })
        .find(|at| (at.wall_ns as i64 - at.mono_ns as i64) > first_level(&s_log) + 50_000_000)
        .map(|at| at.mono_ns)
        .expect("receipts after the step");
    let truth = true_skews(&true_arrivals(&[&s_log, &r_log], |i, r| {
        if i == 0 && r.at.mono_ns >= step_mono {
            100_000_000
        } else {
            0
        }
    }));
    assert_brackets(&json, &truth);
    // Raw skew after the step is wrong by 100 ms; corrected is not.
    assert!(
        json["skew_ns"]["max"].as_i64().unwrap() > 90_000_000,
        "{text}"
    );
    assert!(
        json["skew_corrected_ns"]["max"].as_i64().unwrap() < 10_000_000,
        "{text}"
    );
}

/// wall − mono of a probe's first record.
fn first_level(log: &Path) -> i64 {
    match probe_records(log).first() {
        Some(ProbeRecord::Started(s)) => s.at.wall_ns as i64 - s.at.mono_ns as i64,
        _ => panic!("log starts with Started"),
    }
}
