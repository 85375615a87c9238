//! The agent against real clients on 127.0.0.1:0: broadcasts, bad input, and the
//! record log it leaves behind.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream as StdTcpStream};
use std::time::Duration;

use agent::http_client::{request, start_test};
use agent::{AgentConfig, RunningAgent};
use common::wait_for_clients;
use futures_util::{SinkExt, StreamExt};
use skewscope_core::log::AnyLog;
use skewscope_core::record::{AgentRecord, CloseReason, SendOutcome};
use skewscope_os::log_files::read_file;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, connect_async};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

const WAIT: Duration = Duration::from_secs(5);

async fn start(dir: &tempfile::TempDir, tweak: impl FnOnce(&mut AgentConfig)) -> RunningAgent {
    let mut config = AgentConfig::local(dir.path().to_owned());
    tweak(&mut config);
    RunningAgent::start(config).await.expect("agent starts")
}

async fn connect(agent: &RunningAgent, n: usize) -> Vec<Ws> {
    let mut clients = Vec::new();
    for _ in 0..n {
        let (ws, _) = connect_async(format!("ws://{}/ws?probe=t", agent.addr))
            .await
            .unwrap();
        clients.push(ws);
    }
    wait_for_clients(agent, n).await;
    clients
}

async fn next_data(ws: &mut Ws) -> Message {
    loop {
        let m = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("message in time");
        match m.expect("stream open").expect("valid message") {
            m @ (Message::Text(_) | Message::Binary(_)) => return m,
            _ => continue,
        }
    }
}

fn agent_records(path: &std::path::Path) -> Vec<AgentRecord> {
    match read_file(path).unwrap() {
        AnyLog::Agent(d) => {
            assert_eq!(d.skipped_bytes, 0);
            d.records
        }
        AnyLog::Probe(_) => panic!("agent wrote a probe log"),
    }
}

/// Waits (bounded by [`WAIT`]) until the running agent's log holds at least
/// `n` TX stamps; a log caught mid-write counts as not yet.
async fn until_tx_stamps(log: &std::path::Path, n: usize) {
    let count = || match read_file(log) {
        Ok(AnyLog::Agent(d)) => d
            .records
            .iter()
            .filter(|r| matches!(r, AgentRecord::TxStamp(_)))
            .count(),
        _ => 0,
    };
    tokio::time::timeout(WAIT, async {
        while count() < n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("fewer than {n} TX stamps in {}", log.display()));
}

async fn publish(addr: SocketAddr, body: &[u8]) -> agent::http_client::Response {
    request(addr, "POST", "/publish", body, None).await.unwrap()
}

#[tokio::test]
async fn every_client_gets_the_same_bytes_and_the_log_has_every_send() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&dir, |_| {}).await;
    let mut clients = connect(&agent, 5).await;

    let health = request(agent.addr, "GET", "/healthz", b"", None)
        .await
        .unwrap();
    assert_eq!(health.status, 200);
    assert!(health.body.contains("\"clients\":5"), "{}", health.body);

    let r = publish(agent.addr, b"hello everyone").await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains("\"clients\":5"), "{}", r.body);
    let r = publish(agent.addr, &[0xff, 0x00, 0x80]).await;
    assert_eq!(r.status, 200);
    let r = start_test(agent.addr, None).await.unwrap();
    assert!(r.body.contains("\"seq\":1"), "{}", r.body);
    for ws in &mut clients {
        assert_eq!(next_data(ws).await, Message::text("hello everyone"));
        assert_eq!(next_data(ws).await, Message::binary(vec![0xff, 0x00, 0x80]));
        let Message::Text(t) = next_data(ws).await else {
            panic!("test message is text")
        };
        let test =
            skewscope_core::identity::parse_test_message(t.as_bytes()).expect("a test message");
        assert_eq!(test.seq, 1);
        assert_eq!(t.len(), skewscope_core::identity::TEST_MESSAGE_LEN);
    }
    let log = agent.log_path.clone();
    agent.shutdown().await.unwrap();

    let records = agent_records(&log);
    assert!(matches!(records.first(), Some(AgentRecord::Started(_))));
    assert!(matches!(records.last(), Some(AgentRecord::Stopped(_))));
    let opened = records
        .iter()
        .filter(
            |r| matches!(r, AgentRecord::ConnectionOpened(o) if o.label.as_deref() == Some("t")),
        )
        .count();
    assert_eq!(opened, 5);
    let broadcasts: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            AgentRecord::Broadcast(b) => Some(b),
            _ => None,
        })
        .collect();
    assert_eq!(broadcasts.len(), 3);
    assert_eq!(broadcasts[2].seq, Some(1));
    assert!(broadcasts[0].text && !broadcasts[1].text);
    for b in &broadcasts {
        let slots: Vec<_> = records
            .iter()
            .filter_map(|r| match r {
                AgentRecord::ShardSends(s) if s.broadcast == b.id => Some(&s.slots),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(slots.len(), 5, "broadcast {}", b.id);
        for s in slots {
            assert_eq!(s.outcome, SendOutcome::Written);
            assert!(
                s.mono_ns >= b.at.mono_ns,
                "write done before the broadcast started"
            );
        }
    }
    let shutdowns = records
        .iter()
        .filter(
            |r| matches!(r, AgentRecord::ConnectionClosed(c) if c.reason == CloseReason::Shutdown),
        )
        .count();
    assert_eq!(shutdowns, 5);
}

#[tokio::test]
async fn fixed_order_writes_in_connection_order() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&dir, |c| {
        c.order = agent::config::OrderArg::Fixed;
        c.shards = Some(1);
    })
    .await;
    let _clients = connect(&agent, 4).await;
    for _ in 0..3 {
        start_test(agent.addr, None).await.unwrap();
    }
    let log = agent.log_path.clone();
    agent.shutdown().await.unwrap();
    for r in agent_records(&log) {
        if let AgentRecord::ShardSends(s) = r {
            let conns: Vec<u64> = s.slots.iter().map(|s| s.conn).collect();
            let mut sorted = conns.clone();
            sorted.sort();
            assert_eq!(conns, sorted);
            let times: Vec<u64> = s.slots.iter().map(|s| s.mono_ns).collect();
            assert!(times.windows(2).all(|w| w[0] <= w[1]));
        }
    }
}

