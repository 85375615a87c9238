//! Helpers for tests that run the binaries as separate processes.
#![allow(dead_code)] // each test binary uses its own subset

pub mod broadcaster;
pub mod browser;
pub mod proxy;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use skewscope_os::test_listening::{free_port, start_on_free_ports, until_listening};

/// A two-worker tokio runtime, as the 2-core server has: for tests that
/// drive async code from a plain `#[test]` (those re-run in a namespace).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A finished command's stdout and stderr, labelled, for an assertion's
/// message: what a failing test must show of the binary it ran.
pub fn output_text(o: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The `skewscope` binary under test.
pub const SKEWSCOPE: &str = env!("CARGO_BIN_EXE_skewscope");

/// The agent and probe binaries, built next to this test's own binary.
pub fn sibling_binary(name: &str) -> PathBuf {
    let dir = Path::new(SKEWSCOPE).parent().unwrap().to_owned();
    let path = dir.join(name);
    if !path.exists() {
        let profile = if dir.ends_with("release") {
            vec!["--release"]
        } else {
            vec![]
        };
        let status = Command::new(env!("CARGO"))
            .args(["build", "--bin", name])
            .args(profile)
            .status()
            .unwrap();
        assert!(status.success(), "building {name}");
    }
    path
}

/// Kills the child if the test fails before it is reaped.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn signal(child: &Child, sig: Signal) {
    kill(Pid::from_raw(child.id() as i32), sig).expect("signal our own child");
}

pub fn records_in(path: &Path) -> usize {
    // A log being created has no header for a moment: count that as empty.
    match skewscope_os::log_files::read_file(path) {
        Ok(skewscope_core::log::AnyLog::Probe(d)) => d.records.len(),
        Ok(skewscope_core::log::AnyLog::Agent(d)) => d.records.len(),
        Err(_) => 0,
    }
}

/// A probe log's records on disk (none while it has no header).
pub fn probe_records(path: &Path) -> Vec<skewscope_core::record::ProbeRecord> {
    match skewscope_os::log_files::read_file(path) {
        Ok(skewscope_core::log::AnyLog::Probe(d)) => d.records,
        _ => Vec::new(),
    }
}

/// How many of a probe log's records are `what`.
pub fn count_of(path: &Path, what: fn(&skewscope_core::record::ProbeRecord) -> bool) -> usize {
    probe_records(path).iter().filter(|r| what(r)).count()
}

/// Receipts in a probe log on disk (0 while it has no header).
pub fn receipts_in(path: &Path) -> usize {
    match skewscope_os::log_files::read_file(path) {
        Ok(skewscope_core::log::AnyLog::Probe(d)) => d
            .records
            .iter()
            .filter(|r| matches!(r, skewscope_core::record::ProbeRecord::Receipt(_)))
            .count(),
        _ => 0,
    }
}

/// Connections a probe log says were opened so far (a log still being
/// written reads as far as it is whole): what the report counts as
/// connections and reconnects, written by the probe after the agent has
/// already counted the client.
pub fn opened_in(path: &Path) -> usize {
    match skewscope_os::log_files::read_file(path) {
        Ok(skewscope_core::log::AnyLog::Probe(d)) => d
            .records
            .iter()
            .filter(|r| matches!(r, skewscope_core::record::ProbeRecord::ConnectionOpened(_)))
            .count(),
        _ => 0,
    }
}

pub fn wait_until(what: &str, done: impl FnMut() -> bool) {
    wait_for(what, Duration::from_secs(20), done);
}

/// Waits for `done`, for at most `limit` (a safety net: the condition is
/// what is waited for), looking every 10 ms.
pub fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < limit,
            "{what} did not happen in {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One HTTP request to the agent at `addr`, which must answer 200: its body.
pub fn request_ok(
    addr: &str,
    method: &str,
    path: &str,
    body: &[u8],
    token: Option<&str>,
) -> String {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let r = runtime
        .block_on(agent::http_client::request(
            addr.parse().unwrap(),
            method,
            path,
            body,
            token,
        ))
        .unwrap();
    assert_eq!(r.status, 200, "{method} {path}: {}", r.body);
    r.body
}

/// One test broadcast through the hub.
pub fn trigger(addr: &str) {
    request_ok(addr, "GET", "/start_test", b"", None);
}

/// One test broadcast whose time to act is `lead` (like "300ms") after it.
pub fn trigger_with_lead(addr: &str, lead: &str) {
    let body = request_ok(addr, "GET", &format!("/start_test?lead={lead}"), b"", None);
    assert!(body.contains("at_ns"), "{body}");
}

/// Starts the agent binary on 127.0.0.1:0 with its data under `dir`; returns
/// the process, its address and its log.
pub fn start_agent(dir: &Path) -> (Reaped, String, PathBuf) {
    start_agent_at(dir, "127.0.0.1:0")
}

/// As [`start_agent`], listening on `listen` (to restart one on its port).
pub fn start_agent_at(dir: &Path, listen: &str) -> (Reaped, String, PathBuf) {
    start_agent_with(dir, listen, &[])
}

