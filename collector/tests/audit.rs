//! `skewscope audit` on the real binaries: probes upload to a real agent, the
//! audit triggers broadcasts and judges them; exit 0, 1 and 2 each come from
//! a real run, and the audit's report is what `skewscope report` says of the
//! agent's own data directory.

mod common;

use skewscope_os::log_files::read_file;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{Reaped, SKEWSCOPE, sibling_binary, start_agent_with, wait_until};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Starts a probe with `conns` connections to `url`, uploading to the agent.
fn uploading_probe(
    dir: &Path,
    name: &str,
    url: &str,
    conns: u32,
    agent: &str,
    extra: &[&str],
) -> Reaped {
    uploading_probe_with(dir, name, url, conns, agent, extra, &[])
}

/// [`uploading_probe`] with environment variables.
fn uploading_probe_with(
    dir: &Path,
    name: &str,
    url: &str,
    conns: u32,
    agent: &str,
    extra: &[&str],
    env: &[(&str, &Path)],
) -> Reaped {
    let mut cmd = Command::new(sibling_binary("skewscope-probe"));
    cmd.args(["--url", url, "--connections", &conns.to_string()])
        .args(["--name", name, "--upload", &format!("http://{agent}")])
        .args(["--duration", "120s"])
        .arg("--out")
        .arg(dir.join(format!("{name}.sklog")))
        .args(extra)
        .stdout(Stdio::null());
    for (key, value) in env {
        cmd.env(key, value);
    }
    Reaped(cmd.spawn().unwrap())
}

