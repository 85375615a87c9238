//! What operators already run against an exporter: `promtool check
//! metrics` on `/metrics` (the classic text, which it reads), and the
//! shipped recording and alerting rules through `promtool check rules` and
//! their unit tests (`promtool test rules`). Debian's `prometheus` package,
//! which `./test` installs, has promtool. That Prometheus itself reads the
//! OpenMetrics side is `prometheus.rs`.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use agent::http_client::start_test;
use agent::{AgentConfig, RunningAgent};
use probe::{ProbeConfig, RunningProbe};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An agent that has served a probe: one broadcast received and uploaded,
/// so every family, the per-probe ones too, has a series.
async fn agent_with_a_probe(dir: &Path) -> RunningAgent {
    let agent = RunningAgent::start(AgentConfig::local(dir.join("agent")))
        .await
        .unwrap();
    let mut config = ProbeConfig::new(format!("ws://{}/ws", agent.addr), dir.join("lobby.sklog"));
    config.name = "lobby".into();
    config.count = Some(1);
    config.upload = Some(format!("http://{}", agent.addr));
    let probe = RunningProbe::start(config).await.unwrap();
    assert_eq!(probe.connected().await.opened, 1);
    // The probe has its 101 before the agent hands its socket to a shard: a
    // broadcast before that would miss it, and its run would never end.
    common::wait_for_clients(&agent, 1).await;
    // A time exchange answered before the run's one receipt ends it: the
    // offset and its bound are then in its upload (on a loaded host a run
    // could end first, and /metrics would have no offset to serve).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while probe.clock_bound_now().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "no time exchange answered"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(start_test(agent.addr, None).await.unwrap().status, 200);
    let summary = tokio::time::timeout(std::time::Duration::from_secs(60), probe.finish())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(summary.receipts, 1);
    // The live join follows the probe once it has taken the upload.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !scrape(agent.addr, None)
        .await
        .1
        .contains("skewscope_probe_clock_offset_bound_seconds{probe=\"lobby\"}")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the probe is never followed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    agent
}

/// The rules the agent's package installs, and their unit tests.
fn rules_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../systemd/prometheus")
}

/// `GET /metrics` with this `Accept` header: (content type, body).
async fn scrape(addr: SocketAddr, accept: Option<&str>) -> (String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let accept = accept
        .map(|a| format!("Accept: {a}\r\n"))
        .unwrap_or_default();
    let head =
        format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n{accept}Connection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let content_type = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-type:")
                .map(|v| v.trim().to_owned())
        })
        .unwrap();
    (content_type, body.to_owned())
}

/// Runs promtool with `args`, `stdin` as its input: (success, what it said).
fn promtool(args: &[&str], stdin: &str, dir: &Path) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (./test installs Debian's prometheus)");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), said)
}

/// The metric families a text exposition declares (`# TYPE` lines).
fn families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_passes_the_classic_text_and_prometheus_is_offered_openmetrics() {
    let dir = tempfile::tempdir().unwrap();
    let agent = agent_with_a_probe(dir.path()).await;

    let (content_type, classic) = scrape(agent.addr, None).await;
    assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
    let (ok, said) = promtool(&["check", "metrics"], &classic, dir.path());
    // Success with nothing said: no parse error and no lint finding.
    assert!(ok && said.trim().is_empty(), "{said}\n{classic}");
    assert!(
        classic.contains("skewscope_build_info{version="),
        "{classic}"
    );

    // What Prometheus sends.
    let accept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let (content_type, openmetrics) = scrape(agent.addr, Some(accept)).await;
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(openmetrics.ends_with("# EOF\n"), "{openmetrics}");
    assert!(
        openmetrics.contains("# TYPE skewscope_build info\n"),
        "{openmetrics}"
    );
    // The classic text is unreadable as OpenMetrics for promtool and the
    // other way round: the two really differ.
    let (ok, said) = promtool(&["check", "metrics"], &openmetrics, dir.path());
    assert!(
        !ok && said.contains("unknown metric type \"info\""),
        "{said}"
    );
    agent.shutdown().await.unwrap();
}

#[test]
fn the_shipped_rules_pass_promtool_and_their_unit_tests() {
    let dir = rules_dir();
    let (ok, said) = promtool(&["check", "rules", "skewscope.rules.yml"], "", &dir);
    assert!(ok && said.contains("SUCCESS"), "{said}");
    let (ok, said) = promtool(&["test", "rules", "skewscope.rules.test.yml"], "", &dir);
    assert!(ok && said.contains("SUCCESS"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rules_name_only_metrics_the_agent_serves() {
    let dir = tempfile::tempdir().unwrap();
    let agent = agent_with_a_probe(dir.path()).await;
    let (_, classic) = scrape(agent.addr, None).await;
    agent.shutdown().await.unwrap();
    let served = families(&classic);

    let rules = std::fs::read_to_string(rules_dir().join("skewscope.rules.yml")).unwrap();
    let mut named = BTreeSet::new();
    for word in rules.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')) {
        // Recording rules' own names carry a colon; everything else that
        // starts with the prefix is a metric the agent must serve.
        if word.starts_with("skewscope_") && !word.contains(':') {
            named.insert(word.to_owned());
        }
    }
    assert!(named.len() >= 10, "{named:?}");
    for name in &named {
        let family = name
            .strip_suffix("_bucket")
            .or_else(|| name.strip_suffix("_count"))
            .or_else(|| name.strip_suffix("_sum"))
            .unwrap_or(name);
        assert!(
            served.contains(family),
            "the rules name {name}, which /metrics does not serve:\n{served:?}"
        );
    }
}
