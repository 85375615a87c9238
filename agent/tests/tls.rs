//! TLS on the agent (`--tls-cert`, `--tls-key`) with a private CA, on
//! 127.0.0.1:0 (named by its address, which the certificate carries: a
//! fresh Debian root may not resolve `localhost`), against real clients: rustls over tokio for `https://` and
//! `wss://`, and the real probe with `--ca-file` receiving, stamping and
//! uploading over TLS. Every endpoint answers under TLS only; a plain or an
//! untrusting client is refused and counted while the rest are served; a
//! slow `wss://` client gets every frame whole and in order; the key's
//! owner can change the certificate while clients stay connected.

mod common;

use common::wait_for_clients;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent::{AgentConfig, RunningAgent};
use futures_util::{SinkExt, StreamExt};
use probe::{ProbeConfig, RunningProbe};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use skewscope_core::log::AnyLog;
use skewscope_core::record::ProbeRecord;
use skewscope_core::time_exchange::TimeKey;
use skewscope_core::time_exchange::json::check_reply;
use skewscope_os::log_files::read_file;
use skewscope_os::test_certs::{PrivateCa, private_ca};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::{Connector, MaybeTlsStream, WebSocketStream};

type Wss = WebSocketStream<MaybeTlsStream<TcpStream>>;

const LIMIT: Duration = Duration::from_secs(30);
const TOKEN: &str = "tls-test-token";

/// A client that trusts only the CA in `ca`.
fn trusting(ca: &Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
}

/// An agent on 127.0.0.1:0 serving `ca`'s server certificate, with a token
/// and a 1 s request timeout (a silent handshake is given up after it).
async fn agent_with(dir: &Path, ca: &PrivateCa, max_queue_bytes: usize) -> RunningAgent {
    let token = dir.join("token");
    std::fs::write(&token, TOKEN).unwrap();
    let mut config = AgentConfig::local(dir.join("data"));
    config.token_file = Some(token);
    config.tls_cert = Some(ca.cert.clone());
    config.tls_key = Some(ca.key.clone());
    config.max_queue_bytes = max_queue_bytes;
    config.request_timeout_secs = 1;
    RunningAgent::start(config).await.unwrap()
}

/// One HTTPS request (`Connection: close`): status, head and body.
async fn https(
    agent: &RunningAgent,
    tls: &Arc<rustls::ClientConfig>,
    method: &str,
    path: &str,
    body: &[u8],
) -> std::io::Result<(u16, String, Vec<u8>)> {
    let tcp = TcpStream::connect(agent.addr).await?;
    let name = ServerName::from(agent.addr.ip());
    let mut stream = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(name, tcp)
        .await?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.flush().await?;
    let mut response = Vec::new();
    tokio::time::timeout(LIMIT, stream.read_to_end(&mut response))
        .await
        .expect("an answer in time")?;
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head")
        + 4;
    let head = String::from_utf8_lossy(&response[..split]).into_owned();
    let status = head[9..12].parse().unwrap();
    Ok((status, head, response[split..].to_vec()))
}

/// A `wss://` connection to `path` trusting `tls`.
async fn wss(
    agent: &RunningAgent,
    tls: &Arc<rustls::ClientConfig>,
    path: &str,
) -> Result<Wss, tokio_tungstenite::tungstenite::Error> {
    let url = format!("wss://{}{path}", agent.addr);
    let request = url.into_client_request().unwrap();
    let tcp = TcpStream::connect(agent.addr).await.unwrap();
    let (ws, _) = tokio_tungstenite::client_async_tls_with_config(
        request,
        tcp,
        None,
        Some(Connector::Rustls(tls.clone())),
    )
    .await?;
    Ok(ws)
}

async fn next_message(ws: &mut Wss) -> Message {
    loop {
        match tokio::time::timeout(LIMIT, ws.next())
            .await
            .expect("a message")
        {
            Some(Ok(Message::Ping(_) | Message::Frame(_))) => continue,
            Some(Ok(m)) => return m,
            other => panic!("the connection ended: {other:?}"),
        }
    }
}

async fn health(agent: &RunningAgent, tls: &Arc<rustls::ClientConfig>) -> serde_json::Value {
    let (status, _, body) = https(agent, tls, "GET", "/healthz", b"").await.unwrap();
    assert_eq!(status, 200);
    serde_json::from_slice(&body).unwrap()
}

