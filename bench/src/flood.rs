//! `skewscope-bench flood`: what one hostile client costs the others. The
//! release agent with 50 clients that read everything, and a 51st that
//! floods it. Phases of `secs` each, in one run:
//! - quiet: no flood;
//! - ping flood: the 51st sends pings nonstop, never reads, and reconnects
//!   each time the agent closes it for its control-frame rate;
//! - empty-frame flood: it sends empty data frames nonstop (not rate-limited:
//!   only the shard's per-client read budget stands between it and the
//!   broadcasts);
//! - quiet again.
//!
//! A broadcast every 50 ms throughout. For each: from just before the
//! `/publish` to the last of the 50 clients having it (the worst latency).
//! The agent's RSS is read after each phase.

use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::StreamExt;
use skewscope_core::analysis::stats::Summary;

use crate::upload::AgentProcess;

const CLIENTS: usize = 50;
const EVERY: Duration = Duration::from_millis(50);

/// What the 51st client does during a phase.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flood {
    None,
    Pings,
    EmptyFrames,
}

impl Flood {
    fn name(self) -> &'static str {
        match self {
            Flood::None => "quiet",
            Flood::Pings => "ping flood",
            Flood::EmptyFrames => "empty-frame flood",
        }
    }
}

/// One phase's figures.
struct Phase {
    flood: Flood,
    worst: Summary,
    rss_kib: u64,
    flood_bytes: u64,
    flood_connections: u64,
}

/// Runs the phases and prints a table.
pub async fn run(secs: u64) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let agent = AgentProcess::start(dir.path(), &[])?;
    let addr = agent.addr;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let (ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/ws")).await?;
        clients.push(ws);
    }
    let pid = agent.child.id();
    let rss0 = rss_kib(pid)?;
    let mut phases = Vec::new();
    for flood in [Flood::None, Flood::Pings, Flood::EmptyFrames, Flood::None] {
        eprintln!("bench: flood, {} for {secs} s", flood.name());
        phases.push(phase(addr, &mut clients, flood, Duration::from_secs(secs), pid).await?);
    }
    agent.stop()?;

    let quiet = phases[0].worst.p50 as f64;
    println!(
        "{CLIENTS} clients reading, a 51st flooding, a broadcast every {} ms; worst latency per broadcast = /publish to the last of the {CLIENTS} having it\n",
        EVERY.as_millis()
    );
    println!(
        "| phase | broadcasts | worst latency p50 | p99 | max | p50 ÷ quiet (≤ 2) | flooder bytes its socket took | flooder connections (each closed by the agent) | agent RSS after (start {rss0} KiB) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for p in &phases {
        println!(
            "| {} | {} | {} | {} | {} | {:.2} | {} MiB | {} | {} KiB |",
            p.flood.name(),
            p.worst.count,
            crate::format::us(p.worst.p50),
            crate::format::us(p.worst.p99),
            crate::format::us(p.worst.max),
            p.worst.p50 as f64 / quiet,
            p.flood_bytes >> 20,
            p.flood_connections,
            p.rss_kib
        );
    }
    Ok(())
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn phase(
    addr: SocketAddr,
    clients: &mut [Ws],
    flood: Flood,
    length: Duration,
    pid: u32,
) -> anyhow::Result<Phase> {
    let stop = Arc::new(AtomicBool::new(false));
    let bytes = Arc::new(AtomicU64::new(0));
    let connections = Arc::new(AtomicU64::new(0));
    let flooder = (flood != Flood::None).then(|| {
        let (stop, bytes, connections) = (stop.clone(), bytes.clone(), connections.clone());
        std::thread::spawn(move || flood_until(addr, flood, &stop, &bytes, &connections))
    });
    let until = Instant::now() + length;
    let mut worst = Vec::new();
    let mut n = 0u64;
    while Instant::now() < until {
        let body = format!("broadcast {n}");
        n += 1;
        let start = Instant::now();
        let r = agent::http_client::request(addr, "POST", "/publish", body.as_bytes(), None)
            .await
            .context("publish")?;
        anyhow::ensure!(r.status == 200, "publish: {}", r.body);
        let mut last = start;
        for ws in clients.iter_mut() {
            // Every client gets it; skip anything else (none is sent).
            loop {
                let m = tokio::time::timeout(Duration::from_secs(30), ws.next())
                    .await
                    .context("a client waited 30 s for a broadcast")?
                    .context("a client's connection ended")??;
                if m.is_text() {
                    anyhow::ensure!(m.to_text()? == body, "out of order");
                    break;
                }
            }
            last = last.max(Instant::now());
        }
        // The clients are read one after another: what the last of them
        // had at the end is an upper bound of when it arrived.
        worst.push((last - start).as_nanos() as i64);
        tokio::time::sleep(EVERY).await;
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(f) = flooder {
        let _ = f.join();
    }
    Ok(Phase {
        flood,
        worst: Summary::of(&worst).context("no broadcasts")?,
        rss_kib: rss_kib(pid)?,
        flood_bytes: bytes.load(Ordering::Relaxed),
        flood_connections: connections.load(Ordering::Relaxed),
    })
}

/// The 51st client: upgrades and floods until `stop`, reconnecting when the
/// agent closes it. Bounded by the phase's length.
fn flood_until(
    addr: SocketAddr,
    flood: Flood,
    stop: &AtomicBool,
    bytes: &AtomicU64,
    connections: &AtomicU64,
) {
    let frame: &[u8] = match flood {
        Flood::Pings => &[0x89, 0x80, 1, 2, 3, 4],
        _ => &[0x82, 0x80, 1, 2, 3, 4],
    };
    let batch = frame.repeat(10_000);
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut s) = crate::ws_client::upgrade(addr) else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        connections.fetch_add(1, Ordering::Relaxed);
        let _ = s.set_write_timeout(Some(Duration::from_millis(200)));
        while !stop.load(Ordering::Relaxed) {
            match s.write_all(&batch) {
                Ok(()) => {
                    bytes.fetch_add(batch.len() as u64, Ordering::Relaxed);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => break, // closed by the agent: come back
            }
        }
    }
}

/// The resident memory of process `pid` now, KiB.
pub(crate) fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("VmRSS")
}
