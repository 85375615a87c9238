//! What a report costs on a long run: `skewscope report` as a process on
//! synthetic probe logs (10^6 receipts and 10^5 time exchanges by default;
//! a day of exchanges at one a second is 86,400), its time and peak memory
//! beside those of the same report with every receipt held at once.

use std::process::Command;
use std::time::Instant;

use anyhow::Context;
use skewscope_core::Stamp;
use skewscope_core::analysis::join::join;
use skewscope_core::analysis::report::Report;
use skewscope_core::log::{AnyLog, LogKind, LogWriter};
use skewscope_core::record::{
    AgentRecord, AgentStarted, BroadcastStarted, MessageKey, ProbeRecord, Receipt, SendOrder,
    SendOutcome, SendSlot, ShardSends, TimeSample,
};
use skewscope_os::log_files::read_file;

/// Wall-clock origin of the synthetic run.
const T0: u64 = 1_764_000_000_000_000_000;

/// One probe's log: `connections` × `broadcasts` receipts (a broadcast every
/// `span / broadcasts`) and `exchanges` time samples spread over the same span,
/// with a clock 3 ms ahead of the agent's and 40–440 µs round trips.
fn synthetic_log(connections: u32, broadcasts: u64, exchanges: u64) -> Vec<u8> {
    probe_log(connections, broadcasts, exchanges, false)
}

/// [`synthetic_log`]; with `hub`, its connections are the agent's 1..=N.
fn probe_log(connections: u32, broadcasts: u64, exchanges: u64, hub: bool) -> Vec<u8> {
    let span_ns = exchanges * 1_000_000_000;
    let at = |mono: u64| Stamp {
        wall_ns: T0 + mono + 3_000_000,
        mono_ns: mono,
    };
    let mut log = LogWriter::new(Vec::new(), LogKind::Probe).expect("Vec never fails");
    let mut put = |r: ProbeRecord| log.append(&r).expect("Vec never fails");
    put(skewscope_core::fixtures::probe_started_on(
        "long-run",
        "bench",
        connections,
        at(0),
    ));
    for conn in 0..connections {
        put(skewscope_core::fixtures::connection_opened(
            conn,
            hub.then_some(u64::from(conn) + 1),
            at(1),
        ));
    }
    let mut rng = fastrand::Rng::with_seed(7);
    let (mut next_exchange, mut next_broadcast) = (0u64, 0u64);
    while next_exchange < exchanges || next_broadcast < broadcasts {
        let exchange_at = next_exchange * 1_000_000_000 + 500_000;
        let broadcast_at = next_broadcast * (span_ns / broadcasts) + 2_000_000;
        if next_exchange < exchanges
            && (exchange_at <= broadcast_at || next_broadcast == broadcasts)
        {
            let rtt = 40_000 + rng.u64(0..400_000);
            put(ProbeRecord::TimeSample(TimeSample {
                t1: at(exchange_at),
                t2_wall_ns: T0 + exchange_at + rtt / 2,
                t3_wall_ns: T0 + exchange_at + rtt / 2 + 5_000,
                t4: at(exchange_at + rtt + 5_000),
            }));
            next_exchange += 1;
        } else {
            for conn in 0..connections {
                put(ProbeRecord::Receipt(Receipt {
                    kernel_delay_ns: Some(20_000),
                    ..skewscope_core::fixtures::receipt(
                        conn,
                        MessageKey::Seq(next_broadcast),
                        next_broadcast,
                        at(broadcast_at + u64::from(conn) * 1_000),
                    )
                }));
            }
            next_broadcast += 1;
        }
    }
    log.into_inner()
}

