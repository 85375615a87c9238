//! The tap's join of a real server's fan-out when the server speaks a
//! protocol on its WebSockets, or sends an event stream: the servers of
//! probe/tests/protocols.rs (python-socketio under uvicorn, RabbitMQ with
//! Web-STOMP, Mosquitto with a WebSockets listener, Starlette's SSE), each
//! tapped by the agent with `--tap-protocol auto` while a probe speaking
//! its protocol receives N broadcasts on two connections.
//!
//! The tap reads each connection as what it says it is (the 101's
//! subprotocol, Socket.IO's open packet, the event stream's Content-Type)
//! and takes the same payloads the probe records, so the report, with no
//! flag, joins every receipt to its tapped copy exactly once: N broadcasts
//! (not 2N: the probe's and the tap's are one), each with a fan-out span,
//! every receipt with its copy's position, latency and network time, none
//! missing, none left over. The protocols' own traffic (Engine.IO pings,
//! STOMP heart-beats and receipts, CONNACK, SUBACK, SSE comments) over a
//! run longer than three keep-alive periods is never a message, and events
//! the probe is told not to record (`--event show`; the servers send
//! "noise" or "other" ones beside each) are not taken by the tap either
//! (`--tap-event show`). Beside the Socket.IO probe, a client as browsers
//! run one (long-polling, then upgraded to a WebSocket that begins with
//! "3probe") is read as Socket.IO too, and gets a copy of every broadcast.
//!
//! Each runs in a user and network namespace of its own (the capture needs
//! CAP_NET_RAW there); every server listens on its loopback only.

#[path = "../../probe/tests/protocols/servers.rs"]
mod servers;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{ChildStdout, Command, Stdio};
use std::time::Duration;

use agent::{AgentConfig, RunningAgent};
use collector::inputs::read_inputs;
use collector::joined::{Scope, report_within};
use probe::config::Protocol;
use probe::{ProbeConfig, RunningProbe};
use servers::{
    EVERY_MS, LIMIT, N, Server, http_get, mosquitto, mqtt_publish, python_server, rabbitmq, script,
    stomp_publish,
};
use skewscope_core::analysis::report::ReferenceKind;
use skewscope_core::log::AnyLog;
use skewscope_core::mqtt::MqttVersion;
use skewscope_core::record::AgentRecord;
use skewscope_os::test_namespace::run_in_own_namespace;

/// Probe connections: each gets every broadcast.
const CONNECTIONS: u32 = 2;

/// One tapped run: what the probe is given, and what the tap takes.
struct Run {
    /// The server's port: the one tapped.
    port: u16,
    url: String,
    protocol: Protocol,
    /// `--tap-event`.
    tap_events: Vec<String>,
    /// What the tap records each connection as.
    read_as: &'static str,
    /// Clients of the server besides the probe's connections, which
    /// `trigger` starts: the tap sees them, the probe does not.
    others: u64,
}

