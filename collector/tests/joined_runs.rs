//! Real agents, real probes and a foreign server on 127.0.0.1:0, joined by the
//! collector: exact counts, plausible timings.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use agent::{AgentConfig, RunningAgent};
use collector::inputs::read_inputs;
use collector::joined::report;
use futures_util::{SinkExt, StreamExt};
use probe::{ProbeConfig, RunningProbe};
use skewscope_core::analysis::join::AgentSource;
use skewscope_core::analysis::report::ClockBasis;
use skewscope_core::record::AgentRecord;
use tokio::net::TcpListener;
use tokio::sync::broadcast;
use tokio_tungstenite::tungstenite::Message;

const LIMIT: Duration = Duration::from_secs(20);

async fn start_probe(
    url: &str,
    name: &str,
    connections: u32,
    count: u64,
    out: PathBuf,
) -> RunningProbe {
    let mut config = ProbeConfig::new(url, out);
    config.connections = connections;
    config.name = name.into();
    config.count = Some(count);
    let probe = RunningProbe::start(config).await.unwrap();
    assert_eq!(probe.connected().await.opened, connections);
    probe
}

/// Waits (bounded) for each probe to end by itself and sync its log.
async fn finish_all<const N: usize>(probes: [RunningProbe; N]) {
    for probe in probes {
        tokio::time::timeout(LIMIT, probe.finish())
            .await
            .expect("probe ends within the limit")
            .expect("probe log written");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_and_two_probes_join_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let agent = RunningAgent::start(AgentConfig::local(dir.path().to_owned()))
        .await
        .unwrap();
    let url = format!("ws://{}/ws", agent.addr);
    let (tests, publishes) = (8u64, 3u64);
    let total = tests + publishes;
    let a = start_probe(&url, "a", 5, total, dir.path().join("a.sklog")).await;
    let b = start_probe(&url, "b", 3, total, dir.path().join("b.sklog")).await;
    agent
        .wait_for_clients(8, LIMIT)
        .await
        .unwrap_or_else(|seen| panic!("the agent serves {seen} of 8 probe connections"));

    for _ in 0..tests {
        let r = agent::http_client::start_test(agent.addr, None)
            .await
            .unwrap();
        assert!(r.body.contains("\"clients\":8"), "{}", r.body);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The same foreign payload three times: joined by hash and occurrence.
    for _ in 0..publishes {
        let r = agent::http_client::request(agent.addr, "POST", "/publish", b"GO", None)
            .await
            .unwrap();
        assert_eq!(r.status, 200);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    finish_all([a, b]).await;
    let agent_log = agent.log_path.clone();
    let agent_addr = agent.addr;
    agent.shutdown().await.unwrap();

    let files = [
        agent_log,
        dir.path().join("a.sklog"),
        dir.path().join("b.sklog"),
    ];
    let inputs = read_inputs(&files).unwrap();
    // Each probe connection's own addresses are what the server saw: the
    // agent's peer of the connection it named is the probe's local side
    // (what joins probes to a tapped server's connections).
    let agent_peers: std::collections::HashMap<u64, String> = inputs.agents[0]
        .records()
        .filter_map(|r| match r {
            AgentRecord::ConnectionOpened(o) => Some((o.conn, o.peer)),
            _ => None,
        })
        .collect();
    let joined = collector::joined::join(&inputs, Default::default()).unwrap();
    let named: Vec<_> = joined
        .connections
        .iter()
        .map(|c| (c.agent_conn.unwrap(), c.addresses.clone().unwrap()))
        .collect();
    assert_eq!(named.len(), 8);
    for (agent_conn, (local, remote)) in named {
        assert_eq!(agent_peers[&agent_conn], local);
        assert_eq!(remote, agent_addr.to_string());
    }
    let r = report(inputs, None).unwrap();
    assert_eq!(r.broadcasts, total);
    assert_eq!(r.connections, 8);
    assert_eq!(r.receipts, 8 * total);
    assert_eq!((r.missing, r.duplicates, r.unmatched), (0, 0, 0));
    assert_eq!(r.clock_basis, ClockBasis::SingleHost);
    assert_eq!(
        r.probes.iter().map(|p| p.receipts).collect::<Vec<_>>(),
        vec![5 * total, 3 * total]
    );

    let skew = r.skew_ns.expect("skew measured");
    let latency = r.latency_ns.expect("latency measured with the agent log");
    let fanout = r.fanout_ns.expect("fan-out measured");
    assert_eq!(skew.count, total);
    assert_eq!(latency.count, 8 * total);
    // One clock: nothing is received before the broadcast started, and on
    // loopback everything arrives well within a second.
    assert!(latency.min > 0, "{latency:?}");
    assert!(latency.max < 1_000_000_000, "{latency:?}");
    // Skew cannot exceed the spread of latencies.
    assert!(
        skew.max <= latency.max - latency.min,
        "{skew:?} {latency:?}"
    );
    // (The last write can return after the kernel already delivered it: on
    // loopback the receive path runs inside the sender's write.)
    assert!(fanout.min > 0 && fanout.max < 1_000_000_000, "{fanout:?}");

    // Kernel receive stamps on every receipt, never after the userspace stamp.
    assert_eq!(r.receipts_without_kernel_stamp, 0);
    let delivery = r.delivery_ns.expect("kernel stamps on loopback");
    assert!(
        delivery.min >= 0 && delivery.count == 8 * total,
        "{delivery:?}"
    );
    // Each probe measured its offset to the agent: one clock, so zero within the bound.
    for p in &r.probes {
        assert!(p.clock.time_samples >= 8, "{p:?}");
        let (offset, bound) = (p.clock.offset_ns.unwrap(), p.clock.offset_bound_ns.unwrap());
        assert!(
            offset.unsigned_abs() <= bound,
            "offset {offset} bound {bound}"
        );
    }
    let corrected = r.skew_corrected_ns.expect("corrected skew");
    assert!(
        corrected.lo.max <= skew.max && skew.max <= corrected.hi.max,
        "{corrected:?} {skew:?}"
    );
}

/// A broadcast server that knows nothing of skewscope, like a small FastAPI or
/// Go app: every client gets whatever the test tells it to broadcast.
async fn foreign_server() -> (
    SocketAddr,
    broadcast::Sender<String>,
    tokio::sync::watch::Receiver<usize>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, _) = broadcast::channel::<String>(64);
    let (count_tx, count_rx) = tokio::sync::watch::channel(0usize);
    let sender = tx.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let mut rx = tx.subscribe();
            let count_tx = count_tx.clone();
            tokio::spawn(async move {
                let Ok(ws) = tokio_tungstenite::accept_async(stream).await else {
                    return;
                };
                count_tx.send_modify(|n| *n += 1);
                let (mut write, mut read) = ws.split();
                loop {
                    tokio::select! {
                        msg = rx.recv() => match msg {
                            Ok(text) => if write.send(Message::text(text)).await.is_err() { return },
                            Err(_) => return,
                        },
                        incoming = read.next() => match incoming {
                            Some(Ok(_)) => {}
                            _ => return,
                        },
                    }
                }
            });
        }
    });
    (addr, sender, count_rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_alone_measure_a_foreign_server() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, broadcaster, mut clients) = foreign_server().await;
    let url = format!("ws://{addr}/ws");
    let a = start_probe(&url, "a", 3, 6, dir.path().join("a.sklog")).await;
    let b = start_probe(&url, "b", 2, 6, dir.path().join("b.sklog")).await;
    tokio::time::timeout(LIMIT, clients.wait_for(|n| *n == 5))
        .await
        .unwrap()
        .unwrap();

    // A fixed text, as /start_test broadcasts on such servers, five times; then
    // one other message.
    let lorem = "Lorem ipsum dolor sit amet, ".repeat(16);
    for _ in 0..5 {
        broadcaster.send(lorem.clone()).unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    broadcaster.send("done".into()).unwrap();
    finish_all([a, b]).await;

    let r = report(
        read_inputs(&[dir.path().join("a.sklog"), dir.path().join("b.sklog")]).unwrap(),
        None,
    )
    .unwrap();
    assert_eq!(r.broadcasts, 6);
    assert_eq!(r.connections, 5);
    assert_eq!(r.receipts, 30);
    assert_eq!((r.missing, r.duplicates, r.unmatched), (0, 0, 0));
    assert_eq!(r.skew_ns.expect("skew from probes alone").count, 6);
    assert!(r.skew_ns.unwrap().max < 1_000_000_000);
    assert!(r.latency_ns.is_none() && r.fanout_ns.is_none());
    assert!(r.agent.is_none());
}