#[tokio::test]
async fn token_is_required_when_configured_and_nothing_is_broadcast_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let agent = start(&dir, |c| c.token_file = Some(token_file.clone())).await;
    let mut clients = connect(&agent, 1).await;

    assert_eq!(start_test(agent.addr, None).await.unwrap().status, 401);
    assert_eq!(
        start_test(agent.addr, Some("wrong")).await.unwrap().status,
        401
    );
    let r = request(agent.addr, "POST", "/publish", b"x", Some("s3cre"))
        .await
        .unwrap();
    assert_eq!(r.status, 401);
    let r = request(agent.addr, "POST", "/publish", b"allowed", Some("s3cret"))
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    // The first thing the client sees is the authorised broadcast.
    assert_eq!(next_data(&mut clients[0]).await, Message::text("allowed"));
    // The refusals are counted by endpoint, where an operator sees an app
    // that publishes without its token.
    let health: serde_json::Value = serde_json::from_str(
        &request(agent.addr, "GET", "/healthz", b"", None)
            .await
            .unwrap()
            .body,
    )
    .unwrap();
    assert_eq!(
        health["unauthorized"],
        serde_json::json!({"publish": 1, "start_test": 2}),
        "{health}"
    );
    let metrics = request(agent.addr, "GET", "/metrics", b"", None)
        .await
        .unwrap()
        .body;
    assert!(
        metrics.contains("skewscope_http_unauthorized_total{endpoint=\"publish\"} 1"),
        "{metrics}"
    );
    agent.shutdown().await.unwrap();
}

