//! A server the agent does not replace, tapped from its packets and joined
//! with probes: the report has the server's fan-out span, every receipt's
//! copy and the network time, as for the hub. In a user and network
//! namespace of the test's own (the capture needs CAP_NET_RAW there).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use agent::{AgentConfig, RunningAgent};
use collector::inputs::{Scope, read_inputs, report_within};
use futures_util::StreamExt;
use probe::{ProbeConfig, RunningProbe};
use skewscope_os::test_namespace::in_own_namespace;
use tokio::net::TcpListener;

const LIMIT: Duration = Duration::from_secs(20);

/// Waits for the probes to end by themselves, stops the agent, and
/// reports its log with theirs, the agent as clock reference.
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
    let inputs = read_inputs(&[log, dir.join("a.sklog"), dir.join("b.sklog")]).unwrap();
    let scope = Scope {
        window: None,
        agent_as_reference: true,
    };
    report_within(inputs, None, scope)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn a_tapped_servers_fan_out_joins_the_probes_receipts() {
    if in_own_namespace("a_tapped_servers_fan_out_joins_the_probes_receipts") {
        runtime().block_on(inside());
    }
}

/// The real thing: the FastAPI broadcaster of bench/peers (uvicorn, as
/// people run it), tapped, with probes.
#[test]
fn a_tapped_fastapi_server_joins_the_probes_receipts() {
    if in_own_namespace("a_tapped_fastapi_server_joins_the_probes_receipts") {
        runtime().block_on(fastapi());
    }
}

/// Kills uvicorn when the test ends, however it ends.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn fastapi() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let app = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/peers/fastapi");
    let _server = Server(
        Command::new("python3")
            .args(["-m", "uvicorn", "app:app", "--app-dir"])
            .arg(&app)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--log-level", "warning"])
            .spawn()
            .expect("python3 with uvicorn (./test installs it)"),
    );
    let server: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let deadline = std::time::Instant::now() + LIMIT;
    while agent::http_client::request(server, "GET", "/healthz", b"", None)
        .await
        .is_err()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "uvicorn did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let dir = tempfile::tempdir().unwrap();
    let mut config = AgentConfig::local(dir.path().join("agent"));
    config.tap_port = Some(port);
    config.tap_interface = Some("lo".into());
    let agent = RunningAgent::start(config).await.expect("the agent taps");
    let time = agent.time_addr.unwrap().to_string();
    let broadcasts = 5u64;
    let url = format!("ws://{server}/ws");
    let a = start_probe(&url, "a", 3, broadcasts, &time, &dir.path().join("a.sklog")).await;
    let b = start_probe(&url, "b", 2, broadcasts, &time, &dir.path().join("b.sklog")).await;
    // Two clients as Python's websockets library makes them: they offer
    // permessage-deflate, so uvicorn compresses every copy it sends them.
    let script = format!(
        "import asyncio, websockets\n\
         async def main():\n\
         \x20   async with websockets.connect('{url}') as ws:\n\
         \x20       h = ws.response.headers if hasattr(ws, 'response') else ws.response_headers\n\
         \x20       print('ext', h.get('Sec-WebSocket-Extensions'), flush=True)\n\
         \x20       for _ in range({broadcasts}):\n\
         \x20           await ws.recv()\n\
         \x20   print('done', flush=True)\n\
         asyncio.run(main())\n"
    );
    let mut browsers: Vec<Server> = (0..2)
        .map(|_| {
            Server(
                Command::new("python3")
                    .args(["-c", &script])
                    .stdout(std::process::Stdio::piped())
                    .spawn()
                    .unwrap(),
            )
        })
        .collect();
    let deadline = std::time::Instant::now() + LIMIT;
    loop {
        let r = agent::http_client::request(server, "GET", "/healthz", b"", None)
            .await
            .unwrap();
        if r.body.contains("\"clients\":7") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", r.body);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..broadcasts {
        let r = agent::http_client::request(server, "GET", "/start_test", b"", None)
            .await
            .unwrap();
        assert!(r.body.contains("\"clients\":7"), "{}", r.body);
    }
    for browser in &mut browsers {
        let mut said = String::new();
        std::io::Read::read_to_string(browser.0.stdout.as_mut().unwrap(), &mut said).unwrap();
        assert!(
            said.contains("permessage-deflate"),
            "the client negotiated it: {said}"
        );
        assert!(said.contains("done"), "{said}");
    }
    let r = finish_and_report([a, b], agent, dir.path()).await;
    assert_eq!(r.broadcasts, broadcasts);
    assert_eq!((r.receipts, r.missing), (5 * broadcasts, 0));
    assert_eq!(
        r.fanout_ns.expect("FastAPI's fan-out span").count,
        broadcasts
    );
    assert_eq!(
        r.network_ns.expect("network").estimate.count,
        5 * broadcasts
    );
    // The compressed copies inflate to the same payload: each broadcast is
    // one, to all seven clients.
    let tap = r.tap.expect("the tap's summary");
    assert_eq!((tap.broadcasts, tap.clients), (broadcasts, 7));
    let counters = tap.counters.expect("counters");
    assert_eq!(
        (counters.ring_drops, counters.tap.lost, counters.tap.broken),
        (0, 0, 0)
    );
    assert_eq!(counters.tap.messages, 7 * broadcasts);
    assert_eq!(
        (counters.tap.inflated, counters.tap.compressed),
        (2 * broadcasts, 0)
    );
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
    assert!(!tap.latest_clients.is_empty());
}
