//! `skewscope sweep --workers` with real `skewscope sweep-worker`
//! processes: each stage's connections come from this machine and two
//! workers, one of whose wall clock libfaketime sets 5 ms ahead (as a
//! second machine's clock may be), against the FastAPI broadcaster of
//! bench/peers on loopback, through an agent with a token.
//!
//! What the design promises: each stage is shared between the machines,
//! every broadcast reaches every connection on every machine exactly once,
//! each worker's records reach the agent exactly as its log holds them,
//! and the skew across machines is placed on the agent's clock with
//! bounds that hold the truth (known here: every clock is this host's, the
//! shifted one by exactly its shift). A worker that dies mid-sweep, a
//! worker that never comes and a hub the workers cannot be joined on are
//! each said, and the sweep keeps what it measured. No figure is held to
//! an absolute time.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{Reaped, SKEWSCOPE, faketime_lib, fastapi, probe_records, start_agent_with};
use serde_json::Value;
use skewscope_core::analysis::stats::Summary;
use skewscope_core::record::ProbeRecord;

const BROADCASTS: usize = 5;
/// How far ahead the second worker's wall clock runs.
const SHIFT_NS: u64 = 5_000_000;

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// An agent with a token, and the token's file.
fn agent(dir: &Path) -> (Reaped, String, PathBuf) {
    let token = dir.join("token");
    std::fs::write(&token, "sweep-workers-test-token\n").unwrap();
    let (agent, addr, _) = start_agent_with(
        dir,
        "127.0.0.1:0",
        &["--token-file", token.to_str().unwrap()],
    );
    (agent, format!("http://{addr}"), token)
}

/// `skewscope sweep-worker --once` named `name`, its logs kept in
/// `dir/name`; `shifted` runs its wall clock [`SHIFT_NS`] ahead.
fn worker(agent: &str, token: &Path, name: &str, dir: &Path, shifted: bool) -> Reaped {
    let mut command = Command::new(SKEWSCOPE);
    command
        .args(["sweep-worker", "--agent", agent, "--once", "--name", name])
        .arg("--token-file")
        .arg(token)
        .arg("--keep")
        .arg(dir.join(name))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if shifted {
        command
            .env("LD_PRELOAD", faketime_lib())
            .env("FAKETIME", format!("+{}", SHIFT_NS as f64 / 1e9))
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    }
    Reaped(command.spawn().expect("skewscope sweep-worker runs"))
}

/// The flags of a sweep of the FastAPI app at `server` through the agent
/// at `agent` (its token in `token`) with `workers` workers, then `more`.
fn fastapi_sweep(
    server: &std::net::SocketAddr,
    agent: &str,
    token: &Path,
    workers: &str,
    more: &[&str],
) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--url".into(),
        format!("ws://{server}/ws"),
        "--trigger".into(),
        format!("http://{server}/start_test"),
        "--agent".into(),
        agent.into(),
        "--token-file".into(),
        token.display().to_string(),
        "--workers".into(),
        workers.into(),
    ];
    args.extend(more.iter().map(|m| m.to_string()));
    args
}

/// Runs the sweep with `args` (`--interval 20ms` unless they give one),
/// the JSON to `dir/result.json`.
fn sweep(args: &[&str], dir: &Path) -> (Output, Value) {
    let json = dir.join("result.json");
    let interval: &[&str] = if args.contains(&"--interval") {
        &[]
    } else {
        &["--interval", "20ms"]
    };
    let output = Command::new(SKEWSCOPE)
        .arg("sweep")
        .args(["--broadcasts", &BROADCASTS.to_string()])
        .args(["--settle", "20s"])
        .args(interval)
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("skewscope runs");
    let result = std::fs::read_to_string(&json)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    (output, result)
}

fn text(o: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Waits until worker `name` says it is on the board (its first line),
/// then reads the rest of what it says on a thread of its own, so it can
/// go on saying it: the rest, once it exits.
fn once_on_the_board(w: &mut Reaped, name: &str) -> std::thread::JoinHandle<String> {
    let mut said = std::io::BufReader::new(w.0.stderr.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut said, &mut first).unwrap();
    assert!(
        first.contains(&format!("sweep-worker {name}: on the board of")),
        "{first}"
    );
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut said, &mut rest);
        rest
    })
}

/// Waits (bounded) for a worker to exit; its stderr and status.
fn exited(mut worker: Reaped) -> (std::process::ExitStatus, String) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = worker.0.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = worker.0.stderr.take() {
                use std::io::Read;
                let _ = e.read_to_string(&mut err);
            }
            return (status, err);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the worker did not exit after the sweep"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The probe logs under `dir` whose run is named `name`.
