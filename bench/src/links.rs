//! `skewscope-bench links`: acting together end to end over emulated links.
//!
//! Per link profile: the release agent on loopback, and two devices, each a
//! real probe process (3 connections, acting at `/at_ns`) behind its own
//! skewscope-linkemu link that carries its WebSocket and its time exchange,
//! its wall clock shifted +3 ms or −3 ms by libfaketime (its monotonic
//! clock left real). The hub's test broadcasts go out every 500 ms with a
//! lead: 20 right after the probes connect (the start-up), then, after a
//! warm-up, the measured ones (a probe that has run a while, as in the
//! field). Since every clock is this host's, the truth of every action and
//! exchange is known from the logs. Printed per profile: the link's
//! physical limit (half the least true delay up plus down between the
//! exchange's stamps), the bound each action was taken on against it, the
//! offset's true error, the true action skew, the report's upper bound of
//! it against what the link allows two devices (the sum of their limits),
//! actions on a bound wider than their time to spare, and late actions.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::processes::{
    Reaped, faketime, probe_records, sibling, start_agent, stop_probes, wait_for,
};
use serde::Serialize;
use skewscope_core::record::{MessageKey, ProbeRecord};
use skewscope_linkemu::{Link, Profile, physical_limit_ns};

/// The two devices: name, libfaketime's shift, the shift in ns.
const DEVICES: [(&str, &str, i64); 2] = [
    ("ahead", "+0.003", 3_000_000),
    ("behind", "-0.003", -3_000_000),
];
/// Broadcasts right after the probes connect, one every 500 ms: the
/// start-up (a probe that just started, its first exchanges still coming).
const START_UP_BROADCASTS: usize = 20;

