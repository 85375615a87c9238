//! A probe run as a service keeps its `--out-dir` within its limits: in a
//! restart loop (half the runs SIGKILLed mid-upload) the directory never
//! holds more than `--keep-runs` logs, every record still reaches the agent
//! exactly once, and the report says what was deleted; without anything
//! that has the records, the probe stops recording rather than delete them.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{
    Reaped, count_of, json_report, probe_records, sibling_binary, signal, start_agent, trigger,
    wait_until,
};
use nix::sys::signal::Signal;
use skewscope_core::record::ProbeRecord;

const RESTARTS: usize = 50;
const KEEP_RUNS: usize = 4;

fn logs_in(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "sklog"))
        .collect()
}

fn run_id(records: &[ProbeRecord]) -> Option<u128> {
    records.iter().find_map(|r| match r {
        ProbeRecord::Identity(i) => Some(i.run_id),
        _ => None,
    })
}

fn probe(addr: &str, out_dir: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(sibling_binary("skewscope-probe"));
    c.args(["--url", &format!("ws://{addr}/ws"), "--name", "kiosk"])
        .arg("--out-dir")
        .arg(out_dir)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// The newest log in `dir` (the running probe's).
fn newest(dir: &Path, known: &BTreeMap<PathBuf, ()>) -> Option<PathBuf> {
    logs_in(dir).into_iter().find(|p| !known.contains_key(p))
}

#[test]
fn a_restart_loop_stays_within_the_limits_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr, _) = start_agent(dir.path());
    let out_dir = dir.path().join("logs");
    std::fs::create_dir_all(&out_dir).unwrap();
    // Broadcasts all along, so every run has receipts to upload.
    let stop = Arc::new(AtomicBool::new(false));
    let broadcaster = {
        let (stop, addr) = (stop.clone(), addr.clone());
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(600);
            while !stop.load(Ordering::Relaxed) && Instant::now() < until {
                trigger(&addr);
                std::thread::sleep(Duration::from_millis(40));
            }
        })
    };
    let upload = format!("http://{addr}");
    let keep = KEEP_RUNS.to_string();
    let args = [
        "--upload",
        &upload,
        "--keep-runs",
        &keep,
        "--keep-bytes",
        "8MiB",
    ];
    // Each run's records as it left them (its log may be deleted later).
    let mut runs: BTreeMap<u128, Vec<ProbeRecord>> = BTreeMap::new();
    let mut pruned = 0;
    for i in 0..RESTARTS {
        let known: BTreeMap<PathBuf, ()> = logs_in(&out_dir).into_iter().map(|p| (p, ())).collect();
        let last = i == RESTARTS - 1;
        let mut child = Reaped(
            probe(&addr, &out_dir, &args)
                .args(["--duration", if last { "2s" } else { "600ms" }])
                .spawn()
                .unwrap(),
        );
        let mut log = None;
        wait_until("the run's first receipt", || {
            log = log.clone().or_else(|| newest(&out_dir, &known));
            log.as_ref()
                .is_some_and(|l| count_of(l, |r| matches!(r, ProbeRecord::Receipt(_))) > 0)
        });
        let log = log.unwrap();
        if i % 2 == 1 && !last {
            // Killed mid-run: its upload is the next run's to finish.
            signal(&child.0, Signal::SIGKILL);
            child.0.wait().unwrap();
        } else {
            let status = child.0.wait().unwrap();
            assert!(status.success(), "run {i}: {status}");
        }
        let records = probe_records(&log);
        for r in &records {
            if let ProbeRecord::LogsPruned(p) = r {
                pruned += p.runs;
                assert_eq!((p.max_runs, p.max_bytes), (KEEP_RUNS as u32, 8 << 20));
            }
        }
        runs.insert(run_id(&records).unwrap(), records);
        let kept = logs_in(&out_dir);
        assert!(
            kept.len() <= KEEP_RUNS,
            "run {i}: {} logs: {kept:?}",
            kept.len()
        );
        let bytes: u64 = kept
            .iter()
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum();
        assert!(bytes <= 8 << 20, "run {i}: {bytes} bytes");
    }
    stop.store(true, Ordering::Relaxed);
    broadcaster.join().unwrap();
    signal(&agent.0, Signal::SIGTERM);
    assert!(agent.0.wait().unwrap().success());

    // The last clean run uploaded what the others left: every run is at the
    // agent, record for record, exactly once.
    assert_eq!(runs.len(), RESTARTS);
    for (id, records) in &runs {
        let stored = dir
            .path()
            .join("agent/probes")
            .join(format!("probe-{id:032x}.sklog"));
        assert!(
            probe_records(&stored) == *records,
            "run {id:032x}: the agent's copy differs from the probe's log"
        );
    }
    assert!(
        pruned as usize >= RESTARTS - KEEP_RUNS,
        "{pruned} logs deleted over {RESTARTS} runs"
    );
    // The report says what the last run deleted and kept.
    let last_log = logs_in(&out_dir)
        .into_iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().modified().unwrap())
        .unwrap();
    let (text, json) = json_report(&[&last_log]);
    let line = text
        .lines()
        .find(|l| l.contains("--out-dir: deleted"))
        .unwrap_or_else(|| panic!("{text}"));
    eprintln!("{pruned} logs deleted over {RESTARTS} runs; the last run's report:\n{line}");
    assert_eq!(json["probes"][0]["logs_pruned"]["max_runs"], KEEP_RUNS);
}

