//! `--protocol socketio|stomp|mqtt|sse` against the real servers people run,
//! each started by the test on loopback (./test installs them): a
//! python-socketio server under uvicorn, RabbitMQ with its Web-STOMP plugin,
//! Mosquitto with a WebSockets listener, and an SSE endpoint on Starlette.
//!
//! For each: two probe connections record every one of N broadcasts exactly
//! once, keyed alike on both (so the report joins the copies), act on the
//! payload's `/at`, and stay connected over a run longer than three of the
//! server's keep-alive periods (Socket.IO pings, STOMP heart-beats, MQTT
//! keep-alive; the SSE server's comments), with no reconnection. A server
//! that ends the session mid-run gives a clear reason, and what came before
//! is kept; an event stream that ends is resumed with Last-Event-ID.

mod common;
#[path = "protocols/servers.rs"]
mod servers;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use common::{assert_framed, closed, opened, read_probe_log, receipts};
use probe::config::Protocol;
use probe::{ProbeConfig, RunningProbe};
use servers::{
    EVERY_MS, LIMIT, N, http_get, mosquitto, mqtt_publish, python_server, rabbitmq, stomp_publish,
};
use skewscope_core::act_at::ActAt;
use skewscope_core::mqtt::MqttVersion;
use skewscope_core::record::ProbeRecord;

fn config(dir: &Path, url: String, protocol: Protocol) -> ProbeConfig {
    let mut config = ProbeConfig::new(url, dir.join("probe.sklog"));
    config.name = "proto".into();
    config.connections = 2;
    config.time_exchange = false;
    config.connect_timeout = Duration::from_secs(20);
    config.act_at = Some(ActAt::new("/at", "auto".parse().unwrap()).unwrap());
    config.protocol = protocol;
    config
}

