//! The `skewscope-probe` binary end to end: flags, exit codes, signals and its log.

mod common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use common::{
    BroadcastServer, LIMIT, assert_framed, closed, opened, read_probe_log, receipts, wait_for_log,
};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio_tungstenite::tungstenite::Message;

/// A running `skewscope-probe`, killed if the test ends before it exits.
struct ProbeProcess {
    child: Option<Child>,
}

impl ProbeProcess {
    fn spawn(url: &str, out: &Path, extra: &[&str]) -> ProbeProcess {
        let child = Command::new(env!("CARGO_BIN_EXE_skewscope-probe"))
            .args(["--url", url, "--name", "bin-test", "--out"])
            .arg(out)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        ProbeProcess { child: Some(child) }
    }

    fn signal(&self, signal: Signal) {
        let pid = self.child.as_ref().unwrap().id();
        // The pid is our own child, not yet reaped.
        kill(Pid::from_raw(pid as i32), signal).unwrap();
    }

    /// Waits for the exit (at most [`LIMIT`], then kills it and fails).
    async fn wait(mut self) -> Output {
        let child = self.child.take().unwrap();
        let pid = child.id();
        let waiting = tokio::task::spawn_blocking(move || child.wait_with_output());
        match tokio::time::timeout(LIMIT, waiting).await {
            Ok(output) => output.unwrap().unwrap(),
            Err(_) => {
                // As in `signal`; the waiting task reaps it afterwards.
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
                panic!("skewscope-probe did not exit within {LIMIT:?}");
            }
        }
    }
}

impl Drop for ProbeProcess {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_ends_the_run_with_exit_code_zero() {
    let server = BroadcastServer::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("probe.sklog");
    let probe = ProbeProcess::spawn(&server.url(), &out, &["--connections", "2", "--count", "3"]);
    server.wait_for_clients(2).await;
    for text in ["one", "two", "three"] {
        server.broadcast(Message::text(text));
    }
    let output = probe.wait().await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
    assert!(
        stderr.contains("2 connection(s) opened, 0 failed, 6 receipt(s)"),
        "{stderr}"
    );
    assert!(stderr.contains(&out.display().to_string()), "{stderr}");

    let records = read_probe_log(&out);
    assert_framed(&records);
    assert_eq!(receipts(&records).len(), 6);
    assert!(closed(&records).iter().all(|c| c.reason == "count reached"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_cleanly_and_keeps_everything_sent_before_it() {
    let server = BroadcastServer::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("probe.sklog");
    let probe = ProbeProcess::spawn(&server.url(), &out, &["--connections", "3"]);
    // The server finishes an upgrade before the probe has read the response: wait
    // for the probe's own word that all three are open, or the signal could
    // (rightly) abandon a handshake still in flight.
    wait_for_log(&out, "3 connections opened", |r| opened(r).len() == 3).await;
    for i in 0..5 {
        server.broadcast(Message::text(format!("message {i}")));
    }
    server.wait_sent(15).await;
    probe.signal(Signal::SIGTERM);
    let output = probe.wait().await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{:?}: {stderr}", output.status);

    let records = read_probe_log(&out);
    assert_framed(&records);
    assert_eq!(receipts(&records).len(), 15);
    let closed = closed(&records);
    assert_eq!(closed.len(), 3);
    assert!(closed.iter().all(|c| c.reason == "stopped"), "{closed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_loses_nothing_older_than_the_flush_interval() {
    let server = BroadcastServer::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("probe.sklog");
    let probe = ProbeProcess::spawn(&server.url(), &out, &["--connections", "2"]);
    server.wait_for_clients(2).await;
    for i in 0..4 {
        server.broadcast(Message::text(format!("message {i}")));
    }
    server.wait_sent(8).await;
    // The running probe hands every receipt to the OS within a flush interval,
    // with no exit and no sync.
    wait_for_log(&out, "8 receipts on disk", |r| receipts(r).len() == 8).await;
    probe.signal(Signal::SIGKILL);
    let output = probe.wait().await;
    assert!(!output.status.success());
    let records = read_probe_log(&out);
    assert_eq!(receipts(&records).len(), 8);
    assert!(!matches!(
        records.last(),
        Some(skewscope_core::record::ProbeRecord::Stopped(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_connection_is_a_failure_with_a_clear_message() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("probe.sklog");
    let output = ProbeProcess::spawn(&format!("ws://{addr}/"), &out, &[])
        .wait()
        .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(stderr.contains("could be opened"), "{stderr}");
    assert!(stderr.contains("server is running"), "{stderr}");
}
