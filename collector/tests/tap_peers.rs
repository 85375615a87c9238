//! The tap beside the servers people run: the Go (gorilla/websocket) and
//! FastAPI (uvicorn) broadcasters of bench/peers, unmodified, each with 100
//! probe connections and 50 plain clients (Python's websockets library, which
//! offers permessage-deflate as browsers do), 20 broadcasts through the
//! server's own `/start_test`. Once on loopback, once over a veth link to a
//! second network namespace where the clients live. The report must have the
//! server's fan-out span and a send position for all 150 clients, the
//! latency split for every probe receipt, each receipt joined to its tapped
//! copy, and no copy reaching a device before it left the server beyond the
//! clocks' bounds.
//!
//! Each test runs in a user and network namespace of its own (the capture
//! needs CAP_NET_RAW there). `./test` installs Go, gorilla/websocket and the
//! Python packages.

mod common;

use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use agent::{AgentConfig, RunningAgent};
use collector::inputs::read_inputs;
use collector::joined::{Scope, report_within};
use common::runtime;
use probe::{ProbeConfig, RunningProbe};
use skewscope_os::test_namespace::{
    PEER_ADDR, PeerNamespace, SERVER_ADDR, SERVER_LINK, in_own_namespace,
};

const LIMIT: Duration = Duration::from_secs(60);
const BROADCASTS: u64 = 20;
/// Two probes of this many connections each.
const PER_PROBE: u32 = 50;
const PLAIN: u64 = 50;
const CLIENTS: u64 = 2 * PER_PROBE as u64 + PLAIN;

#[derive(Clone, Copy)]
enum Peer {
    Go,
    FastApi,
}

#[test]
fn go_on_loopback() {
    if in_own_namespace("go_on_loopback") {
        audit(Peer::Go, false);
    }
}

#[test]
fn go_over_a_link() {
    if in_own_namespace("go_over_a_link") {
        audit(Peer::Go, true);
    }
}

#[test]
fn fastapi_on_loopback() {
    if in_own_namespace("fastapi_on_loopback") {
        audit(Peer::FastApi, false);
    }
}

#[test]
fn fastapi_over_a_link() {
    if in_own_namespace("fastapi_over_a_link") {
        audit(Peer::FastApi, true);
    }
}

/// Kills a process when the test ends, however it ends.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn peers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/peers")
}