/// Waits until the probe's log holds `n` receipts.
async fn wait_for_receipts(out: &Path, n: usize) {
    let poll = async {
        loop {
            if let Ok(skewscope_core::log::AnyLog::Probe(d)) =
                skewscope_os::log_files::read_file(out)
                && receipts(&d.records).len() >= n
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    if tokio::time::timeout(LIMIT, poll).await.is_err() {
        let got = skewscope_os::log_files::read_file(out)
            .ok()
            .and_then(|l| match l {
                skewscope_core::log::AnyLog::Probe(d) => Some(d.records),
                _ => None,
            })
            .unwrap_or_default();
        panic!(
            "{n} receipts not recorded within {LIMIT:?}: {} receipts, closes {:?}",
            receipts(&got).len(),
            closed(&got)
        );
    }
}

/// Starts the probe and waits for every connection to be subscribed.
async fn start(config: ProbeConfig) -> RunningProbe {
    let connections = config.connections;
    let probe = RunningProbe::start(config).await.expect("the probe starts");
    let attempts = tokio::time::timeout(LIMIT, probe.connected())
        .await
        .expect("connections settle");
    assert_eq!(attempts.opened, connections, "{attempts:?}");
    probe
}

/// Stops the probe and reads its log.
async fn stop(probe: RunningProbe, out: &Path) -> Vec<ProbeRecord> {
    probe.stop();
    let summary = tokio::time::timeout(LIMIT, probe.finish())
        .await
        .expect("the probe finishes")
        .expect("the run succeeds");
    assert_eq!(summary.failed, 0, "{summary}");
    let records = read_probe_log(out);
    assert_framed(&records);
    records
}

/// Every connection got `n` payloads once each, the same ones (keys and
/// hashes alike, so the report joins them), stamped by the kernel; every
/// one was acted on; no connection was lost or reopened.
fn assert_exactly_once(records: &[ProbeRecord], connections: u32, n: usize, opens: usize) {
    let got = receipts(records);
    let mut per_conn: BTreeMap<u32, Vec<_>> = BTreeMap::new();
    for r in &got {
        per_conn.entry(r.conn).or_default().push((r.key, r.hash));
    }
    assert_eq!(per_conn.len(), connections as usize, "{per_conn:?}");
    let first: BTreeSet<_> = per_conn[&0].iter().copied().collect();
    for (conn, keys) in &per_conn {
        assert_eq!(keys.len(), n, "connection {conn}: {} receipts", keys.len());
        let set: BTreeSet<_> = keys.iter().copied().collect();
        assert_eq!(set.len(), n, "connection {conn}: duplicates");
        assert_eq!(set, first, "connection {conn} got other messages");
    }
    let stamped = got.iter().filter(|r| r.kernel_delay_ns.is_some()).count();
    assert!(
        stamped * 10 >= got.len() * 9,
        "kernel stamps on {stamped} of {} receipts",
        got.len()
    );
    let acted: BTreeSet<_> = records
        .iter()
        .filter_map(|r| match r {
            ProbeRecord::Action(a) => Some((a.conn, a.key)),
            _ => None,
        })
        .collect();
    let received: BTreeSet<_> = got.iter().map(|r| (r.conn, r.key)).collect();
    assert_eq!(acted, received, "every receipt acted on, once");
    assert_eq!(opened(records).len(), opens, "connection openings");
    for c in closed(records) {
        assert_eq!(c.reason, "stopped", "connection {} closed early", c.conn);
    }
}

/// The first payload recorded is the first broadcast's own JSON: the
/// event's data, not the protocol's framing.
fn assert_first_payload(records: &[ProbeRecord]) {
    let said = payloads_of(records);
    assert!(
        said[0].replace(' ', "").starts_with("{\"n\":0,\"at\":"),
        "{said:?}"
    );
}

/// What the payloads said, in order, on connection 0.
fn payloads_of(records: &[ProbeRecord]) -> Vec<String> {
    let texts: BTreeMap<u64, String> = records
        .iter()
        .filter_map(|r| match r {
            ProbeRecord::Payload(p) => {
                Some((p.hash, String::from_utf8_lossy(&p.excerpt).into_owned()))
            }
            _ => None,
        })
        .collect();
    receipts(records)
        .iter()
        .filter(|r| r.conn == 0)
        .map(|r| texts[&r.hash].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socketio_events_once_each_acted_on_across_ping_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    // Pings every second, to be answered within a second.
    let (_server, port) = python_server("socketio_server.py", &["1"]);
    let config = config(
        dir.path(),
        format!("ws://127.0.0.1:{port}"),
        Protocol::SocketIo {
            namespace: "/".into(),
            events: vec!["show".into()],
        },
    );
    let out = config.out.clone();
    let probe = start(config).await;
    http_get(
        port,
        &format!("/emit?count={N}&every_ms={EVERY_MS}&lead_ms=300"),
    );
    wait_for_receipts(&out, 2 * N).await;
    let stats = http_get(port, "/stats");
    assert!(
        stats.contains("\"connected\": 2") && stats.contains("\"disconnects\": 0"),
        "the server dropped the probe: {stats}"
    );
    let records = stop(probe, &out).await;
    assert_exactly_once(&records, 2, N, 2);
    // The payload is the event's argument, not the Socket.IO framing.
    assert_first_payload(&records);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socketio_a_server_that_ends_the_session_is_said_and_what_came_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = python_server("socketio_server.py", &["5"]);
    let mut config = config(
        dir.path(),
        format!("ws://127.0.0.1:{port}/socket.io/"),
        Protocol::SocketIo {
            namespace: "/".into(),
            events: Vec::new(),
        },
    );
    config.connections = 1;
    config.act_at = None;
    let out = config.out.clone();
    let probe = start(config).await;
    http_get(port, "/emit?count=3&every_ms=0");
    // Every event, "noise" too: 6.
    wait_for_receipts(&out, 6).await;
    http_get(port, "/kick");
    let summary = tokio::time::timeout(LIMIT, probe.finish())
        .await
        .expect("the run ends when its one connection does")
        .expect("the run succeeds");
    assert_eq!(summary.receipts, 6);
    let records = read_probe_log(&out);
    let reasons: Vec<String> = closed(&records).into_iter().map(|c| c.reason).collect();
    assert_eq!(
        reasons,
        vec!["Socket.IO: the server disconnected the namespace /".to_owned()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_events_by_type_once_each_resumed_with_last_event_id() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = python_server("sse_server.py", &[]);
    let mut config = config(
        dir.path(),
        format!("http://127.0.0.1:{port}/events"),
        Protocol::Sse {
            events: vec!["show".into()],
        },
    );
    config.reconnect = true;
    let out = config.out.clone();
    let probe = start(config).await;
    let half = N / 2;
    http_get(
        port,
        &format!("/emit?count={half}&every_ms={EVERY_MS}&lead_ms=300"),
    );
    wait_for_receipts(&out, 2 * half).await;
    // The server ends both streams; what it sends until they are back
    // comes with the reconnection, after the last event id each had.
    http_get(port, "/drop");
    http_get(
        port,
        &format!("/emit?count={half}&every_ms={EVERY_MS}&lead_ms=300"),
    );
    wait_for_receipts(&out, 2 * N).await;
    let stats = http_get(port, "/stats");
    let last = 2 * half; // "other" and "show" each take an id
    assert!(
        stats.contains(&format!(
            "\"last_event_ids\":[null,null,\"{last}\",\"{last}\"]"
        )),
        "the reconnections did not say where they were: {stats}"
    );
    let records = stop(probe, &out).await;
    let records: Vec<ProbeRecord> = records
        .into_iter()
        .filter(|r| {
            !matches!(r, ProbeRecord::ConnectionClosed(c) if c.reason == "the server ended the event stream")
        })
        .collect();
    assert_exactly_once(&records, 2, N, 4);
    assert_first_payload(&records);
}

async fn mqtt_run(version: MqttVersion, qos: u8) {
    let dir = tempfile::tempdir().unwrap();
    let (_broker, ws, tcp) = mosquitto(dir.path());
    let config = config(
        dir.path(),
        format!("ws://127.0.0.1:{ws}/mqtt"),
        Protocol::Mqtt {
            version,
            topics: vec!["show/#".into()],
            qos,
            // Mosquitto drops a client silent for 1.5 s: only PINGREQs
            // keep a QoS 0 subscriber, which sends nothing else, alive.
            keep_alive: Duration::from_secs(1),
            username: None,
            password: None,
        },
    );
    let out = config.out.clone();
    let probe = start(config).await;
    let publisher = mqtt_publish(tcp, "show/lobby", qos);
    wait_for_receipts(&out, 2 * N).await;
    publisher.join().unwrap();
    let records = stop(probe, &out).await;
    assert_exactly_once(&records, 2, N, 2);
    assert_first_payload(&records);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_3_1_1_qos_1_once_each_acknowledged_across_keep_alives() {
    mqtt_run(MqttVersion::V311, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mqtt_5_qos_0_once_each_across_keep_alives() {
    mqtt_run(MqttVersion::V5, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_messages_once_each_across_heart_beats() {
    let dir = tempfile::tempdir().unwrap();
    let (_broker, web, stomp, _took) = rabbitmq(dir.path());
    let config = config(
        dir.path(),
        format!("ws://127.0.0.1:{web}/ws"),
        Protocol::Stomp {
            destination: "/topic/show".into(),
            login: Some("guest".into()),
            passcode: Some("guest".into()),
            headers: vec![("host".into(), "/".into())],
            // RabbitMQ closes a client that misses two heart-beats.
            heart_beat: Duration::from_secs(1),
        },
    );
    let out = config.out.clone();
    let probe = start(config).await;
    let publisher = stomp_publish(stomp, "/topic/show");
    wait_for_receipts(&out, 2 * N).await;
    publisher.join().unwrap();
    let records = stop(probe, &out).await;
    assert_exactly_once(&records, 2, N, 2);
    assert_first_payload(&records);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stomp_a_refused_login_is_said() {
    let dir = tempfile::tempdir().unwrap();
    let (_broker, web, _stomp, _took) = rabbitmq(dir.path());
    let mut config = config(
        dir.path(),
        format!("ws://127.0.0.1:{web}/ws"),
        Protocol::Stomp {
            destination: "/topic/show".into(),
            login: Some("guest".into()),
            passcode: Some("wrong".into()),
            headers: Vec::new(),
            heart_beat: Duration::ZERO,
        },
    );
    config.connections = 1;
    let err = RunningProbe::start(config)
        .await
        .unwrap()
        .finish()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("STOMP: the broker sent ERROR"), "{err}");
}