/// As [`start_agent_at`], with more arguments.
pub fn start_agent_with(dir: &Path, listen: &str, extra: &[&str]) -> (Reaped, String, PathBuf) {
    let data = dir.join("agent");
    let mut agent = Reaped(
        Command::new(sibling_binary("skewscope-agent"))
            .args(["--listen", listen, "--data-dir", data.to_str().unwrap()])
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(agent.0.stdout.take().unwrap()).lines();
    let addr = lines
        .next()
        .unwrap()
        .unwrap()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();
    let log = PathBuf::from(
        lines
            .next()
            .unwrap()
            .unwrap()
            .strip_prefix("recording to ")
            .unwrap(),
    );
    (agent, addr, log)
}

/// Runs `skewscope report FILES --json -` and returns the parsed JSON.
pub fn json_report(files: &[&Path]) -> (String, serde_json::Value) {
    let o = Command::new(SKEWSCOPE)
        .arg("report")
        .args(files)
        .args(["--json", "-"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "report failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let json = serde_json::from_str(&out[out.find("{\n").unwrap()..]).unwrap();
    (out, json)
}

/// The peer servers of `bench/peers`.
pub fn peers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/peers")
}

/// The FastAPI broadcaster of bench/peers on a free loopback port.
pub fn fastapi() -> (Reaped, std::net::SocketAddr) {
    fastapi_app("app:app", &[])
}

/// A FastAPI app of bench/peers/fastapi (`module:app`) on a free loopback
/// port, with `env` set, once it listens there itself (a port taken
/// meanwhile by another test's server is tried again on a fresh one).
pub fn fastapi_app(app: &str, env: &[(&str, &str)]) -> (Reaped, std::net::SocketAddr) {
    start_on_free_ports("uvicorn", || {
        let port = free_port();
        let mut child = Reaped(
            Command::new("python3")
                .args(["-m", "uvicorn", app, "--app-dir"])
                .arg(peers().join("fastapi"))
                .envs(env.iter().copied())
                .args(["--host", "127.0.0.1", "--port", &port.to_string()])
                .args(["--log-level", "warning"])
                .spawn()
                .expect("python3 with uvicorn (./test installs it)"),
        );
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        until_listening(addr, &mut child.0, "uvicorn", Duration::from_secs(30))?;
        Ok((child, addr))
    })
}

/// The Go (gorilla/websocket) broadcaster of bench/peers/go, built once
/// into the test's scratch directory (GOPATH mode with Debian's
/// gorilla/websocket: no module download). `./test` installs Go.
pub fn go_peer_binary() -> PathBuf {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let bin = scratch.join("skewscope-peer-go");
    // Tests build it side by side: each into its own file, then renamed.
    let mine = scratch.join(format!("skewscope-peer-go.{}", std::process::id()));
    let out = Command::new("go")
        .args(["build", "-o"])
        .arg(&mine)
        .arg("main.go")
        .current_dir(peers().join("go"))
        .env("GOPATH", "/usr/share/gocode")
        .env("GO111MODULE", "off")
        .env("GOFLAGS", "-mod=mod")
        .env("GOCACHE", scratch.join("gocache"))
        .output()
        .expect("go (./test installs golang-go)");
    assert!(
        out.status.success(),
        "go build: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::rename(&mine, &bin).unwrap();
    bin
}

/// The Go broadcaster on a free loopback port, once it listens there
/// itself.
pub fn go_peer() -> (Reaped, std::net::SocketAddr) {
    let bin = go_peer_binary();
    start_on_free_ports("the go peer", || {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()));
        let mut peer = Reaped(
            Command::new(&bin)
                .args(["-listen", &addr.to_string()])
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        until_listening(addr, &mut peer.0, "the go peer", Duration::from_secs(30))?;
        Ok((peer, addr))
    })
}

/// libfaketime's multi-threaded build (the probe runs several threads), for
/// tests that shift a probe's wall clock; `./test` installs Debian's
/// faketime package.
pub fn faketime_lib() -> PathBuf {
    std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("faketime/libfaketimeMT.so.1"))
        .find(|p| p.exists())
        .expect("libfaketime not found: install Debian's faketime package (./test does)")
}

/// Debian's Chromium, for the tests that run a page in a real browser
/// (`./test` installs it).
pub fn chromium() -> PathBuf {
    for candidate in ["/usr/bin/chromium", "/usr/bin/chromium-browser"] {
        if Path::new(candidate).exists() {
            return candidate.into();
        }
    }
    panic!("Debian's chromium is not installed: ./test installs it (apt-get install chromium)");
}

/// Headless Chromium with its background services off: it fetches nothing
/// the test did not ask for.
pub const CHROMIUM_QUIET: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--no-pings",
    "--no-service-autorun",
    "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,MediaRouter,Translate,AutofillServerCommunication,CertificateTransparencyComponentUpdater",
];
