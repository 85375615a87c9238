//! skewscope's benchmarks. `fanout`: the agent's fan-out span for N
//! connections, with recording on and off, beside the single-thread floor, all
//! in one run with their rounds interleaved so machine noise hits every column
//! alike. `floor`: the single-thread floor alone, with io_uring and staged
//! variants. `floor-server`: that floor behind a WebSocket endpoint, for
//! bench/run. `stamps`: kernel against userspace receipt stamps under CPU
//! stress. `upload`: what probes uploading costs the agent's fan-out, and
//! ingest throughput. `verdict`: an audit's last broadcast to its verdict.

mod drain;
mod flood;
mod floor;
mod floor_server;
mod live_cost;
mod probe_cost;
mod report_cost;
mod scrape;
mod stamps;
mod tap;
mod upload;
mod verdict;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use agent::{AgentConfig, RunningAgent};
use anyhow::{Context, ensure};
use clap::{Parser, Subcommand};
use skewscope_core::analysis::stats::Summary;
use skewscope_core::identity::{TestMessage, encode_test_message};
use skewscope_core::log::{AnyLog, read_file};
use skewscope_os::clock::mono_ns;

use crate::drain::Drain;

#[derive(Parser)]
#[command(name = "skewscope-bench", version, about = "skewscope benchmarks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Fan-out span for N connections: floor vs agent with and without recording.
    Fanout {
        /// Connection counts to measure.
        #[arg(long, value_delimiter = ',', default_value = "100,1000")]
        sizes: Vec<usize>,
        /// Broadcasts per configuration and size.
        #[arg(long, default_value_t = 300)]
        rounds: usize,
        /// Pause between broadcasts, in milliseconds, so receivers drain.
        #[arg(long, default_value_t = 2)]
        pause_ms: u64,
        /// Print the figures as JSON (for bench/run) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The CPU floor alone, as JSON: one thread writing one frame to N sockets
    /// (what bench/run prints beside every server).
    Floor {
        /// Connection counts to measure.
        #[arg(long, value_delimiter = ',', default_value = "1000")]
        sizes: Vec<usize>,
        /// Rounds per size.
        #[arg(long, default_value_t = 40)]
        rounds: usize,
        /// Open the sending sockets inside this named network namespace
        /// (`ip netns`), so writes cross its link and qdisc.
        #[arg(long, requires = "addr")]
        netns: Option<String>,
        /// Address the sending side listens on.
        #[arg(long, default_value = "127.0.0.1")]
        addr: std::net::IpAddr,
        /// Writer on this core and the drain on the other one (of two).
        #[arg(long)]
        writer_core: Option<usize>,
    },
    /// The CPU floor as a WebSocket server on `/ws` (`/start_test`, `/healthz`),
    /// for bench/run to measure with its probes beside the real servers.
    FloorServer {
        /// Address to listen on.
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// Stage every frame (MSG_MORE), then push each socket (TCP_NODELAY).
        #[arg(long)]
        staged: bool,
        /// Start one more thread that only sleeps: the same writes from a
        /// process of two threads, where the kernel counts a reference on
        /// the file of every socket call (what being threaded costs).
        #[arg(long)]
        threaded: bool,
    },
    /// Whether Prometheus scraping /metrics disturbs the fan-out: spans with
    /// no scrape, a scrape every 100 ms, and a scrape at each broadcast.
    Scrape {
        /// Drained clients of the hub.
        #[arg(long, default_value_t = 1000)]
        connections: usize,
        /// Cycles of the three blocks.
        #[arg(long, default_value_t = 10)]
        cycles: usize,
        /// Broadcasts per block.
        #[arg(long, default_value_t = 20)]
        per_block: usize,
    },
    /// One hostile client against 50 others: worst broadcast latency and
    /// the agent's RSS, quiet, under a ping flood, under an empty-frame flood.
    Flood {
        /// Seconds per phase.
        #[arg(long, default_value_t = 4)]
        secs: u64,
    },
    /// Kernel vs userspace receipt stamps, idle and under CPU stress.
    Stamps {
        /// Probe connections.
        #[arg(long, default_value_t = 200)]
        clients: u32,
        /// Test broadcasts per phase.
        #[arg(long, default_value_t = 50)]
        broadcasts: u32,
        /// Busy threads in the stressed phase (default: one per core).
        #[arg(long)]
        busy_threads: Option<usize>,
    },
    /// Fan-out span with and without probes' uploads arriving, and ingest
    /// throughput and CPU, on the release agent binary.
    Upload {
        /// Raw WebSocket clients of the hub.
        #[arg(long, default_value_t = 1000)]
        connections: usize,
        /// Uploading probe sessions (the connections' receipts split among them).
        #[arg(long, default_value_t = 10)]
        probes: usize,
        /// Broadcasts, every other one with an upload arriving.
        #[arg(long, default_value_t = 400)]
        rounds: usize,
        /// Seconds of ingest alone.
        #[arg(long, default_value_t = 5)]
        ingest_secs: u64,
    },
    /// The agent's tap beside a server it does not replace: copies captured
    /// against sent, its CPU against the server's, the server's span with
    /// the tap on and off (needs CAP_NET_RAW).
    Tap {
        /// Client counts to measure.
        #[arg(long, value_delimiter = ',', default_value = "100,1000")]
        sizes: Vec<usize>,
        /// Broadcasts per size.
        #[arg(long, default_value_t = 200)]
        rounds: usize,
    },
    /// Last broadcast to verdict of `skewscope audit`, on the release
    /// binaries: one agent, real probes uploading.
    Verdict {
        /// Probe processes.
        #[arg(long, default_value_t = 10)]
        probes: usize,
        /// Connections per probe.
        #[arg(long, default_value_t = 100)]
        connections: usize,
        /// Broadcasts per audit.
        #[arg(long, default_value_t = 20)]
        broadcasts: u64,
        /// Audits; the median is printed.
        #[arg(long, default_value_t = 5)]
        runs: usize,
    },
    /// What a probe costs its device per receipt (CPU, peak memory per
    /// connection, delivery), for one or more probe builds side by side.
    ProbeCost {
        /// A probe binary to measure (repeatable, e.g. an older build beside
        /// this one); default this benchmark's sibling skewscope-probe.
        #[arg(long = "probe-bin", value_name = "PATH")]
        probe_bins: Vec<std::path::PathBuf>,
        /// Connections per probe.
        #[arg(long, default_value_t = 200)]
        connections: u32,
        /// Broadcasts per round.
        #[arg(long, default_value_t = 100)]
        broadcasts: u32,
        /// Pause between broadcasts, ms.
        #[arg(long, default_value_t = 20)]
        interval_ms: u64,
        /// Rounds (each runs every build once); medians are printed.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Leave the agent's permessage-deflate on (its default), so probes
        /// that offer it receive compressed frames and inflate them. Off:
        /// the agent runs with --no-deflate and every build gets plain
        /// frames, the receive path alone.
        #[arg(long)]
        agent_deflate: bool,
    },
    /// What the agent's live join (receive skew on /metrics) costs per
    /// receipt, beside the report's join of the same records.
    LiveCost {
        /// Uploading probes.
        #[arg(long, default_value_t = 10)]
        probes: usize,
        /// Connections per probe.
        #[arg(long, default_value_t = 100)]
        connections: usize,
        /// Broadcasts.
        #[arg(long, default_value_t = 1_000)]
        broadcasts: u64,
        /// Runs; the median is printed.
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
    /// What `skewscope report` costs on a long run: time and peak memory as
    /// a process, on probe logs of two shapes (100 connections; one
    /// connection, a broadcast per receipt), beside the same report with
    /// every receipt held at once.
    ReportCost {
        /// Receipts per log.
        #[arg(long, default_value_t = 1_000_000)]
        receipts: u64,
        /// Time exchanges (one a second).
        #[arg(long, default_value_t = 100_000)]
        exchanges: u64,
        /// Runs; the medians are printed.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// The `skewscope` binary measured (default: the one beside this bench).
        #[arg(long, value_name = "PATH")]
        skewscope: Option<std::path::PathBuf>,
        /// Instead, write one synthetic log to FILE, of `--connections` ×
        /// `--broadcasts` receipts.
        #[arg(long, value_name = "FILE")]
        write: Option<std::path::PathBuf>,
        /// With `--write`: probe connections.
        #[arg(long, default_value_t = 100)]
        connections: u32,
        /// With `--write`: broadcasts.
        #[arg(long, default_value_t = 10_000)]
        broadcasts: u64,
        /// (Internal) the whole-run report of FILES, for the side-by-side.
        #[arg(long, value_name = "FILE", hide = true, num_args = 1..)]
        whole_run: Option<Vec<std::path::PathBuf>>,
        /// (Internal) run the rest of the line and print its time and peak memory.
        #[arg(long, hide = true, num_args = 1.., allow_hyphen_values = true)]
        peak_of: Option<Vec<std::ffi::OsString>>,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Fanout {
            sizes,
            rounds,
            pause_ms,
            json,
        } => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(fanout(
                &sizes,
                rounds,
                Duration::from_millis(pause_ms),
                json,
            ))
        }
        Command::Floor {
            sizes,
            rounds,
            netns,
            addr,
            writer_core,
        } => {
            let placement = floor::Placement {
                netns,
                addr,
                writer_core,
            };
            let rows = floor::measure(&sizes, rounds, &placement, &test_frame())?;
            println!("{}", serde_json::to_string_pretty(&rows)?);
            Ok(())
        }
        Command::FloorServer {
            listen,
            staged,
            threaded,
        } => floor_server::serve(listen, staged, threaded),
        Command::ProbeCost {
            probe_bins,
            connections,
            broadcasts,
            interval_ms,
            rounds,
            agent_deflate,
        } => probe_cost::run(
            probe_bins,
            connections,
            broadcasts,
            Duration::from_millis(interval_ms),
            rounds,
            agent_deflate,
        ),
        Command::LiveCost {
            probes,
            connections,
            broadcasts,
            runs,
        } => live_cost::run(probes, connections, broadcasts, runs),
        Command::ReportCost {
            receipts,
            exchanges,
            runs,
            skewscope,
            write,
            connections,
            broadcasts,
            whole_run,
            peak_of,
        } => match (write, whole_run, peak_of) {
            (Some(path), _, _) => report_cost::write(&path, connections, broadcasts, exchanges),
            (_, Some(path), _) => report_cost::whole_run(&path),
            (_, _, Some(command)) => report_cost::peak_of(&command),
            (None, None, None) => report_cost::run(receipts, exchanges, runs, skewscope),
        },
        Command::Upload {
            connections,
            probes,
            rounds,
            ingest_secs,
        } => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(upload::run(upload::Options {
                connections,
                probes,
                rounds,
                ingest_for: Duration::from_secs(ingest_secs),
            }))
        }
        Command::Tap { sizes, rounds } => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(tap::run(&sizes, rounds))
        }
        Command::Verdict {
            probes,
            connections,
            broadcasts,
            runs,
        } => verdict::run(verdict::Options {
            probes,
            connections,
            broadcasts,
            runs,
        }),
        Command::Scrape {
            connections,
            cycles,
            per_block,
        } => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(scrape::run(connections, cycles, per_block))
        }
        Command::Flood { secs } => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(flood::run(secs))
        }
        Command::Stamps {
            clients,
            broadcasts,
            busy_threads,
        } => {
            let busy = busy_threads
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            runtime.block_on(stamps::run(clients, broadcasts, busy))
        }
    }
}

