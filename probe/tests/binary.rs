//! The `skewscope-probe` binary end to end: flags, exit codes, signals and its log.

mod common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use common::{
    BroadcastServer, LIMIT, assert_framed, closed, nobody_listens_on, opened, read_probe_log,
    receipts, wait_for_log,
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
    async fn wait(self) -> Output {
        self.wait_within(LIMIT).await
    }

    /// Waits for the exit (at most `limit`, then kills it and fails).
    async fn wait_within(mut self, limit: std::time::Duration) -> Output {
        let child = self.child.take().unwrap();
        let pid = child.id();
        let waiting = tokio::task::spawn_blocking(move || child.wait_with_output());
        match tokio::time::timeout(limit, waiting).await {
            Ok(output) => output.unwrap().unwrap(),
            Err(_) => {
                // As in `signal`; the waiting task reaps it afterwards.
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
                panic!("skewscope-probe did not exit within {limit:?}");
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
    let addr = nobody_listens_on();
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

/// An "agent" that refuses every request with 401, as one does whose token
/// is another: its address.
async fn refusing_agent() -> std::net::SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = [0u8; 4096];
                let _ = stream.read(&mut head).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_is_said_once_naming_its_file_and_ends_the_run() {
    let server = BroadcastServer::start(None).await;
    let agent = refusing_agent().await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("badtoken");
    std::fs::write(&token, "guess\n").unwrap();
    let out = dir.path().join("probe.sklog");
    let upload = format!("http://{agent}");
    // A run that would last a minute ends at the refusal.
    let common = [
        "--no-time-exchange",
        "--duration",
        "60s",
        "--upload",
        &upload,
    ];
    let probe = ProbeProcess::spawn(
        &server.url(),
        &out,
        &[&common[..], &["--token-file", token.to_str().unwrap()]].concat(),
    );
    let output = probe.wait().await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the agent at {upload} refused this probe's token from {} (401 Unauthorized)",
            token.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("give it with --token-file"), "{stderr}");
    // Counted by its words: a log line's timestamp may hold "401" too.
    assert_eq!(
        stderr.matches("401 Unauthorized").count(),
        1,
        "said once: {stderr}"
    );
    assert!(!stderr.contains("retrying"), "{stderr}");
    // What it recorded is kept, and said where.
    assert!(stderr.contains(&out.display().to_string()), "{stderr}");

    // No token at all: the agent wants one.
    let probe = ProbeProcess::spawn(&server.url(), &out, &common);
    let output = probe.wait().await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("requires a token to upload (401 Unauthorized) and this probe has none"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_that_never_arrived_ends_with_its_own_exit_status() {
    let server = BroadcastServer::start(None).await;
    // An agent address nobody listens on: the run itself goes as asked.
    let nobody = nobody_listens_on();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("probe.sklog");
    let upload = format!("http://{nobody}");
    let probe = ProbeProcess::spawn(
        &server.url(),
        &out,
        &["--no-time-exchange", "--count", "1", "--upload", &upload],
    );
    server.wait_for_clients(1).await;
    server.broadcast(Message::text("go"));
    // It gives the upload its final drain before it gives up.
    let output = probe.wait_within(LIMIT + probe::FINAL_DRAIN).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(i32::from(probe::UPLOAD_INCOMPLETE_EXIT)),
        "{stderr}"
    );
    assert!(stderr.contains("upload INCOMPLETE"), "{stderr}");
    assert!(stderr.contains("Start the probe again"), "{stderr}");
    // The run's records are all in its log.
    assert_eq!(receipts(&read_probe_log(&out)).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_says_what_it_does_as_it_starts() {
    let server = BroadcastServer::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("probe.sklog");
    let probe = ProbeProcess::spawn(
        &server.url(),
        &out,
        &["--connections", "2", "--count", "1", "--act-at", "/at"],
    );
    server.wait_for_clients(2).await;
    server.broadcast(Message::text("go"));
    let output = probe.wait().await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let start = stderr
        .lines()
        .find(|l| l.contains("bin-test: 2 connection(s) to"))
        .unwrap_or_else(|| panic!("no start line: {stderr}"));
    for said in [
        server.url(),
        format!("recording to {}", out.display()),
        "UDP time exchange".to_owned(),
        "acting at each message's /at".to_owned(),
        "each connection has 1 message(s)".to_owned(),
    ] {
        assert!(start.contains(&said), "{said}: {start}");
    }
}