/// The agent's log of a hub with `clients` clients and `broadcasts`
/// broadcasts timed as [`probe_log`]'s, every copy written 1 µs apart.
fn agent_log(clients: u64, broadcasts: u64, exchanges: u64) -> Vec<u8> {
    let span_ns = exchanges * 1_000_000_000;
    let at = |mono: u64| Stamp {
        wall_ns: T0 + mono,
        mono_ns: mono,
    };
    let mut log = LogWriter::new(Vec::new(), LogKind::Agent).expect("Vec never fails");
    let mut put = |r: AgentRecord| log.append(&r).expect("Vec never fails");
    put(AgentRecord::Started(AgentStarted {
        host: "bench".into(),
        version: "bench".into(),
        at: at(0),
        shards: 1,
        order: SendOrder::Fixed,
        per_client_times: true,
    }));
    for n in 0..broadcasts {
        let start = n * (span_ns / broadcasts) + 1_900_000;
        put(AgentRecord::Broadcast(BroadcastStarted {
            id: n,
            seq: Some(n),
            hash: n,
            len: 450,
            text: true,
            at: at(start),
        }));
        put(AgentRecord::ShardSends(ShardSends {
            broadcast: n,
            shard: 0,
            loop_start_mono_ns: start,
            slots: (1..=clients)
                .map(|conn| SendSlot {
                    conn,
                    position: conn as u32 - 1,
                    outcome: SendOutcome::Written,
                    mono_ns: start + conn * 1_000,
                })
                .collect(),
        }));
    }
    log.into_inner()
}

/// Writes the synthetic log to `path`.
pub fn write(
    path: &std::path::Path,
    connections: u32,
    broadcasts: u64,
    exchanges: u64,
) -> anyhow::Result<()> {
    let bytes = synthetic_log(connections, broadcasts, exchanges);
    std::fs::write(path, &bytes)?;
    println!("{}: {} bytes", path.display(), bytes.len());
    Ok(())
}

/// One measured process: wall time and peak resident memory.
#[derive(Clone, Copy)]
struct Cost {
    secs: f64,
    peak_kib: u64,
}

/// Runs `command` as a child of a fresh process of this bench (so that its
/// children's peak memory is this one's), and reads back what it cost.
fn measure(command: &[&std::ffi::OsStr]) -> anyhow::Result<Cost> {
    let out = Command::new(std::env::current_exe()?)
        .args(["report-cost", "--peak-of"])
        .args(command)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "{:?} failed: {}",
        command,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace();
    let (Some(secs), Some(peak)) = (words.next(), words.next()) else {
        anyhow::bail!("no measurement from {command:?}: {text}");
    };
    Ok(Cost {
        secs: secs.parse()?,
        peak_kib: peak.parse()?,
    })
}

/// `--peak-of`: runs `command`, discarding its output, and prints its wall
/// time and its peak resident memory (this process's only child).
pub fn peak_of(command: &[std::ffi::OsString]) -> anyhow::Result<()> {
    let (program, args) = command.split_first().context("nothing to run")?;
    let t = Instant::now();
    let status = Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()?;
    let secs = t.elapsed().as_secs_f64();
    anyhow::ensure!(status.success(), "{program:?} exited with {status}");
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)?;
    println!("{secs} {}", usage.max_rss());
    Ok(())
}

/// `--whole-run`: the report of a probe log with every record decoded and
/// every receipt joined at once (the collector's design before it
/// streamed), for the side-by-side.
pub fn whole_run(paths: &[std::path::PathBuf]) -> anyhow::Result<()> {
    let (mut agent, mut probes) = (None, Vec::new());
    for path in paths {
        match read_file(path)? {
            AnyLog::Agent(d) => agent = Some(d.records),
            AnyLog::Probe(d) => probes.push(d.records),
        }
    }
    let probes: Vec<&[ProbeRecord]> = probes.iter().map(Vec::as_slice).collect();
    let r = Report::build(&join(agent.as_deref(), &probes), Vec::new());
    println!("{} receipts", r.receipts);
    Ok(())
}

