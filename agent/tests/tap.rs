//! `--tap-port` on a real loopback: the agent follows a WebSocket server it
//! does not replace and records that server's broadcasts from its packets.
//! Runs in a user and network namespace of its own, where it has the
//! CAP_NET_RAW the capture needs and touches nothing outside.

use std::net::SocketAddr;
use std::time::Duration;

use agent::{AgentConfig, RunningAgent};
use futures_util::{SinkExt, StreamExt};
use skewscope_core::identity::{TestMessage, encode_test_message};
use skewscope_core::log::AnyLog;
use skewscope_core::record::AgentRecord;
use skewscope_os::log_files::read_file;
use skewscope_os::test_namespace::run_in_own_namespace;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::Message;

const LIMIT: Duration = Duration::from_secs(10);

#[test]
fn the_agent_records_a_foreign_servers_broadcasts_from_its_packets() {
    run_in_own_namespace(
        "the_agent_records_a_foreign_servers_broadcasts_from_its_packets",
        inside,
    );
}

async fn inside() {
    // A broadcaster that knows nothing of skewscope.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    let (tx, _) = tokio::sync::broadcast::channel::<String>(64);
    let sender = tx.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let mut rx = tx.subscribe();
            tokio::spawn(async move {
                let mut ws = tokio_tungstenite::accept_async(stream).await.unwrap();
                while let Ok(text) = rx.recv().await {
                    if ws.send(text.into()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });

    let dir = tempfile::tempdir().unwrap();
    let mut config = AgentConfig::local(dir.path().to_owned());
    config.tap_port = Some(server.port());
    config.tap_interface = Some("lo".into());
    let agent = RunningAgent::start(config).await.expect("the agent taps");

    let mut clients = Vec::new();
    let mut addrs: Vec<SocketAddr> = Vec::new();
    for _ in 0..3 {
        let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{server}/ws"))
            .await
            .unwrap();
        if let tokio_tungstenite::MaybeTlsStream::Plain(tcp) = ws.get_ref() {
            addrs.push(tcp.local_addr().unwrap());
        }
        clients.push(ws);
    }
    while sender.receiver_count() < 3 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let lorem = "Lorem ipsum dolor sit amet, ".repeat(16);
    for _ in 0..5 {
        sender.send(lorem.clone()).unwrap();
        for ws in &mut clients {
            let m = tokio::time::timeout(LIMIT, ws.next()).await.unwrap();
            assert!(matches!(m, Some(Ok(Message::Text(_)))));
        }
    }
    let test = encode_test_message(TestMessage {
        seq: 42,
        sent_wall_ns: 1,
        at_wall_ns: None,
    });
    sender.send(test).unwrap();
    for ws in &mut clients {
        tokio::time::timeout(LIMIT, ws.next()).await.unwrap();
    }
    let log = agent.log_path.clone();
    agent.shutdown().await.unwrap();

    let AnyLog::Agent(decoded) = read_file(&log).unwrap() else {
        panic!("an agent log");
    };
    let records = decoded.records;
    assert!(
        records
            .iter()
            .any(|r| matches!(r, AgentRecord::TapStarted(t) if t.port == server.port()))
    );
    let opened = records
        .iter()
        .filter(|r| matches!(r, AgentRecord::TapConnectionOpened(_)))
        .count();
    assert_eq!(opened, 3);
    let broadcasts: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            AgentRecord::TapBroadcast(b) => Some(b),
            _ => None,
        })
        .collect();
    // The fixed text five times and the test message once: six broadcasts
    // of three copies, to exactly the three clients.
    assert_eq!(broadcasts.len(), 6, "{broadcasts:#?}");
    let mut expected: Vec<String> = addrs.iter().map(|a| a.to_string()).collect();
    expected.sort();
    for b in &broadcasts {
        let mut got: Vec<String> = b.copies.iter().map(|c| c.client.clone()).collect();
        got.sort();
        assert_eq!(got, expected, "{b:?}");
        for c in &b.copies {
            assert!(c.first_byte_wall_ns <= c.last_byte_wall_ns);
        }
        // In send order.
        assert!(
            b.copies
                .windows(2)
                .all(|w| w[0].first_byte_wall_ns <= w[1].first_byte_wall_ns)
        );
    }
    assert_eq!(
        broadcasts.iter().filter(|b| b.seq == Some(42)).count(),
        1,
        "the test message is known by its sequence number"
    );
    let counters = records
        .iter()
        .rev()
        .find_map(|r| match r {
            AgentRecord::TapCounters(c) => Some(c.clone()),
            _ => None,
        })
        .expect("the tap's counters at shutdown");
    assert_eq!(counters.tap.followed, 3);
    assert_eq!(counters.tap.messages, 18);
    assert_eq!(
        (counters.ring_drops, counters.tap.lost, counters.tap.broken),
        (0, 0, 0)
    );
}

