//! What a probe costs the device it runs on, per receipt: CPU (the
//! scheduler's own count over all its threads), peak memory per connection,
//! delivery (userspace stamp − kernel stamp), and the skew the kernel
//! stamps measure (which a change to the probe's receive path must leave
//! alone), for one or more probe builds side by side in one run, against
//! one release agent.
//!
//! Each round runs every build once, in a fresh random order, so drift of
//! this shared machine falls on all builds alike; medians over rounds are
//! printed, with each build's ratio to the first.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, ensure};
use skewscope_core::log::AnyLog;
use skewscope_core::record::{MessageKey, ProbeRecord};
use skewscope_os::log_files::read_file;

use crate::processes::{Reaped, sibling, wait_for};
use crate::upload::{AgentProcess, process_cpu};

/// One build's figures of one round.
#[derive(Clone, Copy, Debug)]
struct Round {
    cpu_per_receipt_ns: f64,
    peak_rss_kib: u64,
    delivery_p50_ns: u64,
    delivery_p99_ns: u64,
    /// Across connections, at kernel stamps: p50 over broadcasts.
    kernel_skew_p50_ns: u64,
}

/// One receipt: its broadcast, its delivery (userspace − kernel stamp) and
/// its kernel arrival on the wall clock.
struct Arrival {
    key: MessageKey,
    delivery_ns: u64,
    kernel_wall_ns: u64,
}

fn receipts_in(path: &Path) -> Vec<Arrival> {
    match read_file(path) {
        Ok(AnyLog::Probe(d)) => d
            .records
            .iter()
            .filter_map(|r| match r {
                ProbeRecord::Receipt(r) => {
                    let delivery_ns = r.kernel_delay_ns.unwrap_or(0);
                    Some(Arrival {
                        key: r.key,
                        delivery_ns,
                        kernel_wall_ns: r.at.wall_ns.saturating_sub(delivery_ns),
                    })
                }
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// p50 over broadcasts of max − min kernel arrival across connections.
fn kernel_skew_p50(receipts: &[Arrival]) -> u64 {
    let mut spans: HashMap<MessageKey, (u64, u64)> = HashMap::new();
    for r in receipts {
        let e = spans
            .entry(r.key)
            .or_insert((r.kernel_wall_ns, r.kernel_wall_ns));
        e.0 = e.0.min(r.kernel_wall_ns);
        e.1 = e.1.max(r.kernel_wall_ns);
    }
    let mut skews: Vec<u64> = spans.values().map(|(lo, hi)| hi - lo).collect();
    skews.sort_unstable();
    skews.get(skews.len() / 2).copied().unwrap_or(0)
}

fn opened_in(path: &Path) -> usize {
    match read_file(path) {
        Ok(AnyLog::Probe(d)) => d
            .records
            .iter()
            .filter(|r| matches!(r, ProbeRecord::ConnectionOpened(_)))
            .count(),
        _ => 0,
    }
}

fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn one_round(
    probe: &Path,
    agent: &AgentProcess,
    dir: &Path,
    connections: u32,
    broadcasts: u32,
    interval: Duration,
) -> anyhow::Result<Round> {
    let log = dir.join(format!("probe-{}.sklog", fastrand::u64(..)));
    let child = Reaped(
        Command::new(probe)
            .args(["--url", &format!("ws://{}/ws", agent.addr)])
            .args(["--connections", &connections.to_string(), "--name", "cost"])
            .arg("--out")
            .arg(&log)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot run {}", probe.display()))?,
    );
    let limit = Duration::from_secs(60);
    wait_for("every connection open", limit, || {
        opened_in(&log) == connections as usize
    })?;
    // Settled: the connect burst is not what is measured.
    std::thread::sleep(Duration::from_millis(300));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let before = process_cpu(child.0.id())?;
    for _ in 0..broadcasts {
        let r = runtime.block_on(agent::http_client::start_test(agent.addr, None))?;
        ensure!(r.status == 200, "start_test: {}", r.body);
        std::thread::sleep(interval);
    }
    let want = connections as usize * broadcasts as usize;
    wait_for("every receipt on disk", limit, || {
        receipts_in(&log).len() >= want
    })?;
    let cpu = process_cpu(child.0.id())? - before;
    let peak = peak_rss_kib(child.0.id());
    drop(child);
    let receipts = receipts_in(&log);
    let mut delays: Vec<u64> = receipts.iter().map(|r| r.delivery_ns).collect();
    delays.sort_unstable();
    let at = |q: f64| delays[((delays.len() - 1) as f64 * q) as usize];
    Ok(Round {
        cpu_per_receipt_ns: cpu.as_nanos() as f64 / want as f64,
        peak_rss_kib: peak,
        delivery_p50_ns: at(0.5),
        delivery_p99_ns: at(0.99),
        kernel_skew_p50_ns: kernel_skew_p50(&receipts),
    })
}

/// Runs `rounds` rounds of every build in `probes` (default: this
/// benchmark's sibling `skewscope-probe`) and prints the medians.
pub fn run(
    probes: Vec<PathBuf>,
    connections: u32,
    broadcasts: u32,
    interval: Duration,
    rounds: usize,
    agent_deflate: bool,
) -> anyhow::Result<()> {
    let probes = if probes.is_empty() {
        vec![sibling("skewscope-probe")?]
    } else {
        probes
    };
    let dir = tempfile::tempdir()?;
    let agent_args: &[&str] = if agent_deflate {
        &[]
    } else {
        &["--no-deflate"]
    };
    let agent = AgentProcess::start(&dir.path().join("agent"), agent_args)?;
    let mut results: Vec<Vec<Round>> = vec![Vec::new(); probes.len()];
    for round in 0..rounds.max(1) {
        let mut order: Vec<usize> = (0..probes.len()).collect();
        fastrand::shuffle(&mut order);
        for i in order {
            let r = one_round(
                &probes[i],
                &agent,
                dir.path(),
                connections,
                broadcasts,
                interval,
            )?;
            eprintln!("round {}: {}: {r:?}", round + 1, probes[i].display());
            results[i].push(r);
        }
    }
    agent.stop()?;
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "probe cost: {connections} connections, {broadcasts} broadcasts {interval:?} apart, one release agent ({}), median of {rounds} rounds (builds interleaved)\n",
        if agent_deflate {
            "permessage-deflate on: builds that offer it inflate"
        } else {
            "--no-deflate: plain frames"
        }
    );
    println!(
        "| probe build | CPU per receipt | ÷ first | peak RSS per connection | delivery p50 | delivery p99 | skew at kernel stamps p50 |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let first = median(results[0].iter().map(|r| r.cpu_per_receipt_ns).collect());
    for (probe, rs) in probes.iter().zip(&results) {
        let cpu = median(rs.iter().map(|r| r.cpu_per_receipt_ns).collect());
        let rss = median(rs.iter().map(|r| r.peak_rss_kib as f64).collect());
        let p50 = median(rs.iter().map(|r| r.delivery_p50_ns as f64).collect());
        let p99 = median(rs.iter().map(|r| r.delivery_p99_ns as f64).collect());
        let skew = median(rs.iter().map(|r| r.kernel_skew_p50_ns as f64).collect());
        println!(
            "| {} | {:.2} µs | {:.2} | {:.1} KiB | {:.1} µs | {:.1} µs | {:.1} µs |",
            probe.display(),
            cpu / 1e3,
            cpu / first,
            rss / f64::from(connections),
            p50 / 1e3,
            p99 / 1e3,
            skew / 1e3
        );
    }
    Ok(())
}
