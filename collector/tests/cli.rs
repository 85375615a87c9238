//! The binaries as a person runs them: `skewscope demo`, `skewscope report` on
//! good and damaged logs, and agent + probes as separate processes.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{Reaped, receipts_in, records_in, signal, start_agent, trigger, wait_until};
use nix::sys::signal::Signal;

const SKEWSCOPE: &str = env!("CARGO_BIN_EXE_skewscope");

fn run(args: &[&str]) -> Output {
    Command::new(SKEWSCOPE)
        .args(args)
        .output()
        .expect("skewscope runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A demo with kept logs: the agent log and the probe logs (two devices).
fn kept_demo(dir: &Path) -> (PathBuf, Vec<PathBuf>) {
    let keep = dir.join("demo");
    let json = dir.join("demo.json");
    let html = dir.join("demo.html");
    let o = run(&[
        "demo",
        "--html",
        html.to_str().unwrap(),
        "--clients",
        "12",
        "--broadcasts",
        "6",
        "--interval",
        "20ms",
        "--json",
        json.to_str().unwrap(),
        "--keep",
        keep.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "demo failed: {}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("broadcasts 6   connections 12   receipts 72   missing 0   duplicates 0"),
        "{out}"
    );
    // The page: one mark per broadcast, a heatmap cell per receipt.
    let page = std::fs::read_to_string(&html).unwrap();
    assert_eq!(page.matches(r#"<circle class="mark skew"#).count(), 6);
    assert_eq!(page.matches(r#"<rect class="cell""#).count(), 72);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for key in [
        "broadcasts",
        "connections",
        "receipts",
        "missing",
        "duplicates",
    ] {
        assert!(report[key].is_u64(), "{key} in {report}");
    }
    assert_eq!(report["receipts"], 72);
    // It acts by default: every copy acted on at its time to act (50 ms
    // after the start), and the report sets action skew beside receive skew.
    let actions = &report["actions"];
    assert_eq!(actions["actions"], 72, "{actions}");
    assert_eq!(actions["receipts_without_action"], 0, "{actions}");
    // (The time to act is 50 ms after the hub stamped the message; the
    // broadcast's recorded start comes a moment later.)
    let lead = &actions["lead_given_ns"];
    assert!(lead["min"].as_i64().unwrap() > 0, "{actions}");
    assert!(lead["max"].as_i64().unwrap() <= 50_000_000, "{actions}");
    for key in ["action_skew_ns", "receive_skew_ns"] {
        assert!(actions[key]["max"].is_i64(), "{key} in {actions}");
    }
    assert!(out.contains("acting together"), "{out}");
    for key in ["skew_ns", "latency_ns", "fanout_ns"] {
        for field in ["p50", "p90", "p99", "p999", "max"] {
            assert!(report[key][field].is_i64(), "{key}.{field} in {report}");
        }
    }
    let mut agent = None;
    let mut probes = Vec::new();
    for entry in std::fs::read_dir(&keep).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with("agent-") {
            agent = Some(path);
        } else if name.starts_with("probe-") {
            probes.push(path);
        }
    }
    probes.sort();
    assert_eq!(probes.len(), 2, "two devices: {probes:?}");
    (agent.expect("agent log kept"), probes)
}

#[test]
fn demo_without_acting_receives_only() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("demo.json");
    let o = run(&[
        "demo",
        "--no-act",
        "--clients",
        "4",
        "--broadcasts",
        "3",
        "--interval",
        "20ms",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "demo failed: {}", stderr(&o));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["receipts"], 12);
    assert!(report["actions"].is_null(), "{}", report["actions"]);
    assert!(!stdout(&o).contains("acting together"));
}

#[test]
fn demo_then_report_gives_the_same_counts_and_damage_is_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let (agent, probes) = kept_demo(dir.path());
    let (probe, other) = (&probes[0], probes[1].to_str().unwrap());
    let o = run(&[
        "report",
        agent.to_str().unwrap(),
        probe.to_str().unwrap(),
        other,
        "--json",
        "-",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("receipts 72   missing 0"),
        "{}",
        stdout(&o)
    );

    // A probe killed mid-write: the file ends inside its last record.
    let bytes = std::fs::read(probe).unwrap();
    let torn = dir.path().join("torn.sklog");
    std::fs::write(&torn, &bytes[..bytes.len() - 3]).unwrap();
    let o = run(&[
        "report",
        agent.to_str().unwrap(),
        torn.to_str().unwrap(),
        other,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("torn tail"), "{out}");
    assert!(
        out.contains("receipts 72"),
        "the torn record was the last, not a receipt: {out}"
    );

    // Corruption in the middle loses only the record it touches: flip one
    // payload byte of the 30th receipt.
    let (at, frame_len) = nth_receipt_frame(&bytes, 30);
    let mut bytes = bytes.clone();
    bytes[at + skewscope_core::log::FRAME_HEADER_LEN + 3] ^= 0xff;
    let corrupt = dir.path().join("corrupt.sklog");
    std::fs::write(&corrupt, &bytes).unwrap();
    let o = run(&[
        "report",
        agent.to_str().unwrap(),
        corrupt.to_str().unwrap(),
        other,
        "--json",
        "-",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("damaged bytes"), "{out}");
    let json: serde_json::Value = serde_json::from_str(&out[out.find("{\n").unwrap()..]).unwrap();
    assert_eq!(json["receipts"], 71, "exactly the damaged receipt is lost");
    assert_eq!(json["inputs"][1]["skipped_bytes"], frame_len as u64);
}

/// Offset and size of the frame holding the n-th receipt (from 1) of a probe log.
fn nth_receipt_frame(bytes: &[u8], n: usize) -> (usize, usize) {
    let mut at = skewscope_core::log::HEADER_LEN;
    let mut seen = 0;
    while at < bytes.len() {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize;
        let frame = skewscope_core::log::FRAME_HEADER_LEN + len;
        let payload = &bytes[at + skewscope_core::log::FRAME_HEADER_LEN..at + frame];
        if let Ok(skewscope_core::record::ProbeRecord::Receipt(_)) = postcard::from_bytes(payload) {
            seen += 1;
            if seen == n {
                return (at, frame);
            }
        }
        at += frame;
    }
    panic!("fewer than {n} receipts");
}

#[test]
fn files_that_are_not_logs_are_errors_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "not a log at all").unwrap();
    let o = run(&["report", notes.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains(notes.to_str().unwrap()),
        "{}",
        stderr(&o)
    );
    assert!(
        stderr(&o).contains("not a skewscope record log"),
        "{}",
        stderr(&o)
    );

    let missing = dir.path().join("missing.sklog");
    let o = run(&["report", missing.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("missing.sklog"), "{}", stderr(&o));

    let (agent, _) = kept_demo(dir.path());
    let mut bytes = std::fs::read(&agent).unwrap();
    bytes[8] = 9; // format version 9
    let future = dir.path().join("future.sklog");
    std::fs::write(&future, &bytes).unwrap();
    let o = run(&["report", future.to_str().unwrap()]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("future.sklog") && stderr(&o).contains("version 9"),
        "{}",
        stderr(&o)
    );

    // Two runs' agent logs (the agent restarted) are reported together:
    // each broadcast once, ids counted per run.
    let (other_agent, _) = kept_demo(&dir.path().join("again"));
    let broadcasts = |files: &[&str]| {
        let o = run(&[&["report"][..], files, &["--json", "-"]].concat());
        assert!(o.status.success(), "{}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let json: serde_json::Value =
            serde_json::from_str(&out[out.find("{\n").unwrap()..]).unwrap();
        json["broadcasts"].as_u64().unwrap()
    };
    let (a, b) = (agent.to_str().unwrap(), other_agent.to_str().unwrap());
    assert_eq!(broadcasts(&[a, b]), broadcasts(&[a]) + broadcasts(&[b]));
}

#[test]
fn separate_processes_and_a_probe_killed_mid_run() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr, agent_log) = start_agent(dir.path());
    let url = format!("ws://{addr}/ws");

    let probe_bin = common::sibling_binary("skewscope-probe");
    let (a_log, b_log) = (dir.path().join("a.sklog"), dir.path().join("b.sklog"));
    let a = Reaped(
        Command::new(&probe_bin)
            .args([
                "--url",
                &url,
                "--connections",
                "3",
                "--name",
                "a",
                "--count",
                "10",
            ])
            .args(["--out", a_log.to_str().unwrap()])
            .spawn()
            .unwrap(),
    );
    let b = Reaped(
        Command::new(&probe_bin)
            .args(["--url", &url, "--connections", "2", "--name", "b"])
            .args(["--out", b_log.to_str().unwrap()])
            .spawn()
            .unwrap(),
    );
    // Started + 3 or 2 ConnectionOpened records on disk: every connection is up.
    wait_until("probe a connected", || {
        a_log.exists() && records_in(&a_log) >= 4
    });
    wait_until("probe b connected", || {
        b_log.exists() && records_in(&b_log) >= 3
    });

    for _ in 0..5 {
        trigger(&addr);
        std::thread::sleep(Duration::from_millis(20));
    }
    // Once b's ten receipts are on disk, kill it without warning.
    wait_until("probe b flushed", || receipts_in(&b_log) >= 10);
    signal(&b.0, Signal::SIGKILL);
    let mut b = b;
    b.0.wait().unwrap();
    for _ in 0..5 {
        trigger(&addr);
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut a = a;
    assert!(
        a.0.wait().unwrap().success(),
        "probe a ends by itself after --count"
    );
    signal(&agent.0, Signal::SIGTERM);
    assert!(agent.0.wait().unwrap().success());

    let o = run(&[
        "report",
        agent_log.to_str().unwrap(),
        a_log.to_str().unwrap(),
        b_log.to_str().unwrap(),
        "--json",
        "-",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let json: serde_json::Value = serde_json::from_str(&out[out.find("{\n").unwrap()..]).unwrap();
    assert_eq!(json["broadcasts"], 10);
    assert_eq!(json["connections"], 5);
    // a: 3 × 10; b: 2 × 5 before it was killed, and not "missing" afterwards.
    assert_eq!(json["receipts"], 40, "{out}");
    assert_eq!(json["missing"], 0, "{out}");
    assert_eq!(json["duplicates"], 0);
    assert_eq!(json["probes"][1]["receipts"], 10);
    // The killed one is said to be, the others not.
    assert_eq!(json["probes"][0]["ended"], "stopped");
    assert_eq!(json["probes"][1]["ended"], "no-stop-record");
    assert_eq!(json["agent"]["ended"], "stopped");
    assert!(
        out.contains(
            "b                log ends without a stop record (still running when read, or killed)"
        ),
        "{out}"
    );
    assert!(
        !out.contains("agent's log ends without a stop record"),
        "{out}"
    );
}

#[test]
fn triggers_give_latency_without_an_agent_log_and_bad_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr, agent_log) = start_agent(dir.path());
    let probe_log = dir.path().join("p.sklog");
    let mut probe = Reaped(
        Command::new(common::sibling_binary("skewscope-probe"))
            .args(["--url", &format!("ws://{addr}/ws"), "--connections", "3"])
            .args(["--count", "4", "--no-time-exchange"])
            .args(["--out", probe_log.to_str().unwrap()])
            .spawn()
            .unwrap(),
    );
    wait_until("probe connected", || {
        probe_log.exists() && records_in(&probe_log) >= 4
    });
    // The times a test script would note just before asking for each broadcast.
    let mut triggers = String::from("# wall-clock ns, one per broadcast\n");
    for _ in 0..4 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        triggers.push_str(&format!("{}\n", now.as_nanos()));
        trigger(&addr);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(probe.0.wait().unwrap().success());
    signal(&agent.0, Signal::SIGTERM);
    assert!(agent.0.wait().unwrap().success());
    let triggers_file = dir.path().join("triggers.txt");
    std::fs::write(&triggers_file, &triggers).unwrap();

    // The probe log alone: no agent latency, but latency from the triggers.
    let (out, json) = report_with_triggers(&[&probe_log], &triggers_file);
    assert!(out.contains("from trigger"), "{out}");
    assert!(json["latency_ns"].is_null());
    let from_trigger = &json["latency_from_trigger"];
    assert_eq!(from_trigger["broadcasts"], 4, "{from_trigger}");
    assert_eq!(from_trigger["unused_triggers"], 0);
    assert_eq!(from_trigger["latency_ns"]["count"], 12);
    let by_trigger = from_trigger["latency_ns"]["p50"].as_i64().unwrap();
    assert!(by_trigger > 0 && by_trigger < 1_000_000_000, "{by_trigger}");

    // With the agent log too: a trigger precedes its broadcast's start, so
    // latency from it is the longer one.
    let (_, json) = report_with_triggers(&[&agent_log, &probe_log], &triggers_file);
    let by_start = json["latency_ns"]["min"].as_i64().unwrap();
    let by_trigger = json["latency_from_trigger"]["latency_ns"]["min"]
        .as_i64()
        .unwrap();
    assert!(by_trigger >= by_start, "{by_trigger} < {by_start}");

    // Seconds instead of nanoseconds: the file and line are named, nothing runs.
    std::fs::write(&triggers_file, "1764000000\n").unwrap();
    let o = run(&[
        "report",
        probe_log.to_str().unwrap(),
        "--triggers",
        triggers_file.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(
        err.contains("triggers.txt") && err.contains("line 1"),
        "{err}"
    );
}

/// `skewscope report FILES --triggers T --json -`: the text and the JSON.
fn report_with_triggers(files: &[&Path], triggers: &Path) -> (String, serde_json::Value) {
    let o = Command::new(SKEWSCOPE)
        .arg("report")
        .args(files)
        .arg("--triggers")
        .arg(triggers)
        .args(["--json", "-"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let json = serde_json::from_str(&out[out.find("{\n").unwrap()..]).unwrap();
    (out, json)
}

#[test]
fn mistakes_are_refused_saying_what_to_give() {
    let dir = tempfile::tempdir().unwrap();
    // A file that is not there: the OS error said once, not twice.
    let missing = dir.path().join("missing.sklog");
    let o = run(&["report", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o).matches("No such file or directory").count(),
        1,
        "{}",
        stderr(&o)
    );
    // --between takes times as people have them, and says how when not.
    let o = run(&[
        "report",
        missing.to_str().unwrap(),
        "--between",
        "yesterday",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("give FROM-TO"), "{}", stderr(&o));
    let o = run(&["report", missing.to_str().unwrap(), "--between", "-10m"]);
    assert!(
        !stderr(&o).contains("--between"),
        "-10m is taken: {}",
        stderr(&o)
    );

    // The audit's agent: a WebSocket URL is refused with the one to give;
    // an address alone is taken as http://.
    let o = run(&["audit", "--agent", "ws://127.0.0.1:1/ws"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("give the agent's HTTP address, http://127.0.0.1:1"),
        "{}",
        stderr(&o)
    );
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nobody = closed.local_addr().unwrap().to_string();
    drop(closed);
    let o = run(&["audit", "--agent", &nobody]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains(&format!("http://{nobody}/audit/status: no answer"))
            && stderr(&o).contains("check that skewscope-agent runs there"),
        "{}",
        stderr(&o)
    );
    let empty = dir.path().join("token");
    std::fs::write(&empty, "\n").unwrap();
    let o = run(&[
        "audit",
        "--agent",
        &nobody,
        "--token-file",
        empty.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("is empty"), "{}", stderr(&o));

    // Help: grouped by task, defaults shown as defaults.
    let o = run(&["audit", "--help"]);
    let help = stdout(&o);
    for said in [
        "The agent to audit:",
        "Thresholds (the verdict):",
        "[default: 20]",
    ] {
        assert!(help.contains(said), "{said}: {help}");
    }
    let o = run(&["report", "--help"]);
    let help = stdout(&o);
    assert!(help.contains("Which broadcasts to judge:"), "{help}");
    assert!(help.contains("RFC 3339"), "{help}");
    assert!(
        help.contains("clock all receipts are corrected to"),
        "{help}"
    );
}