/// The agent tapping its own hub: the wire and the agent's own record of
/// the same broadcasts must agree in order. Each copy's first byte leaves
/// after the broadcast started, and its last byte before the agent saw its
/// write return, so the tap's span is never longer than the recorded one.
#[test]
fn tapping_its_own_hub_the_wire_span_fits_inside_the_recorded_one() {
    run_in_own_namespace(
        "tapping_its_own_hub_the_wire_span_fits_inside_the_recorded_one",
        own_hub,
    );
}

async fn own_hub() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let mut config = AgentConfig::local(dir.path().to_owned());
    config.listen = ([127, 0, 0, 1], port).into();
    config.tap_port = Some(port);
    config.tap_interface = Some("lo".into());
    let agent = RunningAgent::start(config)
        .await
        .expect("the agent taps itself");
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/ws", agent.addr))
            .await
            .unwrap();
        clients.push(ws);
    }
    while agent.clients() < 4 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    for _ in 0..8 {
        agent.start_test().await;
        for ws in &mut clients {
            tokio::time::timeout(LIMIT, ws.next()).await.unwrap();
        }
    }
    let log = agent.log_path.clone();
    agent.shutdown().await.unwrap();

    let AnyLog::Agent(decoded) = read_file(&log).unwrap() else {
        panic!("an agent log");
    };
    let joined = skewscope_core::analysis::join::join(Some(&decoded.records), &[]);
    // The hub's own record: start and last write, by test sequence number.
    let mut recorded = std::collections::HashMap::new();
    let mut seqs = std::collections::HashMap::new();
    for r in &decoded.records {
        if let AgentRecord::Broadcast(b) = r {
            seqs.insert(b.id, b.seq.unwrap());
        }
    }
    for b in &joined.broadcasts {
        let skewscope_core::analysis::join::BroadcastKey::Agent { id, .. } = b.key else {
            continue;
        };
        let a = b.agent.unwrap();
        let end = a.start.wall_ns + a.fanout_span_ns.unwrap();
        recorded.insert(seqs[&id], (a.start.wall_ns, end));
    }
    let tapped: Vec<_> = decoded
        .records
        .iter()
        .filter_map(|r| match r {
            AgentRecord::TapBroadcast(b) => Some(b),
            _ => None,
        })
        .collect();
    assert_eq!(tapped.len(), 8);
    // Slack for turning the hub's monotonic write times into wall time.
    const SLACK_NS: u64 = 10_000;
    for t in tapped {
        assert_eq!(t.copies.len(), 4);
        let (start, end) = recorded[&t.seq.expect("test messages")];
        let first = t.copies.iter().map(|c| c.first_byte_wall_ns).min().unwrap();
        let last = t.copies.iter().map(|c| c.last_byte_wall_ns).max().unwrap();
        assert!(
            first + SLACK_NS >= start,
            "a copy left before its broadcast began"
        );
        assert!(
            last <= end + SLACK_NS,
            "a copy left after its write returned"
        );
    }
}
