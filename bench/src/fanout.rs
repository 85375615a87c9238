//! `skewscope-bench fanout`: the agent's fan-out span against one thread's
//! floor, in one run, rounds interleaved (docs/benchmarks.md).

use std::time::Duration;

use agent::{AgentConfig, RunningAgent};
use anyhow::{Context, ensure};
use skewscope_core::analysis::stats::Summary;
use skewscope_core::identity::{TestMessage, encode_test_message};
use skewscope_core::log::AnyLog;
use skewscope_os::clock::mono_ns;
use skewscope_os::log_files::read_file;

use crate::drain::Drain;
use crate::floor;
use crate::format::us;
use crate::ws_client::upgrade_as;

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

/// Measures every size in `sizes` and prints the table (or JSON).
pub async fn run(
    sizes: &[usize],
    rounds: usize,
    pause: Duration,
    json: bool,
) -> anyhow::Result<()> {
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
pub fn test_frame() -> Vec<u8> {
    floor::text_frame(&encode_test_message(TestMessage {
        seq: 1,
        sent_wall_ns: 1_764_000_000_000_000_000,
        at_wall_ns: None,
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