fn logs_named(dir: &Path, name: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            probe_records(p)
                .iter()
                .any(|r| matches!(r, ProbeRecord::Started(s) if s.name == name))
        })
        .collect()
}

/// Per connection of a probe log, its receipts' arrival times in order
/// (the kernel's stamp where known: the read less the kernel's delay, as
/// the report's timebase defines it), less `shift`.
fn arrivals(log: &Path, shift: u64) -> Vec<Vec<u64>> {
    let mut by_conn: Vec<Vec<u64>> = Vec::new();
    for record in probe_records(log) {
        if let ProbeRecord::Receipt(r) = record {
            let conn = r.conn as usize;
            if by_conn.len() <= conn {
                by_conn.resize(conn + 1, Vec::new());
            }
            let arrival = r.at.wall_ns - r.kernel_delay_ns.unwrap_or(0);
            by_conn[conn].push(arrival - shift);
        }
    }
    by_conn
}

#[test]
fn two_workers_share_each_stage_and_the_skew_across_machines_holds_the_truth() {
    let dir = tempfile::tempdir().unwrap();
    let (_agent, agent_url, token) = agent(dir.path());
    let (_server, server) = fastapi();
    let w1 = worker(&agent_url, &token, "w1", dir.path(), false);
    let w2 = worker(&agent_url, &token, "w2", dir.path(), true);
    let keep = dir.path().join("keep");
    let html = dir.path().join("sweep.html");
    let args = fastapi_sweep(
        &server,
        &agent_url,
        &token,
        "2",
        &[
            "--stages",
            "6,30",
            "--keep",
            keep.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (out, result) = sweep(&args, dir.path());
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(u(&result["settings"]["workers"]), 2, "{result:#}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("connections from this machine and 2 worker(s)"),
        "{stdout}"
    );

    // The page says what each machine did and the skew's bounds.
    let page = std::fs::read_to_string(&html).unwrap();
    for says in [
        "each machine&#39;s receipts placed on the agent&#39;s clock",
        "this machine asked for 2; w1 2 (closed,",
        "the skew across machines is on the agent&#39;s clock",
    ] {
        assert!(page.contains(says), "{says}");
    }
    let stages = result["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 2, "{result:#}");
    for (stage, n) in stages.iter().zip([6u64, 30]) {
        let at = format!("at {n}: {stage:#}");
        // Shared: a third each, every one opened, none refused or dropped.
        assert_eq!(u(&stage["opened"]), n, "{at}");
        assert_eq!(u(&stage["refused"]), 0, "{at}");
        assert_eq!(u(&stage["dropped"]), 0, "{at}");
        let machines = stage["machines"].as_array().unwrap();
        let names: Vec<&str> = machines
            .iter()
            .map(|m| m["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["w1", "w2"], "{at}");
        for m in machines {
            assert_eq!(u(&m["connections"]), n / 3, "{at}");
            let state = m["state"].as_str().unwrap();
            assert!(
                state.starts_with("closed,") && state.ends_with("all uploaded"),
                "{at}"
            );
        }
        // Every broadcast on every machine's every connection, once.
        let f = &stage["figures"];
        assert_eq!(u(&f["listening"]), n, "{at}");
        assert_eq!(u(&f["receipts"]), BROADCASTS as u64 * n, "{at}");
        assert_eq!(u(&f["missing"]), 0, "{at}");
        assert_eq!(u(&f["duplicates"]), 0, "{at}");
        assert_eq!(u(&f["skew_ns"]["count"]), BROADCASTS as u64, "{at}");

        // The truth: every clock is this host's, w2's ahead by SHIFT_NS.
        let warmups = u(&stage["warmups"]) as usize;
        let mut connections = arrivals(&keep.join(format!("sweep-{n:06}.sklog")), 0);
        for (name, shift) in [("w1", 0), ("w2", SHIFT_NS)] {
            let run = format!("-{n}-{name}");
            let copies: Vec<PathBuf> = std::fs::read_dir(keep.join("workers/probes"))
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    probe_records(p)
                        .iter()
                        .any(|r| matches!(r, ProbeRecord::Started(s) if s.name.ends_with(&run)))
                })
                .collect();
            assert_eq!(copies.len(), 1, "{at}: {name}'s copy of the stage");
            connections.extend(arrivals(&copies[0], shift));
        }
        assert_eq!(connections.len() as u64, n, "{at}");
        let truth: Vec<i64> = (0..BROADCASTS)
            .map(|k| {
                let at_k: Vec<u64> = connections.iter().map(|c| c[warmups + k]).collect();
                (at_k.iter().max().unwrap() - at_k.iter().min().unwrap()) as i64
            })
            .collect();
        let truth = Summary::of(&truth).unwrap();
        let b = &f["skew_bounds_ns"];
        for q in ["p50", "p99", "max"] {
            let (lo, est, hi) = (
                b["lo"][q].as_i64().unwrap(),
                b[q].as_i64().unwrap(),
                b["hi"][q].as_i64().unwrap(),
            );
            let t = serde_json::to_value(truth).unwrap()[q].as_i64().unwrap();
            assert!(
                lo <= t && t <= hi,
                "{at}: {q}: truth {t} ns outside [{lo}, {hi}]"
            );
            assert!(lo <= est && est <= hi, "{at}: {q}");
            // Placed on one clock, the 5 ms between the machines' clocks
            // is gone: the interval is far narrower than it.
            assert!(
                ((hi - lo) as u64) < SHIFT_NS / 2,
                "{at}: {q}: [{lo}, {hi}] is as wide as the clocks' difference"
            );
        }
        assert_eq!(f["skew_ns"]["p99"], b["p99"], "{at}");
    }

    // Each worker exits after the sweep (--once), and the agent holds
    // each of its stage logs exactly as the worker wrote it.
    for (w, name) in [(w1, "w1"), (w2, "w2")] {
        let (status, err) = exited(w);
        assert!(status.success(), "{name}: {err}");
        for n in [6, 30] {
            let run_suffix = format!("-{n}-{name}");
            let mine: Vec<PathBuf> = std::fs::read_dir(dir.path().join(name))
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.to_string_lossy()
                        .ends_with(&format!("{run_suffix}.sklog"))
                })
                .collect();
            assert_eq!(mine.len(), 1, "{name} at {n}: {err}");
            let run = probe_records(&mine[0])
                .iter()
                .find_map(|r| match r {
                    ProbeRecord::Started(s) => Some(s.name.clone()),
                    _ => None,
                })
                .unwrap();
            let stored = logs_named(&dir.path().join("agent/probes"), &run);
            assert_eq!(stored.len(), 1, "{name} at {n}");
            assert_eq!(
                probe_records(&mine[0]),
                probe_records(&stored[0]),
                "{name} at {n}: the agent's copy differs from the worker's log"
            );
        }
    }
}

#[test]
fn a_worker_that_dies_mid_sweep_is_named_and_what_was_measured_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (_agent, agent_url, token) = agent(dir.path());
    let (_server, server) = fastapi();
    let mut w1 = worker(&agent_url, &token, "w1", dir.path(), false);
    let pid = w1.0.id();
    // Kills the worker once the second stage's connections are open on
    // it: its log shows them.
    let killer = std::thread::spawn({
        let logs = dir.path().join("w1");
        move || {
            common::wait_for(
                "w1 opening the stage of 40",
                Duration::from_secs(120),
                || {
                    std::fs::read_dir(&logs)
                        .into_iter()
                        .flatten()
                        .flatten()
                        .any(|e| {
                            e.file_name().to_string_lossy().ends_with("-40-w1.sklog")
                                && common::opened_in(&e.path()) == 20
                        })
                },
            );
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            )
            .unwrap();
        }
    });
    let args = fastapi_sweep(
        &server,
        &agent_url,
        &token,
        "1",
        &["--stages", "4,40,100", "--interval", "500ms"],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (out, result) = sweep(&args, dir.path());
    killer.join().unwrap();
    let _ = w1.0.wait();
    // The first stage was measured: exit 0, and it is all there.
    assert!(out.status.success(), "{}", text(&out));
    let stages = result["stages"].as_array().unwrap();
    assert_eq!(u(&stages[0]["figures"]["missing"]), 0, "{result:#}");
    assert_eq!(u(&stages[0]["figures"]["receipts"]), 4 * BROADCASTS as u64);
    // The second names the worker gone; the third did not run, and says why.
    let stopped = stages[1]["stopped"].as_str().unwrap_or_default();
    assert!(
        stopped.contains("worker w1 has not been heard from"),
        "{result:#}"
    );
    assert_eq!(u(&result["not_run"][0]["asked"]), 100, "{result:#}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("the sweep stopped: worker w1"), "{stdout}");
}

#[test]
fn workers_that_never_come_a_namesake_or_a_hub_across_machines_are_refused_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (_agent, agent_url, token) = agent(dir.path());
    let agent_addr = agent_url.trim_start_matches("http://").to_owned();
    let token_arg = token.to_str().unwrap();
    let bearer = format!(
        "Authorization: Bearer {}",
        std::fs::read_to_string(&token).unwrap().trim()
    );
    let hub = |workers_wait: &str| {
        sweep(
            &[
                "--url",
                &format!("ws://{agent_addr}/ws"),
                "--trigger",
                &format!("http://{agent_addr}/start_test"),
                "--trigger-header",
                &bearer,
                "--agent",
                &agent_url,
                "--token-file",
                token_arg,
                "--workers",
                "1",
                "--workers-wait",
                workers_wait,
                "--stages",
                "4",
            ],
            dir.path(),
        )
    };

    // No worker: the sweep says how to start one, and opens nothing.
    let (out, _) = hub("1s");
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--workers 1: 0 idle worker(s) on the agent's board after 1s")
            && err.contains("skewscope sweep-worker --agent URL --token-file FILE"),
        "{err}"
    );

    // A second worker under a name a live one has is refused (once the
    // first is on the board: it says so on its first line).
    let mut w = worker(&agent_url, &token, "w1", dir.path(), false);
    let rest = once_on_the_board(&mut w, "w1");
    let namesake = Command::new(SKEWSCOPE)
        .args([
            "sweep-worker",
            "--agent",
            &agent_url,
            "--once",
            "--name",
            "w1",
        ])
        .arg("--token-file")
        .arg(&token)
        .output()
        .unwrap();
    assert!(!namesake.status.success());
    assert!(
        String::from_utf8_lossy(&namesake.stderr)
            .contains("--name w1: another worker of that name is on the agent's board and alive"),
        "{}",
        text(&namesake)
    );

    // The agent's own hub across machines: said at the first stage.
    let (out, result) = hub("60s");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let stopped = result["stages"][0]["stopped"].as_str().unwrap_or_default();
    assert!(
        stopped.contains("the server is a skewscope agent's hub")
            && stopped.contains("without --workers"),
        "{result:#}"
    );
    // The worker was told the sweep is over and exits (--once).
    let (status, _) = exited(w);
    let err = rest.join().unwrap();
    assert!(status.success(), "{err}");
}