/// Sends raw bytes and returns everything the server answers until it closes.
fn raw_exchange(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut s = StdTcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_http_gets_an_error_and_others_keep_being_served() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&dir, |c| c.max_publish = 1000).await;
    let mut clients = connect(&agent, 2).await;
    let addr = agent.addr;

    let cases: Vec<(&[u8], &str)> = vec![
        (b"\x00\x01garbage\r\n\r\n", "HTTP/1.1 400"),
        (b"GET /ws HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 400"),
        (b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 8\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", "HTTP/1.1 426"),
        // No Host, and a key that is not base64 of 16 bytes.
        (b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", "HTTP/1.1 400"),
        (b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: 123456789012345678901234\r\n\r\n", "HTTP/1.1 400"),
        (b"POST /publish HTTP/1.1\r\nContent-Length: 5000\r\n\r\n", "HTTP/1.1 413"),
        (b"POST /publish HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", "HTTP/1.1 411"),
        (b"DELETE /publish HTTP/1.1\r\n\r\n", "HTTP/1.1 405"),
        (b"GET /nope HTTP/1.1\r\n\r\n", "HTTP/1.1 404"),
    ];
    for (bytes, expect) in cases {
        let bytes = bytes.to_vec();
        let answer = tokio::task::spawn_blocking(move || raw_exchange(addr, &bytes))
            .await
            .unwrap();
        assert!(
            answer.starts_with(expect),
            "expected {expect}, got {answer:?}"
        );
    }
    let huge_head = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    let answer = tokio::task::spawn_blocking(move || raw_exchange(addr, huge_head.as_bytes()))
        .await
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:?}");

    // A publisher vanishing mid-body broadcasts nothing.
    tokio::task::spawn_blocking(move || {
        let mut s = StdTcpStream::connect(addr).unwrap();
        s.write_all(b"POST /publish HTTP/1.1\r\nContent-Length: 100\r\n\r\nhalf")
            .unwrap();
    })
    .await
    .unwrap();

    assert_eq!(publish(addr, b"still here").await.status, 200);
    for ws in &mut clients {
        assert_eq!(next_data(ws).await, Message::text("still here"));
    }
    agent.shutdown().await.unwrap();
}

/// Upgrades a raw socket and returns it, with the agent's connection id.
fn raw_upgrade(addr: SocketAddr) -> (StdTcpStream, u64) {
    raw_upgrade_as(addr, "/ws")
}

/// [`raw_upgrade`] to `path` (with a query, say).
fn raw_upgrade_as(addr: SocketAddr, path: &str) -> (StdTcpStream, u64) {
    let mut s = StdTcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n").as_bytes()).unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let conn = head
        .lines()
        .find_map(|l| l.strip_prefix("X-Skewscope-Conn: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("connection id header");
    (s, conn)
}

/// Reads until the server closes; returns the close code if a close frame came.
fn close_code_from(mut s: StdTcpStream) -> Option<u16> {
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    // Server frames are unmasked: 0x88, length, code.
    let at = out.windows(2).position(|w| w[0] == 0x88 && w[1] >= 2)?;
    Some(u16::from_be_bytes([out[at + 2], out[at + 3]]))
}

fn masked(opcode_byte: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![opcode_byte];
    let mask = [9u8, 8, 7, 6];
    match payload.len() {
        n if n < 126 => f.push(0x80 | n as u8),
        n if n < 65536 => {
            f.push(0x80 | 126);
            f.extend((n as u16).to_be_bytes());
        }
        n => {
            f.push(0x80 | 127);
            f.extend((n as u64).to_be_bytes());
        }
    }
    f.extend(mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misbehaving_clients_are_closed_and_recorded_while_others_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&dir, |c| c.max_frame = 1000).await;
    let mut good = connect(&agent, 2).await;
    let addr = agent.addr;

    let (codes, conns) = tokio::task::spawn_blocking(move || {
        let mut codes = Vec::new();
        let mut conns = Vec::new();
        // Garbage after the upgrade.
        let (mut s, c) = raw_upgrade(addr);
        s.write_all(b"this is not a websocket frame").unwrap();
        codes.push(close_code_from(s));
        conns.push(c);
        // One oversized frame.
        let (mut s, c) = raw_upgrade(addr);
        s.write_all(&masked(0x82, &vec![1u8; 2000])).unwrap();
        codes.push(close_code_from(s));
        conns.push(c);
        // A fragmented message that never ends.
        let (mut s, c) = raw_upgrade(addr);
        s.write_all(&masked(0x02, &[1u8; 400])).unwrap();
        for _ in 0..10 {
            if s.write_all(&masked(0x00, &[1u8; 400])).is_err() {
                break;
            }
        }
        codes.push(close_code_from(s));
        conns.push(c);
        // A ping is answered, then a clean close.
        let (mut s, c) = raw_upgrade(addr);
        s.write_all(&masked(0x89, b"p")).unwrap();
        s.write_all(&masked(0x88, &1000u16.to_be_bytes())).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        assert!(out.starts_with(&[0x8a, 1, b'p']), "pong first: {out:?}");
        codes.push(Some(u16::from_be_bytes([out[5], out[6]])));
        conns.push(c);
        (codes, conns)
    })
    .await
    .unwrap();
    assert_eq!(codes, vec![Some(1002), Some(1009), Some(1009), Some(1000)]);

    wait_for_clients(&agent, 2).await;
    assert!(
        publish(addr, b"after the trouble")
            .await
            .body
            .contains("\"clients\":2")
    );
    for ws in &mut good {
        assert_eq!(next_data(ws).await, Message::text("after the trouble"));
    }
    // A well-behaved client closing gets the close handshake.
    good[0].close(None).await.unwrap();
    let log = agent.log_path.clone();
    agent.shutdown().await.unwrap();

    let reasons: Vec<(u64, CloseReason)> = agent_records(&log)
        .into_iter()
        .filter_map(|r| match r {
            AgentRecord::ConnectionClosed(c) => Some((c.conn, c.reason)),
            _ => None,
        })
        .collect();
    let reason_of = |conn| {
        reasons
            .iter()
            .find(|(c, _)| *c == conn)
            .map(|(_, r)| r.clone())
    };
    assert!(matches!(
        reason_of(conns[0]),
        Some(CloseReason::ProtocolError(_))
    ));
    assert_eq!(reason_of(conns[1]), Some(CloseReason::FrameTooLarge));
    assert_eq!(reason_of(conns[2]), Some(CloseReason::FrameTooLarge));
    assert_eq!(reason_of(conns[3]), Some(CloseReason::ClientClosed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_queued_then_dropped_without_delaying_others() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&dir, |c| {
        c.max_queue_bytes = 256 * 1024;
        c.max_publish = 64 * 1024;
    })
    .await;
    let mut good = connect(&agent, 1).await;
    let addr = agent.addr;
    // Upgrades and then never reads: its receive and send buffers fill up.
    let (stalled, stalled_conn) = tokio::task::spawn_blocking(move || raw_upgrade(addr))
        .await
        .unwrap();
    wait_for_clients(&agent, 2).await;

    let payload = vec![b'x'; 60 * 1024];
    let mut rounds = 0;
    // Bounded: the stalled client is dropped long before 400 rounds (24 MB).
    while agent.clients() == 2 && rounds < 400 {
        let r = publish(addr, &payload).await;
        assert_eq!(r.status, 200);
        // The healthy client keeps receiving every broadcast.
        assert_eq!(
            next_data(&mut good[0]).await,
            Message::text(String::from_utf8(payload.clone()).unwrap())
        );
        rounds += 1;
    }
    assert_eq!(
        agent.clients(),
        1,
        "stalled client never dropped after {rounds} rounds"
    );
    drop(stalled);
    let log = agent.log_path.clone();
    agent.shutdown().await.unwrap();

    let records = agent_records(&log);
    let outcomes: Vec<SendOutcome> = records
        .iter()
        .filter_map(|r| match r {
            AgentRecord::ShardSends(s) => Some(
                s.slots
                    .iter()
                    .filter(|s| s.conn == stalled_conn)
                    .map(|s| s.outcome)
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        })
        .flatten()
        .collect();
    assert!(outcomes.contains(&SendOutcome::Queued), "{outcomes:?}");
    assert_eq!(outcomes.last(), Some(&SendOutcome::Dropped));
    assert!(records.iter().any(|r| matches!(r, AgentRecord::ConnectionClosed(c) if c.conn == stalled_conn && c.reason == CloseReason::QueueOverflow)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_vanishing_mid_write_are_closed_and_others_served() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&dir, |_| {}).await;
    let mut good = connect(&agent, 1).await;
    let addr = agent.addr;
    // Ten clients that upgrade and then reset their connections (SO_LINGER 0).
    tokio::task::spawn_blocking(move || {
        for _ in 0..10 {
            let (s, _) = raw_upgrade(addr);
            let sock = socket2::SockRef::from(&s);
            sock.set_linger(Some(Duration::ZERO)).unwrap();
            drop(s);
        }
    })
    .await
    .unwrap();
    for i in 0..20 {
        let r = publish(addr, format!("m{i}").as_bytes()).await;
        assert_eq!(r.status, 200);
    }
    for i in 0..20 {
        assert_eq!(
            next_data(&mut good[0]).await,
            Message::text(format!("m{i}"))
        );
    }
    wait_for_clients(&agent, 1).await;
    agent.shutdown().await.unwrap();
}

/// With TX stamps a probe socket's error readiness is usually its stamps,
/// and is not followed by a read; a reset must still close it, seen on its
/// read side alone (nothing is written to it after).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stamped_probes_that_reset_are_closed_without_a_write() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&dir, |c| c.tx_timestamps = true).await;
    let mut good = connect(&agent, 1).await;
    let addr = agent.addr;
    let vanishing: Vec<_> = tokio::task::spawn_blocking(move || {
        (0..10)
            .map(|_| raw_upgrade_as(addr, "/ws?probe=v").0)
            .collect()
    })
    .await
    .unwrap();
    wait_for_clients(&agent, 11).await;
    // A broadcast each, stamped: their error readiness has fired.
    assert_eq!(publish(addr, b"first").await.status, 200);
    assert_eq!(next_data(&mut good[0]).await, Message::text("first"));
    tokio::task::spawn_blocking(move || {
        for s in vanishing {
            let sock = socket2::SockRef::from(&s);
            sock.set_linger(Some(Duration::ZERO)).unwrap();
            drop(s);
        }
    })
    .await
    .unwrap();
    wait_for_clients(&agent, 1).await;
    assert_eq!(publish(addr, b"after").await.status, 200);
    assert_eq!(next_data(&mut good[0]).await, Message::text("after"));
    agent.shutdown().await.unwrap();
}

#[tokio::test]
async fn close_code_of_a_normal_client_is_echoed() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&dir, |_| {}).await;
    let mut clients = connect(&agent, 1).await;
    clients[0]
        .send(Message::Close(Some(
            tokio_tungstenite::tungstenite::protocol::CloseFrame {
                code: CloseCode::Away,
                reason: "".into(),
            },
        )))
        .await
        .unwrap();
    let reply = tokio::time::timeout(WAIT, clients[0].next()).await.unwrap();
    match reply {
        Some(Ok(Message::Close(Some(f)))) => assert_eq!(f.code, CloseCode::Away),
        other => panic!("expected a close reply, got {other:?}"),
    }
    wait_for_clients(&agent, 0).await;
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tx_timestamps_are_recorded_for_every_copy_to_a_probe_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&dir, |c| c.tx_timestamps = true).await;
    let mut clients = connect(&agent, 3).await;
    // Two clients that are not probes: their copies join no receipt.
    for _ in 0..2 {
        let (ws, _) = connect_async(format!("ws://{}/ws", agent.addr))
            .await
            .unwrap();
        clients.push(ws);
    }
    wait_for_clients(&agent, 5).await;
    for _ in 0..4 {
        start_test(agent.addr, None).await.unwrap();
        for ws in &mut clients {
            next_data(ws).await;
        }
    }
    // Stamps are drained between broadcasts and written on the recorder's
    // tick: wait until the log holds one for every probe's copy.
    let log = agent.log_path.clone();
    until_tx_stamps(&log, 3 * 4).await;
    agent.shutdown().await.unwrap();

    let records = agent_records(&log);
    let starts: std::collections::HashMap<u64, u64> = records
        .iter()
        .filter_map(|r| match r {
            AgentRecord::Broadcast(b) => Some((b.id, b.at.mono_ns)),
            _ => None,
        })
        .collect();
    let written: std::collections::HashMap<(u64, u64), u64> = records
        .iter()
        .filter_map(|r| match r {
            AgentRecord::ShardSends(s) => Some(
                s.slots
                    .iter()
                    .map(move |x| ((s.broadcast, x.conn), x.mono_ns)),
            ),
            _ => None,
        })
        .flatten()
        .collect();
    let probes: std::collections::HashSet<u64> = records
        .iter()
        .filter_map(|r| match r {
            AgentRecord::ConnectionOpened(o) if o.label.is_some() => Some(o.conn),
            _ => None,
        })
        .collect();
    assert_eq!(probes.len(), 3);
    let mut software = 0;
    for r in &records {
        if let AgentRecord::TxStamp(t) = r {
            assert!(probes.contains(&t.conn), "{t:?} is not a probe's copy");
            let start = starts[&t.broadcast];
            let done = written[&(t.broadcast, t.conn)];
            // The kernel stamps the packet after the broadcast began and, within
            // clock-conversion error, no later than shortly after write returned.
            assert!(t.mono_ns + 50_000 >= start, "{t:?} before start {start}");
            assert!(
                t.mono_ns <= done + 50_000_000,
                "{t:?} long after write {done}"
            );
            if t.kind == skewscope_core::record::TxKind::Software {
                software += 1;
            }
        }
    }
    assert_eq!(
        software,
        3 * 4,
        "a software TX stamp for every probe's copy"
    );
}

/// Asks `/healthz` until `ok` holds of its answer (bounded by [`WAIT`]).
async fn until_health(agent: &RunningAgent, ok: impl Fn(&serde_json::Value) -> bool) {
    let mut last = serde_json::Value::Null;
    let seen = tokio::time::timeout(WAIT, async {
        loop {
            if let Ok(r) = request(agent.addr, "GET", "/healthz", b"", None).await
                && let Ok(h) = serde_json::from_str::<serde_json::Value>(&r.body)
            {
                if ok(&h) {
                    return;
                }
                last = h;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(seen.is_ok(), "/healthz never as expected; last {last}");
}

/// Asks until the agent answers `status` (bounded by 4 × [`WAIT`]: each
/// try is a new connection, slow on a loaded machine); a request refused
/// at the socket counts as not yet.
async fn until_status(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &[u8],
    status: u16,
) -> agent::http_client::Response {
    tokio::time::timeout(4 * WAIT, async {
        loop {
            if let Ok(r) = request(addr, method, path, body, None).await
                && r.status == status
            {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{method} {path} never answered {status}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_bodies_in_flight_are_bounded_in_total() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&dir, |c| {
        c.max_publish = 1024;
        c.max_publish_in_flight = 4096;
    })
    .await;
    // Four requests announce the largest body and send none of it.
    let head = b"POST /publish HTTP/1.1\r\nHost: t\r\nContent-Length: 1024\r\n\r\n";
    let mut holders = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(agent.addr).await.unwrap();
        tokio::io::AsyncWriteExt::write_all(&mut s, head)
            .await
            .unwrap();
        holders.push(s);
    }
    // Their heads are read in no set order with the fifth's: wait until
    // the four hold the whole budget.
    until_health(&agent, |h| h["publish_bytes_in_flight"] == 4096).await;
    // A fifth is turned away before its body is read, not queued.
    let refused = until_status(agent.addr, "POST", "/publish", &[b'x'; 1024], 503).await;
    assert!(refused.body.contains("in flight"), "{}", refused.body);
    // When they go, their share is free again.
    drop(holders);
    until_health(&agent, |h| h["publish_bytes_in_flight"] == 0).await;
    let sent = until_status(agent.addr, "POST", "/publish", b"after", 200).await;
    assert!(sent.body.contains("\"broadcast\""), "{}", sent.body);
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_clients_turns_the_next_away_with_503_and_counts_it() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&dir, |c| c.max_clients = Some(2)).await;
    let mut two = connect(&agent, 2).await;
    match connect_async(format!("ws://{}/ws", agent.addr)).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 503),
        other => panic!("expected 503, got {other:?}"),
    }
    let health = request(agent.addr, "GET", "/healthz", b"", None)
        .await
        .unwrap();
    assert!(
        health.body.contains("\"refused_clients\":1"),
        "{}",
        health.body
    );
    // One leaves: there is room again.
    two.pop().unwrap().close(None).await.unwrap();
    wait_for_clients(&agent, 1).await;
    let (_again, _) = connect_async(format!("ws://{}/ws", agent.addr))
        .await
        .expect("room for one more");
    wait_for_clients(&agent, 2).await;
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_never_send_a_request_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&dir, |c| c.max_pending = 3).await;
    // Three sockets that say nothing hold every pending place.
    let mut idle = Vec::new();
    for _ in 0..3 {
        idle.push(TcpStream::connect(agent.addr).await.unwrap());
    }
    // A fourth connection is turned away at once.
    let refused = until_status(agent.addr, "GET", "/healthz", b"", 503).await;
    assert!(refused.body.contains("pending"), "{}", refused.body);
    // When they go, everyone else is served again, and it was counted.
    drop(idle);
    let health = until_status(agent.addr, "GET", "/healthz", b"", 200).await;
    let health: serde_json::Value = serde_json::from_str(&health.body).unwrap();
    assert!(health["refused_pending"].as_u64().unwrap() >= 1, "{health}");
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_must_be_one_and_digits_only() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&dir, |_| {}).await;
    for (head, status) in [
        ("Content-Length: -1\r\n", "400"),
        ("Content-Length: +5\r\n", "400"),
        ("Content-Length: 0x10\r\n", "400"),
        ("Content-Length: 2\r\nContent-Length: 2\r\n", "400"),
        ("", "411"),
    ] {
        let mut s = StdTcpStream::connect(agent.addr).unwrap();
        write!(s, "POST /publish HTTP/1.1\r\nHost: t\r\n{head}\r\nhi").unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{head:?}: {answer}"
        );
    }
    agent.shutdown().await.unwrap();
}

/// Limits raised past 4 GiB still never let one body claim more than the
/// budget can count: it is refused as too large, not queued as busy, and
/// nothing is allocated for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_what_the_budget_counts_is_refused_as_too_large() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&dir, |c| {
        c.max_publish = 1 << 40;
        c.max_publish_in_flight = 1 << 40;
    })
    .await;
    let mut s = StdTcpStream::connect(agent.addr).unwrap();
    write!(
        s,
        "POST /publish HTTP/1.1\r\nHost: t\r\nContent-Length: 5000000000\r\n\r\nhi"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("4 GiB"), "{answer}");
    let health = request(agent.addr, "GET", "/healthz", b"", None)
        .await
        .unwrap();
    assert_eq!(health.status, 200);
    agent.shutdown().await.unwrap();
}