fn audit(args: &[&str]) -> Output {
    Command::new(SKEWSCOPE)
        .arg("audit")
        .args(args)
        .output()
        .unwrap()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The agent's `/audit/status`, for waiting on the probes.
fn status(addr: &str, token: &str) -> serde_json::Value {
    serde_json::from_str(&common::request_ok(
        addr,
        "GET",
        "/audit/status",
        b"",
        Some(token),
    ))
    .unwrap()
}

/// Probe runs uploading to the agent right now.
fn uploading(addr: &str, token: &str) -> usize {
    status(addr, token)["probes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["uploading"] == true)
        .count()
}

#[test]
fn an_audit_requiring_no_probe_is_refused_before_it_asks_anything() {
    // Nothing listens on port 9: the refusal comes before any request.
    let o = audit(&["--agent", "http://127.0.0.1:9", "--require-probes", "0"]);
    assert_eq!(o.status.code(), Some(2), "{}", common::output_text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--require-probes") && err.contains("1.."),
        "{err}"
    );
    assert!(!err.contains("no answer"), "{err}");
}

#[test]
fn an_audit_of_the_hub_passes_fails_or_cannot_run_and_says_which() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let token_arg = token.to_str().unwrap();
    let (_agent, addr, _) =
        start_agent_with(dir.path(), "127.0.0.1:0", &["--token-file", token_arg]);
    let url = format!("ws://{addr}/ws");
    let probe_args = ["--token-file", token_arg];
    let _a = uploading_probe(dir.path(), "kiosk-a", &url, 2, &addr, &probe_args);
    // kiosk-b gets the token as a systemd unit hands it over: a credential
    // named `token` in $CREDENTIALS_DIRECTORY, no flag.
    let credentials = dir.path().join("credentials");
    std::fs::create_dir(&credentials).unwrap();
    std::fs::copy(&token, credentials.join("token")).unwrap();
    let _b = uploading_probe_with(
        dir.path(),
        "kiosk-b",
        &url,
        3,
        &addr,
        &[],
        &[("CREDENTIALS_DIRECTORY", credentials.as_path())],
    );
    wait_until("two probes uploading", || uploading(&addr, "s3cret") == 2);
    wait_until("their five connections", || {
        status(&addr, "s3cret")["clients"] == 5
    });
    let agent_url = format!("http://{addr}");
    let common = [
        "--agent",
        &agent_url,
        "--token-file",
        token_arg,
        "--broadcasts",
        "5",
        "--interval",
        "20ms",
    ];

    // Exit 0: every threshold holds.
    let out = dir.path().join("pass.json");
    let keep = dir.path().join("copy");
    let page = dir.path().join("pass.html");
    let o = Command::new(SKEWSCOPE)
        .arg("audit")
        .args(common)
        .args(["--require-probes", "2", "--settle", "20s"])
        .args(["--max-skew-p99", "1s", "--json"])
        .arg(&out)
        .arg("--keep")
        .arg(&keep)
        .arg("--html")
        .arg(&page)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", common::output_text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("PASS  skew-p99"),
        "{}",
        common::output_text(&o)
    );
    assert!(
        stdout.contains("PASS: all 3 checks passed"),
        "{}",
        common::output_text(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("broadcast 5 of 5"),
        "progress on stderr: {}",
        common::output_text(&o)
    );
    let pass = json(&out);
    assert_eq!(pass["verdict"]["pass"], true);
    assert_eq!(
        pass["audit"]["complete"],
        true,
        "{}",
        common::output_text(&o)
    );
    let report = &pass["report"];
    assert_eq!(report["broadcasts"], 5);
    assert_eq!(
        report["receipts"], 25,
        "every connection got every broadcast"
    );
    assert_eq!(report["missing"], 0);
    assert_eq!(report["duplicates"], 0);
    // The figure judged is the report's own (one clock: the raw skew).
    let skew = &pass["verdict"]["checks"][0];
    assert_eq!(skew["check"], "skew-p99");
    assert_eq!(skew["measured"], report["skew_ns"]["p99"]);
    // The page to hand over: the verdict first, a mark per broadcast.
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains(r#"<section id="verdict" class="pass"><h2>PASS: all 3 checks passed"#),
        "{html}"
    );
    assert_eq!(html.matches(r#"<circle class="mark skew"#).count(), 5);
    assert_eq!(html.matches(r#"<g class="mark offset">"#).count(), 2);

    // `skewscope report` on the agent's own data directory, for the same
    // broadcasts, says the same.
    let reproduce = pass["audit"]["reproduce"].as_str().unwrap();
    let range = reproduce.rsplit(' ').next().unwrap();
    let o = Command::new(SKEWSCOPE)
        .arg("report")
        .arg(dir.path().join("agent"))
        .args(["--broadcasts", range, "--json", "-"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", common::output_text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let direct: serde_json::Value =
        serde_json::from_str(&stdout[stdout.find("{\n").unwrap()..]).expect("report JSON");
    for field in ["broadcasts", "receipts", "missing", "skew_ns", "fanout_ns"] {
        assert_eq!(direct[field], report[field], "{field}");
    }

    // Exit 1: a threshold no real fan-out meets.
    let page = dir.path().join("fail.html");
    let html_args = ["--html", page.to_str().unwrap()];
    let o = audit(
        &[
            &common[..],
            &["--settle", "20s", "--max-skew-max", "1ns"],
            &html_args,
        ]
        .concat(),
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("verdict"),
        "{}",
        common::output_text(&o)
    );
    assert_eq!(o.status.code(), Some(1), "{}", common::output_text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("FAIL  skew-max ≤ 1 ns"),
        "{}",
        common::output_text(&o)
    );
    assert!(
        stdout.contains("FAIL: 1 of 4 checks failed"),
        "{}",
        common::output_text(&o)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains(r#"<section id="verdict" class="fail"><h2>FAIL: 1 of 4 checks failed"#),
        "{html}"
    );
    assert!(
        html.contains(r#"<tr class="fail"><td>FAIL</td><td>skew-max</td><td>≤ 1 ns</td>"#),
        "{html}"
    );

    // Exit 2: a wrong token, too few probes, no agent at all.
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "guess").unwrap();
    let o = audit(&[
        "--agent",
        &agent_url,
        "--token-file",
        wrong.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", common::output_text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(&format!(
            "the agent refused the token from {} (401)",
            wrong.display()
        )),
        "{}",
        common::output_text(&o)
    );
    // No token: it wants one. The address alone is taken as http://.
    let o = audit(&["--agent", &addr]);
    assert_eq!(o.status.code(), Some(2), "{}", common::output_text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("the agent requires a token (401) and none was given: give --token-file"),
        "{}",
        common::output_text(&o)
    );
    let o = audit(&[&common[..], &["--require-probes", "3", "--settle", "300ms"]].concat());
    assert_eq!(o.status.code(), Some(2), "{}", common::output_text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--require-probes is 3"),
        "{}",
        common::output_text(&o)
    );
    // It names the ones uploading, so the missing one can be told.
    assert!(err.contains("kiosk-a") && err.contains("kiosk-b"), "{err}");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nobody = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let o = audit(&["--agent", &nobody]);
    assert_eq!(o.status.code(), Some(2), "{}", common::output_text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no answer"),
        "{}",
        common::output_text(&o)
    );
}

#[test]
fn a_long_running_agent_is_audited_on_this_run_only() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let token_arg = token.to_str().unwrap();
    let (_agent, addr, _) =
        start_agent_with(dir.path(), "127.0.0.1:0", &["--token-file", token_arg]);
    let url = format!("ws://{addr}/ws");
    // An earlier run of the kiosk: it connected, uploaded and ended.
    let earlier = dir.path().join("earlier");
    std::fs::create_dir(&earlier).unwrap();
    let mut old = uploading_probe(
        &earlier,
        "kiosk-a",
        &url,
        3,
        &addr,
        &["--token-file", token_arg, "--count", "1"],
    );
    wait_until("the earlier run's three connections", || {
        status(&addr, "s3cret")["clients"] == 3
    });
    common::request_ok(&addr, "GET", "/start_test", b"", Some("s3cret"));
    assert!(old.0.wait().unwrap().success());
    wait_until("the earlier run uploaded and idle", || {
        status(&addr, "s3cret")["probes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["uploading"] == false && p["idle_ms"].as_u64().unwrap() > 3_000)
    });
    // This run of the kiosk: two connections.
    let _a = uploading_probe(
        dir.path(),
        "kiosk-a",
        &url,
        2,
        &addr,
        &["--token-file", token_arg],
    );
    wait_until("the new run uploading", || uploading(&addr, "s3cret") == 1);
    wait_until("its two connections", || {
        status(&addr, "s3cret")["clients"] == 2
    });
    let out = dir.path().join("audit.json");
    let o = audit(&[
        "--agent",
        &format!("http://{addr}"),
        "--token-file",
        token_arg,
        "--broadcasts",
        "3",
        "--interval",
        "20ms",
        "--settle",
        "20s",
        "--json",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", common::output_text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    // The connections of this run, not of both.
    assert!(
        stdout.contains("broadcasts 3   connections 2   receipts 6   missing 0"),
        "{}",
        common::output_text(&o)
    );
    // The earlier run is named as such, and is no fault.
    assert!(
        stderr.contains("left out 1 earlier probe run(s)") && stderr.contains("kiosk-a (run "),
        "{}",
        common::output_text(&o)
    );
    assert!(
        !stdout.contains("without a stop record"),
        "{}",
        common::output_text(&o)
    );
    let facts = json(&out);
    assert_eq!(facts["audit"]["earlier_runs"].as_array().unwrap().len(), 1);
    // Its reproduction names the logs it read, since the directory holds more.
    let reproduce = facts["audit"]["reproduce"].as_str().unwrap();
    assert!(reproduce.contains("DIR/probes/"), "{reproduce}");
    let files: Vec<_> = reproduce
        .split(' ')
        .filter_map(|a| a.strip_prefix("DIR/"))
        .map(|name| dir.path().join("agent").join(name))
        .collect();
    let o = Command::new(SKEWSCOPE)
        .arg("report")
        .args(&files)
        .args(reproduce.split(' ').skip_while(|a| !a.starts_with("--")))
        .args(["--json", "-"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", common::output_text(&o));
    let direct = String::from_utf8_lossy(&o.stdout);
    let direct: serde_json::Value =
        serde_json::from_str(&direct[direct.find("{\n").unwrap()..]).unwrap();
    assert_eq!(direct["connections"], 2, "{reproduce}");
    assert_eq!(direct["receipts"], facts["report"]["receipts"]);
}

/// A broadcast server that is not skewscope: WebSocket clients on `/ws` of
/// one port, and `GET /start_test` on another sends every client the same
/// fixed text, as FastAPI-style servers do.
/// A broadcaster that knows nothing of skewscope: its WebSocket and HTTP
/// addresses, and its sender (whose receivers are its connected clients).
fn foreign_server(
    runtime: &tokio::runtime::Runtime,
) -> (
    SocketAddr,
    SocketAddr,
    tokio::sync::broadcast::Sender<String>,
) {
    let (ws, http) = runtime.block_on(async {
        (
            tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
            tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        )
    });
    let addrs = (ws.local_addr().unwrap(), http.local_addr().unwrap());
    let sender = runtime.block_on(async { common::broadcaster::serve(ws) });
    let clients = sender.clone();
    runtime.spawn(async move {
        let message = "Lorem ipsum dolor sit amet, ".repeat(16);
        loop {
            let (mut stream, _) = http.accept().await.unwrap();
            let mut head = vec![0u8; 4096];
            let n = stream.read(&mut head).await.unwrap_or(0);
            if String::from_utf8_lossy(&head[..n]).starts_with("GET /start_test ") {
                let clients = sender.send(message.clone()).unwrap_or(0);
                let body = format!("{{\"clients\":{clients}}}");
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            } else {
                let _ = stream
                    .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    .await;
            }
        }
    });
    (addrs.0, addrs.1, clients)
}

#[test]
fn an_audit_of_a_foreign_server_uses_the_agent_as_clock_reference_and_collector() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (ws, http, clients) = foreign_server(&runtime);
    let dir = tempfile::tempdir().unwrap();
    let (_agent, addr, _) = start_agent_with(dir.path(), "127.0.0.1:0", &[]);
    let url = format!("ws://{ws}/ws");
    let time = ["--time-server", &addr, "--time-interval", "100ms"];
    let _a = uploading_probe(dir.path(), "lobby", &url, 2, &addr, &time);
    let _b = uploading_probe(dir.path(), "stage", &url, 2, &addr, &time);
    // A probe of the agent's own hub uploads too: not this audit's.
    let hub = format!("ws://{addr}/ws");
    let _c = uploading_probe(dir.path(), "backstage", &hub, 1, &addr, &[]);
    let token = "unused";
    wait_until("three probes uploading", || uploading(&addr, token) == 3);
    // Their four connections are the server's before the first trigger.
    wait_until("four connections to the server", || {
        clients.receiver_count() == 4
    });

    let out = dir.path().join("foreign.json");
    let o = Command::new(SKEWSCOPE)
        .args(["audit", "--agent", &format!("http://{addr}")])
        .args(["--trigger", &format!("http://{http}/start_test")])
        .args(["--broadcasts", "5", "--interval", "20ms", "--settle", "20s"])
        .args(["--require-probes", "3", "--max-skew-p99", "1s"])
        .args(["--max-offset-bound", "100ms", "--json"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", common::output_text(&o));
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("not every receipt had arrived"),
        "the audit saw every receipt arrive: {}",
        common::output_text(&o)
    );
    let audit = json(&out);
    let report = &audit["report"];
    assert_eq!(report["broadcasts"], 5, "{}", common::output_text(&o));
    assert_eq!(report["receipts"], 20);
    assert_eq!(report["missing"], 0);
    assert_eq!(report["connections"], 4, "only the foreign server's probes");
    let names: Vec<&str> = report["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert!(!names.contains(&"backstage"), "{names:?}");
    // Latency from the audit's own trigger times, one per receipt.
    assert_eq!(report["latency_from_trigger"]["latency_ns"]["count"], 20);
    // The agent sent nothing: it is the clock reference, not the server.
    assert!(report["fanout_ns"].is_null());
    assert!(!report["agent"].is_null(), "the agent run is the reference");
    let checks = audit["verdict"]["checks"].as_array().unwrap();
    let bound = checks
        .iter()
        .find(|c| c["check"] == "offset-bound")
        .unwrap();
    assert_eq!(bound["pass"], true, "{bound}");
}

/// A probe that stays connected to the agent but whose records stop
/// arriving (a stalled link) fails the audit by name instead of silently
/// dropping out of the report.
#[test]
fn a_probe_whose_records_stop_arriving_fails_the_audit() {
    let dir = tempfile::tempdir().unwrap();
    let (_agent, addr, _) = start_agent_with(dir.path(), "127.0.0.1:0", &[]);
    let url = format!("ws://{addr}/ws");
    let link = common::proxy::Proxy::start(&addr, None, true);
    let _a = uploading_probe(dir.path(), "lobby", &url, 2, &addr, &[]);
    let _b = uploading_probe(dir.path(), "stage", &url, 1, &link.addr, &[]);
    wait_until("two probes uploading", || uploading(&addr, "") == 2);
    wait_until("their three connections", || {
        status(&addr, "")["clients"] == 3
    });
    link.hold();
    let o = audit(&[
        "--agent",
        &format!("http://{addr}"),
        "--broadcasts",
        "3",
        "--interval",
        "20ms",
        "--settle",
        "1500ms",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", common::output_text(&o));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("FAIL  probes-reported ≤ 0: 1  (records since the last broadcast"),
        "{}",
        common::output_text(&o)
    );
    assert!(
        stdout.contains("FAIL: 1 of 3 checks failed"),
        "{}",
        common::output_text(&o)
    );
    assert!(
        stdout.contains("not every receipt had arrived"),
        "{}",
        common::output_text(&o)
    );
}

/// A kiosk killed during an audit is named as the one that stopped: its
/// connections close, so the hub's later broadcasts never target them and
/// nothing is "missing"; without the name it would just drop out.
#[test]
fn a_probe_killed_during_the_audit_is_named_and_fails_it() {
    let dir = tempfile::tempdir().unwrap();
    let (_agent, addr, _) = start_agent_with(dir.path(), "127.0.0.1:0", &[]);
    let url = format!("ws://{addr}/ws");
    let _a = uploading_probe(dir.path(), "lobby", &url, 2, &addr, &[]);
    let mut b = uploading_probe(dir.path(), "stage", &url, 1, &addr, &[]);
    wait_until("two probes uploading", || uploading(&addr, "") == 2);
    wait_until("their three connections", || {
        status(&addr, "")["clients"] == 3
    });
    let auditing = Command::new(SKEWSCOPE)
        .arg("audit")
        .args([
            "--agent",
            &format!("http://{addr}"),
            "--require-probes",
            "2",
        ])
        .args([
            "--broadcasts",
            "10",
            "--interval",
            "300ms",
            "--settle",
            "3s",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Two of its ten broadcasts out: the audit began with both probes.
    wait_until("the audit's second broadcast", || {
        status(&addr, "")["broadcasts"].as_u64().unwrap_or(0) >= 2
    });
    b.0.kill().unwrap();
    let o = auditing.wait_with_output().unwrap();
    let text = common::output_text(&o);
    // It began naming both.
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("2 probe(s) uploading: lobby, stage"),
        "{text}"
    );
    let sent = status(&addr, "")["broadcasts"].as_u64().unwrap();
    assert_eq!(sent, 10, "the kill came before the last broadcast: {text}");
    assert_eq!(o.status.code(), Some(1), "{text}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains("probes-reported"))
        .unwrap_or_else(|| panic!("no probes-reported check: {text}"));
    assert!(line.contains("FAIL  probes-reported ≤ 0: 1"), "{text}");
    assert!(
        line.contains("stopped uploading during the audit") && line.contains("stage"),
        "{text}"
    );
    assert!(!line.contains("lobby"), "{text}");
}

/// SIGKILL the agent in the middle of an audit with probes streaming, and
/// start it again on its data directory: the audit says it could not finish
/// (exit 2), the probes reconnect and finish their uploads, and the agent's
/// data directory holds every probe record exactly once: the probes' own
/// logs, record for record, and a report that counts each receipt once.
#[test]
fn an_agent_killed_mid_audit_loses_and_doubles_nothing() {
    use nix::sys::signal::Signal;
    use skewscope_core::log::AnyLog;
    use skewscope_core::record::ProbeRecord;

    let dir = tempfile::tempdir().unwrap();
    let (mut agent, addr, _) = start_agent_with(dir.path(), "127.0.0.1:0", &[]);
    let url = format!("ws://{addr}/ws");
    let reconnect = ["--reconnect"];
    let mut a = uploading_probe(dir.path(), "lobby", &url, 3, &addr, &reconnect);
    let mut b = uploading_probe(dir.path(), "stage", &url, 2, &addr, &reconnect);
    wait_until("two probes uploading", || uploading(&addr, "") == 2);
    wait_until("five connections", || status(&addr, "")["clients"] == 5);
    let mut audit = Reaped(
        Command::new(SKEWSCOPE)
            .args(["audit", "--agent", &format!("http://{addr}")])
            .args(["--broadcasts", "40", "--interval", "50ms", "--settle", "2s"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Five broadcasts' copies in the probes' own logs (the agent's count
    // of broadcasts sent runs ahead of their copies arriving: killed then,
    // a loaded host once left 20 receipts, not 25).
    wait_until("five broadcasts received", || {
        ["lobby", "stage"]
            .iter()
            .map(|n| common::receipts_in(&dir.path().join(format!("{n}.sklog"))))
            .sum::<usize>()
            >= 25
    });
    common::signal(&agent.0, Signal::SIGKILL);
    agent.0.wait().unwrap();
    let (mut agent, _, _) = start_agent_with(dir.path(), &addr, &[]);
    let code = audit.0.wait().unwrap().code();
    let mut said = String::new();
    std::io::Read::read_to_string(&mut audit.0.stderr.take().unwrap(), &mut said).unwrap();
    assert_eq!(code, Some(2), "{said}");
    assert!(said.contains("cannot audit"), "{said}");

    // The probes come back and finish; their last records are uploaded.
    // What counts a reconnect is the probe's own `ConnectionOpened`, which
    // it writes after the agent has already counted the client: wait for
    // the logs (stopped right after the agent's count, a probe once had not
    // written its fifth).
    wait_until("five connections again", || {
        status(&addr, "")["clients"] == 5
    });
    wait_until("every connection opened twice in the logs", || {
        ["lobby", "stage"]
            .iter()
            .map(|n| common::opened_in(&dir.path().join(format!("{n}.sklog"))))
            .sum::<usize>()
            >= 10
    });
    common::signal(&a.0, Signal::SIGTERM);
    common::signal(&b.0, Signal::SIGTERM);
    assert!(a.0.wait().unwrap().success());
    assert!(b.0.wait().unwrap().success());
    common::signal(&agent.0, Signal::SIGTERM);
    agent.0.wait().unwrap();

    let records = |path: &std::path::Path| match read_file(path).unwrap() {
        AnyLog::Probe(d) => d.records,
        AnyLog::Agent(_) => panic!("not a probe log"),
    };
    let mut receipts = 0;
    for name in ["lobby", "stage"] {
        let own = records(&dir.path().join(format!("{name}.sklog")));
        let run = own
            .iter()
            .find_map(|r| match r {
                ProbeRecord::Identity(i) => Some(i.run_id),
                _ => None,
            })
            .unwrap();
        let stored = records(
            &dir.path()
                .join("agent/probes")
                .join(format!("probe-{run:032x}.sklog")),
        );
        assert_eq!(stored.len(), own.len(), "{name}");
        assert!(stored == own, "{name}: the stored run differs from its log");
        receipts += own
            .iter()
            .filter(|r| matches!(r, ProbeRecord::Receipt(_)))
            .count();
    }
    assert!(receipts >= 25, "broadcasts reached the probes: {receipts}");
    // Every receipt once. A SIGKILLed agent loses up to 100 ms of its own
    // records (its recorder's flush interval): receipts of a broadcast it
    // sent in that window match no broadcast in its log, and are counted.
    let (text, report) = common::json_report(&[&dir.path().join("agent")]);
    let joined = report["receipts"].as_u64().unwrap();
    let unmatched = report["unmatched"].as_u64().unwrap();
    assert_eq!(joined + unmatched, receipts as u64, "{text}");
    // 100 ms holds at most three broadcasts 50 ms apart, of 5 receipts each.
    assert!(
        unmatched <= 15,
        "at most one flush interval's receipts: {text}"
    );
    assert_eq!(report["duplicates"], 0, "{text}");
    assert_eq!(report["reconnects"], 5, "{text}");
}

/// A site that serves the agent over TLS with its own CA: the probe
/// receives over `wss://` and uploads over `https://` with `--ca-file`, the
/// audit asks over `https://` with the same file; without it the audit
/// cannot reach the agent and says why. The operator then renews the
/// certificate (a new CA here) and sends SIGHUP: the same agent process
/// serves the new one, and the probe connected under the old one stays.
#[test]
fn an_audit_over_tls_trusts_the_sites_ca_and_a_renewed_certificate_needs_no_restart() {
    use nix::sys::signal::{Signal, kill};
    use skewscope_os::test_certs::private_ca;
    let dir = tempfile::tempdir().unwrap();
    let (old, new) = (private_ca(dir.path(), "old"), private_ca(dir.path(), "new"));
    let (cert, key) = (dir.path().join("live.pem"), dir.path().join("live.key"));
    std::fs::copy(&old.cert, &cert).unwrap();
    std::fs::copy(&old.key, &key).unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let token_arg = token.to_str().unwrap();
    let (agent, addr, _) = start_agent_with(
        dir.path(),
        "127.0.0.1:0",
        &[
            "--token-file",
            token_arg,
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    // By address, which the certificate carries: a fresh Debian root may
    // not resolve `localhost`.
    let host = addr.clone();
    let mut probe = Command::new(sibling_binary("skewscope-probe"));
    probe
        .args(["--url", &format!("wss://{host}/ws"), "--name", "tls-kiosk"])
        .args(["--connections", "2"])
        .args([
            "--upload",
            &format!("https://{host}"),
            "--token-file",
            token_arg,
        ])
        .arg("--ca-file")
        .arg(&old.ca)
        .args(["--duration", "120s", "--out"])
        .arg(dir.path().join("tls-kiosk.sklog"))
        .stdout(Stdio::null());
    let _probe = Reaped(probe.spawn().unwrap());
    let agent_url = format!("https://{host}");
    let ask = |ca: &Path| {
        audit(&[
            "--agent",
            &agent_url,
            "--ca-file",
            ca.to_str().unwrap(),
            "--token-file",
            token_arg,
            "--require-probes",
            "1",
            "--broadcasts",
            "3",
            "--interval",
            "20ms",
        ])
    };
    let o = ask(&old.ca);
    assert_eq!(o.status.code(), Some(0), "{}", common::output_text(&o));
    assert!(
        common::output_text(&o).contains("PASS"),
        "{}",
        common::output_text(&o)
    );
    // Without the site's CA the system roots do not know the agent.
    let o = audit(&["--agent", &agent_url, "--token-file", token_arg]);
    assert_eq!(o.status.code(), Some(2), "{}", common::output_text(&o));
    assert!(
        common::output_text(&o)
            .to_lowercase()
            .contains("certificate"),
        "{}",
        common::output_text(&o)
    );

    // Renewed: the new pair in place, SIGHUP, and the same process serves it.
    std::fs::copy(&new.cert, &cert).unwrap();
    std::fs::copy(&new.key, &key).unwrap();
    kill(
        nix::unistd::Pid::from_raw(agent.0.id() as i32),
        Signal::SIGHUP,
    )
    .unwrap();
    let mut renewed = None;
    wait_until("the renewed certificate served", || {
        let o = ask(&new.ca);
        let served = o.status.code() == Some(0);
        renewed = Some(o);
        served
    });
    let o = renewed.unwrap();
    // Its two connections, made under the old certificate, got all 3.
    assert!(
        common::output_text(&o).contains("connections 2   receipts 6   missing 0"),
        "{}",
        common::output_text(&o)
    );
}
