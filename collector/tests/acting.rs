//! Acting together, on the real binaries: broadcasts that carry a time to
//! act, probes (`--act-at`) that act at it, and the report and the audit
//! that judge the actions.
//!
//! Probes run under libfaketime with their wall clocks shifted (the
//! monotonic clock stays real), so every process shares one real clock and
//! the truth is known: an action's real moment is its recorded wall time
//! minus its probe's shift.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{
    Reaped, SKEWSCOPE, count_of, fastapi, json_report, probe_records, sibling_binary, signal,
    start_agent, trigger_with_lead, wait_until,
};
use nix::sys::signal::Signal;
use skewscope_core::record::{MessageKey, ProbeRecord};

/// A probe with 3 connections acting at `/at_ns` (or `pointer`), its wall
/// clock shifted by `shift` (like "+0.002") when given.
fn acting_probe(url: &str, name: &str, out: &Path, shift: Option<&str>, extra: &[&str]) -> Reaped {
    let mut cmd = Command::new(sibling_binary("skewscope-probe"));
    cmd.args(["--url", url, "--name", name, "--connections", "3"])
        .args(["--time-interval", "200ms", "--duration", "120s"])
        .args(["--out", out.to_str().unwrap()])
        .args(extra)
        .stderr(Stdio::null());
    if let Some(spec) = shift {
        cmd.env("LD_PRELOAD", common::faketime_lib())
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .env("FAKETIME", spec);
    }
    Reaped(cmd.spawn().unwrap())
}

fn wait_ready(logs: &[&Path], exchanges: usize) {
    for log in logs {
        wait_until("probe connected", || {
            count_of(log, |r| matches!(r, ProbeRecord::ConnectionOpened(_))) == 3
        });
        wait_until("time burst answered", || {
            count_of(log, |r| matches!(r, ProbeRecord::TimeSample(_))) >= exchanges
        });
    }
}

/// Per broadcast: every action's real moment (its wall stamp minus its
/// probe's shift); and the largest offset bound and timer error any used.
struct Truth {
    by_seq: BTreeMap<u64, Vec<i64>>,
    worst_bound: i64,
    worst_timer: i64,
    actions: usize,
    late: usize,
}

fn truth(logs: &[(&Path, i64)]) -> Truth {
    let mut t = Truth {
        by_seq: BTreeMap::new(),
        worst_bound: 0,
        worst_timer: 0,
        actions: 0,
        late: 0,
    };
    for (log, shift) in logs {
        for r in probe_records(log) {
            let ProbeRecord::Action(a) = r else { continue };
            let MessageKey::Seq(seq) = a.key else {
                continue;
            };
            t.actions += 1;
            t.late += usize::from(a.late_ns > 0);
            t.by_seq
                .entry(seq)
                .or_default()
                .push(a.done.wall_ns as i64 - shift);
            t.worst_bound = t
                .worst_bound
                .max(a.offset_bound_ns.expect("a bounded offset") as i64);
            t.worst_timer = t
                .worst_timer
                .max(a.done.mono_ns as i64 - a.target.mono_ns as i64);
        }
    }
    t
}

