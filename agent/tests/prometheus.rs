//! `/metrics` scraped by a real Prometheus (Debian's `prometheus`, which
//! `./test` installs): on loopback, every second, with the bearer token
//! `--metrics-token-file` asks for. Three plain clients and two probes
//! uploading their receipts listen. The values Prometheus stored, read back
//! through its HTTP API, must be what the agent did and what the probes
//! received: a skew per broadcast, nothing missing, both probes' clocks.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent::http_client::request;
use agent::{AgentConfig, RunningAgent};
use futures_util::StreamExt;
use probe::{ProbeConfig, RunningProbe};
use skewscope_os::test_listening::{free_port, start_on_free_ports, until_listening};

const LIMIT: Duration = Duration::from_secs(60);
const BROADCASTS: u64 = 5;
const CLIENTS: usize = 3;
const PROBE_CONNECTIONS: usize = 3;

/// Stops Prometheus when the test ends, however it ends.
struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Prometheus scraping `agent` on a free loopback port; the port (tried
/// again on fresh ports if Prometheus exits before listening).
fn start_prometheus(dir: &Path, agent: SocketAddr, token: &Path) -> (Prometheus, SocketAddr) {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: skewscope\n    \
             authorization:\n      credentials_file: {}\n    \
             static_configs:\n      - targets: ['{}']\n",
            token.display(),
            agent
        ),
    )
    .unwrap();
    start_on_free_ports("prometheus", || {
        let web = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let mut prometheus = Prometheus(
            Command::new("prometheus")
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("tsdb").display()
                ))
                .arg(format!("--web.listen-address={web}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("prometheus (./test installs Debian's)"),
        );
        until_listening(web, &mut prometheus.0, "prometheus", LIMIT)?;
        Ok((prometheus, web))
    })
}

/// The value of instant query `query`, if Prometheus has one.
async fn query(prometheus: SocketAddr, query: &str) -> Option<f64> {
    let r = request(
        prometheus,
        "GET",
        &format!("/api/v1/query?query={query}"),
        b"",
        None,
    )
    .await
    .ok()?;
    let v: serde_json::Value = serde_json::from_str(&r.body).ok()?;
    v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
}

/// Waits until `query` has the value `want` in Prometheus.
async fn until_stored(prometheus: SocketAddr, q: &str, want: f64) {
    let deadline = Instant::now() + LIMIT;
    loop {
        let got = query(prometheus, q).await;
        if got == Some(want) {
            return;
        }
        assert!(Instant::now() < deadline, "{q}: {got:?}, want {want}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_stores_what_the_agent_did() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("metrics.token");
    std::fs::write(&token, "scrape-secret\n").unwrap();
    let mut config = AgentConfig::local(dir.path().join("agent"));
    config.metrics_token_file = Some(token.clone());
    let agent = RunningAgent::start(config).await.unwrap();

    // Without the token, no metrics.
    let refused = request(agent.addr, "GET", "/metrics", b"", None)
        .await
        .unwrap();
    assert_eq!(refused.status, 401);

    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", agent.addr))
            .await
            .unwrap();
        clients.push(ws);
    }
    // Two probes, 2 and 1 connections, uploading as they receive.
    let mut probes = Vec::new();
    for (name, connections) in [("kiosk-a", 2), ("kiosk-b", 1)] {
        let mut config = ProbeConfig::new(
            format!("ws://{}/ws", agent.addr),
            dir.path().join(format!("{name}.sklog")),
        );
        config.name = name.into();
        config.connections = connections;
        config.count = Some(BROADCASTS);
        config.upload = Some(format!("http://{}", agent.addr));
        let probe = RunningProbe::start(config).await.unwrap();
        assert_eq!(probe.connected().await.opened, connections);
        probes.push(probe);
    }
    let listeners = CLIENTS + PROBE_CONNECTIONS;
    let deadline = Instant::now() + LIMIT;
    while agent.clients() != listeners {
        assert!(Instant::now() < deadline, "{} clients", agent.clients());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for i in 0..BROADCASTS {
        let r = request(
            agent.addr,
            "POST",
            "/publish",
            format!("b{i}").as_bytes(),
            None,
        )
        .await
        .unwrap();
        assert_eq!(r.status, 200);
        for ws in &mut clients {
            tokio::time::timeout(LIMIT, ws.next()).await.unwrap();
        }
    }
    // The probes stop after --count and have uploaded everything.
    for probe in probes {
        let summary = tokio::time::timeout(LIMIT, probe.finish())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(summary.receipts, BROADCASTS * u64::from(summary.opened));
    }

    let (_prometheus, web) = start_prometheus(dir.path(), agent.addr, &token);

    // The scrape worked (with the token), and stored what the agent did.
    until_stored(web, "up", 1.0).await;
    // An `info` family exists only in OpenMetrics: Prometheus was served
    // that, and read it.
    until_stored(web, "skewscope_build_info", 1.0).await;
    until_stored(web, "skewscope_broadcasts_total", BROADCASTS as f64).await;
    until_stored(
        web,
        "skewscope_fanout_span_seconds_count",
        BROADCASTS as f64,
    )
    .await;
    until_stored(web, "skewscope_clients_connected", CLIENTS as f64).await;
    until_stored(web, "skewscope_clients_opened_total", listeners as f64).await;
    // Every broadcast judged with the probes' receipts: one skew each,
    // every probe connection's receipt joined, none missing.
    let b = BROADCASTS as f64;
    until_stored(web, "skewscope_broadcasts_judged_total", b).await;
    until_stored(web, "skewscope_receive_skew_seconds_count", b).await;
    until_stored(web, "skewscope_receive_skew_upper_bound_seconds_count", b).await;
    until_stored(
        web,
        "skewscope_receipts_total%7Bresult%3D%22received%22%7D",
        b * PROBE_CONNECTIONS as f64,
    )
    .await;
    until_stored(
        web,
        "skewscope_receipts_total%7Bresult%3D%22missing%22%7D",
        0.0,
    )
    .await;
    until_stored(web, "skewscope_receipts_unmatched_total", 0.0).await;
    // Both probes' clocks, one series each, on one host: the offset is
    // within its bound of zero, and the bound is small.
    until_stored(
        web,
        "count(skewscope_probe_clock_offset_bound_seconds)",
        2.0,
    )
    .await;
    until_stored(web, "count(skewscope_probe_clock_synced)", 2.0).await;
    until_stored(
        web,
        "count(abs(skewscope_probe_clock_offset_seconds)%3C%3Dskewscope_probe_clock_offset_bound_seconds)",
        2.0,
    )
    .await;
    until_stored(
        web,
        "count(time()-skewscope_probe_last_upload_timestamp_seconds%3C60)",
        2.0,
    )
    .await;
    until_stored(web, "skewscope_records_lost_total", 0.0).await;
    // Every span is under the histogram's top bucket of about 10 s.
    until_stored(
        web,
        "skewscope_fanout_span_seconds_bucket%7Ble%3D%2210.48576%22%7D",
        BROADCASTS as f64,
    )
    .await;
    drop(clients);
    agent.shutdown().await.unwrap();
}
