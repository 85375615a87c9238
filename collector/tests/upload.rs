//! Probes stream their records to the agent (`--upload`): what the agent
//! stores is the probe's own log, record for record, exactly once, across a
//! SIGKILL and restart of the agent in the middle of the upload.

mod common;

use std::path::Path;
use std::process::Command;

use common::proxy::Proxy;
use common::{Reaped, probe_records, sibling_binary, signal, start_agent_at, trigger, wait_until};
use nix::sys::signal::Signal;
use skewscope_core::log::AnyLog;
use skewscope_core::record::ProbeRecord;
use skewscope_os::log_files::read_file;

fn uploaded_runs(data: &Path) -> Vec<std::path::PathBuf> {
    // The run logs; beside each the agent keeps its owner's digest (.owner).
    std::fs::read_dir(data.join("probes"))
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "sklog"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn the_agent_stores_every_record_once_across_its_own_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr, first_run_log) = start_agent_at(dir.path(), "127.0.0.1:0");
    let out = dir.path().join("probe.sklog");
    let mut probe = Reaped(
        Command::new(sibling_binary("skewscope-probe"))
            .args(["--url", &format!("ws://{addr}/ws"), "--connections", "5"])
            .args(["--name", "uploader", "--upload", &format!("http://{addr}")])
            .arg("--out")
            .arg(&out)
            .spawn()
            .unwrap(),
    );
    let data = dir.path().join("agent");
    wait_until("the probe's five connections", || {
        out.exists()
            && probe_records(&out)
                .iter()
                .filter(|r| matches!(r, ProbeRecord::ConnectionOpened(_)))
                .count()
                == 5
    });
    for _ in 0..10 {
        trigger(&addr);
    }
    // Some of the run reached the agent; then it dies without warning.
    wait_until("a first upload", || {
        uploaded_runs(&data)
            .first()
            .is_some_and(|p| std::fs::metadata(p).is_ok_and(|m| m.len() > 2_000))
    });
    signal(&agent.0, Signal::SIGKILL);
    agent.0.wait().unwrap();
    // The probe's connections end with the agent; it finishes its run and
    // keeps trying to upload the rest until an agent answers again.
    let (mut agent, _, _) = start_agent_at(dir.path(), &addr);
    let status = probe.0.wait().unwrap();
    assert!(status.success(), "probe exit {status:?}");
    signal(&agent.0, Signal::SIGTERM);
    agent.0.wait().unwrap();

    let runs = uploaded_runs(&data);
    assert_eq!(runs.len(), 1, "{runs:?}");
    let stored = probe_records(&runs[0]);
    let own = probe_records(&out);
    assert!(own.iter().any(|r| matches!(r, ProbeRecord::Receipt(_))));
    assert!(matches!(own.last(), Some(ProbeRecord::Stopped(_))));
    assert_eq!(stored.len(), own.len(), "record counts differ");
    assert!(stored == own, "the stored run differs from the probe's log");

    // The uploaded run joins the agent run it was measured against like any
    // probe log; the data directory, which now holds two agent runs, reports
    // the same.
    let (text, json) = common::json_report(&[&first_run_log, &runs[0]]);
    let (_, whole) = common::json_report(&[&data]);
    for field in ["broadcasts", "receipts", "missing", "duplicates", "skew_ns"] {
        assert_eq!(whole[field], json[field], "{field}");
    }
    let receipts = own
        .iter()
        .filter(|r| matches!(r, ProbeRecord::Receipt(_)))
        .count();
    assert_eq!(json["receipts"], receipts as u64, "{text}");
    assert_eq!(json["duplicates"], 0, "{text}");
    assert_eq!(json["probes"][0]["name"], "uploader", "{text}");
}