/// Parses the server's (unmasked) frames in `bytes`: (opcode, payload).
fn server_frames(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while bytes.len() >= 2 {
        let (op, len7) = (bytes[0] & 0x0f, usize::from(bytes[1] & 0x7f));
        let (len, head) = match len7 {
            126 if bytes.len() >= 4 => (usize::from(u16::from_be_bytes([bytes[2], bytes[3]])), 4),
            127 if bytes.len() >= 10 => (
                u64::from_be_bytes(bytes[2..10].try_into().unwrap()) as usize,
                10,
            ),
            126 | 127 => break,
            n => (n, 2),
        };
        if bytes.len() < head + len {
            break;
        }
        out.push((op, bytes[head..head + len].to_vec()));
        bytes = &bytes[head + len..];
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_flood_is_closed_with_1008_and_others_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&dir, |c| c.shards = Some(1)).await;
    let mut good = connect(&agent, 3).await;
    let (mut flooder, conn) = raw_upgrade(agent.addr);
    wait_for_clients(&agent, 4).await;
    // A thousand pings at once: ten times the burst a client may send.
    let burst = skewscope_core::control_rate::CONTROL_BURST as usize;
    let pings: Vec<u8> = (0..10 * burst)
        .flat_map(|_| masked(0x89, &[7u8; 125]))
        .collect();
    let writer = {
        let mut s = flooder.try_clone().unwrap();
        std::thread::spawn(move || {
            let _ = s.write_all(&pings); // the agent may close it midway
        })
    };
    let mut answer = Vec::new();
    let _ = flooder.read_to_end(&mut answer);
    writer.join().unwrap();
    let frames = server_frames(&answer);
    let pongs = frames.iter().filter(|(op, _)| *op == 0xA).count();
    assert!(pongs <= burst, "at most the burst is answered: {pongs}");
    // The agent closes with pings still unread, so the kernel may reset
    // the connection and the close frame be lost with it; when it arrives,
    // it says 1008 and is the last. The log below is what must hold.
    if let Some(at) = frames.iter().position(|(op, _)| *op == 0x8) {
        let close = &frames[at].1;
        assert_eq!(u16::from_be_bytes([close[0], close[1]]), 1008);
        assert_eq!(at, frames.len() - 1, "nothing after the close");
    }

    wait_for_clients(&agent, 3).await;
    assert_eq!(publish(agent.addr, b"still served").await.status, 200);
    for ws in &mut good {
        assert_eq!(next_data(ws).await, Message::text("still served"));
    }
    let log = agent.log_path.clone();
    agent.shutdown().await.unwrap();
    assert!(agent_records(&log).iter().any(|r| matches!(r,
        AgentRecord::ConnectionClosed(c) if c.conn == conn && c.reason == CloseReason::TooManyControlFrames)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_a_client_sends_after_its_close_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&dir, |_| {}).await;
    let (mut s, _) = raw_upgrade(agent.addr);
    let mut bytes = masked(0x88, &1000u16.to_be_bytes());
    bytes.extend(masked(0x89, b"after"));
    s.write_all(&bytes).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let ops: Vec<u8> = server_frames(&answer).iter().map(|f| f.0).collect();
    assert_eq!(ops, vec![0x8], "only the close is echoed, no pong");
    agent.shutdown().await.unwrap();
}

/// A client sending empty data frames as fast as loopback goes (each costs
/// the shard more to parse than the client to send), on the same shard as
/// everyone else: each broadcast still reaches every other client while the
/// flood goes on (the shard reads at most `READ_BUDGET` from one client per
/// turn and looks at its commands between clients).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_flooding_data_does_not_hold_up_broadcasts() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    let dir = tempfile::tempdir().unwrap();
    let agent = start(&dir, |c| c.shards = Some(1)).await;
    let mut good = connect(&agent, 20).await;
    let (flooder, _) = raw_upgrade(agent.addr);
    wait_for_clients(&agent, 21).await;
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    // Bounded: at most 8 GiB or 30 s, whichever comes first.
    let writer = {
        let (stop, written) = (stop.clone(), written.clone());
        let mut s = flooder;
        std::thread::spawn(move || {
            let frame: Vec<u8> = (0..10_000).flat_map(|_| masked(0x82, b"")).collect();
            let until = std::time::Instant::now() + Duration::from_secs(30);
            while !stop.load(Ordering::Relaxed)
                && written.load(Ordering::Relaxed) < 8 << 30
                && std::time::Instant::now() < until
            {
                if s.write_all(&frame).is_err() {
                    break;
                }
                written.fetch_add(frame.len() as u64, Ordering::Relaxed);
            }
            stop.store(true, Ordering::Relaxed);
        })
    };
    // The flood is under way before the broadcasts.
    while written.load(Ordering::Relaxed) < 16 << 20 {
        assert!(!stop.load(Ordering::Relaxed), "the flood ended early");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    for i in 0..5 {
        let body = format!("during the flood {i}");
        assert_eq!(publish(agent.addr, body.as_bytes()).await.status, 200);
        for ws in &mut good {
            assert_eq!(next_data(ws).await, Message::text(body.clone()));
        }
    }
    let flooding = !stop.swap(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(
        flooding,
        "every broadcast arrived while the flood still went on ({} MiB written)",
        written.load(Ordering::Relaxed) >> 20
    );
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_text_and_unsendable_close_codes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&dir, |_| {}).await;
    let addr = agent.addr;
    let code_for = move |bytes: Vec<u8>| {
        let (mut s, _) = raw_upgrade(addr);
        s.write_all(&bytes).unwrap();
        close_code_from(s)
    };
    // "€" split across two fragments, its last byte missing: 1007.
    let euro = "€".as_bytes();
    let mut split = masked(0x01, &euro[..1]);
    split.extend(masked(0x80, &euro[1..2]));
    let results = tokio::task::spawn_blocking(move || {
        (
            code_for(split),
            code_for(masked(0x88, &1005u16.to_be_bytes())),
            code_for(masked(0x88, &[3])),
            code_for(masked(0x88, &4000u16.to_be_bytes())),
        )
    })
    .await
    .unwrap();
    assert_eq!(results, (Some(1007), Some(1002), Some(1002), Some(4000)));
    agent.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_asking_for_a_subprotocol_gets_the_one_we_speak_and_it_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let agent = start(&dir, |c| c.subprotocols = vec!["v2.sync".into()]).await;
    let mut request =
        tokio_tungstenite::tungstenite::client::IntoClientRequest::into_client_request(format!(
            "ws://{}/ws",
            agent.addr
        ))
        .unwrap();
    request.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        "graphql-ws, v2.sync".parse().unwrap(),
    );
    // tungstenite, like a browser, fails a handshake whose answer lacks it.
    let (mut ws, response) = tokio_tungstenite::connect_async(request).await.unwrap();
    assert_eq!(
        response.headers()["Sec-WebSocket-Protocol"],
        "v2.sync",
        "{response:?}"
    );
    // One that offers none still connects.
    let (mut plain, _) = connect_async(format!("ws://{}/ws", agent.addr))
        .await
        .unwrap();
    wait_for_clients(&agent, 2).await;
    assert_eq!(publish(agent.addr, b"both").await.status, 200);
    assert_eq!(next_data(&mut ws).await, Message::text("both"));
    assert_eq!(next_data(&mut plain).await, Message::text("both"));
    let log = agent.log_path.clone();
    agent.shutdown().await.unwrap();
    let chosen: Vec<String> = agent_records(&log)
        .into_iter()
        .filter_map(|r| match r {
            AgentRecord::ConnectionSubprotocol(s) => Some(s.subprotocol),
            _ => None,
        })
        .collect();
    assert_eq!(chosen, vec!["v2.sync".to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_shutdown_clients_get_a_clean_close() {
    let dir = tempfile::tempdir().unwrap();
    // The clients are tasks of this test's runtime, which a loaded machine
    // may not run within the agent's 500 ms: give them the time (the wait
    // ends as soon as every one has answered).
    let agent = start(&dir, |c| c.close_wait_ms = 20_000).await;
    let clients = connect(&agent, 3).await;
    // Each client reads on, as a browser does, and so answers the close;
    // it also keeps talking, so a socket dropped without waiting for that
    // answer has unread bytes and is reset.
    let readers: Vec<_> = clients
        .into_iter()
        .map(|mut ws| {
            tokio::spawn(async move {
                let mut close = None;
                let mut tick = tokio::time::interval(Duration::from_millis(1));
                let deadline = tokio::time::Instant::now() + 4 * WAIT;
                loop {
                    tokio::select! {
                        _ = tick.tick(), if close.is_none() => {
                            let _ = ws.send(Message::text("chatter")).await;
                        }
                        m = ws.next() => match m {
                            Some(Ok(Message::Close(frame))) => {
                                close = Some(frame.map(|f| u16::from(f.code)));
                            }
                            Some(Ok(_)) => {}
                            // The end after the close handshake: clean.
                            None => return Ok(close.flatten()),
                            Some(Err(e)) => return Err(e.to_string()),
                        },
                        _ = tokio::time::sleep_until(deadline) => return Err("no end".into()),
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(20)).await;
    agent.shutdown().await.unwrap();
    for r in readers {
        assert_eq!(r.await.unwrap(), Ok(Some(1001)), "a clean close, code 1001");
    }
}