#[test]
fn probes_with_shifted_clocks_act_together_within_their_own_bounds() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr, agent_log) = start_agent(dir.path());
    let url = format!("ws://{addr}/ws");
    let (a_log, b_log) = (
        dir.path().join("ahead.sklog"),
        dir.path().join("behind.sklog"),
    );
    let act = ["--act-at", "/at_ns"];
    let mut a = acting_probe(&url, "ahead", &a_log, Some("+0.002"), &act);
    let mut b = acting_probe(&url, "behind", &b_log, Some("-0.002"), &act);
    wait_ready(&[&a_log, &b_log], 8);
    let broadcasts = 10;
    for _ in 0..broadcasts {
        // Far more than a loaded 2-core machine takes to deliver 6 copies.
        trigger_with_lead(&addr, "300ms");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Every action done, then the probes stop (and wait for none).
    wait_until("every action recorded", || {
        count_of(&a_log, |r| matches!(r, ProbeRecord::Action(_))) == 3 * broadcasts
            && count_of(&b_log, |r| matches!(r, ProbeRecord::Action(_))) == 3 * broadcasts
    });
    signal(&a.0, Signal::SIGTERM);
    signal(&b.0, Signal::SIGTERM);
    assert!(a.0.wait().unwrap().success());
    assert!(b.0.wait().unwrap().success());
    signal(&agent.0, Signal::SIGTERM);
    assert!(agent.0.wait().unwrap().success());

    let (text, json) = json_report(&[&agent_log, &a_log, &b_log]);
    let actions = &json["actions"];
    assert_eq!(actions["actions"], 60, "{text}");
    assert_eq!(actions["late"], 0, "{text}");
    assert_eq!(actions["receipts_without_action"], 0, "{text}");

    let t = truth(&[(&a_log, 2_000_000), (&b_log, -2_000_000)]);
    assert_eq!(t.by_seq.len(), broadcasts);
    let true_skews: Vec<i64> = t
        .by_seq
        .values()
        .map(|v| v.iter().max().unwrap() - v.iter().min().unwrap())
        .collect();
    let truth_max = *true_skews.iter().max().unwrap();
    let truth_min = *true_skews.iter().min().unwrap();
    // The corrected action skew's interval holds the truth.
    let c = &actions["action_skew_corrected_ns"];
    let at = |part: &str, field: &str| c[part][field].as_i64().unwrap();
    assert!(
        at("lo", "max") <= truth_max && truth_max <= at("hi", "max"),
        "max {truth_max} vs {c}: {text}"
    );
    assert!(
        at("lo", "min") <= truth_min && truth_min <= at("hi", "min"),
        "min {truth_min} vs {c}: {text}"
    );
    // And the actions are as close as the probes' own clock bounds allow:
    // each aimed at the time within its offset bound, and fired within its
    // timer's error, so two probes cannot be further apart than both; each
    // probe's planning and firing stamps pair wall with monotonic time to
    // within half a bracket (PAIR_TEAR_NS wide, unless preempted three
    // times running).
    let stamp_pairing = 2 * skewscope_os::clock::PAIR_TEAR_NS as i64;
    let bound = 2 * t.worst_bound + t.worst_timer + stamp_pairing;
    assert!(
        truth_max <= bound,
        "true action skew {truth_max} ns over the probes' own bound {bound} ns: {text}"
    );
    // The 4 ms between the two clocks is gone from the actions: the raw
    // action skew (the devices' own clocks) shows it, the truth does not.
    let raw = actions["action_skew_ns"]["p50"].as_i64().unwrap();
    assert!((raw - 4_000_000).abs() <= bound, "raw p50 {raw}: {text}");
    // The lead given is each action's time to act less its broadcast's
    // start as the agent recorded it (the message is built just before the
    // start, so a little under the 300 ms asked, by however long that took).
    let starts: BTreeMap<u64, i64> = match skewscope_os::log_files::read_file(&agent_log) {
        Ok(skewscope_core::log::AnyLog::Agent(d)) => d
            .records
            .iter()
            .filter_map(|r| match r {
                skewscope_core::record::AgentRecord::Broadcast(b) => {
                    Some((b.seq?, b.at.wall_ns as i64))
                }
                _ => None,
            })
            .collect(),
        _ => panic!("the agent's log"),
    };
    let mut given: Vec<i64> = [&a_log, &b_log]
        .iter()
        .flat_map(|log| probe_records(log))
        .filter_map(|r| match r {
            ProbeRecord::Action(a) => match a.key {
                MessageKey::Seq(seq) => Some(a.act_at_ns as i64 - starts[&seq]),
                MessageKey::Hash { .. } => None,
            },
            _ => None,
        })
        .collect();
    given.sort_unstable();
    assert!(
        given.iter().all(|&g| g > 0 && g <= 300_000_000),
        "{given:?}"
    );
    let median = given[given.len() / 2];
    let lead = actions["lead_given_ns"]["p50"].as_i64().unwrap();
    // The summary's histogram keeps three significant digits.
    assert!(
        (lead - median).abs() <= median / 500,
        "{lead} vs {median}: {text}"
    );
}