#[test]
fn a_plan_past_a_workers_room_is_refused_by_the_worker_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (_agent, agent_url, token) = agent(dir.path());
    let mut w = worker(&agent_url, &token, "w1", dir.path(), false);
    let rest = once_on_the_board(&mut w, "w1");
    // A plan no sweep would make (it shares within each room), as a
    // broken or hostile one might pin it.
    let token_text = std::fs::read_to_string(&token).unwrap().trim().to_owned();
    let http = collector::audit::agent_api::http_client(None).unwrap();
    let api = collector::audit::agent_api::AgentApi::new(&agent_url, Some(token_text), http);
    let plan = serde_json::json!({
        "sweep": "t1", "seq": 1, "step": "open", "stage": 4_000_000_000u32,
        "shares": {"w1": 4_000_000_000u32},
        "connect": {"url": "ws://127.0.0.1:9/ws", "protocol": {}, "headers": [],
                    "subprotocols": [], "deflate": true, "connect_timeout_ms": 1000,
                    "insecure": false}
    });
    let _: Value = api.call_json("PUT", "/sweep/plan", Some(&plan)).unwrap();
    let mut state = Value::Null;
    common::wait_for("w1 acting on the plan", Duration::from_secs(30), || {
        let view: Value = api.call_json("GET", "/sweep", None::<&Value>).unwrap();
        let status = &view["workers"][0]["status"];
        state = status["state"].clone();
        status["acted_on"] == serde_json::json!(["t1", 1])
    });
    assert_eq!(state["state"], "failed", "{state}");
    assert!(
        state["why"]
            .as_str()
            .unwrap()
            .contains("asked for 4000000000 connections; this machine has room for"),
        "{state}"
    );
    // Taken down: the worker, --once, exits; it opened nothing.
    let _: Value = api
        .call_json("DELETE", "/sweep/plan", None::<&Value>)
        .unwrap();
    let (status, _) = exited(w);
    let err = rest.join().unwrap();
    assert!(status.success(), "{err}");
    assert!(!err.contains("opening"), "{err}");
}
