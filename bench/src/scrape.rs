//! `skewscope-bench scrape`: whether Prometheus scraping `/metrics` disturbs
//! the fan-out. One release agent with N drained clients. Blocks of
//! broadcasts 50 ms apart, in a fresh random order each cycle:
//! - no scrape;
//! - a scrape every 100 ms (Prometheus at ten times its usual rate);
//! - a scrape at each broadcast's moment (the worst case).
//!
//! Fan-out spans come from the agent's own log. Each load's median is also
//! taken as a ratio to the quiet block of its cycle, so the machine's drift
//! cancels.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use skewscope_core::analysis::join::{BroadcastKey, join};
use skewscope_core::analysis::stats::Summary;
use skewscope_core::log::AnyLog;
use skewscope_os::log_files::read_file;

use crate::drain::Drain;
use crate::upload::AgentProcess;

const PAUSE: Duration = Duration::from_millis(50);
const EVERY: Duration = Duration::from_millis(100);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Load {
    None,
    Every100ms,
    AtTheBroadcast,
}

const LOADS: [Load; 3] = [Load::None, Load::Every100ms, Load::AtTheBroadcast];

/// Runs `cycles` cycles of the three blocks, `per_block` broadcasts each.
pub async fn run(connections: usize, cycles: usize, per_block: usize) -> anyhow::Result<()> {
    skewscope_os::files::ensure_open_files(connections as u32 * 2 + 64)?;
    let dir = tempfile::tempdir()?;
    let agent = AgentProcess::start(dir.path(), &[])?;
    let addr = agent.addr;
    let _drain = Drain::upgraded(addr, connections).await?;
    let scrape = move || async move {
        let r = agent::http_client::request(addr, "GET", "/metrics", b"", None).await?;
        ensure!(r.status == 200, "/metrics: {}", r.status);
        anyhow::Ok(r.body.len())
    };
    let mut load_of: HashMap<u64, (usize, Load)> = HashMap::new();
    let mut order = LOADS;
    let mut scraped = 0usize;
    for cycle in 0..cycles {
        fastrand::shuffle(&mut order);
        for &load in &order {
            let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
            let background = (load == Load::Every100ms).then(|| {
                tokio::spawn(async move {
                    let mut n = 0usize;
                    let mut tick = tokio::time::interval(EVERY);
                    loop {
                        tokio::select! {
                            _ = tick.tick() => {
                                scrape().await?;
                                n += 1;
                            }
                            _ = stop_rx.changed() => return anyhow::Ok(n),
                        }
                    }
                })
            });
            for _ in 0..per_block {
                let trigger = agent::http_client::start_test(addr, None);
                let sent = if load == Load::AtTheBroadcast {
                    let (sent, got) = tokio::join!(trigger, scrape());
                    got?;
                    scraped += 1;
                    sent?
                } else {
                    trigger.await?
                };
                ensure!(sent.status == 200, "start_test: {}", sent.body);
                let id = serde_json::from_str::<serde_json::Value>(&sent.body)?["broadcast"]
                    .as_u64()
                    .context("no broadcast id")?;
                load_of.insert(id, (cycle, load));
                tokio::time::sleep(PAUSE).await;
            }
            let _ = stop_tx.send(true);
            if let Some(b) = background {
                scraped += b.await??;
            }
        }
    }
    let log = agent.stop()?;
    let AnyLog::Agent(decoded) = read_file(&log)? else {
        bail!("not an agent log");
    };
    let joined = join(Some(&decoded.records), &[]);
    let mut by_load: HashMap<Load, Vec<i64>> = HashMap::new();
    let mut by_cycle: HashMap<(usize, Load), Vec<i64>> = HashMap::new();
    for b in &joined.broadcasts {
        let (BroadcastKey::Agent { id, .. }, Some(span)) =
            (b.key, b.agent.and_then(|a| a.fanout_span_ns))
        else {
            continue;
        };
        if let Some(&(cycle, load)) = load_of.get(&id) {
            by_load.entry(load).or_default().push(span as i64);
            by_cycle.entry((cycle, load)).or_default().push(span as i64);
        }
    }
    let median = |v: &[i64]| Summary::of(v).map(|s| s.p50 as f64);
    println!(
        "scrape benchmark: {connections} connections, {cycles} cycles of 3 blocks of {per_block} broadcasts {} ms apart, block order shuffled per cycle; {scraped} scrapes\n",
        PAUSE.as_millis()
    );
    println!(
        "| load | fan-out span p50 | p90 | n | p50 ÷ no scrape | median of block ÷ its cycle's quiet block |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let quiet = median(&by_load[&Load::None]).context("no quiet broadcasts")?;
    for (load, name) in LOADS.iter().zip([
        "no scrape",
        "a scrape every 100 ms",
        "a scrape at each broadcast's moment",
    ]) {
        let s = Summary::of(&by_load[load]).context("no broadcasts")?;
        let mut ratios: Vec<f64> = (0..cycles)
            .filter_map(|c| {
                Some(median(by_cycle.get(&(c, *load))?)? / median(by_cycle.get(&(c, Load::None))?)?)
            })
            .collect();
        ratios.sort_by(f64::total_cmp);
        let paired = ratios.get(ratios.len() / 2).copied().unwrap_or(f64::NAN);
        println!(
            "| {name} | {} | {} | {} | {:.3} | {paired:.3} |",
            crate::format::us(s.p50),
            crate::format::us(s.p90),
            s.count,
            s.p50 as f64 / quiet
        );
    }
    Ok(())
}