/// One profile's figures (ns unless said).
#[derive(Clone, Debug, Serialize)]
pub struct LinkFigures {
    /// The link.
    pub profile: &'static str,
    /// Broadcasts measured, and actions.
    pub broadcasts: usize,
    /// …
    pub actions: usize,
    /// Each device's physical limit: half its least true delay up plus
    /// down, between the stamps of its exchanges.
    pub limits_ns: Vec<u64>,
    /// The same from the delays the link applied (without the hosts' own
    /// time between stamp and socket).
    pub link_limits_ns: Vec<u64>,
    /// Bound acted on ÷ its device's limit, p50 and p99 (after start-up).
    pub bound_ratio: (f64, f64),
    /// The same in the first 10 s.
    pub bound_ratio_start: (f64, f64),
    /// |offset acted on − truth|, p50 and p99 (after start-up).
    pub offset_error_ns: (u64, u64),
    /// True action skew per broadcast: p50, p99, max (after start-up).
    pub action_skew_ns: (u64, u64, u64),
    /// The same in the first 10 s.
    pub action_skew_start_ns: (u64, u64, u64),
    /// The report's upper bound of the action skew, p50 and p99 (after
    /// start-up).
    pub upper_ns: (u64, u64),
    /// The same over the start-up broadcasts.
    pub upper_start_ns: (u64, u64),
    /// Actions on a bound wider than their time to spare (after start-up).
    pub on_wide_bound: u64,
    /// The timers' error (actual − target on the device's monotonic clock),
    /// p99 and max (after start-up): what this shared machine's scheduler
    /// adds, beside the clocks.
    pub timer_ns: (u64, u64),
    /// That p99 ÷ what the link allows two devices (the sum of their limits).
    pub upper_ratio_p99: f64,
    /// Actions whose message came after its time.
    pub late: u64,
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// Runs every profile: `broadcasts` broadcasts each, `lead` ahead.
pub fn run(
    profiles: &[Profile],
    broadcasts: usize,
    lead: Duration,
    warmup: Duration,
) -> anyhow::Result<Vec<LinkFigures>> {
    profiles
        .iter()
        .map(|p| run_profile(*p, broadcasts, lead, warmup))
        .collect()
}

fn run_profile(
    profile: Profile,
    broadcasts: usize,
    lead: Duration,
    warmup: Duration,
) -> anyhow::Result<LinkFigures> {
    eprintln!("bench: links: {}", profile.name);
    let dir = tempfile::tempdir()?;
    let (agent, addr) = start_agent(dir.path())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut links = Vec::new();
    let mut probes = Vec::new();
    let started = Instant::now();
    // The probes outlast every broadcast (one each 500 ms after the
    // warm-up), with two minutes to spare for the last actions.
    let run_for = warmup
        + Duration::from_millis(500) * (START_UP_BROADCASTS + broadcasts) as u32
        + Duration::from_secs(120);
    let run_for = format!("{}s", run_for.as_secs());
    for (i, (name, spec, _)) in DEVICES.iter().enumerate() {
        let link = Link::start(profile, 101 + i as u64, "127.0.0.1:0".parse()?, addr, None)?;
        let log = dir.path().join(format!("{name}.sklog"));
        let child = Command::new(sibling("skewscope-probe")?)
            .args(["--url", &format!("ws://{}/ws", link.addr()), "--name", name])
            .args([
                "--connections",
                "3",
                "--duration",
                &run_for,
                "--act-at",
                "/at_ns",
            ])
            .arg("--out")
            .arg(&log)
            .env("LD_PRELOAD", faketime()?)
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .env("FAKETIME", spec)
            .stderr(Stdio::null())
            .spawn()?;
        probes.push((Reaped(child), log));
        links.push(link);
    }
    for (_, log) in &probes {
        wait_for("probe connected", Duration::from_secs(60), || {
            probe_records(log)
                .iter()
                .filter(|r| matches!(r, ProbeRecord::ConnectionOpened(_)))
                .count()
                == 3
        })?;
    }
    // The start-up: broadcasts from the moment the probes connect.
    let trigger = || -> anyhow::Result<u64> {
        let r = runtime.block_on(agent::http_client::request(
            addr,
            "GET",
            &format!("/start_test?lead={}ms", lead.as_millis()),
            b"",
            None,
        ))?;
        let body: serde_json::Value = serde_json::from_str(&r.body)?;
        body["seq"].as_u64().context("a broadcast's seq")
    };
    let mut start_up = Vec::new();
    for _ in 0..START_UP_BROADCASTS {
        start_up.push(trigger()?);
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(warmup.saturating_sub(started.elapsed()));
    let mut measured = Vec::new();
    for _ in 0..broadcasts {
        measured.push(trigger()?);
        std::thread::sleep(Duration::from_millis(500));
    }
    let broadcasts = START_UP_BROADCASTS + broadcasts;
    for (_, log) in &probes {
        wait_for("every action recorded", Duration::from_secs(60), || {
            probe_records(log)
                .iter()
                .filter(|r| matches!(r, ProbeRecord::Action(_)))
                .count()
                >= 3 * broadcasts
        })?;
    }
    stop_probes(&mut probes)?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(agent.0.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )?;
    let link_limits: Vec<u64> = links
        .into_iter()
        .map(|l| physical_limit_ns(&l.stop()).unwrap_or(0))
        .collect();
    drop(agent);
    // The true one-way delays between the stamps: the agent's clock is the
    // real one, the probe's is the real one plus its shift.
    let limits: Vec<u64> = probes
        .iter()
        .zip(DEVICES)
        .map(|((_, log), (_, _, shift))| {
            let (mut up, mut down) = (i64::MAX, i64::MAX);
            for r in probe_records(log) {
                if let ProbeRecord::TimeSample(t) = r {
                    up = up.min(t.t2_wall_ns as i64 - (t.t1.wall_ns as i64 - shift));
                    down = down.min((t.t4.wall_ns as i64 - shift) - t.t3_wall_ns as i64);
                }
            }
            ((up + down) / 2).max(1) as u64
        })
        .collect();

    let early = |seq: u64| start_up.contains(&seq);
    let (mut ratio, mut ratio_start, mut error) = (Vec::new(), Vec::new(), Vec::new());
    let mut by_seq: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    let mut late = 0;
    let mut actions = 0;
    for (((_, log), (_, _, shift)), limit) in probes.iter().zip(DEVICES).zip(&limits) {
        for r in probe_records(log) {
            let ProbeRecord::Action(a) = r else { continue };
            let MessageKey::Seq(seq) = a.key else {
                continue;
            };
            actions += 1;
            late += u64::from(a.late_ns > 0);
            let (Some(theta), Some(bound)) = (a.offset_ns, a.offset_bound_ns) else {
                continue;
            };
            let r = bound as f64 / *limit as f64;
            if early(seq) {
                ratio_start.push(r);
            } else {
                ratio.push(r);
                error.push((theta + shift).unsigned_abs() as f64);
            }
            by_seq
                .entry(seq)
                .or_default()
                .push(a.done.wall_ns as i64 - shift);
        }
    }
    let mut skews = Vec::new();
    let mut skews_start = Vec::new();
    for (seq, v) in &by_seq {
        if v.len() == 6 {
            let s = (v.iter().max().unwrap() - v.iter().min().unwrap()) as f64;
            if early(*seq) {
                skews_start.push(s)
            } else {
                skews.push(s)
            }
        }
    }
    // The report's upper bound, from the same logs: the start-up's
    // broadcasts and the measured ones apart (the hub numbers them as
    // their seq).
    let report = |ids: &[u64]| -> anyhow::Result<serde_json::Value> {
        let mut cmd = Command::new(sibling("skewscope")?);
        cmd.arg("report").arg(dir.path().join("agent"));
        for (_, log) in &probes {
            cmd.arg(log);
        }
        let first = ids.iter().min().copied().unwrap_or(0);
        let last = ids.iter().max().copied().unwrap_or(0);
        let output = cmd
            .args(["--broadcasts", &format!("{first}-{last}"), "--json", "-"])
            .stderr(Stdio::null())
            .output()?;
        let text = String::from_utf8_lossy(&output.stdout);
        let start = text.find("\n{").map_or(0, |i| i + 1);
        serde_json::from_str(&text[start..]).context("the report's JSON")
    };
    let upper_of = |json: &serde_json::Value| {
        let hi = &json["actions"]["action_skew_corrected_ns"]["hi"];
        (
            hi["p50"].as_u64().unwrap_or(0),
            hi["p99"].as_u64().unwrap_or(0),
        )
    };
    let steady = report(&measured)?;
    let upper = upper_of(&steady);
    let upper_start = upper_of(&report(&start_up)?);
    let on_wide_bound = steady["actions"]["on_wide_bound"].as_u64().unwrap_or(0);
    let timer = &steady["actions"]["timer_error_ns"];
    let timer_ns = (
        timer["p99"].as_u64().unwrap_or(0),
        timer["max"].as_u64().unwrap_or(0),
    );
    let two: u64 = limits.iter().sum();
    if std::env::var_os("SKEWSCOPE_BENCH_KEEP").is_some() {
        eprintln!("bench: links: logs kept in {}", dir.keep().display());
    }
    let triple = |v: &mut Vec<f64>| {
        (
            percentile(v, 0.5) as u64,
            percentile(v, 0.99) as u64,
            v.iter().copied().fold(0.0, f64::max) as u64,
        )
    };
    Ok(LinkFigures {
        profile: profile.name,
        broadcasts: by_seq.len(),
        actions,
        limits_ns: limits.clone(),
        link_limits_ns: link_limits,
        bound_ratio: (percentile(&mut ratio, 0.5), percentile(&mut ratio, 0.99)),
        bound_ratio_start: (
            percentile(&mut ratio_start, 0.5),
            percentile(&mut ratio_start, 0.99),
        ),
        offset_error_ns: (
            percentile(&mut error, 0.5) as u64,
            percentile(&mut error, 0.99) as u64,
        ),
        action_skew_ns: triple(&mut skews),
        action_skew_start_ns: triple(&mut skews_start),
        upper_ns: upper,
        upper_start_ns: upper_start,
        on_wide_bound,
        timer_ns,
        upper_ratio_p99: upper.1 as f64 / two as f64,
        late,
    })
}

fn us(ns: u64) -> String {
    format!("{:.0}", ns as f64 / 1e3)
}

/// The table the docs quote.
pub fn print(figures: &[LinkFigures], lead: Duration, warmup: Duration) {
    println!(
        "acting together over emulated links: 2 devices (clocks +3 / -3 ms) x 3 connections, a broadcast every 500 ms with a {} ms lead; {START_UP_BROADCASTS} from the probes' start ('start'), the rest after {} s; µs unless said",
        lead.as_millis(),
        warmup.as_secs()
    );
    println!(
        "| link | limits (link's own) | bound ÷ limit p50 / p99 | offset error p50 / p99 | true action skew p50 / p99 / max | upper bound p50 / p99 (÷ 2 limits) | start: bound ÷ limit p99, true skew max, upper p99 | timer error p99 / max | wide / late |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for f in figures {
        println!(
            "| {} | {} ({}) | {:.2} / {:.2} | {} / {} | {} / {} / {} | {} / {} ({:.2}) | {:.2}, {}, {} | {} / {} | {} / {} of {} |",
            f.profile,
            f.limits_ns
                .iter()
                .map(|l| us(*l))
                .collect::<Vec<_>>()
                .join(", "),
            f.link_limits_ns
                .iter()
                .map(|l| us(*l))
                .collect::<Vec<_>>()
                .join(", "),
            f.bound_ratio.0,
            f.bound_ratio.1,
            us(f.offset_error_ns.0),
            us(f.offset_error_ns.1),
            us(f.action_skew_ns.0),
            us(f.action_skew_ns.1),
            us(f.action_skew_ns.2),
            us(f.upper_ns.0),
            us(f.upper_ns.1),
            f.upper_ratio_p99,
            f.bound_ratio_start.1,
            us(f.action_skew_start_ns.2),
            us(f.upper_start_ns.1),
            us(f.timer_ns.0),
            us(f.timer_ns.1),
            f.on_wide_bound,
            f.late,
            f.actions,
        );
    }
}
