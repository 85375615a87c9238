//! The probe library against real WebSocket servers on 127.0.0.1.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{
    BroadcastServer, assert_framed, closed, nobody_listens_on, opened, read_probe_log, receipts,
    within,
};
use probe::{ProbeConfig, ProbeError, RunningProbe};
use skewscope_core::identity::{TestMessage, encode_test_message, payload_hash};
use skewscope_core::record::{MessageKey, ProbeRecord};
use tokio_tungstenite::tungstenite::Message;

fn config(url: String, out: &Path, connections: u32) -> ProbeConfig {
    let mut config = ProbeConfig::new(url, out);
    config.connections = connections;
    config.name = "test-probe".to_owned();
    config
}

fn log_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("probe.sklog")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_server_payloads_are_keyed_by_hash_and_occurrence() {
    let server = BroadcastServer::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let out = log_path(&dir);
    let mut config = config(server.url(), &out, 3);
    config.count = Some(7);
    let probe = RunningProbe::start(config).await.unwrap();
    assert_eq!(within("connecting", probe.connected()).await.opened, 3);
    server.wait_for_clients(3).await;

    let distinct = ["alpha", "bravo", "charlie", "delta", "echo"];
    let repeated = "go!";
    for payload in distinct {
        server.broadcast(Message::text(payload));
    }
    server.broadcast(Message::text(repeated));
    server.broadcast(Message::text(repeated));

    // --count 7 ends the run without a stop.
    let summary = within("the probe finishing", probe.finish()).await.unwrap();
    assert_eq!(
        (summary.opened, summary.failed, summary.receipts),
        (3, 0, 21)
    );

    let records = read_probe_log(&out);
    assert_framed(&records);
    let ProbeRecord::Started(started) = &records[0] else {
        unreachable!()
    };
    assert_eq!(started.name, "test-probe");
    assert_eq!(started.url, server.url());
    assert_eq!(started.connections, 3);
    assert_eq!(started.version, env!("CARGO_PKG_VERSION"));

    let opened = opened(&records);
    assert_eq!(opened.len(), 3);
    assert!(opened.iter().all(|o| o.agent_conn.is_none()));

    let receipts = receipts(&records);
    assert_eq!(receipts.len(), 21);
    let repeated_hash = payload_hash(repeated.as_bytes());
    for conn in 0..3 {
        let mine: Vec<_> = receipts.iter().filter(|r| r.conn == conn).collect();
        assert_eq!(mine.len(), 7, "connection {conn}");
        let mut keys = Vec::new();
        for receipt in &mine {
            let MessageKey::Hash { hash, occurrence } = receipt.key else {
                panic!("foreign payload keyed by sequence: {receipt:?}");
            };
            assert_eq!(hash, receipt.hash);
            assert!((3..=7).contains(&receipt.len), "{receipt:?}");
            keys.push((hash, occurrence));
        }
        for payload in distinct {
            assert!(
                keys.contains(&(payload_hash(payload.as_bytes()), 0)),
                "{payload}"
            );
        }
        assert!(keys.contains(&(repeated_hash, 0)));
        assert!(keys.contains(&(repeated_hash, 1)));
    }
    let closed = closed(&records);
    assert_eq!(closed.len(), 3);
    assert!(
        closed.iter().all(|c| c.reason == "count reached"),
        "{closed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_larger_than_the_read_buffer_arrive_whole() {
    let server = BroadcastServer::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let out = log_path(&dir);
    let mut config = config(server.url(), &out, 2);
    config.count = Some(2);
    let probe = RunningProbe::start(config).await.unwrap();
    server.wait_for_clients(2).await;

    // 25x the probe's 4 KiB read buffer, and a small one after it.
    let big: String = (0..100_000)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    server.broadcast(Message::text(big.clone()));
    server.broadcast(Message::text("after"));

    let summary = within("the probe finishing", probe.finish()).await.unwrap();
    assert_eq!(summary.receipts, 4);
    let receipts = receipts(&read_probe_log(&out));
    let big_hash = payload_hash(big.as_bytes());
    assert_eq!(
        receipts
            .iter()
            .filter(|r| r.hash == big_hash && r.len == 100_000)
            .count(),
        2,
        "{receipts:?}"
    );
    assert_eq!(
        receipts
            .iter()
            .filter(|r| r.hash == payload_hash(b"after"))
            .count(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_messages_are_keyed_by_sequence() {
    let server = BroadcastServer::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let out = log_path(&dir);
    let mut config = config(server.url(), &out, 2);
    config.count = Some(3);
    let probe = RunningProbe::start(config).await.unwrap();
    within("connecting", probe.connected()).await;
    server.wait_for_clients(2).await;
    for seq in 1..=3 {
        let text = encode_test_message(TestMessage {
            seq,
            sent_wall_ns: skewscope_os::clock::now().wall_ns,
            at_wall_ns: None,
        });
        server.broadcast(Message::text(text));
    }
    within("the probe finishing", probe.finish()).await.unwrap();

    let records = read_probe_log(&out);
    assert_framed(&records);
    let mut seqs: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for receipt in receipts(&records) {
        let MessageKey::Seq(seq) = receipt.key else {
            panic!("test message keyed by hash: {receipt:?}");
        };
        assert_eq!(
            receipt.len as usize,
            skewscope_core::identity::TEST_MESSAGE_LEN
        );
        seqs.entry(receipt.conn).or_default().push(seq);
    }
    assert_eq!(seqs.len(), 2);
    for seqs in seqs.values() {
        assert_eq!(seqs, &[1, 2, 3]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_header_and_probe_label_are_exchanged() {
    let server = BroadcastServer::start(Some(1000)).await;
    let dir = tempfile::tempdir().unwrap();
    let out = log_path(&dir);
    let mut config = config(server.url(), &out, 2);
    config.name = "kitchen pi".to_owned();
    let probe = RunningProbe::start(config).await.unwrap();
    assert_eq!(within("connecting", probe.connected()).await.opened, 2);
    probe.stop();
    within("the probe finishing", probe.finish()).await.unwrap();

    let records = read_probe_log(&out);
    assert_framed(&records);
    let agent_conns: BTreeSet<_> = opened(&records).iter().map(|o| o.agent_conn).collect();
    assert_eq!(agent_conns, BTreeSet::from([Some(1000), Some(1001)]));
    let targets = server.request_targets();
    assert_eq!(targets.len(), 2);
    assert!(
        targets.iter().all(|t| t == "/ws?probe=kitchen%20pi"),
        "{targets:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_keeps_every_receipt_and_writes_stopped() {
    let server = BroadcastServer::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let out = log_path(&dir);
    let before = skewscope_os::clock::now_raw();
    let probe = RunningProbe::start(config(server.url(), &out, 4))
        .await
        .unwrap();
    within("connecting", probe.connected()).await;
    server.wait_for_clients(4).await;
    for i in 0..4u8 {
        server.broadcast(Message::binary(vec![i; 100]));
    }
    server.wait_sent(16).await;
    probe.stop();
    let summary = within("the probe finishing", probe.finish()).await.unwrap();
    let after = skewscope_os::clock::now_raw();
    assert_eq!(summary.receipts, 16);

    let records = read_probe_log(&out);
    assert_framed(&records);
    let receipts = receipts(&records);
    assert_eq!(receipts.len(), 16);
    for r in &receipts {
        assert!(before.wall_ns <= r.at.wall_ns && r.at.wall_ns <= after.wall_ns);
        assert!(before.mono_ns <= r.at.mono_ns && r.at.mono_ns <= after.mono_ns);
        assert_eq!(r.len, 100);
    }
    let closed = closed(&records);
    assert_eq!(closed.len(), 4);
    assert!(closed.iter().all(|c| c.reason == "stopped"), "{closed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_server_ends_the_run() {
    let server = BroadcastServer::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let out = log_path(&dir);
    let probe = RunningProbe::start(config(server.url(), &out, 2))
        .await
        .unwrap();
    within("connecting", probe.connected()).await;
    server.wait_for_clients(2).await;
    server.broadcast(Message::text("before"));
    server.wait_sent(2).await;
    server.vanish();

    // No stop, no count: the run must end because both connections are gone.
    let summary = within("the probe finishing", probe.finish()).await.unwrap();
    assert_eq!((summary.opened, summary.receipts), (2, 2));
    let records = read_probe_log(&out);
    assert_framed(&records);
    let closed = closed(&records);
    assert_eq!(closed.len(), 2);
    for c in &closed {
        assert!(c.reason.contains("without a closing handshake"), "{c:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_close_frame_is_recorded_with_its_code() {
    let server = BroadcastServer::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let out = log_path(&dir);
    let probe = RunningProbe::start(config(server.url(), &out, 2))
        .await
        .unwrap();
    within("connecting", probe.connected()).await;
    server.wait_for_clients(2).await;
    server.broadcast(Message::text("last words"));
    server.close_all("restart");

    let summary = within("the probe finishing", probe.finish()).await.unwrap();
    assert_eq!(summary.receipts, 2);
    let records = read_probe_log(&out);
    assert_framed(&records);
    let closed = closed(&records);
    assert_eq!(closed.len(), 2);
    assert!(
        closed
            .iter()
            .all(|c| c.reason == "server closed (code 1001: restart)"),
        "{closed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_are_recorded_and_none_opened_is_an_error() {
    let addr = nobody_listens_on();
    let url = format!("ws://{addr}/ws");
    let dir = tempfile::tempdir().unwrap();
    let out = log_path(&dir);
    let probe = RunningProbe::start(config(url.clone(), &out, 2))
        .await
        .unwrap();
    let attempts = within("connecting", probe.connected()).await;
    assert_eq!((attempts.opened, attempts.failed), (0, 2));

    let err = within("the probe finishing", probe.finish())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProbeError::NoneOpened { attempted: 2, .. }),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains(&url), "{message}");
    assert!(message.contains("server is running"), "{message}");

    let records = read_probe_log(&out);
    assert_framed(&records);
    let failed: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            ProbeRecord::ConnectionFailed(f) => Some(f),
            _ => None,
        })
        .collect();
    assert_eq!(failed.len(), 2);
    assert!(
        failed.iter().all(|f| f.error.contains("refused")),
        "{failed:?}"
    );
    assert!(opened(&records).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_upgrades_hits_the_connect_timeout() {
    // Bound and listening (the kernel completes TCP handshakes) but never accepting.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/ws", silent.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let out = log_path(&dir);
    let mut config = config(url, &out, 1);
    config.connect_timeout = Duration::from_millis(300);
    let probe = RunningProbe::start(config).await.unwrap();
    let err = within("the probe finishing", probe.finish())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("connect timeout"), "{err}");
    drop(silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duration_ends_the_run() {
    let server = BroadcastServer::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let out = log_path(&dir);
    let mut config = config(server.url(), &out, 2);
    config.duration = Some(Duration::from_millis(300));
    let probe = RunningProbe::start(config).await.unwrap();
    within("connecting", probe.connected()).await;
    server.wait_for_clients(2).await;
    server.broadcast(Message::text("during"));
    server.wait_sent(2).await;
    let summary = within("the probe finishing", probe.finish()).await.unwrap();
    assert_eq!(summary.receipts, 2);
    let records = read_probe_log(&out);
    assert_framed(&records);
    assert!(closed(&records).iter().all(|c| c.reason == "duration over"));
}

#[tokio::test]
async fn bad_urls_fail_before_anything_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let out = log_path(&dir);
    let result = RunningProbe::start(config("http://127.0.0.1:1/".to_owned(), &out, 1)).await;
    assert!(matches!(result, Err(ProbeError::Url { .. })));
    assert!(!out.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_in_flight_are_bounded_and_the_rest_follow() {
    let gate = probe::MAX_HANDSHAKES_IN_FLIGHT;
    let n = gate as u32 + 44;
    let server = BroadcastServer::start_holding_upgrades().await;
    let dir = tempfile::tempdir().unwrap();
    let out = log_path(&dir);
    let mut config = config(server.url(), &out, n);
    config.count = Some(2);
    let probe = RunningProbe::start(config).await.unwrap();

    // The server answers no upgrade yet: only the gate's worth may even
    // connect, and every other connection is seen waiting at the gate (so
    // the count below cannot pass by being looked at too soon).
    server.wait_for_accepted(gate).await;
    within("every other connection queued at the gate", async {
        while probe.handshakes_waiting() < n as usize - gate {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(probe.handshakes_waiting(), n as usize - gate);
    assert_eq!(
        server.accepted(),
        gate,
        "more handshakes in flight than the gate allows"
    );

    server.allow_upgrades();
    let attempts = within("connecting", probe.connected()).await;
    assert_eq!((attempts.opened, attempts.failed), (n, 0));
    server.wait_for_clients(n as usize).await;
    server.broadcast(Message::text("one"));
    server.broadcast(Message::text("two"));
    let summary = within("the probe finishing", probe.finish()).await.unwrap();
    assert_eq!(summary.receipts, 2 * u64::from(n));
    let records = read_probe_log(&out);
    assert_framed(&records);
    let conns: BTreeSet<u32> = receipts(&records).iter().map(|r| r.conn).collect();
    assert_eq!(conns.len(), n as usize);
}

/// A hostile server: upgrades, then sends pings as fast as it can and
/// never reads (bounded: 256 MiB or 20 s). Returns its URL and how many
/// bytes it got out.
async fn ping_flooder() -> (String, tokio::task::JoinHandle<u64>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}/ws", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            head.push(s.read_u8().await.unwrap());
        }
        let head = String::from_utf8(head).unwrap();
        let key = head
            .lines()
            .find_map(|l| {
                l.strip_prefix("Sec-WebSocket-Key: ")
                    .or(l.strip_prefix("sec-websocket-key: "))
            })
            .unwrap()
            .trim()
            .to_owned();
        let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
        s.write_all(
            format!("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
        let mut ping = vec![0x89, 125];
        ping.extend([b'p'; 125]);
        let pings: Vec<u8> = ping.repeat(500);
        let (mut sent, until) = (0u64, tokio::time::Instant::now() + Duration::from_secs(20));
        while sent < 256 << 20 && tokio::time::Instant::now() < until {
            match tokio::time::timeout(Duration::from_millis(200), s.write_all(&pings)).await {
                Ok(Ok(())) => sent += pings.len() as u64,
                Ok(Err(_)) => break, // the probe closed it
                Err(_) => {}         // the probe does not read: its window is full
            }
        }
        sent
    });
    (url, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_flooding_pings_is_closed_and_recorded() {
    let (url, flooder) = ping_flooder().await;
    let dir = tempfile::tempdir().unwrap();
    let out = log_path(&dir);
    let probe = RunningProbe::start(config(url, &out, 1)).await.unwrap();
    let summary = within("the probe finishing", probe.finish()).await.unwrap();
    assert_eq!(summary.opened, 1);
    let records = read_probe_log(&out);
    assert_framed(&records);
    let closed = closed(&records);
    assert_eq!(closed.len(), 1);
    assert!(
        closed[0].reason.contains("control frames faster than"),
        "{closed:?}"
    );
    // It ended long before the flood's own bound.
    let sent = flooder.await.unwrap();
    assert!(
        sent < 256 << 20,
        "the probe took {} MiB of pings",
        sent >> 20
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_log_ends_the_run_with_a_record_and_an_error_that_says_so() {
    let server = BroadcastServer::start(None).await;
    let dir = tempfile::tempdir().unwrap();
    let out = log_path(&dir);
    let mut c = config(server.url(), &out, 2);
    c.max_log_bytes = Some(8 * 1024);
    let probe = RunningProbe::start(c).await.unwrap();
    within("connecting", probe.connected()).await;
    server.wait_for_clients(2).await;
    // Far more than 8 KiB of receipts, bounded.
    for i in 0..1_000 {
        server.broadcast(Message::text(format!("chatty {i}")));
    }
    let err = within("the probe finishing", probe.finish())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            ProbeError::LogFull {
                max_bytes: 8192,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("--max-log-bytes"), "{err}");
    let records = read_probe_log(&out);
    assert!(
        matches!(records.last(), Some(ProbeRecord::LogFull(f)) if f.max_bytes == 8192),
        "{:?}",
        records.last()
    );
    let size = std::fs::metadata(&out).unwrap().len();
    assert!(size < 8 * 1024 + 256, "the bound holds: {size} bytes");
}