/// A probe with `--reconnect` outlives the server's restart: its
/// connections come back, the report of the agent's data directory (two
/// agent runs) has every broadcast of both runs on every connection, counts
/// the reconnects, and does not count the gap as missing.
#[test]
fn probe_connections_come_back_after_the_agent_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr, _) = start_agent_at(dir.path(), "127.0.0.1:0");
    let out = dir.path().join("kiosk.sklog");
    let mut probe = Reaped(
        Command::new(sibling_binary("skewscope-probe"))
            .args(["--url", &format!("ws://{addr}/ws"), "--connections", "3"])
            .args(["--name", "kiosk", "--reconnect", "--duration", "120s"])
            .arg("--out")
            .arg(&out)
            .spawn()
            .unwrap(),
    );
    wait_until("three connections", || {
        out.exists() && common::opened_in(&out) == 3
    });
    for _ in 0..4 {
        trigger(&addr);
    }
    wait_until("twelve receipts", || receipts_in(&out) == 12);
    // What is killed here is the agent, not its records: a SIGKILL loses
    // up to a flush interval of them (once, under load, the four
    // broadcasts' own records), so wait for its log to hold them.
    wait_until("the agent's log holds the four broadcasts", || {
        broadcasts_logged(&dir.path().join("agent")) == 4
    });
    signal(&agent.0, Signal::SIGKILL);
    agent.0.wait().unwrap();
    // Broadcasts nobody can hear while it is down are not anyone's loss.
    let (mut agent, _, _) = start_agent_at(dir.path(), &addr);
    wait_until("the three connections back", || {
        common::opened_in(&out) == 6
    });
    for _ in 0..5 {
        trigger(&addr);
    }
    wait_until("fifteen more receipts", || receipts_in(&out) == 27);
    signal(&probe.0, Signal::SIGTERM);
    assert!(probe.0.wait().unwrap().success());
    signal(&agent.0, Signal::SIGTERM);
    agent.0.wait().unwrap();

    let (text, json) = common::json_report(&[&dir.path().join("agent"), &out]);
    assert_eq!(json["broadcasts"], 9, "{text}");
    assert_eq!(json["receipts"], 27, "{text}");
    assert_eq!(json["missing"], 0, "{text}");
    assert_eq!(json["unmatched"], 0, "{text}");
    assert_eq!(json["connections"], 3, "{text}");
    assert_eq!(json["reconnects"], 3, "{text}");
    assert!(text.contains("reconnects 3"), "{text}");
    // Broadcast ids restart with the agent: two runs each have an id 1,
    // and the report still counts nine broadcasts, not seven.
    let runs_with_id_1 = std::fs::read_dir(dir.path().join("agent"))
        .unwrap()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "sklog"))
        .filter(|e| match read_file(&e.path()) {
            Ok(AnyLog::Agent(d)) => d.records.iter().any(
                |r| matches!(r, skewscope_core::record::AgentRecord::Broadcast(b) if b.id == 1),
            ),
            _ => false,
        })
        .count();
    assert_eq!(runs_with_id_1, 2);
    // The probe's log alone (no agent) says the same of loss.
    let (text, alone) = common::json_report(&[&out]);
    assert_eq!(alone["receipts"], 27, "{text}");
    assert_eq!(alone["missing"], 0, "{text}");
}

fn receipts_in(path: &Path) -> usize {
    probe_records(path)
        .iter()
        .filter(|r| matches!(r, ProbeRecord::Receipt(_)))
        .count()
}

/// Broadcast records in the agent logs under `dir` (as far as each is
/// written whole).
fn broadcasts_logged(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "sklog"))
        .map(|e| match read_file(&e.path()) {
            Ok(AnyLog::Agent(d)) => d
                .records
                .iter()
                .filter(|r| matches!(r, skewscope_core::record::AgentRecord::Broadcast(_)))
                .count(),
            _ => 0,
        })
        .sum()
}

fn run_id_in(records: &[ProbeRecord]) -> u128 {
    records
        .iter()
        .find_map(|r| match r {
            ProbeRecord::Identity(i) => Some(i.run_id),
            _ => None,
        })
        .expect("an Identity record")
}

fn uploading_probe(addr: &str, upload: &str, conns: u32, out: &Path) -> Command {
    let mut c = Command::new(sibling_binary("skewscope-probe"));
    c.args(["--url", &format!("ws://{addr}/ws"), "--connections"])
        .arg(conns.to_string())
        .args(["--name", "kiosk", "--upload", &format!("http://{upload}")])
        .arg("--out")
        .arg(out)
        .stderr(std::process::Stdio::piped());
    c
}

/// A probe SIGKILLed before the agent acknowledged anything keeps its run:
/// started again on the same `--out`, it moves the old log aside and
/// uploads it, so the agent stores everything the killed run had flushed,
/// once.
#[test]
fn a_probe_killed_mid_upload_resumes_that_run_when_started_again() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr, _) = start_agent_at(dir.path(), "127.0.0.1:0");
    // The agent is out of the probe's reach until the second start.
    let link = Proxy::start(&addr, None, false);
    let out = dir.path().join("kiosk.sklog");
    let mut first = Reaped(uploading_probe(&addr, &link.addr, 3, &out).spawn().unwrap());
    wait_until("three connections", || {
        out.exists() && common::opened_in(&out) == 3
    });
    for _ in 0..5 {
        trigger(&addr);
    }
    wait_until("fifteen receipts flushed", || receipts_in(&out) == 15);
    signal(&first.0, Signal::SIGKILL);
    first.0.wait().unwrap();
    let killed = probe_records(&out);
    let run_id = run_id_in(&killed);

    link.open();
    let mut second = Reaped(uploading_probe(&addr, &link.addr, 1, &out).spawn().unwrap());
    let stored = dir
        .path()
        .join("agent/probes")
        .join(format!("probe-{run_id:032x}.sklog"));
    // (The agent creates the file a moment before it writes the header: a
    // file that is not a log yet reads as no records.)
    wait_until("the killed run stored", || {
        probe_records(&stored).len() == killed.len()
    });
    signal(&second.0, Signal::SIGTERM);
    let output = second.0.wait_with_output_after_take();
    signal(&agent.0, Signal::SIGTERM);
    agent.0.wait().unwrap();

    assert!(
        output.contains("1 earlier run(s) uploaded in full"),
        "{output}"
    );
    assert!(
        probe_records(&stored) == killed,
        "stored differs from the killed run's log"
    );
    let kept = dir.path().join(format!("kiosk.run-{run_id:032x}.sklog"));
    assert!(
        probe_records(&kept) == killed,
        "the killed run's log is kept"
    );
    assert_ne!(
        run_id_in(&probe_records(&out)),
        run_id,
        "a new run at --out"
    );
}