/// Taps `run`'s server, runs the probe through the N broadcasts `trigger`
/// starts, and checks the report the agent's and the probe's logs make.
async fn tapped(dir: &Path, run: Run, trigger: impl FnOnce()) {
    let mut config = AgentConfig::local(dir.join("agent"));
    config.tap_port = Some(run.port);
    config.tap_interface = Some("lo".into());
    config.tap_event = run.tap_events;
    let agent = RunningAgent::start(config).await.expect("the agent taps");

    let out = dir.join("probe.sklog");
    let mut probe = ProbeConfig::new(run.url, &out);
    probe.name = "tapped".into();
    probe.connections = CONNECTIONS;
    probe.count = Some(N as u64);
    probe.connect_timeout = Duration::from_secs(20);
    probe.time_server = Some(agent.time_addr.expect("the time port").to_string());
    probe.protocol = run.protocol;
    let probe = RunningProbe::start(probe).await.expect("the probe starts");
    let attempts = tokio::time::timeout(LIMIT, probe.connected())
        .await
        .expect("the probe's connections subscribe");
    assert_eq!(attempts.opened, CONNECTIONS, "{attempts:?}");
    trigger();
    // Each connection ends by itself after its N-th payload.
    let summary = tokio::time::timeout(LIMIT, probe.finish())
        .await
        .expect("every broadcast received")
        .expect("the probe's run");
    assert_eq!(summary.receipts, u64::from(CONNECTIONS) * N as u64);
    let log = agent.log_path.clone();
    agent.shutdown().await.unwrap();

    let clients = u64::from(CONNECTIONS) + run.others;
    opened_as(&log, run.read_as, clients);
    let r = report_within(read_inputs(&[log, out]).unwrap(), None, Scope::default()).unwrap();
    let n = N as u64;
    let receipts = u64::from(CONNECTIONS) * n;
    // No flag: the agent tapped the port the probe reached.
    let reference = r.reference.as_ref().expect("the reference used");
    assert_eq!(reference.kind, ReferenceKind::Tap, "{reference:?}");
    // One broadcast per payload, the probe's receipts and the tap's copies
    // joined: a receipt without its copy would be a broadcast of its own.
    assert_eq!(r.broadcasts, n);
    assert_eq!(
        (
            r.receipts,
            r.missing,
            r.duplicates,
            r.unmatched,
            r.reconnects
        ),
        (receipts, 0, 0, 0, 0)
    );
    assert_eq!(r.fanout_ns.expect("the tapped fan-out span").count, n);
    assert_eq!(
        r.fanout_position_ns.expect("positions").count,
        receipts,
        "every receipt joined to its tapped copy"
    );
    assert_eq!(r.latency_ns.expect("latency").count, receipts);
    let network = r.network_ns.expect("copy on the wire -> device kernel");
    assert_eq!(network.estimate.count, receipts);
    // One clock: no copy reaches the probe before it left the server,
    // beyond the bounds.
    assert!(network.hi.min >= 0, "{network:?}");
    // The tap's own view: N broadcasts to every client, a copy each, and
    // nothing else taken as a message.
    let tap = r.tap.expect("the tap's summary");
    assert_eq!((tap.broadcasts, tap.clients), (n, clients));
    assert!(tap.per_client.iter().all(|c| c.copies == n), "{tap:?}");
    let counters = tap.counters.expect("the tap's counters");
    assert_eq!(
        (
            counters.tap.messages,
            counters.tap.broken,
            counters.tap.lost,
            counters.ring_drops
        ),
        (clients * n, 0, 0, 0),
        "only the payloads are messages; nothing broke or was dropped"
    );
}

