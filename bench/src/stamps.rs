//! `skewscope-bench stamps`: kernel against userspace receipt stamps, idle and
//! with busy threads on every core of the probe's machine, in one run.
//!
//! The userspace stamp is taken when the probe's task runs after the frame is
//! complete; under CPU pressure that can be long after the packet arrived. The
//! kernel's receive stamp is not delayed by scheduling, so the skew measured at
//! kernel stamps should stay put while the userspace one grows.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agent::{AgentConfig, RunningAgent};
use anyhow::ensure;
use probe::{ProbeConfig, RunningProbe};
use skewscope_core::analysis::report::Report;
use skewscope_core::analysis::stats::Summary;
use skewscope_core::log::AnyLog;
use skewscope_os::log_files::read_file;

/// Longest a stress phase may run, whatever was asked.
const PHASE_LIMIT: Duration = Duration::from_secs(60);

/// One phase's figures.
struct Phase {
    name: String,
    delivery: Option<Summary>,
    skew_kernel: Option<Summary>,
    skew_userspace: Option<Summary>,
    without_kernel_stamp: u64,
}

/// Runs both phases and prints them side by side.
pub async fn run(clients: u32, broadcasts: u32, busy_threads: usize) -> anyhow::Result<()> {
    let idle = phase("idle", clients, broadcasts, 0).await?;
    let busy = phase(
        &format!("{busy_threads} busy threads"),
        clients,
        broadcasts,
        busy_threads,
    )
    .await?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "receipt stamps, kernel vs userspace: {clients} connections, {broadcasts} broadcasts, {cores} cores; p50 / p99 / max\n"
    );
    println!(
        "| load | userspace − kernel stamp | skew at kernel stamps | skew at userspace stamps | receipts without kernel stamp |"
    );
    println!("|---|---:|---:|---:|---:|");
    for p in [idle, busy] {
        println!(
            "| {} | {} | {} | {} | {} |",
            p.name,
            triple(&p.delivery),
            triple(&p.skew_kernel),
            triple(&p.skew_userspace),
            p.without_kernel_stamp
        );
    }
    Ok(())
}

fn triple(s: &Option<Summary>) -> String {
    match s {
        Some(s) => format!(
            "{:.1} / {:.1} / {:.1} µs",
            s.p50 as f64 / 1e3,
            s.p99 as f64 / 1e3,
            s.max as f64 / 1e3
        ),
        None => "-".into(),
    }
}

async fn phase(name: &str, clients: u32, broadcasts: u32, busy: usize) -> anyhow::Result<Phase> {
    eprintln!("bench: stamps, {name}");
    let dir = tempfile::tempdir()?;
    let agent = RunningAgent::start(AgentConfig::local(dir.path().to_owned())).await?;
    let out = dir.path().join("probe.sklog");
    let mut config = ProbeConfig::new(format!("ws://{}/ws", agent.addr), &out);
    config.connections = clients;
    config.count = Some(u64::from(broadcasts));
    let probe = RunningProbe::start(config).await?;
    ensure!(
        probe.connected().await.opened == clients,
        "not every connection opened"
    );
    while agent.clients() < clients as usize {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + PHASE_LIMIT;
    let spinners: Vec<_> = (0..busy)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                    x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();
    for _ in 0..broadcasts {
        agent::http_client::start_test(agent.addr, None).await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let summary = tokio::time::timeout(Duration::from_secs(30), probe.finish()).await;
    stop.store(true, Ordering::Relaxed);
    for s in spinners {
        let _ = s.join();
    }
    summary??;
    agent.shutdown().await?;

    let AnyLog::Probe(decoded) = read_file(&out)? else {
        anyhow::bail!("{} is not a probe log", out.display());
    };
    let joined = skewscope_core::analysis::join::join(None, &[&decoded.records]);
    let report = Report::build(&joined, vec![]);
    Ok(Phase {
        name: name.to_owned(),
        delivery: report.delivery_ns,
        skew_kernel: report.skew_ns,
        skew_userspace: report.skew_userspace_ns,
        without_kernel_stamp: report.receipts_without_kernel_stamp,
    })
}
