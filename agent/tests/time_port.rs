//! The UDP time port against real packets on 127.0.0.1: answers, never
//! amplifies, and drops and counts what it should not answer.

use std::net::UdpSocket;
use std::time::Duration;

use agent::{AgentConfig, RunningAgent};
use skewscope_core::time_exchange::{PACKET_LEN, Reply, Request};

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
        let request = Request {
            id: 42,
            t1_wall_ns: before,
        };
        let reply = exchange(&socket, &request.encode()).expect("a reply");
        let after = skewscope_os::clock::now().wall_ns;
        assert_eq!(
            reply.len(),
            PACKET_LEN,
            "a reply is exactly the size of the request"
        );
        let reply = Reply::decode(&reply).unwrap();
        assert_eq!((reply.id, reply.t1_wall_ns), (42, before));
        assert!(
            before <= reply.t2_wall_ns
                && reply.t2_wall_ns <= reply.t3_wall_ns
                && reply.t3_wall_ns <= after
        );

        let mut big = Request {
            id: 43,
            t1_wall_ns: 1,
        }
        .encode()
        .to_vec();
        big.resize(1200, 0);
        let reflected = Reply {
            id: 1,
            t1_wall_ns: 1,
            t2_wall_ns: 1,
            t3_wall_ns: 1,
        }
        .encode();
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
        let fresh = exchange(
            &socket,
            &Request {
                id: 44,
                t1_wall_ns: 5,
            }
            .encode(),
        );
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
