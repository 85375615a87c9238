//! `skewscope demo --lead auto`: the agent picks each broadcast's lead
//! from what the demo's probes upload (they upload when the lead is
//! auto), and the report says what it chose and how many actions were
//! late; a lead the agent would refuse is refused before anything starts.

use std::process::Command;

const SKEWSCOPE: &str = env!("CARGO_BIN_EXE_skewscope");

#[test]
fn the_demo_acts_on_the_lead_the_agent_picks() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("demo.json");
    let o = Command::new(SKEWSCOPE)
        .args(["demo", "--lead", "auto", "--clients", "8"])
        .args(["--broadcasts", "30", "--interval", "100ms", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("lead=auto chose the lead of 30 broadcast(s)"),
        "{out}"
    );
    // Its p50 and the "lead given" row's are over different sets: said.
    assert!(
        out.contains("one per broadcast; \"lead given\" counts one per action"),
        "{out}"
    );
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let actions = &report["actions"];
    assert_eq!(actions["actions"], 240, "{out}");
    let auto = &actions["auto_lead"];
    assert_eq!(auto["broadcasts"], 30, "{out}");
    assert_eq!(auto["actions"], 240, "{out}");
    assert_eq!(auto["late"], actions["late"], "{out}");
    // The probes upload (every 200 ms), so within 3 s of broadcasts the
    // agent's lead rests on their reads, not on the fan-out alone.
    assert!(auto["on_probe_reads"].as_u64().unwrap() >= 1, "{out}");
}

#[test]
fn a_lead_the_agent_would_refuse_is_refused_before_anything_starts() {
    for (lead, says) in [("10h", "at most 1h"), ("-5ms", "never negative")] {
        let o = Command::new(SKEWSCOPE)
            .args(["demo", "--lead", lead])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{lead}: {err}");
        assert!(err.contains(says), "{lead}: {err}");
        assert!(!err.contains("demo: agent on"), "{lead}: started: {err}");
    }
}