/// One size's results, in nanoseconds.
#[derive(serde::Serialize)]
struct Row {
    clients: usize,
    floor: Summary,
    recording: Summary,
    not_recording: Summary,
    tx_stamps: Summary,
    /// TX stamps on, with one client in 100 a probe: only probes are stamped.
    tx_stamps_few_probes: Summary,
    pinned: Summary,
    one_shard: Summary,
    recorded_span: Option<Summary>,
}

async fn fanout(sizes: &[usize], rounds: usize, pause: Duration, json: bool) -> anyhow::Result<()> {
    let most = sizes.iter().copied().max().unwrap_or(0) as u32;
    // Per size: agent sockets on both ends for six agents, plus floor pairs.
    skewscope_os::files::ensure_open_files(most * 14 + 200)?;
    let frame = test_frame();
    let mut rows = Vec::new();
    for &n in sizes {
        eprintln!("bench: {n} connections, {rounds} rounds");
        rows.push(measure(n, rounds, pause, &frame).await?);
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&rows)?);
    } else {
        print_table(&rows, rounds, frame.len());
    }
    Ok(())
}

/// The exact frame the agent sends for a test broadcast.
fn test_frame() -> Vec<u8> {
    floor::text_frame(&encode_test_message(TestMessage {
        seq: 1,
        sent_wall_ns: 1_764_000_000_000_000_000,
    }))
}

