//! The UDP time port against real packets on 127.0.0.1: answers, never
//! amplifies, and drops and counts what it should not answer.

use std::net::UdpSocket;
use std::time::Duration;

use agent::{AgentConfig, RunningAgent};
use skewscope_core::time_exchange::{Invalid, PACKET_LEN, Reply, Request, TimeKey, V1_PACKET_LEN};

fn exchange(socket: &UdpSocket, bytes: &[u8]) -> Option<Vec<u8>> {
    socket.send(bytes).unwrap();
    let mut buf = [0u8; 2048];
    match socket.recv(&mut buf) {
        Ok(n) => Some(buf[..n].to_vec()),
        Err(_) => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_requests_and_drops_malformed_oversized_and_replayed_packets() {
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(AgentConfig::local(dir.path().to_owned()))
        .await
        .unwrap();
    let time_addr = agent.time_addr.expect("time port on by default");
    assert_eq!(
        time_addr.port(),
        agent.addr.port(),
        "same port number as HTTP by default"
    );

    let answers = tokio::task::spawn_blocking(move || {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.connect(time_addr).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let before = skewscope_os::clock::now().wall_ns;
        let request = Request::new(42, before);
        let reply = exchange(&socket, &request.encode()).expect("a reply");
        let after = skewscope_os::clock::now().wall_ns;
        assert_eq!(
            reply.len(),
            PACKET_LEN,
            "a reply is exactly the size of the request"
        );
        let reply = Reply::decode(&reply, None).unwrap();
        assert_eq!((reply.id, reply.t1_wall_ns), (42, before));
        assert!(
            before <= reply.t2_wall_ns
                && reply.t2_wall_ns <= reply.t3_wall_ns
                && reply.t3_wall_ns <= after
        );

        let mut big = Request::new(43, 1).encode();
        big.resize(1200, 0);
        let reflected = Reply {
            id: 1,
            t1_wall_ns: 1,
            t2_wall_ns: 1,
            t3_wall_ns: 1,
        }
        .encode(&request, None);
        let dropped = vec![
            // Replayed: the same id again.
            exchange(&socket, &request.encode()),
            // Truncated, garbage, a reply sent back, and oversized.
            exchange(&socket, &request.encode()[..20]),
            exchange(&socket, &[0xAB; PACKET_LEN]),
            exchange(&socket, &reflected),
            exchange(&socket, &big),
        ];
        // Still serving.
        let fresh = exchange(&socket, &Request::new(44, 5).encode());
        (dropped, fresh)
    })
    .await
    .unwrap();
    let (dropped, fresh) = answers;
    assert!(dropped.iter().all(Option::is_none), "{dropped:?}");
    assert!(fresh.is_some());

    let health = agent::http_client::request(agent.addr, "GET", "/healthz", b"", None)
        .await
        .unwrap();
    assert!(
        health
            .body
            .contains(r#""time":{"answered":2,"malformed":3,"oversized":1,"replayed":1}"#),
        "{}",
        health.body
    );
    let log = agent.log_path.clone();
    agent.shutdown().await.unwrap();
    let skewscope_core::log::AnyLog::Agent(d) = skewscope_os::log_files::read_file(&log).unwrap()
    else {
        panic!()
    };
    let last_counters = d.records.iter().rev().find_map(|r| match r {
        skewscope_core::record::AgentRecord::TimePort(c) => Some(*c),
        _ => None,
    });
    assert_eq!(
        last_counters.map(|c| (c.answered, c.replayed)),
        Some((2, 1))
    );
    assert!(
        d.records
            .iter()
            .any(|r| matches!(r, skewscope_core::record::AgentRecord::ClockState(_)))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_every_reply_is_tagged_and_an_old_probe_is_answered_in_kind() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let mut config = AgentConfig::local(dir.path().join("data"));
    config.token_file = Some(token_file);
    let agent = RunningAgent::start(config).await.unwrap();
    let time_addr = agent.time_addr.unwrap();
    tokio::task::spawn_blocking(move || {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.connect(time_addr).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let key = TimeKey::from_token("s3cret");
        let request = Request::new(1, 100);
        let reply = exchange(&socket, &request.encode()).expect("a reply");
        assert_eq!(Reply::decode(&reply, Some(&key)).map(|r| r.id), Ok(1));
        // Another token's key refuses it; the token itself is never sent.
        let other = TimeKey::from_token("guess");
        assert_eq!(Reply::decode(&reply, Some(&other)), Err(Invalid::BadTag));
        assert!(!reply.windows(6).any(|w| w == b"s3cret"));
        // A probe from before the tag: 48 bytes in, 48 untagged out.
        let mut old = Request::new(2, 100);
        old.version = 1;
        let reply = exchange(&socket, &old.encode()).expect("a reply to version 1");
        assert_eq!(reply.len(), V1_PACKET_LEN);
        assert_eq!(&reply[..4], b"SKTM");
        assert_eq!((reply[4], reply[6]), (1, 0), "version 1, untagged");
    })
    .await
    .unwrap();
    agent.shutdown().await.unwrap();
}
