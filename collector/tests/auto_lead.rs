//! `lead=auto` following a site whose link changes: a probe behind an
//! emulated link (skewscope-linkemu) acts on test broadcasts whose lead the
//! agent picks. The link is wired, then 40 ms slower one way, then wired
//! again. What the design promises, asserted: the lead rises to cover the
//! slow link within a few judged broadcasts (the ones before are late, and
//! counted), no action is late once it has, it falls back after the slow
//! copies leave the window and never faster than an eighth of the gap a
//! broadcast, and the report says what `lead=auto` chose and how many of
//! its actions were late, as the probe's own log counts them.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{
    Reaped, count_of, json_report, probe_records, request_ok, sibling_binary, signal, start_agent,
    wait_for,
};
use nix::sys::signal::Signal;
use skewscope_core::analysis::auto_lead::{FALL_FRACTION, MARGIN_NS, WINDOW_BROADCASTS};
use skewscope_core::record::ProbeRecord;
use skewscope_linkemu::profile::{Jitter, Way};
use skewscope_linkemu::{Link, Profile};

const MS: u64 = 1_000_000;
/// How much slower the link gets, server to device.
const SLOW_NS: u64 = 40 * MS;

/// A metric's value in the agent's `/metrics`.
fn metric(agent: &str, name: &str) -> f64 {
    let text = request_ok(agent, "GET", "/metrics", b"", None);
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} not in /metrics"))
}

/// `/start_test?lead=auto`: its time to act and the lead it was given, ns.
fn broadcast_auto(agent: &str) -> (u64, u64) {
    let body = request_ok(agent, "GET", "/start_test?lead=auto", b"", None);
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["lead"], "auto", "{body}");
    (
        json["at_ns"].as_u64().unwrap(),
        json["lead_ns"].as_u64().unwrap(),
    )
}

/// `n` auto broadcasts 50 ms apart, then a wait until the agent has judged
/// them all (the probe's uploads moved past them); their times to act and
/// leads.
fn phase(agent: &str, n: usize, judged_before: &mut f64) -> Vec<(u64, u64)> {
    let leads: Vec<(u64, u64)> = (0..n)
        .map(|_| {
            let lead = broadcast_auto(agent);
            std::thread::sleep(Duration::from_millis(50));
            lead
        })
        .collect();
    let target = *judged_before + n as f64;
    wait_for("the broadcasts judged", Duration::from_secs(60), || {
        metric(agent, "skewscope_broadcasts_judged_total") >= target
    });
    *judged_before = target;
    leads
}

fn slow() -> Profile {
    Profile {
        name: "slow",
        up: Profile::WIRED.up,
        down: Way {
            base_ns: SLOW_NS,
            jitter: Jitter::None,
            stall: None,
            loss_percent: 0.0,
            rate_bps: None,
        },
        power_save: None,
    }
}