async fn measure(n: usize, rounds: usize, pause: Duration, frame: &[u8]) -> anyhow::Result<Row> {
    let dir = tempfile::tempdir()?;
    let recording = RunningAgent::start(AgentConfig::local(dir.path().join("on"))).await?;
    let mut config = AgentConfig::local(dir.path().join("off"));
    config.no_send_times = true;
    let not_recording = RunningAgent::start(config).await?;
    let mut config = AgentConfig::local(dir.path().join("tx"));
    config.tx_timestamps = true;
    let tx_stamping = RunningAgent::start(config).await?;
    let mut config = AgentConfig::local(dir.path().join("tx-few"));
    config.tx_timestamps = true;
    let tx_few_probes = RunningAgent::start(config).await?;
    let mut config = AgentConfig::local(dir.path().join("pinned"));
    config.pin_shards = true;
    let pinned = RunningAgent::start(config).await?;
    let mut config = AgentConfig::local(dir.path().join("one-shard"));
    config.shards = Some(1);
    let one_shard = RunningAgent::start(config).await?;

    let mut receivers = Vec::with_capacity(6 * n);
    for (agent, probe_every) in [
        (&recording, 1),
        (&not_recording, 1),
        (&tx_stamping, 1),
        (&tx_few_probes, 100),
        (&pinned, 1),
        (&one_shard, 1),
    ] {
        // Blocking handshakes off the runtime thread, which serves the agent's accepts.
        let addr = agent.addr;
        let clients = tokio::task::spawn_blocking(move || {
            (0..n)
                .map(|i| upgrade_as(addr, i % probe_every == 0))
                .collect::<anyhow::Result<Vec<_>>>()
        })
        .await??;
        receivers.extend(clients);
        wait_for(agent, n).await?;
    }
    let (mut senders, floor_receivers) = floor::loopback_pairs(n)?;
    receivers.extend(floor_receivers);
    let _drain = Drain::start(receivers)?;

    let mut floor_spans = Vec::with_capacity(rounds);
    let mut on_spans = Vec::with_capacity(rounds);
    let mut off_spans = Vec::with_capacity(rounds);
    let mut tx_spans = Vec::with_capacity(rounds);
    let mut tx_few_spans = Vec::with_capacity(rounds);
    let mut pinned_spans = Vec::with_capacity(rounds);
    let mut one_shard_spans = Vec::with_capacity(rounds);
    for round in 0..rounds {
        // Rotate which configuration goes first, so none always follows another.
        for which in (0..7).map(|i| (round + i) % 7) {
            match which {
                0 => floor_spans.push(floor::write_all_once(&mut senders, frame)? as i64),
                1 => on_spans.push(broadcast_span(&recording).await? as i64),
                2 => off_spans.push(broadcast_span(&not_recording).await? as i64),
                3 => tx_spans.push(broadcast_span(&tx_stamping).await? as i64),
                4 => pinned_spans.push(broadcast_span(&pinned).await? as i64),
                5 => tx_few_spans.push(broadcast_span(&tx_few_probes).await? as i64),
                _ => one_shard_spans.push(broadcast_span(&one_shard).await? as i64),
            }
            tokio::time::sleep(pause).await;
        }
    }
    let log = recording.log_path.clone();
    recording.shutdown().await?;
    not_recording.shutdown().await?;
    tx_stamping.shutdown().await?;
    tx_few_probes.shutdown().await?;
    pinned.shutdown().await?;
    one_shard.shutdown().await?;
    Ok(Row {
        clients: n,
        floor: Summary::of(&floor_spans).context("no rounds")?,
        recording: Summary::of(&on_spans).context("no rounds")?,
        not_recording: Summary::of(&off_spans).context("no rounds")?,
        tx_stamps: Summary::of(&tx_spans).context("no rounds")?,
        tx_stamps_few_probes: Summary::of(&tx_few_spans).context("no rounds")?,
        pinned: Summary::of(&pinned_spans).context("no rounds")?,
        one_shard: Summary::of(&one_shard_spans).context("no rounds")?,
        recorded_span: recorded_spans(&log)?,
    })
}

