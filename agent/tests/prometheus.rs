//! `/metrics` scraped by a real Prometheus (Debian's `prometheus`, which
//! `./test` installs): on loopback, every second, with the bearer token
//! `--metrics-token-file` asks for. The values Prometheus stored, read back
//! through its HTTP API, must be what the agent did.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent::http_client::request;
use agent::{AgentConfig, RunningAgent};
use futures_util::StreamExt;

const LIMIT: Duration = Duration::from_secs(60);
const BROADCASTS: u64 = 5;
const CLIENTS: usize = 3;

/// Stops Prometheus when the test ends, however it ends.
struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
    while agent.clients() != CLIENTS {
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

    let web = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             scrape_configs:\n  - job_name: skewscope\n    \
             authorization:\n      credentials_file: {}\n    \
             static_configs:\n      - targets: ['{}']\n",
            token.display(),
            agent.addr
        ),
    )
    .unwrap();
    let _prometheus = Prometheus(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("tsdb").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (./test installs Debian's)"),
    );

    // The scrape worked (with the token), and stored what the agent did.
    until_stored(web, "up", 1.0).await;
    until_stored(web, "skewscope_broadcasts_total", BROADCASTS as f64).await;
    until_stored(
        web,
        "skewscope_fanout_span_seconds_count",
        BROADCASTS as f64,
    )
    .await;
    until_stored(web, "skewscope_clients_connected", CLIENTS as f64).await;
    until_stored(web, "skewscope_clients_opened_total", CLIENTS as f64).await;
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
