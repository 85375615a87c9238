//! `skewscope-bench tls`: what TLS (`--tls-cert`) costs the fan-out. Two
//! release agents side by side, one plain and one TLS, each with N clients
//! drained on loopback, and the floor (one thread writing the same frame to
//! N sockets), rounds interleaved. The figure is CPU per broadcast on the
//! agents' shard threads (the kernel's own nanosecond count,
//! `/proc/PID/task/*/schedstat`, threads named `shard-*`), beside the
//! floor's CPU for its writes (`CLOCK_THREAD_CPUTIME_ID`). The TLS clients
//! complete their handshakes and upgrades, then their ciphertext is drained
//! unread: only the server's side is measured.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, ensure};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use skewscope_core::analysis::stats::Summary;

use crate::drain::Drain;
use crate::floor;
use crate::format::us;
use crate::processes::wait_for;
use crate::upload::AgentProcess;
use agent::bench::Wire;

/// One client count's results, in nanoseconds of CPU per broadcast.
#[derive(serde::Serialize)]
struct Row {
    clients: usize,
    floor: Summary,
    plain: Summary,
    tls: Summary,
    /// The agent's sealing alone (its `Wire::seal` of the frame, for each
    /// of N sessions, in memory): the price TLS adds per broadcast, without
    /// the kernel's share, which on loopback moves between the sending
    /// thread and ksoftirqd from run to run.
    sealing: Summary,
    /// The agent's CPU (every thread) per connection that connects, asks
    /// `GET /healthz` and leaves: plain, and with its TLS handshake. Per
    /// batch of [`CONNECTS`].
    connect_plain: Summary,
    connect_tls: Summary,
}

/// Connections per batch of the per-connection figure.
const CONNECTS: usize = 50;

/// Measures every size and prints the table (or JSON).
pub fn run(sizes: &[usize], rounds: usize, json: bool) -> anyhow::Result<()> {
    let most = sizes.iter().copied().max().unwrap_or(0) as u32;
    skewscope_os::files::ensure_open_files(most * 8 + 200)?;
    let mut rows = Vec::new();
    for &n in sizes {
        eprintln!("bench: {n} clients per server, {rounds} broadcasts each");
        rows.push(measure(n, rounds)?);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print_table(&rows, rounds);
    }
    Ok(())
}

fn measure(n: usize, rounds: usize) -> anyhow::Result<Row> {
    let dir = tempfile::tempdir()?;
    let ca = skewscope_os::test_certs::private_ca(dir.path(), "bench");
    let plain = AgentProcess::start(&dir.path().join("plain"), &["--no-time-exchange"])?;
    let tls_agent = AgentProcess::start(
        &dir.path().join("tls"),
        &[
            "--no-time-exchange",
            "--tls-cert",
            ca.cert.to_str().context("path")?,
            "--tls-key",
            ca.key.to_str().context("path")?,
        ],
    )?;
    let client_tls = trusting(&ca.ca)?;
    let mut receivers = Vec::with_capacity(3 * n);
    for _ in 0..n {
        receivers.push(crate::ws_client::upgrade_as(plain.addr, false)?);
        receivers.push(tls_upgrade(tls_agent.addr, &client_tls)?);
    }
    for (agent, tls) in [(&plain, None), (&tls_agent, Some(&client_tls))] {
        wait_for("every client on the hub", Duration::from_secs(60), || {
            get(agent.addr, tls, "/healthz").is_ok_and(|b| b.contains(&format!("\"clients\":{n},")))
        })?;
    }
    let (mut senders, floor_receivers) = floor::loopback_pairs(n)?;
    receivers.extend(floor_receivers);
    let _drain = Drain::start(receivers)?;
    let frame = crate::fanout::test_frame();

    let (mut floor_cpu, mut plain_cpu, mut tls_cpu) = (Vec::new(), Vec::new(), Vec::new());
    let mut sessions = (0..n)
        .map(|_| sealing_session(&ca))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut sealing = Vec::new();
    for round in 0..rounds {
        // Rotate which goes first, so none always follows another.
        for which in (0..4).map(|i| (round + i) % 4) {
            match which {
                0 => {
                    let before = thread_cpu_ns();
                    floor::write_all_once(&mut senders, &frame)?;
                    floor_cpu.push((thread_cpu_ns() - before) as i64);
                }
                1 => plain_cpu.push(broadcast_cpu(&plain, None, n)?),
                2 => {
                    let before = thread_cpu_ns();
                    for wire in &mut sessions {
                        std::hint::black_box(wire.seal(&frame)?);
                    }
                    sealing.push((thread_cpu_ns() - before) as i64);
                }
                _ => tls_cpu.push(broadcast_cpu(&tls_agent, Some(&client_tls), n)?),
            }
        }
    }
    let (mut connect_plain, mut connect_tls) = (Vec::new(), Vec::new());
    for _ in 0..10 {
        connect_plain.push(connect_cpu(&plain, None)?);
        connect_tls.push(connect_cpu(&tls_agent, Some(&client_tls))?);
    }
    plain.stop()?;
    tls_agent.stop()?;
    Ok(Row {
        clients: n,
        floor: Summary::of(&floor_cpu).context("no rounds")?,
        plain: Summary::of(&plain_cpu).context("no rounds")?,
        tls: Summary::of(&tls_cpu).context("no rounds")?,
        sealing: Summary::of(&sealing).context("no rounds")?,
        connect_plain: Summary::of(&connect_plain).context("no batches")?,
        connect_tls: Summary::of(&connect_tls).context("no batches")?,
    })
}

