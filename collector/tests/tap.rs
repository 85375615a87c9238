//! A server the agent does not replace, tapped from its packets and joined
//! with probes: the report has the server's fan-out span, every receipt's
//! copy and the network time, as for the hub. In a user and network
//! namespace of the test's own (the capture needs CAP_NET_RAW there). The
//! real servers people run (Go, FastAPI) are in `tap_peers.rs`.

mod common;

use std::path::Path;
use std::time::Duration;

use agent::{AgentConfig, RunningAgent};
use collector::inputs::{expand, read_inputs};
use collector::joined::{Scope, report_within};
use futures_util::StreamExt;
use probe::{ProbeConfig, RunningProbe};
use skewscope_core::analysis::report::ReferenceKind;
use skewscope_os::test_namespace::run_in_own_namespace;
use tokio::net::TcpListener;

const LIMIT: Duration = Duration::from_secs(20);

/// Waits for the probes to end by themselves, stops the agent, copies its
/// log and theirs elsewhere (as an operator copies them off the server and
/// the devices) and reports them with no flag: the report infers that the
/// agent tapped the probes' server.
async fn finish_and_report(
    probes: [RunningProbe; 2],
    agent: RunningAgent,
    dir: &Path,
) -> skewscope_core::analysis::report::Report {
    for p in probes {
        tokio::time::timeout(LIMIT, p.finish())
            .await
            .expect("probe ends")
            .expect("probe log");
    }
    let log = agent.log_path.clone();
    agent.shutdown().await.unwrap();
    let copies = dir.join("copied");
    std::fs::create_dir(&copies).unwrap();
    for from in [log, dir.join("a.sklog"), dir.join("b.sklog")] {
        std::fs::copy(&from, copies.join(from.file_name().unwrap())).unwrap();
    }
    let files = expand(&[copies]).unwrap().files;
    report_within(read_inputs(&files).unwrap(), None, Scope::default()).unwrap()
}

#[test]
fn a_tapped_servers_fan_out_joins_the_probes_receipts() {
    run_in_own_namespace("a_tapped_servers_fan_out_joins_the_probes_receipts", inside);
}

async fn start_probe(
    url: &str,
    name: &str,
    conns: u32,
    count: u64,
    time: &str,
    out: &Path,
) -> RunningProbe {
    let mut config = ProbeConfig::new(url, out);
    config.connections = conns;
    config.name = name.into();
    config.count = Some(count);
    config.time_server = Some(time.into());
    let probe = RunningProbe::start(config).await.unwrap();
    assert_eq!(probe.connected().await.opened, conns);
    probe
}

async fn inside() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    let sender = common::broadcaster::serve(listener);

    let dir = tempfile::tempdir().unwrap();
    let mut config = AgentConfig::local(dir.path().join("agent"));
    config.tap_port = Some(server.port());
    config.tap_interface = Some("lo".into());
    let agent = RunningAgent::start(config).await.expect("the agent taps");
    let time = agent.time_addr.unwrap().to_string();

    let broadcasts = 6u64;
    let url = format!("ws://{server}/ws");
    let a = start_probe(&url, "a", 3, broadcasts, &time, &dir.path().join("a.sklog")).await;
    let b = start_probe(&url, "b", 2, broadcasts, &time, &dir.path().join("b.sklog")).await;
    // Two plain clients too: the tap sees them, the probes do not.
    let mut plain = Vec::new();
    for _ in 0..2 {
        plain.push(
            tokio_tungstenite::connect_async(url.as_str())
                .await
                .unwrap()
                .0,
        );
    }
    while sender.receiver_count() < 7 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let lorem = "Lorem ipsum dolor sit amet, ".repeat(16);
    for i in 0..broadcasts {
        sender.send(format!("{lorem}{i}")).unwrap();
        for ws in &mut plain {
            tokio::time::timeout(LIMIT, ws.next()).await.unwrap();
        }
    }
    let r = finish_and_report([a, b], agent, dir.path()).await;
    // No flag: the reference is inferred, and said.
    let reference = r.reference.clone().expect("the reference used");
    assert_eq!(reference.kind, ReferenceKind::Tap, "{reference:?}");
    assert!(
        reference
            .why
            .contains(&format!("the agent tapped port {}", server.port())),
        "{reference:?}"
    );
    assert!(
        collector::table::render(&r).contains("reference: the agent's tap ("),
        "{}",
        collector::table::render(&r)
    );
    assert_eq!(r.broadcasts, broadcasts);
    assert_eq!(r.receipts, 5 * broadcasts);
    assert_eq!(r.missing, 0);
    // The server's side, from its packets: a span per broadcast, and every
    // receipt's copy found (its position and its network time).
    let fanout = r.fanout_ns.expect("the tapped fan-out span");
    assert_eq!(fanout.count, broadcasts);
    assert_eq!(
        r.fanout_position_ns.expect("positions").count,
        5 * broadcasts
    );
    let latency = r
        .latency_ns
        .expect("latency from the first byte on the wire");
    assert_eq!(latency.count, 5 * broadcasts);
    let network = r.network_ns.expect("copy on the wire -> device kernel");
    assert_eq!(network.estimate.count, 5 * broadcasts);
    // One clock here: no copy reaches a device before it left the server,
    // beyond the offset bounds (the upper bound of each interval is >= 0).
    assert!(network.hi.min >= 0, "{network:?}");
    // The tap's own view covers the plain clients too.
    let tap = r.tap.expect("the tap's summary");
    assert_eq!((tap.broadcasts, tap.clients), (broadcasts, 7));
    let counters = tap.counters.expect("the tap's counters");
    assert_eq!(
        (
            counters.tap.followed,
            counters.ring_drops,
            counters.tap.lost
        ),
        (7, 0, 0)
    );
    assert_eq!(tap.per_client.len(), 7);
    assert!(
        tap.per_client
            .iter()
            .all(|c| c.copies == broadcasts && c.mean_position.is_some()),
        "{:?}",
        tap.per_client
    );
}
