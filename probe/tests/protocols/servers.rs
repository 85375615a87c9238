//! The real servers the protocol tests run against, started on loopback
//! (./test installs them): a python-socketio server under uvicorn, an SSE
//! endpoint on Starlette, Mosquitto with a WebSockets listener, RabbitMQ
//! with Web-STOMP; and the publishers that make them broadcast. Shared by
//! probe/tests/protocols.rs (the probe against each) and
//! collector/tests/tap_protocols.rs (each tapped, joined with the probe),
//! which include this file with `#[path]`.
#![allow(dead_code)] // each test binary uses its own subset

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use skewscope_os::test_listening::{free_port, start_on_free_ports, until_listening};

/// Bound on any one wait here: a broker's start included.
pub const LIMIT: Duration = Duration::from_secs(60);

/// Broadcasts per run, and their spacing: 12 × 300 ms outlasts three
/// keep-alive periods of 1 s.
pub const N: usize = 12;
pub const EVERY_MS: u64 = 300;

/// A process the test started, ended (by its id) when dropped.
pub struct Server {
    /// The process.
    pub child: Child,
    /// Run when the process has ended (epmd's own stop, for RabbitMQ).
    pub after: Option<Box<dyn FnOnce()>>,
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

/// A helper script of this directory (the path works from the probe's
/// tests and the collector's alike: both crates sit at the workspace root).
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../probe/tests/protocols")
        .join(name)
}

/// Starts a helper script that prints its port first.
pub fn python_server(name: &str, args: &[&str]) -> (Server, u16) {
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

/// Waits until `port` accepts connections (a broker started), at most [`LIMIT`].
pub fn wait_for_port(port: u16, what: &str, server: &mut Server) -> Duration {
    try_wait_for_port(port, what, server).unwrap_or_else(|exited| panic!("{exited}"))
}

/// Waits until `port` accepts connections, at most [`LIMIT`]; `Err` saying
/// so if the server exited first.
pub fn try_wait_for_port(port: u16, what: &str, server: &mut Server) -> Result<Duration, String> {
    until_listening(
        ([127, 0, 0, 1], port).into(),
        &mut server.child,
        what,
        LIMIT,
    )
}

/// A GET on loopback; the body.
pub fn http_get(port: u16, target: &str) -> String {
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
pub fn payload(n: usize) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    format!("{{\"n\":{n},\"at\":{:.6}}}", now.as_secs_f64() + 0.3)
}

/// Mosquitto on a free port with a WebSockets listener, and a plain MQTT
/// one for the test's publisher; returns it, the WebSocket port and the
/// plain one.
pub fn mosquitto(dir: &Path) -> (Server, u16, u16) {
    start_on_free_ports("mosquitto", || try_mosquitto(dir))
}

/// One try of [`mosquitto`], on ports picked now.
fn try_mosquitto(dir: &Path) -> Result<(Server, u16, u16), String> {
    let (ws, tcp) = (free_port(), free_port());
    let conf = dir.join("mosquitto.conf");
    // `user root`: run as root (the tap's tests are root in a user
    // namespace of their own), it stays as it is rather than switching to
    // the mosquitto user, which such a namespace cannot do.
    std::fs::write(
        &conf,
        format!(
            "user root\nper_listener_settings false\nallow_anonymous true\npersistence false\n\
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
    let took = try_wait_for_port(ws, "mosquitto", &mut server)?;
    try_wait_for_port(tcp, "mosquitto", &mut server)?;
    eprintln!("mosquitto listening after {took:?}");
    Ok((server, ws, tcp))
}

/// Publishes `N` payloads to `topic` at `qos`, one every [`EVERY_MS`], as a
/// plain MQTT 3.1.1 client (packets written here by hand, MQTT 3.1.1 §3).
pub fn mqtt_publish(port: u16, topic: &str, qos: u8) -> std::thread::JoinHandle<()> {
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

/// RabbitMQ under `dir` (its own node name, ports and Erlang port mapper,
/// all on loopback) with Web-STOMP; returns it, the Web-STOMP port and the
/// plain STOMP one, and how long it took to start.
pub fn rabbitmq(dir: &Path) -> (Server, u16, u16, Duration) {
    start_on_free_ports("rabbitmq-server", || try_rabbitmq(dir))
}

/// One try of [`rabbitmq`], on ports (and so a node name) picked now.
fn try_rabbitmq(dir: &Path) -> Result<(Server, u16, u16, Duration), String> {
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
    // The node's host is an address, not "localhost": Erlang resolves a
    // name through /etc/hosts, which a fresh root or container may lack
    // (epmd_error nxdomain); an address needs long names.
    let node = format!("skewscope-test-{}-{web}@127.0.0.1", std::process::id());
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
        .env("RABBITMQ_USE_LONGNAME", "true")
        // A node that fails to start writes its crash dump here, not in
        // the crate's directory.
        .env("ERL_CRASH_DUMP", dir.join("erl_crash.dump"))
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
    let took = try_wait_for_port(web, "rabbitmq-server", &mut server)?;
    try_wait_for_port(stomp, "rabbitmq-server", &mut server)?;
    eprintln!("RabbitMQ with Web-STOMP listening after {took:?}");
    Ok((server, web, stomp, took))
}

/// Sends `N` payloads to `destination`, one every [`EVERY_MS`], as a plain
/// STOMP 1.2 client over TCP.
pub fn stomp_publish(port: u16, destination: &str) -> std::thread::JoinHandle<()> {
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
        // STOMP's graceful end (1.2, "Graceful Disconnect"): a DISCONNECT
        // with a receipt, and the broker's RECEIPT before the socket
        // closes, so every SEND before it was taken. Closed at once, a
        // loaded broker could drop the last SEND with the connection: one
        // payload short on every subscriber, seen once in a soak.
        s.write_all(b"DISCONNECT\nreceipt:bye\n\n\0").unwrap();
        let mut receipt = Vec::new();
        loop {
            s.read_exact(&mut byte).unwrap();
            if byte[0] == 0 {
                // A frame ends; heart-beat newlines before it are skipped.
                let frame = String::from_utf8_lossy(&receipt).trim_start().to_owned();
                if frame.starts_with("RECEIPT") {
                    assert!(frame.contains("receipt-id:bye"), "{frame}");
                    break;
                }
                receipt.clear();
            } else {
                receipt.push(byte[0]);
            }
        }
    })
}
