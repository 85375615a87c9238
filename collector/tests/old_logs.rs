//! Old logs under the new clock model: the logs frozen in
//! core/tests/data read, and report what the previous release (49441c1,
//! the last before the region model) reported from them, in every figure
//! the clock model does not decide (its JSON reports are committed beside
//! this test, written by that build). Where the clock model decides, the
//! old model was exact only for a lone exchange: there the offset is the
//! same, its bound within a nanosecond of rounding; elsewhere the truth is
//! known (one host: the offset is 0) and must be inside the new bound.

mod common;

use std::path::Path;
use std::process::Command;

use common::SKEWSCOPE;
use serde_json::Value;

fn report(files: &[&str]) -> Value {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/tests/data");
    let out = Command::new(SKEWSCOPE)
        .arg("report")
        .args(files.iter().map(|f| data.join(f)))
        .args(["--json", "-"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    serde_json::from_str(&text[text.find("\n{").map_or(0, |i| i + 1)..]).unwrap()
}

fn previous(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every leaf of `v` by its path.
fn leaves(v: &Value, path: String, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) => m
            .iter()
            .for_each(|(k, x)| leaves(x, format!("{path}/{k}"), out)),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, x)| leaves(x, format!("{path}/{i}"), out)),
        _ => out.push((path, v.clone())),
    }
}

/// Figures the clock model decides (or that name the files read), and the
/// lead advice, which the lead rule (`lead_rule`: a tail model below 10,000
/// reads, readiness and a margin) decides since.
fn decided_by_the_clock_model(path: &str) -> bool {
    [
        "/skew_corrected_ns",
        "/latency_corrected_ns",
        "/network_ns",
        "/lead/p999_ns",
    ]
    .iter()
    .any(|p| path.starts_with(p))
        || (path.starts_with("/probes/") && path.contains("/offset"))
        || path.ends_with("/file")
}

fn same_beyond_the_clock_model(old: &Value, new: &Value) -> usize {
    let (mut before, mut now) = (Vec::new(), Vec::new());
    leaves(old, String::new(), &mut before);
    leaves(new, String::new(), &mut now);
    let now: std::collections::BTreeMap<String, Value> = now.into_iter().collect();
    let mut compared = 0;
    for (path, value) in before {
        if decided_by_the_clock_model(&path) {
            continue;
        }
        assert_eq!(now.get(&path), Some(&value), "{path}");
        compared += 1;
    }
    compared
}

#[test]
fn the_previous_releases_logs_report_the_same_figures() {
    let new = report(&["c41f7be/agent.sklog", "c41f7be/probe.sklog"]);
    let old = previous("report-49441c1-c41f7be.json");
    assert!(same_beyond_the_clock_model(&old, &new) > 150);
    // Six reads, a device's copies of a broadcast counted once: three
    // independent ones, so the lead rests on a tail model, never below the
    // largest.
    let lead = &new["lead"];
    assert_eq!(lead["copies"], 6, "{lead}");
    assert_eq!(lead["evidence"]["tail-model"]["reads"], 3, "{lead}");
    assert!(
        lead["p999_ns"].as_i64() > lead["every_copy_ns"].as_i64(),
        "{lead}"
    );
    // One host: the truth is 0, inside the new bound as it was the old.
    let probe = &new["probes"][0];
    let (offset, bound) = (
        probe["offset_ns"].as_i64().unwrap(),
        probe["offset_bound_ns"].as_i64().unwrap(),
    );
    assert!(offset.abs() <= bound, "{probe}");
    // Corrected skew's interval still holds the skew as measured on one clock.
    let (raw, c) = (&new["skew_ns"], &new["skew_corrected_ns"]);
    for q in ["p50", "max"] {
        let truth = raw[q].as_i64().unwrap();
        assert!(
            c["lo"][q].as_i64().unwrap() <= truth && truth <= c["hi"][q].as_i64().unwrap(),
            "{q}: {c}"
        );
    }
}

#[test]
fn a_lone_exchange_gives_the_offset_it_gave_before() {
    let new = report(&[
        "records-2026-12-02.agent.sklog",
        "records-2026-12-02.probe.sklog",
    ]);
    let old = previous("report-49441c1-2026-12-02.json");
    assert!(same_beyond_the_clock_model(&old, &new) > 80);
    let (o, n) = (&old["probes"][0], &new["probes"][0]);
    assert_eq!(n["time_samples"], 1);
    assert_eq!(n["offset_ns"], o["offset_ns"], "{n}");
    let (ob, nb) = (
        o["offset_bound_ns"].as_u64().unwrap(),
        n["offset_bound_ns"].as_u64().unwrap(),
    );
    assert!(nb >= ob && nb <= ob + 1, "{ob} then, {nb} now");
}