#[test]
fn the_auto_lead_follows_a_link_that_slows_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr, agent_log) = start_agent(dir.path());
    let link = Link::start(
        Profile::WIRED,
        5,
        "127.0.0.1:0".parse().unwrap(),
        addr.parse().unwrap(),
        None,
    )
    .unwrap();
    let via = link.addr();
    let log = dir.path().join("kiosk.sklog");
    let mut probe = Reaped(
        Command::new(sibling_binary("skewscope-probe"))
            .args(["--url", &format!("ws://{via}/ws"), "--name", "kiosk"])
            .args([
                "--connections",
                "2",
                "--duration",
                "300s",
                "--act-at",
                "/at_ns",
            ])
            .args(["--time-interval", "200ms"])
            // Uploads straight to the agent: judging waits on them, not on
            // the link under test.
            .args([
                "--upload",
                &format!("http://{addr}"),
                "--out",
                log.to_str().unwrap(),
            ])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_for("probe connected", Duration::from_secs(60), || {
        count_of(&log, |r| matches!(r, ProbeRecord::ConnectionOpened(_))) == 2
    });
    wait_for("time exchanges answered", Duration::from_secs(60), || {
        count_of(&log, |r| matches!(r, ProbeRecord::TimeSample(_))) >= 8
    });
    let mut judged = metric(&addr, "skewscope_broadcasts_judged_total");
    let mut given = Vec::new();

    // Wired: the lead settles on what the wired link needs.
    given.extend(phase(&addr, 10, &mut judged));
    let wired = metric(&addr, "skewscope_auto_lead_seconds");
    assert!(
        metric(&addr, "skewscope_auto_lead_copies") > 0.0,
        "the lead rests on the probe's reads"
    );
    assert!(wired * 1e9 < (SLOW_NS / 2) as f64, "wired lead {wired} s");

    // Slower: the first slow broadcasts judged raise it past the new link.
    link.set_profile(slow());
    let mut rising: Vec<(u64, u64)> = Vec::new();
    for _ in 0..4 {
        let slow_ones = phase(&addr, 2, &mut judged);
        rising.extend(&slow_ones);
        given.extend(slow_ones);
        if metric(&addr, "skewscope_auto_lead_seconds") * 1e9 > SLOW_NS as f64 {
            break;
        }
    }
    let raised = metric(&addr, "skewscope_auto_lead_seconds");
    assert!(
        raised * 1e9 > (SLOW_NS + MARGIN_NS) as f64,
        "after {} slow broadcasts the lead is {raised} s",
        rising.len()
    );
    // Covered: broadcasts given the raised lead are acted on in time.
    let covered = phase(&addr, 6, &mut judged);
    assert!(covered.iter().all(|&(_, l)| l > SLOW_NS), "{covered:?}");
    given.extend(&covered);

    // Wired again: held while slow copies are in the window, then falling
    // back, gradually.
    link.set_profile(Profile::WIRED);
    let mut falling = Vec::new();
    for _ in 0..(WINDOW_BROADCASTS / 8 + 4) {
        given.extend(phase(&addr, 8, &mut judged));
        falling.push((metric(&addr, "skewscope_auto_lead_seconds") * 1e9) as u64);
    }
    let last = *falling.last().unwrap();
    assert!(
        (last as f64) < raised * 1e9 / 2.0,
        "fell back to {last} ns from {raised} s: {falling:?}"
    );
    for w in falling.windows(2) {
        // Eight broadcasts judged between two looks: at most that many
        // eighths of the gap (to the wired lead) closed.
        let most = 1.0 - (1.0 - FALL_FRACTION).powi(8);
        let gap = w[0].saturating_sub((wired * 1e9) as u64) as f64;
        assert!(
            w[0].saturating_sub(w[1]) as f64 <= gap * most + (5 * MS) as f64,
            "fell too fast: {falling:?}"
        );
    }

    signal(&probe.0, Signal::SIGTERM);
    assert!(probe.0.wait().unwrap().success());
    signal(&agent.0, Signal::SIGTERM);
    assert!(agent.0.wait().unwrap().success());
    drop(link);

    // Late actions: only on broadcasts given a lead the slow link did not
    // allow (before the lead rose, or sent as the link changed), none on
    // one given the raised lead; the report counts exactly what the
    // probe's log holds.
    let lead_of: std::collections::HashMap<u64, u64> = given.into_iter().collect();
    let records = probe_records(&log);
    let (mut late, mut late_raised) = (0u64, Vec::new());
    for r in &records {
        if let ProbeRecord::Action(a) = r
            && a.late_ns > 0
        {
            late += 1;
            if lead_of[&a.act_at_ns] >= SLOW_NS {
                late_raised.push(*a);
            }
        }
    }
    // At the raised lead a copy later than any the window has seen can
    // still be late, as at any fixed lead: one broadcast's at most.
    assert!(late_raised.len() <= 2, "{late_raised:?}");
    let actions = records
        .iter()
        .filter(|r| matches!(r, ProbeRecord::Action(_)))
        .count() as u64;
    assert!(late > 0, "the slow link's first broadcasts came late");
    let (text, json) = json_report(&[&agent_log, Path::new(&log)]);
    let auto = &json["actions"]["auto_lead"];
    assert_eq!(auto["late"].as_u64(), Some(late), "{text}");
    assert_eq!(auto["actions"].as_u64(), Some(actions), "{text}");
    assert!(auto["on_probe_reads"].as_u64().unwrap() > 0, "{text}");
    assert!(text.contains("lead=auto chose the lead of"), "{text}");
}
