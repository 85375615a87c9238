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

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{assert_framed, closed, opened, read_probe_log, receipts};
use probe::config::Protocol;
use probe::{ProbeConfig, RunningProbe};
use skewscope_core::act_at::ActAt;
use skewscope_core::mqtt::MqttVersion;
use skewscope_core::record::ProbeRecord;

/// Bound on any one wait here: a broker's start included.
const LIMIT: Duration = Duration::from_secs(60);

/// Broadcasts per run, and their spacing: 12 × 300 ms outlasts three
/// keep-alive periods of 1 s.
const N: usize = 12;
const EVERY_MS: u64 = 300;

/// A process the test started, ended (by its id) when dropped.
struct Server {
    child: Child,
    /// Run when the process has ended (epmd's own stop, for RabbitMQ).
    after: Option<Box<dyn FnOnce()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGTERM first: brokers stop cleanly on it.
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(after) = self.after.take() {
            after();
        }
    }
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/protocols")
        .join(name)
}

/// Starts a helper script that prints its port first.
fn python_server(name: &str, args: &[&str]) -> (Server, u16) {
    let mut child = Command::new("python3")
        .arg(script(name))
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 (./test installs python-socketio, uvicorn and starlette)");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("the server prints its port");
    let port = line.trim().parse().unwrap_or_else(|_| {
        panic!("{name} printed {line:?}, not its port (is python-socketio installed?)")
    });
    (Server { child, after: None }, port)
}

/// A port free on loopback now, for a server that cannot be given port 0.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Waits until `port` accepts connections (a broker started), at most [`LIMIT`].
fn wait_for_port(port: u16, what: &str, server: &mut Server) -> Duration {
    let start = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!("{what} exited ({status}) before listening on {port}");
        }
        assert!(
            start.elapsed() < LIMIT,
            "{what} not listening on {port} within {LIMIT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

/// A GET on loopback; the body.
fn http_get(port: u16, target: &str) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("the helper server");
    stream.set_read_timeout(Some(LIMIT)).unwrap();
    write!(
        stream,
        "GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    body.to_owned()
}

/// A broadcast's payload, as the publishers here send it: its number and a
/// time to act 300 ms ahead, in seconds (as `time.time()` gives it).
fn payload(n: usize) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    format!("{{\"n\":{n},\"at\":{:.6}}}", now.as_secs_f64() + 0.3)
}

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

/// Mosquitto on a free port with a WebSockets listener, and a plain MQTT
/// one for the test's publisher; returns it, the WebSocket port and the
/// plain one.
fn mosquitto(dir: &Path) -> (Server, u16, u16) {
    let (ws, tcp) = (free_port(), free_port());
    let conf = dir.join("mosquitto.conf");
    std::fs::write(
        &conf,
        format!(
            "per_listener_settings false\nallow_anonymous true\npersistence false\n\
             log_dest stderr\nlog_type error\nlog_type warning\n\
             listener {ws} 127.0.0.1\nprotocol websockets\n\
             listener {tcp} 127.0.0.1\nprotocol mqtt\n"
        ),
    )
    .unwrap();
    // Debian puts it in /usr/sbin, which a user's PATH may lack.
    let binary = if Path::new("/usr/sbin/mosquitto").exists() {
        "/usr/sbin/mosquitto"
    } else {
        "mosquitto"
    };
    let child = Command::new(binary)
        .arg("-c")
        .arg(&conf)
        .spawn()
        .expect("mosquitto (./test installs Debian's mosquitto)");
    let mut server = Server { child, after: None };
    let took = wait_for_port(ws, "mosquitto", &mut server);
    wait_for_port(tcp, "mosquitto", &mut server);
    eprintln!("mosquitto listening after {took:?}");
    (server, ws, tcp)
}