fn free_port(host: [u8; 4]) -> u16 {
    std::net::TcpListener::bind(SocketAddr::from((host, 0)))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_server(peer: Peer, host: [u8; 4]) -> (Process, SocketAddr) {
    let port = free_port(host);
    let addr = SocketAddr::from((host, port));
    let child = match peer {
        Peer::Go => Command::new(common::go_peer_binary())
            .args(["-listen", &addr.to_string()])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
        Peer::FastApi => Command::new("python3")
            .args(["-m", "uvicorn", "app:app", "--app-dir"])
            .arg(peers().join("fastapi"))
            .args([
                "--host",
                &addr.ip().to_string(),
                "--port",
                &port.to_string(),
            ])
            .args(["--log-level", "warning"])
            .spawn()
            .expect("python3 with uvicorn (./test installs it)"),
    };
    (Process(child), addr)
}

/// `/healthz` until the server says `clients`.
async fn until_clients(server: SocketAddr, clients: u64) {
    let want = format!("\"clients\":{clients}");
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Ok(r) = agent::http_client::request(server, "GET", "/healthz", b"", None).await
            && r.body.replace(' ', "").contains(&want)
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{server} never had {clients} clients"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What the clients' side did: the probes' logs, and what the plain
/// clients said (which extension they negotiated; that they got every
/// message).
struct Clients {
    logs: Vec<PathBuf>,
    said: String,
}

/// The probes and the plain clients, from start to their last message.
fn clients(url: String, time: String, dir: PathBuf) -> Clients {
    let script = format!(
        "import asyncio, websockets\n\
         async def one(i):\n\
         \x20   async with websockets.connect('{url}') as ws:\n\
         \x20       if i == 0:\n\
         \x20           h = ws.response.headers if hasattr(ws, 'response') else ws.response_headers\n\
         \x20           print('ext', h.get('Sec-WebSocket-Extensions'), flush=True)\n\
         \x20       for _ in range({BROADCASTS}):\n\
         \x20           await ws.recv()\n\
         async def main():\n\
         \x20   await asyncio.gather(*(one(i) for i in range({PLAIN})))\n\
         \x20   print('done', flush=True)\n\
         asyncio.run(main())\n"
    );
    let mut plain = Process(
        Command::new("python3")
            .args(["-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 with websockets"),
    );
    let logs: Vec<PathBuf> = ["a", "b"]
        .iter()
        .map(|n| dir.join(format!("{n}.sklog")))
        .collect();
    runtime().block_on(async {
        let mut probes = Vec::new();
        for (name, out) in ["a", "b"].iter().zip(&logs) {
            let mut config = ProbeConfig::new(&url, out);
            config.connections = PER_PROBE;
            config.name = (*name).into();
            config.count = Some(BROADCASTS);
            config.time_server = Some(time.clone());
            let probe = RunningProbe::start(config).await.unwrap();
            assert_eq!(probe.connected().await.opened, PER_PROBE);
            probes.push(probe);
        }
        for p in probes {
            tokio::time::timeout(LIMIT, p.finish())
                .await
                .expect("the probe got every broadcast")
                .expect("probe log");
        }
    });
    let mut said = String::new();
    plain
        .0
        .stdout
        .as_mut()
        .unwrap()
        .read_to_string(&mut said)
        .unwrap();
    Clients { logs, said }
}

fn audit(peer: Peer, over_a_link: bool) {
    let (host, link, pair) = if over_a_link {
        let pair = PeerNamespace::create().expect("a namespace pair");
        (SERVER_ADDR, SERVER_LINK, Some(pair))
    } else {
        ([127, 0, 0, 1], "lo", None)
    };
    let (_server, server) = start_server(peer, host);
    let rt = runtime();
    rt.block_on(until_clients(server, 0));

    let dir = tempfile::tempdir().unwrap();
    let mut config = AgentConfig::local(dir.path().join("agent"));
    config.listen = SocketAddr::from((host, 0));
    config.tap_port = Some(server.port());
    config.tap_interface = Some(link.into());
    let agent = rt
        .block_on(RunningAgent::start(config))
        .expect("the agent taps");
    let time = agent.time_addr.unwrap().to_string();
    let url = format!("ws://{server}/ws");
    let work = dir.path().to_path_buf();
    let run = move || clients(url, time, work);
    let clients = match &pair {
        Some(pair) => pair.run(run).unwrap(),
        None => std::thread::spawn(run),
    };
    rt.block_on(async {
        until_clients(server, CLIENTS).await;
        for _ in 0..BROADCASTS {
            let r = agent::http_client::request(server, "GET", "/start_test", b"", None)
                .await
                .unwrap();
            assert!(
                r.body
                    .replace(' ', "")
                    .contains(&format!("\"clients\":{CLIENTS}")),
                "{}",
                r.body
            );
        }
    });
    let clients = clients.join().expect("the clients ran");
    assert!(clients.said.contains("done"), "{}", clients.said);
    if matches!(peer, Peer::FastApi) {
        assert!(
            clients.said.contains("permessage-deflate"),
            "uvicorn compresses for these clients: {}",
            clients.said
        );
    }
    let log = agent.log_path.clone();
    rt.block_on(agent.shutdown()).unwrap();

    let mut inputs = vec![log];
    inputs.extend(clients.logs);
    let inputs = read_inputs(&inputs).unwrap();
    let scope = Scope {
        window: None,
        agent_as_reference: true,
    };
    let r = report_within(inputs, None, scope).unwrap();
    // Asked for, and a tap of the probes' server: the tap is the reference.
    assert_eq!(
        r.reference.as_ref().map(|r| r.kind),
        Some(skewscope_core::analysis::report::ReferenceKind::Tap)
    );
    let receipts = 2 * u64::from(PER_PROBE) * BROADCASTS;
    assert_eq!(r.broadcasts, BROADCASTS);
    assert_eq!((r.receipts, r.missing), (receipts, 0));
    // The server's side, from its packets.
    assert_eq!(r.fanout_ns.expect("fan-out span").count, BROADCASTS);
    assert_eq!(
        r.fanout_position_ns.expect("positions").count,
        receipts,
        "every probe receipt joined to its tapped copy"
    );
    assert_eq!(r.latency_ns.expect("latency").count, receipts);
    assert_eq!(r.delivery_ns.expect("delivery").count, receipts);
    let network = r.network_ns.expect("copy on the wire -> device kernel");
    assert_eq!(network.estimate.count, receipts);
    // One clock on either side of the link: no copy is received before it
    // left, beyond the bounds (each interval's upper end is >= 0).
    assert!(network.hi.min >= 0, "{network:?}");

    // Every client's place in the send order, probes or not.
    let tap = r.tap.expect("the tap's summary");
    assert_eq!((tap.broadcasts, tap.clients), (BROADCASTS, CLIENTS));
    assert_eq!(tap.per_client.len() as u64, CLIENTS);
    let client_host = if over_a_link { PEER_ADDR } else { host };
    let client_ip = std::net::Ipv4Addr::from(client_host).to_string();
    for c in &tap.per_client {
        assert_eq!(c.copies, BROADCASTS, "{c:?}");
        assert!(c.mean_position.is_some(), "{c:?}");
        assert!(c.client.starts_with(&format!("{client_ip}:")), "{c:?}");
    }
    let counters = tap.counters.expect("the tap's counters");
    // The triggers and health checks went to the same port from this host:
    // on loopback they are plain HTTP, recognised and skipped; a tap of the
    // link never sees them.
    if over_a_link {
        assert_eq!(counters.tap.not_websocket, 0, "{counters:?}");
    } else {
        assert!(counters.tap.not_websocket >= BROADCASTS, "{counters:?}");
    }
    assert_eq!(
        (
            counters.tap.followed - counters.tap.not_websocket,
            counters.ring_drops,
            counters.tap.lost,
            counters.tap.broken
        ),
        (CLIENTS, 0, 0, 0)
    );
    assert_eq!(counters.tap.messages, CLIENTS * BROADCASTS);
    // uvicorn compresses for every client that offers permessage-deflate:
    // the plain Python clients and the probes, which offer it as browsers do.
    let inflated = match peer {
        Peer::Go => 0,
        Peer::FastApi => CLIENTS * BROADCASTS,
    };
    assert_eq!(
        (counters.tap.inflated, counters.tap.compressed),
        (inflated, 0)
    );
}