#[test]
fn with_no_lead_every_action_is_late_and_counted() {
    // One clock and no time exchange: the probe maps the time to act with
    // no error, so a message that cannot arrive before it was sent is
    // always seen to arrive after its time.
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr, agent_log) = start_agent(dir.path());
    let url = format!("ws://{addr}/ws");
    let log = dir.path().join("now.sklog");
    let mut p = acting_probe(
        &url,
        "now",
        &log,
        None,
        &["--act-at", "/at_ns", "--no-time-exchange"],
    );
    wait_until("probe connected", || {
        count_of(&log, |r| matches!(r, ProbeRecord::ConnectionOpened(_))) == 3
    });
    for _ in 0..5 {
        trigger_with_lead(&addr, "0ms");
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_until("every action recorded", || {
        count_of(&log, |r| matches!(r, ProbeRecord::Action(_))) == 15
    });
    signal(&p.0, Signal::SIGTERM);
    assert!(p.0.wait().unwrap().success());
    signal(&agent.0, Signal::SIGTERM);
    assert!(agent.0.wait().unwrap().success());

    let t = truth(&[]);
    assert_eq!(t.actions, 0);
    let late = probe_records(&log)
        .iter()
        .filter(|r| matches!(r, ProbeRecord::Action(a) if a.late_ns > 0))
        .count();
    assert_eq!(late, 15, "every action was late");
    let (text, json) = json_report(&[&agent_log, &log]);
    assert_eq!(json["actions"]["late"], 15, "{text}");
    assert_eq!(
        json["actions"]["late_listed"].as_array().unwrap().len(),
        15,
        "{text}"
    );
    assert!(text.contains("15 LATE"), "{text}");
}

fn audit(agent: &str, trigger: &str, json: &Path) -> Output {
    Command::new(SKEWSCOPE)
        .args(["audit", "--agent", &format!("http://{agent}")])
        .args(["--trigger", trigger])
        .args(["--broadcasts", "5", "--interval", "50ms", "--settle", "20s"])
        .args(["--require-probes", "2", "--max-skew-p99", "1s"])
        // The action-skew threshold is not what this test is about (field_links.rs
        // holds one the truth meets and one it does not): under two busy loops
        // the actors' timers alone were once 7 ms late, so it is set far out.
        .args(["--max-late", "0", "--max-action-skew-p99", "1s", "--json"])
        .arg(json)
        .output()
        .unwrap()
}

#[test]
fn beside_fastapi_the_audit_judges_actions_with_and_without_a_lead() {
    let dir = tempfile::tempdir().unwrap();
    let (_agent, agent_addr, _) = start_agent(dir.path());
    let (_server, server) = fastapi();
    let url = format!("ws://{server}/ws");
    // The app puts "at": time.time() + lead, float seconds, as FastAPI apps
    // write it; the probes read it at /at and sync with the agent.
    let extra = [
        "--act-at",
        "/at",
        "--time-server",
        agent_addr.as_str(),
        "--upload",
        &format!("http://{agent_addr}"),
    ];
    let (a_log, b_log) = (dir.path().join("a.sklog"), dir.path().join("b.sklog"));
    let _a = acting_probe(&url, "lobby", &a_log, Some("+0.002"), &extra);
    let _b = acting_probe(&url, "stage", &b_log, Some("-0.002"), &extra);
    wait_ready(&[&a_log, &b_log], 8);

    // A lead the LAN never comes near: every action in time, together.
    let fitting = dir.path().join("fitting.json");
    let o = audit(
        &agent_addr,
        &format!("http://{server}/start_test?lead=0.3"),
        &fitting,
    );
    assert_eq!(o.status.code(), Some(0), "{}", common::output_text(&o));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&fitting).unwrap()).unwrap();
    let actions = &report["report"]["actions"];
    assert_eq!(actions["actions"], 30, "{}", common::output_text(&o));
    assert_eq!(actions["late"], 0, "{}", common::output_text(&o));
    // The lead the report recommends, from its latencies from the trigger.
    assert!(
        !report["report"]["lead"].is_null(),
        "{}",
        common::output_text(&o)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("lead: act"));

    // No lead: the app's time has passed when the copies arrive.
    let none = dir.path().join("none.json");
    let o = audit(
        &agent_addr,
        &format!("http://{server}/start_test?lead=0"),
        &none,
    );
    assert_eq!(o.status.code(), Some(1), "{}", common::output_text(&o));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&none).unwrap()).unwrap();
    let late = report["report"]["actions"]["late"].as_u64().unwrap();
    assert!(late > 0, "{}", common::output_text(&o));
    let check = report["verdict"]["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "late")
        .unwrap()
        .clone();
    assert_eq!(check["pass"], false, "{check}");
}