/// Publishes `N` payloads to `topic` at `qos`, one every [`EVERY_MS`], as a
/// plain MQTT 3.1.1 client (packets written here by hand, MQTT 3.1.1 §3).
fn mqtt_publish(port: u16, topic: &str, qos: u8) -> std::thread::JoinHandle<()> {
    let topic = topic.to_owned();
    std::thread::spawn(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(LIMIT)).unwrap();
        let string = |v: &mut Vec<u8>, s: &str| {
            v.extend_from_slice(&(s.len() as u16).to_be_bytes());
            v.extend_from_slice(s.as_bytes());
        };
        let packet = |first: u8, body: &[u8]| {
            let mut p = vec![first];
            let mut len = body.len();
            loop {
                let mut b = (len % 128) as u8;
                len /= 128;
                if len > 0 {
                    b |= 0x80;
                }
                p.push(b);
                if len == 0 {
                    break;
                }
            }
            p.extend_from_slice(body);
            p
        };
        let mut connect = Vec::new();
        string(&mut connect, "MQTT");
        connect.extend_from_slice(&[4, 0x02, 0, 60]);
        string(&mut connect, "skewscope-test-publisher");
        s.write_all(&packet(0x10, &connect)).unwrap();
        let mut connack = [0u8; 4];
        s.read_exact(&mut connack).unwrap();
        assert_eq!(connack, [0x20, 2, 0, 0], "the broker accepts the publisher");
        for n in 0..N {
            if n > 0 {
                std::thread::sleep(Duration::from_millis(EVERY_MS));
            }
            let mut body = Vec::new();
            string(&mut body, &topic);
            if qos > 0 {
                body.extend_from_slice(&(n as u16 + 1).to_be_bytes());
            }
            body.extend_from_slice(payload(n).as_bytes());
            s.write_all(&packet(0x30 | (qos << 1), &body)).unwrap();
        }
        // PUBACKs are read so the broker is never held up writing them.
        if qos > 0 {
            let mut acks = vec![0u8; 4 * N];
            let _ = s.read_exact(&mut acks);
        }
        s.write_all(&[0xE0, 0]).unwrap();
    })
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

/// RabbitMQ under `dir` (its own node name, ports and Erlang port mapper,
/// all on loopback) with Web-STOMP; returns it, the Web-STOMP port and the
/// plain STOMP one, and how long it took to start.
fn rabbitmq(dir: &Path) -> (Server, u16, u16, Duration) {
    let (web, stomp, dist, epmd) = (free_port(), free_port(), free_port(), free_port());
    std::fs::write(
        dir.join("rabbitmq.conf"),
        format!(
            "listeners.tcp = none\nloopback_users = none\n\
             stomp.listeners.tcp.1 = 127.0.0.1:{stomp}\n\
             web_stomp.tcp.port = {web}\nweb_stomp.tcp.ip = 127.0.0.1\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("enabled_plugins"), "[rabbitmq_web_stomp].\n").unwrap();
    let node = format!("skewscope-test-{}-{web}@localhost", std::process::id());
    let child = Command::new("/usr/lib/rabbitmq/bin/rabbitmq-server")
        .env("HOME", dir)
        .env("RABBITMQ_BASE", dir)
        .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
        .env("RABBITMQ_LOG_BASE", dir.join("log"))
        .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
        .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
        .env("RABBITMQ_PLUGINS_EXPAND_DIR", dir.join("plugins"))
        .env("RABBITMQ_PID_FILE", dir.join("rabbitmq.pid"))
        .env("RABBITMQ_NODENAME", &node)
        .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
        .env("RABBITMQ_DIST_PORT", dist.to_string())
        .env(
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
            "-kernel inet_dist_use_interface {127,0,0,1}",
        )
        .env("ERL_EPMD_PORT", epmd.to_string())
        .env("ERL_EPMD_ADDRESS", "127.0.0.1")
        .stdout(Stdio::null())
        .spawn()
        .expect("rabbitmq-server (./test installs Debian's rabbitmq-server)");
    let mut server = Server {
        child,
        // The port mapper the node started outlives it: stop it too.
        after: Some(Box::new(move || {
            let _ = Command::new("epmd")
                .args(["-port", &epmd.to_string(), "-kill"])
                .env("ERL_EPMD_PORT", epmd.to_string())
                .stdout(Stdio::null())
                .status();
        })),
    };
    let took = wait_for_port(web, "rabbitmq-server", &mut server);
    wait_for_port(stomp, "rabbitmq-server", &mut server);
    eprintln!("RabbitMQ with Web-STOMP listening after {took:?}");
    (server, web, stomp, took)
}

/// Sends `N` payloads to `destination`, one every [`EVERY_MS`], as a plain
/// STOMP 1.2 client over TCP.
fn stomp_publish(port: u16, destination: &str) -> std::thread::JoinHandle<()> {
    let destination = destination.to_owned();
    std::thread::spawn(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(LIMIT)).unwrap();
        s.write_all(b"CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\0")
            .unwrap();
        let mut connected = Vec::new();
        let mut byte = [0u8; 1];
        while byte[0] != 0 || connected.is_empty() {
            s.read_exact(&mut byte).unwrap();
            connected.push(byte[0]);
        }
        assert!(connected.starts_with(b"CONNECTED"), "{connected:?}");
        for n in 0..N {
            if n > 0 {
                std::thread::sleep(Duration::from_millis(EVERY_MS));
            }
            let body = payload(n);
            write!(
                s,
                "SEND\ndestination:{destination}\ncontent-type:application/json\ncontent-length:{}\n\n{body}\0",
                body.len()
            )
            .unwrap();
        }
        s.write_all(b"DISCONNECT\n\n\0").unwrap();
    })
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