#[test]
fn without_a_copy_elsewhere_the_disk_is_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr, _) = start_agent(dir.path());
    let out_dir = dir.path().join("logs");
    let args = ["--keep-runs", "3", "--duration", "200ms"];
    for _ in 0..3 {
        let out = probe(&addr, &out_dir, &args).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let before = logs_in(&out_dir);
    assert_eq!(before.len(), 3);
    let out = probe(&addr, &out_dir, &args).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        said.contains("is at its limits") && said.contains("only copies"),
        "{said}"
    );
    let mut after = logs_in(&out_dir);
    let mut before = before;
    after.sort();
    before.sort();
    assert_eq!(after, before, "nothing deleted, nothing new");
    signal(&agent.0, Signal::SIGTERM);
    assert!(agent.0.wait().unwrap().success());
}

/// A fake agent on loopback that answers every upload message with an
/// acknowledgement of 2^63 records: what a broken or hostile agent could
/// send. Its address.
fn lying_agent() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            use futures_util::{SinkExt, StreamExt};
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let Ok(mut ws) = tokio_tungstenite::accept_async(stream).await else {
                        return;
                    };
                    let lie =
                        skewscope_core::ingest::encode(&skewscope_core::ingest::ToProbe::Ack {
                            next_seq: 1 << 63,
                        });
                    while let Some(Ok(_)) = ws.next().await {
                        let message =
                            tokio_tungstenite::tungstenite::Message::Binary(lie.clone().into());
                        if ws.send(message).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
    });
    addr
}

/// The probe takes an ack only for records it sent: an agent that says it
/// has 2^63 records of a run is not believed, the run's summary says so
/// rather than "all uploaded", and no log it holds is ever deleted on its
/// word (the next run, with room for one log, refuses to start instead).
#[test]
fn an_agent_that_acknowledges_what_it_never_got_is_not_believed() {
    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr, _) = start_agent(dir.path());
    let liar = format!("http://{}", lying_agent());
    let out_dir = dir.path().join("logs");
    let args = ["--keep-runs", "1", "--duration", "1s", "--upload", &liar];
    let out = probe(&addr, &out_dir, &args).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!said.contains("record(s) uploaded"), "{said}");
    assert!(said.contains("upload INCOMPLETE"), "{said}");
    assert!(said.contains("NOT believed"), "{said}");
    // Its retries name the agent as --upload gave it, not the endpoint.
    assert!(
        said.contains(&format!("upload to the agent at {liar}: ")),
        "{said}"
    );
    let before = logs_in(&out_dir);
    assert_eq!(before.len(), 1);
    let out = probe(&addr, &out_dir, &args).output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("is at its limits"), "{said}");
    assert_eq!(logs_in(&out_dir), before, "the only copy kept");
    signal(&agent.0, Signal::SIGTERM);
    assert!(agent.0.wait().unwrap().success());
}
