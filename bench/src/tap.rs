//! `skewscope-bench tap`: what the agent's tap of another server costs and
//! whether it sees everything. A server that knows nothing of skewscope
//! (this benchmark's floor-server: one thread writing one frame to every
//! client, which reports its own span) has N drained clients; blocks of
//! broadcasts alternate between the release agent tapping it and no agent.
//! Needs CAP_NET_RAW (root).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use skewscope_core::analysis::stats::Summary;
use skewscope_core::log::AnyLog;
use skewscope_core::record::AgentRecord;
use skewscope_os::log_files::read_file;

use crate::drain::Drain;
use crate::upload::{AgentProcess, process_cpu};

/// Alternating blocks per size: tap on, off, on, off, …
const BLOCKS: usize = 8;

/// Kills the server when the benchmark ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One size's figures.
struct Row {
    clients: usize,
    span_on: Summary,
    span_off: Summary,
    server_cpu_ns: f64,
    tap_cpu_ns: f64,
    tapped_span: Option<Summary>,
    copies: u64,
    sent: u64,
    drops: u64,
}

/// Runs the benchmark for each size and prints a table.
pub async fn run(sizes: &[usize], rounds: usize) -> anyhow::Result<()> {
    let most = sizes.iter().copied().max().unwrap_or(0) as u32;
    skewscope_os::files::ensure_open_files(most * 2 + 64)?;
    let mut rows = Vec::new();
    for &n in sizes {
        eprintln!("bench: tap, {n} clients, {rounds} broadcasts");
        rows.push(measure(n, rounds).await?);
    }
    println!(
        "tap beside the floor-server (one thread writing each broadcast to every client), {rounds} broadcasts per size in {BLOCKS} blocks, tap on and off alternating\n"
    );
    println!(
        "| clients | copies captured / sent | ring drops | server's own span p50, tap on / off | ratio | tap CPU per broadcast | server CPU per broadcast | tap ÷ server | tap's span p50 (wire) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        println!(
            "| {} | {} / {} | {} | {} / {} | {:.3} | {} | {} | {:.3} | {} |",
            r.clients,
            r.copies,
            r.sent,
            r.drops,
            crate::format::us(r.span_on.p50),
            crate::format::us(r.span_off.p50),
            r.span_on.p50 as f64 / r.span_off.p50 as f64,
            crate::format::us(r.tap_cpu_ns as i64),
            crate::format::us(r.server_cpu_ns as i64),
            r.tap_cpu_ns / r.server_cpu_ns,
            r.tapped_span
                .map_or("-".into(), |s| crate::format::us(s.p50)),
        );
    }
    Ok(())
}

async fn measure(n: usize, rounds: usize) -> anyhow::Result<Row> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let server = Server(
        Command::new(std::env::current_exe()?)
            .args(["floor-server", "--listen", &addr.to_string()])
            .stdout(Stdio::null())
            .spawn()?,
    );
    let mut ready = false;
    for _ in 0..200 {
        if skewscope_os::test_listening::accepts(addr) {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    ensure!(ready, "the floor-server did not listen");
    let per_block = (rounds / BLOCKS).max(1);
    let dir = tempfile::tempdir()?;
    let (mut on, mut off) = (Vec::new(), Vec::new());
    let (mut tap_cpu, mut server_cpu_on) = (Duration::ZERO, Duration::ZERO);
    let (mut copies, mut drops, mut tapped) = (0u64, 0u64, Vec::new());
    for block in 0..BLOCKS {
        let tapping = block % 2 == 0;
        // The tap starts before the clients connect (it follows only
        // connections it saw open), and they connect anew each block.
        let agent = if tapping {
            Some(start_tap(dir.path(), block, port)?)
        } else {
            None
        };
        let drain = Drain::upgraded(addr, n).await?;
        let server_before = process_cpu(server.0.id())?;
        let tap_before = agent.as_ref().map(|a| a.cpu()).transpose()?;
        for _ in 0..per_block {
            let r = agent::http_client::request(addr, "GET", "/start_test", b"", None).await?;
            let body: serde_json::Value = serde_json::from_str(&r.body)?;
            ensure!(
                body["clients"] == n,
                "the server has {} clients",
                body["clients"]
            );
            let span = body["span_ns"].as_i64().context("no span")?;
            if tapping {
                on.push(span)
            } else {
                off.push(span)
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if let Some(a) = agent {
            tap_cpu += a.cpu()? - tap_before.unwrap_or_default();
            server_cpu_on += process_cpu(server.0.id())? - server_before;
            let log = a.stop()?;
            let (c, d, spans) = tapped_in(&log)?;
            copies += c;
            tapped.extend(spans);
            drops += d;
        }
        drop(drain);
        // The server drops clients it cannot write to; wait until it has.
        for _ in 0..500 {
            let r = agent::http_client::request(addr, "GET", "/healthz", b"", None).await?;
            if r.body.contains("\"clients\":0") {
                break;
            }
            let _ = agent::http_client::request(addr, "GET", "/start_test", b"", None).await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let broadcasts_on = (per_block * BLOCKS.div_ceil(2)) as f64;
    Ok(Row {
        clients: n,
        span_on: Summary::of(&on).context("no rounds")?,
        span_off: Summary::of(&off).context("no rounds")?,
        server_cpu_ns: server_cpu_on.as_nanos() as f64 / broadcasts_on,
        tap_cpu_ns: tap_cpu.as_nanos() as f64 / broadcasts_on,
        tapped_span: Summary::of(&tapped),
        copies,
        sent: (n * per_block * BLOCKS.div_ceil(2)) as u64,
        drops,
    })
}

fn start_tap(dir: &std::path::Path, block: usize, port: u16) -> anyhow::Result<AgentProcess> {
    let agent = AgentProcess::start(
        &dir.join(format!("agent-{block}")),
        &["--tap-port", &port.to_string(), "--tap-interface", "lo"],
    );
    match agent {
        Ok(a) => Ok(a),
        Err(e) => {
            bail!("cannot start the tapping agent (it needs CAP_NET_RAW: run as root): {e:#}")
        }
    }
}

/// Copies captured, ring drops, and each broadcast's span on the wire.
fn tapped_in(log: &std::path::Path) -> anyhow::Result<(u64, u64, Vec<i64>)> {
    let AnyLog::Agent(d) = read_file(log)? else {
        bail!("not an agent log");
    };
    let (mut copies, mut drops, mut spans) = (0u64, 0u64, Vec::new());
    for r in &d.records {
        match r {
            AgentRecord::TapBroadcast(b) => {
                copies += b.copies.len() as u64;
                let first = b.copies.iter().map(|c| c.first_byte_wall_ns).min();
                let last = b.copies.iter().map(|c| c.last_byte_wall_ns).max();
                if let (Some(f), Some(l)) = (first, last) {
                    spans.push((l - f) as i64);
                }
            }
            AgentRecord::TapCounters(c) => drops = c.ring_drops,
            _ => {}
        }
    }
    Ok((copies, drops, spans))
}
