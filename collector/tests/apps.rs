//! The kiosks' own actions, audited: an app that hands its broadcasts to
//! the hub (`POST /publish?lead=`) through its own endpoint, audited with
//! `skewscope audit --trigger` on that endpoint; two Python kiosks that act
//! through the clock module and report their own actions (one killed with
//! SIGKILL mid-run and started again); a native app beside a probe that
//! answers its notices. What the design promises, asserted:
//! - the audit sees the hub's broadcasts that followed the trigger, and
//!   passes with a lead the LAN allows and fails with none;
//! - it lists each app as a device with its kind, and judges its actions
//!   like a probe's: every action once (none twice, none unmatched), the
//!   killed kiosk's actions all there but the one it may have been killed
//!   in the middle of;
//! - the native app's answered actions are its own row.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{
    Reaped, SKEWSCOPE, fastapi_app, request_ok, sibling_binary, signal, start_agent_with, wait_for,
};
use nix::sys::signal::Signal;

const BROADCASTS: u64 = 10;

fn clients() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients")
}

/// A Python kiosk: the documented example, reporting its actions as `name`.
fn kiosk(agent: &str, token: &Path, name: &str, state: &Path) -> Child {
    Command::new("python3")
        .arg(clients().join("python/examples/act_on_broadcast.py"))
        .arg(format!("ws://{agent}/ws"))
        .arg(format!("ws://{agent}/clock"))
        .arg("--token-file")
        .arg(token)
        .args(["--name", name, "--state-dir"])
        .arg(state)
        .env("PYTHONPATH", clients().join("python"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 with websockets (./test installs it)")
}

/// A child's stdout lines, as they come.
fn lines_of(child: &mut Child) -> mpsc::Receiver<String> {
    let out = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in out.lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// The lines of `rx` until one starts with `prefix`.
fn until(rx: &mpsc::Receiver<String>, prefix: &str) -> Vec<String> {
    let mut seen = Vec::new();
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("no {prefix:?} line ({e}) after {seen:?}"));
        let done = line.starts_with(prefix);
        seen.push(line);
        if done {
            return seen;
        }
    }
}

fn audit(agent: &str, token: &Path, trigger: &str, probes: u32, json: &Path) -> Output {
    Command::new(SKEWSCOPE)
        .args(["audit", "--agent", &format!("http://{agent}")])
        .arg("--token-file")
        .arg(token)
        .args(["--trigger", trigger])
        .args([
            "--broadcasts",
            &BROADCASTS.to_string(),
            "--interval",
            "400ms",
        ])
        .args(["--settle", "20s", "--require-probes", &probes.to_string()])
        .args(["--max-skew-p99", "1s", "--max-late", "0"])
        .args(["--max-action-skew-p99", "1s", "--json"])
        .arg(json)
        .output()
        .unwrap()
}

#[test]
fn the_audit_of_the_hub_path_judges_each_apps_own_actions_once() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "kiosk-site-token\n").unwrap();
    let (mut agent, addr, _log) = start_agent_with(
        dir.path(),
        "127.0.0.1:0",
        &["--token-file", token.to_str().unwrap()],
    );
    let agent_url = format!("http://{addr}");
    let (_app, app) = fastapi_app(
        "hub_app:app",
        &[
            ("SKEWSCOPE_AGENT", &agent_url),
            ("SKEWSCOPE_TOKEN_FILE", token.to_str().unwrap()),
        ],
    );

    // The native app beside a probe: it answers each notice.
    let mut reader = Reaped(
        Command::new("python3")
            .arg(clients().join("act-notify/act_reader.py"))
            .arg("0")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let reader_lines = lines_of(&mut reader.0);
    let notify = reader_lines
        .recv_timeout(Duration::from_secs(30))
        .unwrap()
        .trim_start_matches("listening on ")
        .to_owned();
    let probe_log = dir.path().join("lobby.sklog");
    let mut probe = Reaped(
        Command::new(sibling_binary("skewscope-probe"))
            .args(["--url", &format!("ws://{addr}/ws"), "--name", "lobby"])
            .args(["--act-at", "/at", "--act-notify", &notify])
            .args(["--act-notify-name", "signage", "--time-interval", "200ms"])
            .args(["--upload", &agent_url, "--token-file"])
            .arg(&token)
            .args(["--out", probe_log.to_str().unwrap(), "--duration", "300s"])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    let states = [dir.path().join("state-1"), dir.path().join("state-2")];
    let mut first = Reaped(kiosk(&addr, &token, "kiosk-1", &states[0]));
    let mut second = Reaped(kiosk(&addr, &token, "kiosk-2", &states[1]));
    let first_lines = lines_of(&mut first.0);
    let second_lines = lines_of(&mut second.0);
    until(&first_lines, "reporting as");
    until(&second_lines, "reporting as");
    wait_for("three runs uploading", Duration::from_secs(60), || {
        let status: serde_json::Value = serde_json::from_str(&request_ok(
            &addr,
            "GET",
            "/audit/status",
            b"",
            Some("kiosk-site-token"),
        ))
        .unwrap();
        status["probes"].as_array().is_some_and(|p| p.len() >= 3)
    });

    // While the audit runs: kiosk-1 is killed after its third action and
    // started again with the same name and state; it goes on with its run.
    let killer = {
        let (addr, token, state) = (addr.clone(), token.clone(), states[0].clone());
        std::thread::spawn(move || {
            let mut printed = 0;
            while printed < 3 {
                printed += until(&first_lines, "act:")
                    .iter()
                    .filter(|l| l.starts_with("act:"))
                    .count();
            }
            signal(&first.0, Signal::SIGKILL);
            let _ = first.0.wait();
            let mut again = Reaped(kiosk(&addr, &token, "kiosk-1", &state));
            let lines = lines_of(&mut again.0);
            (printed, again, lines)
        })
    };

    let json = dir.path().join("pass.json");
    let o = audit(
        &addr,
        &token,
        &format!("http://{app}/start_test?lead=0.4"),
        3,
        &json,
    );
    let (printed_before, mut again, again_lines) = killer.join().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", common::output_text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("the probes listen to the agent's hub"),
        "{}",
        common::output_text(&o)
    );
    let outcome: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let report = &outcome["report"];
    assert_eq!(
        report["broadcasts"],
        BROADCASTS,
        "{}",
        common::output_text(&o)
    );
    let actions = &report["actions"];
    assert_eq!(actions["late"], 0, "{}", common::output_text(&o));
    assert_eq!(
        actions["unmatched_actions"],
        0,
        "{}",
        common::output_text(&o)
    );
    assert_eq!(report["duplicates"], 0, "{}", common::output_text(&o));
    let actor = |name: &str| -> serde_json::Value {
        actions["by_actor"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .unwrap_or_else(|| panic!("{name} not among the actors: {}", common::output_text(&o)))
            .clone()
    };
    assert_eq!(actor("kiosk-2")["kind"], "app");
    assert_eq!(
        actor("kiosk-2")["actions"],
        BROADCASTS,
        "{}",
        common::output_text(&o)
    );
    assert_eq!(actor("lobby")["kind"], "probe");
    assert_eq!(actor("lobby")["actions"], BROADCASTS);
    assert_eq!(actor("lobby/signage")["kind"], "native-app");
    assert_eq!(
        actor("lobby/signage")["actions"],
        BROADCASTS,
        "{}",
        common::output_text(&o)
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("who acted:"), "{}", common::output_text(&o));

    // kiosk-1: its actions before the kill and after the restart, each
    // judged once; the one it may have been killed in the middle of (acted,
    // not yet written) is the only one that can be missing.
    signal(&again.0, Signal::SIGTERM);
    assert!(again.0.wait().unwrap().success());
    let after = again_lines
        .try_iter()
        .filter(|l| l.starts_with("act:"))
        .count();
    let judged = actor("kiosk-1")["actions"].as_u64().unwrap() as usize;
    let printed = printed_before + after;
    assert!(
        judged == printed || judged + 1 == printed,
        "kiosk-1 printed {printed} actions ({printed_before} before the kill), the audit judged {judged}: {}",
        common::output_text(&o)
    );
    assert!(
        after > 0,
        "the restarted kiosk acted on none: {}",
        common::output_text(&o)
    );

    // No lead: the time to act has passed when the copies are read.
    let json = dir.path().join("fail.json");
    // kiosk-1 has stopped its run: two uploading.
    let o = audit(
        &addr,
        &token,
        &format!("http://{app}/start_test?lead=0"),
        2,
        &json,
    );
    assert_eq!(o.status.code(), Some(1), "{}", common::output_text(&o));
    let outcome: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(outcome["report"]["actions"]["late"].as_u64().unwrap() > 0);

    for p in [&second, &probe] {
        signal(&p.0, Signal::SIGTERM);
    }
    assert!(second.0.wait().unwrap().success());
    assert!(probe.0.wait().unwrap().success());
    signal(&agent.0, Signal::SIGTERM);
    assert!(agent.0.wait().unwrap().success());
}
