//! `skewscope sweep` against the servers people run, on loopback: the
//! FastAPI (uvicorn) and Go (gorilla/websocket) broadcasters of
//! bench/peers, unmodified, swept through small stages (5, 50, 200
//! connections) with their own `/start_test` as the trigger.
//!
//! What the design promises, whatever the machine's speed: every stage's
//! broadcasts reach every connection exactly once (receipts = broadcasts ×
//! connections, none missing, none twice), the knee's sentence says what
//! the stages' figures say against the threshold, and the result carries
//! every setting and the machine. A stage over the open-file limit is cut
//! and said; a trigger that makes no broadcast stops the sweep with the
//! reason. No figure is held to an absolute time.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{SKEWSCOPE, fastapi, go_peer, start_agent_with};
use serde_json::Value;
use skewscope_os::test_namespace::in_own_namespace;

/// The stages the tests sweep: small, for a loaded 2-core machine.
const STAGES: &str = "5,50,200";
const BROADCASTS: u64 = 5;

/// Runs `skewscope sweep` with `args` and the test's usual pacing, the
/// JSON to `dir/result.json`; returns its output and the parsed result.
fn sweep(prefix: &[&str], args: &[&str], dir: &Path) -> (Output, String, Value) {
    let json = dir.join("result.json");
    let mut command = match prefix.split_first() {
        Some((program, rest)) => {
            let mut c = Command::new(program);
            c.args(rest).arg(SKEWSCOPE);
            c
        }
        None => Command::new(SKEWSCOPE),
    };
    let output = command
        .arg("sweep")
        .args(["--broadcasts", &BROADCASTS.to_string()])
        .args(["--interval", "20ms", "--settle", "20s"])
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("skewscope runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let result = std::fs::read_to_string(&json)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| {
            panic!(
                "no result JSON; stdout:\n{stdout}\nstderr:\n{}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    (output, stdout, result)
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// `1000` as `1,000`, as the sentences write it.
fn thousands(n: u64) -> String {
    let d = n.to_string();
    let mut out = String::new();
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Every stage: each connection opened, none refused or dropped, and each
/// broadcast received on each exactly once.
fn assert_every_receipt_once(result: &Value, stages: &[u64]) {
    let run = result["stages"].as_array().unwrap();
    assert_eq!(run.len(), stages.len(), "{result:#}");
    for (stage, &n) in run.iter().zip(stages) {
        let at = format!("at {n}: {stage:#}");
        assert_eq!(u(&stage["connections"]), n, "{at}");
        assert_eq!(u(&stage["opened"]), n, "{at}");
        assert_eq!(u(&stage["refused"]), 0, "{at}");
        assert_eq!(u(&stage["dropped"]), 0, "{at}");
        assert!(stage["stopped"].is_null(), "{at}");
        let f = &stage["figures"];
        assert_eq!(u(&f["triggered"]), BROADCASTS, "{at}");
        assert_eq!(u(&f["heard"]), BROADCASTS, "{at}");
        assert_eq!(u(&f["listening"]), n, "{at}");
        assert_eq!(u(&f["receipts"]), BROADCASTS * n, "{at}");
        // Its own CPU is spread over exactly the measured receipts.
        assert_eq!(u(&stage["probe_cpu"]["receipts"]), BROADCASTS * n, "{at}");
        assert!(
            stage["probe_cpu"]["per_receipt_us"].as_f64().unwrap() > 0.0,
            "{at}"
        );
        assert_eq!(u(&f["expected"]), BROADCASTS * n, "{at}");
        assert_eq!(u(&f["missing"]), 0, "{at}");
        assert_eq!(u(&f["duplicates"]), 0, "{at}");
        assert_eq!(u(&f["unexplained"]), 0, "{at}");
        assert_eq!(u(&f["skew_ns"]["count"]), BROADCASTS, "{at}");
        assert_eq!(
            u(&f["latency_from_trigger_ns"]["count"]),
            BROADCASTS * n,
            "{at}"
        );
        // Ordered figures, whatever they are.
        let skew = &f["skew_ns"];
        assert!(u(&skew["p50"]) <= u(&skew["p99"]) && u(&skew["p99"]) <= u(&skew["max"]));
    }
}

/// The knee's fields and sentence say what the stages' figures say
/// against the threshold.
fn assert_knee_consistent(result: &Value, text: &str) {
    let threshold = u(&result["settings"]["max_skew_p99_ns"]);
    let stages: Vec<(u64, u64)> = result["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (u(&s["opened"]), u(&s["figures"]["skew_ns"]["p99"])))
        .collect();
    let knee = &result["knee"];
    let sentence = knee["sentence"].as_str().unwrap();
    assert!(
        text.contains(&format!("knee: {sentence}")),
        "the printed knee is the result's: {text}"
    );
    match stages.iter().position(|&(_, p99)| p99 > threshold) {
        Some(i) => {
            let (clients, p99) = stages[i];
            assert_eq!(u(&knee["first_over"]["clients"]), clients, "{knee:#}");
            assert_eq!(u(&knee["first_over"]["skew_p99_ns"]), p99, "{knee:#}");
            assert!(
                sentence.contains(&format!("at {}", thousands(clients))),
                "{sentence}"
            );
            match i.checked_sub(1) {
                Some(j) => {
                    assert_eq!(u(&knee["within_up_to"]["clients"]), stages[j].0);
                    assert!(
                        sentence.contains(&format!("up to {} clients", thousands(stages[j].0))),
                        "{sentence}"
                    );
                }
                None => {
                    assert!(knee["within_up_to"].is_null());
                    assert!(sentence.contains("from the first stage"), "{sentence}");
                }
            }
        }
        None => {
            let last = stages.last().unwrap().0;
            assert!(knee["first_over"].is_null(), "{knee:#}");
            assert_eq!(u(&knee["within_up_to"]["clients"]), last);
            assert!(
                sentence.contains(&format!(
                    "at every stage, up to {} clients",
                    thousands(last)
                )),
                "{sentence}"
            );
        }
    }
    assert!(sentence.contains("within 10 ms") || sentence.contains("exceeds 10 ms"));
}

/// The result carries what was asked and where it ran.
fn assert_settings_recorded(result: &Value, url: &str, trigger: &str, pid: u32) {
    let s = &result["settings"];
    assert_eq!(result["kind"], "skewscope sweep");
    assert_eq!(s["url"], url);
    assert_eq!(s["trigger"]["url"], trigger);
    assert_eq!(s["trigger"]["method"], "GET");
    assert_eq!(s["stages"], serde_json::json!([5, 50, 200]));
    assert_eq!(u(&s["broadcasts"]), BROADCASTS);
    assert_eq!(u(&s["interval_ms"]), 20);
    assert_eq!(u(&s["settle_ms"]), 20_000);
    assert_eq!(u(&s["max_skew_p99_ns"]), 10_000_000);
    assert_eq!(u(&s["server_pid"]), u64::from(pid));
    assert_eq!(s["protocol"]["protocol"], "ws");
    assert_eq!(s["probe"]["deflate"], true);
    let e = &result["environment"];
    for field in ["host", "kernel", "started_at", "skewscope_version"] {
        assert!(
            e[field].as_str().is_some_and(|v| !v.is_empty()),
            "{field}: {e:#}"
        );
    }
    assert!(u(&e["open_file_limit"]) > 200);
    assert!(u(&e["cores"]) >= 1);
    let command = e["command"].as_str().unwrap();
    assert!(
        command.contains("sweep") && command.contains(&format!("--stages {STAGES}")),
        "{command}"
    );
    // The server's CPU, charged to each stage.
    for stage in result["stages"].as_array().unwrap() {
        let cpu = &stage["server_cpu"];
        assert!(cpu["per_broadcast_ms"].as_f64().is_some(), "{stage:#}");
    }
}

#[test]
fn fastapi_every_stage_receives_every_broadcast_once_with_its_knee() {
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = fastapi();
    let url = format!("ws://{addr}/ws");
    let trigger = format!("http://{addr}/start_test");
    let html = dir.path().join("fastapi.html");
    let pid = server.0.id();
    let (output, text, result) = sweep(
        &[],
        &[
            "--url",
            &url,
            "--trigger",
            &trigger,
            "--stages",
            STAGES,
            "--server-pid",
            &pid.to_string(),
            "--label",
            "fastapi",
            "--html",
            html.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(output.status.success(), "{text}");
    assert_every_receipt_once(&result, &[5, 50, 200]);
    assert_knee_consistent(&result, &text);
    assert_settings_recorded(&result, &url, &trigger, pid);
    // uvicorn names itself, and its process says what it runs.
    let e = &result["environment"];
    assert_eq!(e["server_header"], "uvicorn", "{e:#}");
    assert!(e["server_command"].as_str().unwrap().contains("uvicorn"));
    assert!(text.contains("server: uvicorn (pid"), "{text}");
    // uvicorn takes the permessage-deflate the probe offers, as browsers
    // do, and keeps its context: every connection inflates with a window of
    // its own, which is in the probe's CPU, and the text says so.
    for stage in result["stages"].as_array().unwrap() {
        let n = u(&stage["opened"]);
        assert_eq!(u(&stage["compressed"]["connections"]), n, "{stage:#}");
        assert_eq!(u(&stage["compressed"]["keeping_context"]), n, "{stage:#}");
    }
    assert!(
        text.contains("at 200: the server compressed what it sent on 200 of 200 connection(s) (permessage-deflate, keeping its context"),
        "{text}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains(r#"class="chart sweep-skew""#), "the curve");
    assert!(page.contains(r#"class="chart sweep-cpu""#), "the CPU curve");
    let sentence = result["knee"]["sentence"].as_str().unwrap();
    assert!(page.contains(&sentence[1..]), "the knee is on the page");
}

#[test]
fn go_every_stage_receives_every_broadcast_once_and_compares() {
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = go_peer();
    let url = format!("ws://{addr}/ws");
    let trigger = format!("http://{addr}/start_test");
    let pid = server.0.id();
    let (output, text, result) = sweep(
        &[],
        &[
            "--url",
            &url,
            "--trigger",
            &trigger,
            "--stages",
            STAGES,
            "--server-pid",
            &pid.to_string(),
            "--label",
            "go",
        ],
        dir.path(),
    );
    assert!(output.status.success(), "{text}");
    assert_every_receipt_once(&result, &[5, 50, 200]);
    assert_knee_consistent(&result, &text);
    assert_settings_recorded(&result, &url, &trigger, pid);
    // gorilla compresses nothing unless its server asks: plain frames, and
    // no word of inflating.
    for stage in result["stages"].as_array().unwrap() {
        assert_eq!(u(&stage["compressed"]["connections"]), 0, "{stage:#}");
    }
    assert!(!text.contains("permessage-deflate"), "{text}");

    // Side by side with a run asked differently: both columns, and the
    // difference said.
    let mut other = result.clone();
    other["settings"]["label"] = "go-again".into();
    other["settings"]["broadcasts"] = 50.into();
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    std::fs::write(&a, result.to_string()).unwrap();
    std::fs::write(&b, other.to_string()).unwrap();
    let page = dir.path().join("both.html");
    let compared = Command::new(SKEWSCOPE)
        .arg("sweep-compare")
        .args([&a, &b])
        .arg("--html")
        .arg(&page)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&compared.stdout);
    assert!(compared.status.success(), "{table}");
    assert!(
        table.contains("go-again") && table.contains("200"),
        "{table}"
    );
    assert!(
        table.contains("broadcasts a stage: go 5; go-again 50"),
        "{table}"
    );
    let page = std::fs::read_to_string(&page).unwrap();
    // A skew, a latency and a CPU curve each.
    assert_eq!(page.matches(r#"class="curve s0""#).count(), 3, "{page}");
    assert_eq!(page.matches(r#"class="curve s1""#).count(), 3, "{page}");
    // Anything else is refused with what it is.
    let refused = Command::new(SKEWSCOPE)
        .arg("sweep-compare")
        .arg(
            dir.path()
                .join("result.json")
                .with_file_name("nothing.json"),
        )
        .output()
        .unwrap();
    assert!(!refused.status.success());
}

/// The server's own side: an agent taps FastAPI's port, and `--agent`
/// joins its log into every stage, which then has the server's fan-out
/// span for every measured broadcast, as the tap saw the copies leave. An
/// agent that taps nothing gives no span, and the stage says why. In a
/// user and network namespace of the test's own (the capture needs
/// CAP_NET_RAW there).
#[test]
fn an_agent_tapping_the_server_gives_each_stage_its_fan_out_span() {
    if !in_own_namespace("an_agent_tapping_the_server_gives_each_stage_its_fan_out_span") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr) = fastapi();
    let port = addr.port().to_string();
    let (_agent, agent_addr, _) = start_agent_with(
        &dir.path().join("tapping"),
        "127.0.0.1:0",
        &["--tap-port", &port, "--tap-interface", "lo"],
    );
    let agent = format!("http://{agent_addr}");
    let url = format!("ws://{addr}/ws");
    let trigger = format!("http://{addr}/start_test");
    let html = dir.path().join("tapped.html");
    let (output, text, result) = sweep(
        &[],
        &[
            "--url",
            &url,
            "--trigger",
            &trigger,
            "--stages",
            "5,50",
            "--agent",
            &agent,
            "--html",
            html.to_str().unwrap(),
        ],
        dir.path(),
    );
    assert!(output.status.success(), "{text}");
    assert_every_receipt_once(&result, &[5, 50]);
    assert_eq!(result["settings"]["agent"], agent.as_str());
    for stage in result["stages"].as_array().unwrap() {
        let at = format!("{stage:#}");
        let tap = &stage["figures"]["tap"];
        assert_eq!(u(&tap["port"]), u64::from(addr.port()), "{at}");
        assert_eq!(u(&tap["broadcasts"]), BROADCASTS, "{at}");
        // The stage's connections, each seen getting its copies.
        assert_eq!(u(&tap["clients"]), u(&stage["opened"]), "{at}");
        let span = &tap["fanout_span_ns"];
        assert_eq!(u(&span["count"]), BROADCASTS, "{at}");
        assert!(u(&span["p50"]) <= u(&span["p99"]) && u(&span["p99"]) <= u(&span["max"]));
        assert_eq!(u(&tap["ring_drops"]), 0, "{at}");
        assert!(stage["tap_short"].is_null(), "{at}");
    }
    assert!(text.contains("fan-out p50"), "{text}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("server&#39;s fan-out span p99 (tap)"),
        "the span's curve is on the page"
    );

    // An agent that taps nothing: every receipt as before, no span, and
    // the stage says why.
    let (_plain, plain_addr, _) = start_agent_with(&dir.path().join("plain"), "127.0.0.1:0", &[]);
    let (output, text, result) = sweep(
        &[],
        &[
            "--url",
            &url,
            "--trigger",
            &trigger,
            "--stages",
            "5",
            "--agent",
            &format!("http://{plain_addr}"),
        ],
        dir.path(),
    );
    assert!(output.status.success(), "{text}");
    assert_every_receipt_once(&result, &[5]);
    let stage = &result["stages"][0];
    assert!(stage["figures"]["tap"].is_null(), "{stage:#}");
    let short = stage["tap_short"].as_str().unwrap();
    assert!(short.contains("joined as no tap of this server"), "{short}");
    assert!(short.contains("did not tap"), "{short}");
    assert!(text.contains(short), "{text}");
}

#[test]
fn a_stage_over_the_file_limit_is_cut_and_said() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr) = go_peer();
    let url = format!("ws://{addr}/ws");
    let trigger = format!("http://{addr}/start_test");
    // 400 open files: the 1,000 stage cannot be held, the 5 can.
    let (output, text, result) = sweep(
        &["prlimit", "--nofile=400:400", "--"],
        &["--url", &url, "--trigger", &trigger, "--stages", "5,1000"],
        dir.path(),
    );
    assert!(output.status.success(), "{text}");
    assert_eq!(u(&result["environment"]["open_file_limit"]), 400);
    let cut = &result["stages"][1];
    let n = u(&cut["connections"]);
    assert_eq!(u(&cut["asked"]), 1000);
    assert!(n > 5 && n < 400, "{cut:#}");
    let why = cut["cut"].as_str().unwrap();
    assert!(why.contains(&format!("cut to {n} connections")), "{why}");
    assert!(why.contains("400 open files"), "{why}");
    assert!(text.contains(why), "the text says so: {text}");
    // What it does hold, it measures in full.
    assert_eq!(u(&cut["opened"]), n);
    assert_eq!(u(&cut["figures"]["receipts"]), BROADCASTS * n);
    assert_eq!(u(&cut["figures"]["missing"]), 0);
}

#[test]
fn a_trigger_that_makes_no_broadcast_stops_the_sweep_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr) = fastapi();
    let url = format!("ws://{addr}/ws");
    // 200 OK, and no broadcast.
    let trigger = format!("http://{addr}/healthz");
    let json = dir.path().join("result.json");
    let output = Command::new(SKEWSCOPE)
        .arg("sweep")
        .args(["--url", &url, "--trigger", &trigger, "--stages", "5,50"])
        .args(["--settle", "300ms", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{text}");
    let result: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let first = &result["stages"][0];
    let why = first["stopped"].as_str().unwrap();
    assert!(why.contains("no connection received anything"), "{why}");
    assert!(first["figures"].is_null());
    assert_eq!(u(&result["not_run"][0]["asked"]), 50);
    assert!(
        result["not_run"][0]["why"]
            .as_str()
            .unwrap()
            .contains("the sweep stopped at 5 connections"),
        "{result:#}"
    );
    let sentence = result["knee"]["sentence"].as_str().unwrap();
    assert!(
        sentence.starts_with("no stage was measured: at 5 clients"),
        "{sentence}"
    );

    // A trigger the server refuses: the same, with its status.
    let missing = format!("http://{addr}/no-such-endpoint");
    let output = Command::new(SKEWSCOPE)
        .arg("sweep")
        .args(["--url", &url, "--trigger", &missing, "--stages", "5"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(text.contains("answered 404"), "{text}");
}
