//! A passive audit of a live site: `skewscope audit --passive` triggers
//! nothing and judges the broadcasts the site sends on its own, and
//! `--match` keeps only the ones that matter for sync.
//!
//! Beside the FastAPI broadcaster of `bench/peers`, an app (this test)
//! broadcasts two kinds of messages, alternating: the lorem-ipsum text of
//! `/start_test`, and `{"type": "go", "at": …}` with a time to act
//! (`/start_test?lead=`). Two probes listen, acting at `/at`, and upload to
//! the agent, which is only the clock reference here. With `--match
//! /type=go`, the audit must judge the "go" broadcasts and leave out every
//! other one. That it judged exactly those is checked against something
//! the match does not decide: the probes act on "go" messages only, so a
//! judged lorem message would show as a receipt without an action.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Reaped, SKEWSCOPE, fastapi, records_in, sibling_binary, start_agent, wait_until};

/// A probe of 3 connections on `url`, acting at `/at`, uploading to and
/// timed against the agent at `agent`.
fn probe(url: &str, agent: &str, name: &str, out: &Path) -> Reaped {
    Reaped(
        Command::new(sibling_binary("skewscope-probe"))
            .args(["--url", url, "--name", name, "--connections", "3"])
            .args(["--act-at", "/at", "--time-server", agent])
            .args(["--upload", &format!("http://{agent}"), "--reconnect"])
            .args(["--time-interval", "200ms", "--duration", "180s"])
            .args(["--out", out.to_str().unwrap()])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// Broadcasts the site's own app sends while the test runs: the two kinds
/// alternate every 150 ms (at most 400, and never after the test ends).
struct SiteTraffic {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SiteTraffic {
    fn start(server: std::net::SocketAddr) -> SiteTraffic {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            for i in 0..400 {
                if flag.load(Ordering::Relaxed) {
                    return;
                }
                let path = if i % 2 == 0 {
                    "/start_test"
                } else {
                    "/start_test?lead=0.3"
                };
                let r = runtime
                    .block_on(agent::http_client::request(server, "GET", path, b"", None))
                    .unwrap();
                assert_eq!(r.status, 200, "{}", r.body);
                std::thread::sleep(Duration::from_millis(150));
            }
        });
        SiteTraffic {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for SiteTraffic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn passive_audit(agent: &str, json: &Path, extra: &[&str]) -> Output {
    Command::new(SKEWSCOPE)
        .args(["audit", "--agent", &format!("http://{agent}"), "--passive"])
        .args([
            "--window",
            "60s",
            "--broadcasts",
            "4",
            "--match",
            "/type=go",
        ])
        .args([
            "--require-probes",
            "2",
            "--settle",
            "20s",
            "--max-skew-p99",
            "1s",
        ])
        .args(["--max-late", "0", "--json"])
        .arg(json)
        .args(extra)
        .output()
        .unwrap()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn a_passive_audit_judges_only_the_sites_matching_broadcasts() {
    let dir = tempfile::tempdir().unwrap();
    let (_agent, agent, _) = start_agent(dir.path());
    let (_server, server) = fastapi();
    let url = format!("ws://{server}/ws");
    let (a, b) = (dir.path().join("a.sklog"), dir.path().join("b.sklog"));
    let _probes = [
        probe(&url, &agent, "lobby", &a),
        probe(&url, &agent, "stage", &b),
    ];
    wait_until("probes connected", || {
        common::opened_in(&a) == 3 && common::opened_in(&b) == 3
    });
    wait_until("probes logging", || {
        records_in(&a) > 8 && records_in(&b) > 8
    });
    let _traffic = SiteTraffic::start(server);

    // Thresholds that hold: exit 0.
    let passing = dir.path().join("passing.json");
    let o = passive_audit(&agent, &passing, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", common::output_text(&o));
    let out = json(&passing);
    assert_eq!(out["audit"]["passive"], true, "{}", common::output_text(&o));
    assert_eq!(out["audit"]["triggered"], 0);
    let report = &out["report"];
    let matched = &report["matched"];
    assert_eq!(matched["expression"], "/type=go");
    let judged = matched["matched"].as_u64().unwrap();
    // The window closes at the first look with 4 "go" broadcasts in it; the
    // lorem ones between them are left out, none unknown.
    assert!(judged >= 4, "{matched}");
    assert!(
        matched["left_out"].as_u64().unwrap() >= judged - 1,
        "{matched}"
    );
    assert_eq!(matched["unknown"], 0, "{matched}");
    assert_eq!(report["broadcasts"].as_u64(), Some(judged), "{report}");
    assert_eq!(report["missing"], 0, "{}", common::output_text(&o));
    // Every judged receipt has its action: no lorem message was judged.
    let actions = &report["actions"];
    assert_eq!(
        actions["receipts_without_action"],
        0,
        "{}",
        common::output_text(&o)
    );
    assert_eq!(
        actions["actions"].as_u64(),
        Some(judged * 6),
        "{}",
        common::output_text(&o)
    );
    assert_eq!(actions["late"], 0);
    // The probes connected to FastAPI, not the hub: the agent is the clock.
    assert_eq!(
        report["reference"]["kind"],
        "clock",
        "{}",
        common::output_text(&o)
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("--match /type=go:"), "{stdout}");
    assert!(
        out["audit"]["reproduce"]
            .as_str()
            .unwrap()
            .contains("--match '/type=go'")
    );

    // A threshold no LAN meets: exit 1, same broadcasts' kind.
    let failing = dir.path().join("failing.json");
    let o = passive_audit(&agent, &failing, &["--max-action-skew-p99", "1ns"]);
    assert_eq!(o.status.code(), Some(1), "{}", common::output_text(&o));
    assert_eq!(
        json(&failing)["report"]["actions"]["receipts_without_action"],
        0
    );

    // More probes required than upload: the audit cannot run, exit 2.
    let o = Command::new(SKEWSCOPE)
        .args(["audit", "--agent", &format!("http://{agent}"), "--passive"])
        .args(["--window", "5s", "--require-probes", "3", "--settle", "1s"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", common::output_text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--require-probes is 3"),
        "{}",
        common::output_text(&o)
    );
}

#[test]
fn a_passive_audit_refuses_to_trigger() {
    // --passive with a trigger is a contradiction, refused before anything runs.
    let o = Command::new(SKEWSCOPE)
        .args(["audit", "--agent", "http://127.0.0.1:9", "--passive"])
        .args(["--trigger", "http://127.0.0.1:9/start_test"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", common::output_text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot be used with"));
}

#[test]
fn a_passive_audit_of_the_hub_judges_what_the_app_published() {
    let dir = tempfile::tempdir().unwrap();
    let (_agent, agent, _) = start_agent(dir.path());
    let log = dir.path().join("hub.sklog");
    let url = format!("ws://{agent}/ws");
    let _probe = probe(&url, &agent, "lobby", &log);
    wait_until("probe connected", || common::opened_in(&log) == 3);
    wait_until("probe logging", || records_in(&log) > 8);
    // The site's app publishes state updates and, every other time, a "go".
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let addr: std::net::SocketAddr = agent.parse().unwrap();
    let publisher = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        for i in 0..400u32 {
            if flag.load(Ordering::Relaxed) {
                return;
            }
            let body = if i % 2 == 0 {
                format!(r#"{{"type":"state","n":{i}}}"#)
            } else {
                let at = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_secs_f64()
                    + 0.3;
                format!(r#"{{"type":"go","n":{i},"at":{at}}}"#)
            };
            let r = runtime
                .block_on(agent::http_client::request(
                    addr,
                    "POST",
                    "/publish",
                    body.as_bytes(),
                    None,
                ))
                .unwrap();
            assert_eq!(r.status, 200, "{}", r.body);
            std::thread::sleep(Duration::from_millis(150));
        }
    });
    let out = dir.path().join("hub.json");
    let o = Command::new(SKEWSCOPE)
        .args(["audit", "--agent", &format!("http://{agent}"), "--passive"])
        .args([
            "--window",
            "60s",
            "--broadcasts",
            "3",
            "--match",
            "/type=go",
        ])
        .args(["--require-probes", "1", "--settle", "20s", "--json"])
        .arg(&out)
        .output()
        .unwrap();
    stop.store(true, Ordering::Relaxed);
    publisher.join().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", common::output_text(&o));
    let out = json(&out);
    let report = &out["report"];
    assert_eq!(
        report["reference"]["kind"],
        "hub",
        "{}",
        common::output_text(&o)
    );
    let judged = report["matched"]["matched"].as_u64().unwrap();
    assert!(judged >= 3, "{}", report["matched"]);
    assert!(report["matched"]["left_out"].as_u64().unwrap() >= judged - 1);
    assert_eq!(report["broadcasts"].as_u64(), Some(judged));
    assert_eq!(
        report["receipts"].as_u64(),
        Some(judged * 3),
        "{}",
        common::output_text(&o)
    );
    assert_eq!(
        report["actions"]["receipts_without_action"],
        0,
        "{}",
        common::output_text(&o)
    );
    assert!(
        out["audit"]["reproduce"]
            .as_str()
            .unwrap()
            .starts_with("report DIR --broadcasts ")
    );
}