/// A link that drops every upload connection after 4 KiB: batches shrink
/// until they get through, and the agent stores the run exactly as the
/// probe logged it.
#[test]
fn an_upload_cut_every_few_kilobytes_still_arrives_once() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr, _) = start_agent_at(dir.path(), "127.0.0.1:0");
    let link = Proxy::start(&addr, Some(4096), true);
    let out = dir.path().join("kiosk.sklog");
    let mut probe = Reaped(uploading_probe(&addr, &link.addr, 5, &out).spawn().unwrap());
    wait_until("five connections", || {
        out.exists() && common::opened_in(&out) == 5
    });
    for _ in 0..60 {
        trigger(&addr);
    }
    wait_until("300 receipts flushed", || receipts_in(&out) == 300);
    signal(&probe.0, Signal::SIGTERM);
    let output = probe.0.wait_with_output_after_take();
    signal(&agent.0, Signal::SIGTERM);
    agent.0.wait().unwrap();

    assert!(output.contains("record(s) uploaded"), "{output}");
    assert!(!output.contains("INCOMPLETE"), "{output}");
    let cuts = link.cuts.load(std::sync::atomic::Ordering::SeqCst);
    assert!(cuts >= 3, "the link was cut {cuts} times");
    let own = probe_records(&out);
    let stored = probe_records(
        &dir.path()
            .join("agent/probes")
            .join(format!("probe-{:032x}.sklog", run_id_in(&own))),
    );
    assert_eq!(stored.len(), own.len());
    assert!(stored == own, "the stored run differs from the probe's log");
}

/// Waiting for a child whose stderr is piped, and reading it.
trait StderrOf {
    fn wait_with_output_after_take(&mut self) -> String;
}

impl StderrOf for std::process::Child {
    fn wait_with_output_after_take(&mut self) -> String {
        let mut text = String::new();
        if let Some(mut err) = self.stderr.take() {
            std::io::Read::read_to_string(&mut err, &mut text).unwrap();
        }
        assert!(self.wait().unwrap().success(), "probe failed: {text}");
        text
    }
}

/// logrotate moves the probe's log away and SIGHUPs it: the recorder starts
/// a new file and the uploader follows the run into it, also across a
/// reconnect, so the agent stores the whole run, the rotated file's records
/// then the new file's.
#[test]
fn an_upload_follows_the_log_across_a_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr, _) = start_agent_at(dir.path(), "127.0.0.1:0");
    let out = dir.path().join("kiosk.sklog");
    let mut probe = Reaped(uploading_probe(&addr, &addr, 2, &out).spawn().unwrap());
    wait_until("two connections", || {
        out.exists() && common::opened_in(&out) == 2
    });
    for _ in 0..3 {
        trigger(&addr);
    }
    wait_until("six receipts", || receipts_in(&out) == 6);
    let rotated = dir.path().join("kiosk.sklog.1");
    std::fs::rename(&out, &rotated).unwrap();
    signal(&probe.0, Signal::SIGHUP);
    wait_until("a new log", || {
        out.exists() && !probe_records(&out).is_empty()
    });
    for _ in 0..4 {
        trigger(&addr);
    }
    wait_until("eight receipts in the new log", || receipts_in(&out) == 8);
    // The agent dies and comes back: the uploader's next session must go
    // on from the rotated run, not from the new file read from its start.
    signal(&agent.0, Signal::SIGKILL);
    agent.0.wait().unwrap();
    let (mut agent, _, _) = start_agent_at(dir.path(), &addr);
    // Its connections ended with the agent; the run ends and drains.
    let output = probe.0.wait_with_output_after_take();
    signal(&agent.0, Signal::SIGTERM);
    agent.0.wait().unwrap();
    assert!(!output.contains("INCOMPLETE"), "{output}");

    let mut whole = probe_records(&rotated);
    whole.extend(probe_records(&out));
    let stored = probe_records(
        &dir.path()
            .join("agent/probes")
            .join(format!("probe-{:032x}.sklog", run_id_in(&whole))),
    );
    assert_eq!(stored.len(), whole.len());
    assert!(
        stored == whole,
        "the stored run is not the two files in order"
    );
}