/// One test broadcast through `agent`; the CPU its shard threads spent on
/// it. The answer comes once every shard has finished its loop.
fn broadcast_cpu(
    agent: &AgentProcess,
    tls: Option<&Arc<rustls::ClientConfig>>,
    n: usize,
) -> anyhow::Result<i64> {
    let pid = agent.child.id();
    let before = shard_cpu_ns(pid)?;
    let said = get(agent.addr, tls, "/start_test")?;
    let after = shard_cpu_ns(pid)?;
    ensure!(
        said.contains(&format!("\"clients\":{n}")),
        "the broadcast missed clients: {said}"
    );
    Ok((after - before) as i64)
}

/// The agent's CPU (all its threads) per connection of a batch of
/// [`CONNECTS`] that each connect, ask `/healthz` and leave.
fn connect_cpu(
    agent: &AgentProcess,
    tls: Option<&Arc<rustls::ClientConfig>>,
) -> anyhow::Result<i64> {
    let before = agent.cpu()?;
    for _ in 0..CONNECTS {
        get(agent.addr, tls, "/healthz")?;
    }
    Ok(((agent.cpu()? - before).as_nanos() / CONNECTS as u128) as i64)
}

/// CPU time of the agent's shard threads so far.
fn shard_cpu_ns(pid: u32) -> anyhow::Result<u64> {
    let mut ns = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let task = task?.path();
        if !std::fs::read_to_string(task.join("comm"))?.starts_with("shard-") {
            continue;
        }
        let stat = std::fs::read_to_string(task.join("schedstat"))?;
        ns += stat
            .split(' ')
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .context("odd schedstat")?;
    }
    Ok(ns)
}

/// A server TLS session of the agent's kind, its handshake done in memory
/// with a client trusting the bench's CA, as a shard holds it.
fn sealing_session(ca: &skewscope_os::test_certs::PrivateCa) -> anyhow::Result<Wire> {
    let server = agent::tls::ServerTls::load(&ca.cert, &ca.key)?;
    let mut server = rustls::ServerConnection::new(server.config())?;
    let mut client =
        rustls::ClientConnection::new(trusting(&ca.ca)?, ServerName::try_from("localhost")?)?;
    while client.is_handshaking() || server.is_handshaking() {
        let mut bytes = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut bytes)?;
        }
        server.read_tls(&mut bytes.as_slice())?;
        server.process_new_packets()?;
        bytes.clear();
        while server.wants_write() {
            server.write_tls(&mut bytes)?;
        }
        client.read_tls(&mut bytes.as_slice())?;
        client.process_new_packets()?;
    }
    Ok(Wire::tls(Box::new(server)))
}