/// Bytes that say their own index at every position, so a frame cut,
/// reordered or mixed with another shows.
fn body(index: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (index as usize * 31 + i / 7) as u8)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_answers_over_tls_and_plain_or_untrusting_clients_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let site = private_ca(dir.path(), "site");
    let stranger = private_ca(dir.path(), "stranger");
    let agent = agent_with(dir.path(), &site, 1 << 20).await;
    let tls = trusting(&site.ca);

    // The page is a secure context now: served with its isolation headers.
    let (status, head, page) = https(&agent, &tls, "GET", "/probe", b"").await.unwrap();
    assert_eq!(status, 200);
    assert!(
        head.contains("Cross-Origin-Opener-Policy: same-origin"),
        "{head}"
    );
    assert!(String::from_utf8_lossy(&page).contains("<script"));
    let (status, _, metrics) = https(&agent, &tls, "GET", "/metrics", b"").await.unwrap();
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&metrics).contains("skewscope_tls_handshakes_failed_total 0"));

    // Plain HTTP on the TLS port, a client that trusts another CA, and one
    // that connects and says nothing: refused, counted, nobody else
    // disturbed.
    let silent = TcpStream::connect(agent.addr).await.unwrap();
    let plain = agent::http_client::request(agent.addr, "GET", "/healthz", b"", None).await;
    assert!(plain.is_err() || plain.unwrap().status != 200);
    let refused = https(&agent, &trusting(&stranger.ca), "GET", "/healthz", b"").await;
    let why = refused.unwrap_err().to_string();
    assert!(
        why.contains("UnknownIssuer") || why.contains("certificate"),
        "{why}"
    );
    let deadline = Instant::now() + LIMIT;
    while health(&agent, &tls).await["tls_handshakes_failed"] != 3 {
        assert!(Instant::now() < deadline, "{}", health(&agent, &tls).await);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // The hub over wss://: a small and a large broadcast (many TLS records
    // each), byte for byte, and a ping answered.
    drop(silent);
    let mut one = wss(&agent, &tls, "/ws").await.unwrap();
    let mut two = wss(&agent, &tls, "/ws?probe=two").await.unwrap();
    wait_for_clients(&agent, 2).await;
    one.send(Message::Ping(b"are you there".to_vec().into()))
        .await
        .unwrap();
    match tokio::time::timeout(LIMIT, one.next()).await.unwrap() {
        Some(Ok(Message::Pong(p))) => assert_eq!(&p[..], b"are you there"),
        other => panic!("expected the pong, got {other:?}"),
    }
    for (i, len) in [(1u32, 200usize), (2, 300_000)] {
        let (status, _, said) = https(&agent, &tls, "POST", "/publish", &body(i, len))
            .await
            .unwrap();
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&said));
        for ws in [&mut one, &mut two] {
            match next_message(ws).await {
                Message::Binary(b) => assert!(b[..] == body(i, len)[..], "broadcast {i}"),
                Message::Text(t) => assert!(t.as_bytes() == body(i, len), "broadcast {i}"),
                other => panic!("{other:?}"),
            }
        }
    }

    // /clock over wss://: a tagged reply, the tag checked with the token.
    let mut clock = wss(&agent, &tls, "/clock").await.unwrap();
    let request = r#"{"id":1,"t1":5}"#;
    clock.send(Message::Text(request.into())).await.unwrap();
    let Message::Text(reply) = next_message(&mut clock).await else {
        panic!("a text reply")
    };
    let reply: serde_json::Value = serde_json::from_str(&reply).unwrap();
    let (t2, t3) = check_reply(&TimeKey::from_token(TOKEN), request, &reply).unwrap();
    assert!(t2 <= t3 && t2 > 1_700_000_000_000_000_000, "{reply}");
    drop((one, two, clock));
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_receives_and_uploads_over_tls_with_its_ca_file() {
    let dir = tempfile::tempdir().unwrap();
    let site = private_ca(dir.path(), "site");
    let agent = agent_with(dir.path(), &site, 1 << 20).await;
    let tls = trusting(&site.ca);
    let token = dir.path().join("token");
    let mut config = ProbeConfig::new(
        format!("wss://{}/ws", agent.addr),
        dir.path().join("probe.sklog"),
    );
    config.name = "tls-probe".into();
    config.count = Some(3);
    config.ca_file = Some(site.ca.clone());
    config.upload = Some(format!("https://{}", agent.addr));
    config.upload_token = Some(std::fs::read_to_string(&token).unwrap());
    config.time_exchange = false;
    let probe = RunningProbe::start(config).await.unwrap();
    assert_eq!(probe.connected().await.opened, 1);
    // Its socket in a shard before the first broadcast (the 101 comes first).
    wait_for_clients(&agent, 1).await;
    for _ in 0..3 {
        let (status, _, _) = https(&agent, &tls, "GET", "/start_test", b"")
            .await
            .unwrap();
        assert_eq!(status, 200);
    }
    let summary = tokio::time::timeout(LIMIT, probe.finish())
        .await
        .expect("the probe ends after 3 messages")
        .unwrap();
    assert!(
        summary.uploaded.is_some_and(|u| u.complete),
        "every record acknowledged: {summary:?}"
    );
    assert_eq!(summary.receipts, 3);
    let receipts = |records: &[ProbeRecord]| {
        records
            .iter()
            .filter(|r| matches!(r, ProbeRecord::Receipt(_)))
            .count()
    };
    let AnyLog::Probe(own) = read_file(&dir.path().join("probe.sklog")).unwrap() else {
        panic!("a probe log")
    };
    assert_eq!(receipts(&own.records), 3);
    let (status, _, runs) = https(&agent, &tls, "GET", "/audit/status", b"")
        .await
        .unwrap();
    assert_eq!(status, 200);
    let runs: serde_json::Value = serde_json::from_slice(&runs).unwrap();
    let stored = runs["probes"][0]["file"].as_str().unwrap();
    let AnyLog::Probe(uploaded) = read_file(&dir.path().join("data").join(stored)).unwrap() else {
        panic!("a probe log")
    };
    assert_eq!(
        uploaded.records.len(),
        own.records.len(),
        "the whole log, once"
    );
    assert_eq!(receipts(&uploaded.records), 3);
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_wss_client_gets_every_frame_whole_and_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let site = private_ca(dir.path(), "site");
    let agent = agent_with(dir.path(), &site, 64 << 20).await;
    let tls = trusting(&site.ca);
    let mut slow = wss(&agent, &tls, "/ws").await.unwrap();
    wait_for_clients(&agent, 1).await;
    // More than the loopback socket buffers hold, while it reads nothing:
    // most frames wait in the agent's queue and are sealed as it drains.
    const FRAMES: u32 = 60;
    const LEN: usize = 200_000;
    for i in 0..FRAMES {
        let (status, _, _) = https(&agent, &tls, "POST", "/publish", &body(i, LEN))
            .await
            .unwrap();
        assert_eq!(status, 200);
    }
    for i in 0..FRAMES {
        match next_message(&mut slow).await {
            Message::Binary(b) => assert!(b[..] == body(i, LEN)[..], "frame {i}"),
            other => panic!("frame {i}: {other:?}"),
        }
    }
    assert_eq!(health(&agent, &tls).await["clients"], 1, "never dropped");
    drop(slow);
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_certificate_serves_new_clients_while_open_ones_stay() {
    let dir = tempfile::tempdir().unwrap();
    let old = private_ca(dir.path(), "old");
    let new = private_ca(dir.path(), "new");
    let live = PrivateCa {
        ca: old.ca.clone(),
        cert: dir.path().join("live.pem"),
        key: dir.path().join("live.key"),
    };
    std::fs::copy(&old.cert, &live.cert).unwrap();
    std::fs::copy(&old.key, &live.key).unwrap();
    let agent = agent_with(dir.path(), &live, 1 << 20).await;
    let (trusts_old, trusts_new) = (trusting(&old.ca), trusting(&new.ca));
    let mut open = wss(&agent, &trusts_old, "/ws").await.unwrap();
    assert!(
        https(&agent, &trusts_new, "GET", "/healthz", b"")
            .await
            .is_err()
    );

    // A broken pair is refused and the one in use stays.
    std::fs::write(&live.cert, "not a certificate").unwrap();
    assert!(agent.reload_tls().await.is_err());
    assert!(
        https(&agent, &trusts_old, "GET", "/healthz", b"")
            .await
            .is_ok()
    );
    std::fs::copy(&new.cert, &live.cert).unwrap();
    std::fs::copy(&new.key, &live.key).unwrap();
    agent.reload_tls().await.unwrap();
    assert!(
        https(&agent, &trusts_old, "GET", "/healthz", b"")
            .await
            .is_err()
    );
    let (status, _, _) = https(&agent, &trusts_new, "POST", "/publish", b"after")
        .await
        .unwrap();
    assert_eq!(status, 200);
    // The connection made under the old certificate still gets broadcasts.
    match next_message(&mut open).await {
        Message::Text(t) => assert_eq!(t.as_str(), "after"),
        other => panic!("{other:?}"),
    }
    drop(open);
    agent.shutdown().await.unwrap();
}