/// Time from asking the hub to broadcast until every shard has finished its loop.
async fn broadcast_span(agent: &RunningAgent) -> anyhow::Result<u64> {
    let start = mono_ns();
    let sent = agent.start_test().await;
    let span = mono_ns() - start;
    ensure!(sent.clients > 0, "broadcast reached no clients");
    Ok(span)
}

/// The agent's own record: broadcast start to the last write, per broadcast.
fn recorded_spans(log: &std::path::Path) -> anyhow::Result<Option<Summary>> {
    let AnyLog::Agent(decoded) = read_file(log)? else {
        anyhow::bail!("{} is not an agent log", log.display());
    };
    let joined = skewscope_core::analysis::join::join(Some(&decoded.records), &[]);
    Ok(skewscope_core::analysis::report::Report::build(&joined, vec![]).fanout_ns)
}

async fn wait_for(agent: &RunningAgent, n: usize) -> anyhow::Result<()> {
    for _ in 0..5_000 {
        if agent.clients() >= n {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    anyhow::bail!("agent serves {} of {n} connections", agent.clients())
}

/// A raw WebSocket client named as a probe: upgrade, then leave the socket
/// to the drain.
pub(crate) fn upgrade(addr: SocketAddr) -> anyhow::Result<TcpStream> {
    upgrade_as(addr, true)
}

/// A raw WebSocket client, named as a probe (`?probe=bench`) or not.
fn upgrade_as(addr: SocketAddr, probe: bool) -> anyhow::Result<TcpStream> {
    let mut s = TcpStream::connect(addr)?;
    let path = if probe { "/ws?probe=bench" } else { "/ws" };
    s.write_all(
        format!(
            "GET {path} HTTP/1.1\r\nHost: bench\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
        .as_bytes(),
    )?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte)?;
        head.push(byte[0]);
        ensure!(head.len() < 4096, "upgrade response too long");
    }
    ensure!(head.starts_with(b"HTTP/1.1 101"), "upgrade refused");
    Ok(s)
}

pub(crate) fn us(ns: i64) -> String {
    format!("{:.1} µs", ns as f64 / 1e3)
}

fn print_table(rows: &[Row], rounds: usize, frame_len: usize) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "fan-out span, {cores} cores, {frame_len}-byte frame, {rounds} broadcasts per cell; median (p90)\n"
    );
    println!(
        "| clients | floor: 1 thread writes | agent, recording | ÷ floor | agent, not recording | ÷ floor | recording cost | agent, + TX stamps | ÷ floor | ÷ recording | + TX stamps, 1 in 100 a probe | ÷ recording | agent, pinned shards | ÷ unpinned | agent, one shard | ÷ floor | agent's own record: start → last write |"
    );
    println!(
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for r in rows {
        let ratio = |s: &Summary| s.p50 as f64 / r.floor.p50 as f64;
        let cost = r.recording.p50 as f64 / r.not_recording.p50 as f64 - 1.0;
        println!(
            "| {} | {} ({}) | {} ({}) | {:.2} | {} ({}) | {:.2} | {:+.1} % | {} ({}) | {:.2} | {:.2} | {} ({}) | {:.2} | {} ({}) | {:.2} | {} ({}) | {:.2} | {} |",
            r.clients,
            us(r.floor.p50),
            us(r.floor.p90),
            us(r.recording.p50),
            us(r.recording.p90),
            ratio(&r.recording),
            us(r.not_recording.p50),
            us(r.not_recording.p90),
            ratio(&r.not_recording),
            cost * 100.0,
            us(r.tx_stamps.p50),
            us(r.tx_stamps.p90),
            ratio(&r.tx_stamps),
            r.tx_stamps.p50 as f64 / r.recording.p50 as f64,
            us(r.tx_stamps_few_probes.p50),
            us(r.tx_stamps_few_probes.p90),
            r.tx_stamps_few_probes.p50 as f64 / r.recording.p50 as f64,
            us(r.pinned.p50),
            us(r.pinned.p90),
            r.pinned.p50 as f64 / r.recording.p50 as f64,
            us(r.one_shard.p50),
            us(r.one_shard.p90),
            ratio(&r.one_shard),
            r.recorded_span
                .map(|s| format!("{} ({})", us(s.p50), us(s.p90)))
                .unwrap_or_else(|| "-".into()),
        );
    }
}