/// The agent's log records its `clients` tapped connections as read as
/// `protocol`.
fn opened_as(log: &Path, protocol: &str, clients: u64) {
    let Ok(AnyLog::Agent(log)) = skewscope_os::log_files::read_file(log) else {
        panic!("the agent's log");
    };
    let details: Vec<String> = log
        .records
        .iter()
        .filter_map(|r| match r {
            AgentRecord::TapConnectionOpened(o) => Some(o.detail.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(details.len() as u64, clients, "{details:?}");
    assert!(
        details.iter().all(|d| d.starts_with(protocol)),
        "read as {protocol}: {details:?}"
    );
}

async fn socketio_inside() {
    let dir = tempfile::tempdir().unwrap();
    // Pings every second, to be answered within a second.
    let (_server, port) = python_server("socketio_server.py", &["1"]);
    let run = Run {
        port,
        url: format!("ws://127.0.0.1:{port}"),
        protocol: Protocol::SocketIo {
            namespace: "/".into(),
            events: vec!["show".into()],
        },
        tap_events: vec!["show".into()],
        read_as: "Socket.IO",
        // A client as browsers run one: long-polling first, then upgraded
        // to a WebSocket whose first message is "3probe".
        others: 1,
    };
    let mut browser = None;
    tapped(dir.path(), run, || {
        browser = Some(upgrading_client(port));
        http_get(
            port,
            &format!("/emit?count={N}&every_ms={EVERY_MS}&lead_ms=300"),
        );
    })
    .await;
    let (mut browser, mut said) = browser.unwrap();
    let mut line = String::new();
    said.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "done", "the upgraded client got every show");
    assert!(browser.child.wait().unwrap().success());
}

/// Starts servers/socketio_upgrading_client.py against `port` and waits
/// until its WebSocket is upgraded; the process, and what it says next.
fn upgrading_client(port: u16) -> (Server, BufReader<ChildStdout>) {
    let mut child = Command::new("python3")
        .arg(script("socketio_upgrading_client.py"))
        .args([port.to_string(), N.to_string()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 with websockets");
    let mut said = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    // The script bounds each of its waits.
    said.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "upgraded", "the client's upgrade");
    (Server { child, after: None }, said)
}

#[test]
fn socketio_events_tapped_join_the_probes_receipts() {
    run_in_own_namespace(
        "socketio_events_tapped_join_the_probes_receipts",
        socketio_inside,
    );
}

async fn stomp_inside() {
    let dir = tempfile::tempdir().unwrap();
    let (_broker, web, stomp, _took) = rabbitmq(dir.path());
    let run = Run {
        port: web,
        url: format!("ws://127.0.0.1:{web}/ws"),
        protocol: Protocol::Stomp {
            destination: "/topic/show".into(),
            login: Some("guest".into()),
            passcode: Some("guest".into()),
            headers: vec![("host".into(), "/".into())],
            // RabbitMQ closes a client that misses two heart-beats.
            heart_beat: Duration::from_secs(1),
        },
        tap_events: Vec::new(),
        read_as: "STOMP",
        others: 0,
    };
    let mut publisher = None;
    tapped(dir.path(), run, || {
        publisher = Some(stomp_publish(stomp, "/topic/show"));
    })
    .await;
    publisher.unwrap().join().unwrap();
}

#[test]
fn stomp_messages_tapped_join_the_probes_receipts() {
    run_in_own_namespace(
        "stomp_messages_tapped_join_the_probes_receipts",
        stomp_inside,
    );
}

async fn mqtt_inside() {
    let dir = tempfile::tempdir().unwrap();
    let (_broker, ws, tcp) = mosquitto(dir.path());
    let run = Run {
        port: ws,
        url: format!("ws://127.0.0.1:{ws}/mqtt"),
        // MQTT 5: the tap learns the version from the CONNACK, and reads
        // each PUBLISH's properties before its payload.
        protocol: Protocol::Mqtt {
            version: MqttVersion::V5,
            topics: vec!["show/#".into()],
            qos: 1,
            keep_alive: Duration::from_secs(1),
            username: None,
            password: None,
        },
        tap_events: Vec::new(),
        read_as: "MQTT",
        others: 0,
    };
    let mut publisher = None;
    tapped(dir.path(), run, || {
        publisher = Some(mqtt_publish(tcp, "show/lobby", 1));
    })
    .await;
    publisher.unwrap().join().unwrap();
}

#[test]
fn mqtt_publishes_tapped_join_the_probes_receipts() {
    run_in_own_namespace(
        "mqtt_publishes_tapped_join_the_probes_receipts",
        mqtt_inside,
    );
}

async fn sse_inside() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = python_server("sse_server.py", &[]);
    let run = Run {
        port,
        url: format!("http://127.0.0.1:{port}/events"),
        protocol: Protocol::Sse {
            events: vec!["show".into()],
        },
        tap_events: vec!["show".into()],
        read_as: "SSE",
        others: 0,
    };
    tapped(dir.path(), run, || {
        http_get(
            port,
            &format!("/emit?count={N}&every_ms={EVERY_MS}&lead_ms=300"),
        );
    })
    .await;
}

#[test]
fn sse_events_tapped_join_the_probes_receipts() {
    run_in_own_namespace("sse_events_tapped_join_the_probes_receipts", sse_inside);
}