/// Writes logs of `receipts` receipts in two shapes (100 connections, and
/// one connection: a broadcast per receipt), and a hub's agent log of
/// `receipts` copies to 1,000 clients with a 10-connection probe among them;
/// runs `skewscope report` on each as a process and the whole-run report
/// beside it, `runs` times, and prints the medians side by side.
pub fn run(
    receipts: u64,
    exchanges: u64,
    runs: usize,
    skewscope: Option<std::path::PathBuf>,
) -> anyhow::Result<()> {
    let skewscope = match skewscope {
        Some(path) => path,
        None => std::env::current_exe()?
            .parent()
            .context("the bench's directory")?
            .join("skewscope"),
    };
    anyhow::ensure!(
        skewscope.is_file(),
        "{} not found: build it (cargo build --release --bins) or pass --skewscope",
        skewscope.display()
    );
    let dir = tempfile::tempdir()?;
    let me = std::env::current_exe()?;
    println!(
        "report cost: `skewscope report` ({}) on synthetic probe logs of {receipts} receipts and {exchanges} time exchanges, as processes; median of {runs} runs",
        skewscope.display()
    );
    println!(
        "{:<52} {:>8}  {:>9} {:>9}  {:>9} {:>9}  {:>11} {:>9}",
        "shape",
        "file MB",
        "streamed",
        "peak MB",
        "whole run",
        "peak MB",
        "peak÷whole",
        "peak÷file"
    );
    // (label, probe connections, hub clients: 0 for no agent log).
    let hub_clients = 1_000u64;
    let shapes = [
        (
            format!("100 conn × {} broadcasts", receipts / 100),
            100u32,
            0u64,
        ),
        (format!("1 conn × {receipts} broadcasts"), 1, 0),
        (
            format!(
                "hub: {hub_clients} clients × {} broadcasts, 10 probe conns",
                receipts / hub_clients
            ),
            10,
            hub_clients,
        ),
    ];
    for (label, connections, clients) in shapes {
        let broadcasts = receipts
            .checked_div(clients)
            .unwrap_or(receipts / u64::from(connections))
            .max(1);
        let mut logs = Vec::new();
        let mut file_bytes = 0usize;
        if clients > 0 {
            let path = dir.path().join("agent.sklog");
            let bytes = agent_log(clients, broadcasts, exchanges);
            file_bytes += bytes.len();
            std::fs::write(&path, bytes)?;
            logs.push(path);
        }
        let path = dir.path().join("probe.sklog");
        let bytes = probe_log(connections, broadcasts, exchanges, clients > 0);
        file_bytes += bytes.len();
        std::fs::write(&path, bytes)?;
        logs.push(path);
        let file_mb = file_bytes as f64 / 1e6;
        let (mut streamed, mut whole) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            let mut report: Vec<&std::ffi::OsStr> = vec![skewscope.as_os_str(), "report".as_ref()];
            report.extend(logs.iter().map(|l| l.as_os_str()));
            streamed.push(measure(&report)?);
            let mut whole_run: Vec<&std::ffi::OsStr> = vec![
                me.as_os_str(),
                "report-cost".as_ref(),
                "--whole-run".as_ref(),
            ];
            whole_run.extend(logs.iter().map(|l| l.as_os_str()));
            whole.push(measure(&whole_run)?);
        }
        let (s, w) = (median(&streamed), median(&whole));
        let mb = |kib: u64| kib as f64 * 1024.0 / 1e6;
        println!(
            "{:<52} {:>8.1}  {:>7.2} s {:>9.1}  {:>7.2} s {:>9.1}  {:>11.3} {:>9.2}",
            label,
            file_mb,
            s.secs,
            mb(s.peak_kib),
            w.secs,
            mb(w.peak_kib),
            s.peak_kib as f64 / w.peak_kib as f64,
            mb(s.peak_kib) / file_mb,
        );
        for log in logs {
            std::fs::remove_file(log)?;
        }
    }
    Ok(())
}

/// Medians of time and of peak memory, each on its own.
fn median(costs: &[Cost]) -> Cost {
    let mut secs: Vec<f64> = costs.iter().map(|c| c.secs).collect();
    let mut peaks: Vec<u64> = costs.iter().map(|c| c.peak_kib).collect();
    secs.sort_by(f64::total_cmp);
    peaks.sort_unstable();
    Cost {
        secs: secs[secs.len() / 2],
        peak_kib: peaks[peaks.len() / 2],
    }
}