/// This thread's CPU time, nanoseconds.
fn thread_cpu_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .expect("the thread CPU clock");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// A client that trusts only the bench's CA.
fn trusting(ca: &Path) -> anyhow::Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca)? {
        roots.add(cert?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(Arc::new(
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth(),
    ))
}

/// A `wss://` client: TLS handshake and WebSocket upgrade, then the socket
/// alone, for the drain to read (and discard) its records.
fn tls_upgrade(addr: SocketAddr, tls: &Arc<rustls::ClientConfig>) -> anyhow::Result<TcpStream> {
    let mut socket = TcpStream::connect(addr)?;
    let mut session = rustls::ClientConnection::new(tls.clone(), ServerName::from(addr.ip()))?;
    let mut stream = rustls::Stream::new(&mut session, &mut socket);
    crate::ws_client::upgrade_over(&mut stream, "/ws")?;
    Ok(socket)
}

/// One GET (`Connection: close`), over TLS when `tls` is given: the body.
fn get(
    addr: SocketAddr,
    tls: Option<&Arc<rustls::ClientConfig>>,
    path: &str,
) -> anyhow::Result<String> {
    let request = format!("GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n");
    let mut socket = TcpStream::connect(addr)?;
    socket.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut response = Vec::new();
    match tls {
        None => {
            socket.write_all(request.as_bytes())?;
            socket.read_to_end(&mut response)?;
        }
        Some(tls) => {
            let mut session =
                rustls::ClientConnection::new(tls.clone(), ServerName::from(addr.ip()))?;
            let mut stream = rustls::Stream::new(&mut session, &mut socket);
            stream.write_all(request.as_bytes())?;
            stream.flush()?;
            stream.read_to_end(&mut response)?;
        }
    }
    let text = String::from_utf8_lossy(&response);
    let (_, body) = text.split_once("\r\n\r\n").context("no response head")?;
    Ok(body.to_owned())
}

fn print_table(rows: &[Row], rounds: usize) {
    let frame = crate::fanout::test_frame().len();
    println!(
        "CPU per broadcast on the shards, {frame}-byte frame, {rounds} broadcasts per cell; median (p90)\n"
    );
    println!(
        "| clients | floor: 1 thread writes | agent, ws:// | ÷ floor | agent, wss:// | ÷ floor | wss ÷ ws | sealing alone, N copies | ÷ floor | per copy |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {} ({}) | {} ({}) | {:.2} | {} ({}) | {:.2} | {:.2} | {} ({}) | {:.2} | {:.2} µs |",
            r.clients,
            us(r.floor.p50),
            us(r.floor.p90),
            us(r.plain.p50),
            us(r.plain.p90),
            r.plain.p50 as f64 / r.floor.p50 as f64,
            us(r.tls.p50),
            us(r.tls.p90),
            r.tls.p50 as f64 / r.floor.p50 as f64,
            r.tls.p50 as f64 / r.plain.p50 as f64,
            us(r.sealing.p50),
            us(r.sealing.p90),
            r.sealing.p50 as f64 / r.floor.p50 as f64,
            r.sealing.p50 as f64 / r.clients as f64 / 1e3,
        );
    }
    if let Some(r) = rows.last() {
        println!(
            "\nagent CPU per connection (connect, GET /healthz, close), median (p90) of 10 batches of {CONNECTS}: \
             http:// {} ({}), https:// {} ({}): the handshake adds {}",
            us(r.connect_plain.p50),
            us(r.connect_plain.p90),
            us(r.connect_tls.p50),
            us(r.connect_tls.p90),
            us(r.connect_tls.p50 - r.connect_plain.p50),
        );
    }
}
