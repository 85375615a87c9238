//! `skewscope-bench verdict`: how long `skewscope audit` takes from its last
//! broadcast to its verdict, on the release binaries: one agent, P probe
//! processes of C connections each uploading to it, and the audit run R
//! times. Also times one `skewscope report` of the audit's copy of the logs:
//! the work an audit does after `--settle` when receipts are missing.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};

use crate::processes::sibling;
use crate::upload::AgentProcess;

/// What to measure.
pub struct Options {
    /// Probe processes.
    pub probes: usize,
    /// Connections per probe.
    pub connections: usize,
    /// Broadcasts per audit.
    pub broadcasts: u64,
    /// Audits; the median is printed.
    pub runs: usize,
}

/// Kills the probes when the benchmark ends, however it ends.
struct Probes(Vec<Child>);

impl Drop for Probes {
    fn drop(&mut self) {
        for p in &mut self.0 {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}

/// Runs the benchmark and prints its figures.
pub fn run(options: Options) -> anyhow::Result<()> {
    let total = options.probes * options.connections;
    skewscope_os::files::ensure_open_files(total as u32 * 2 + 64)?;
    let dir = tempfile::tempdir()?;
    let agent = AgentProcess::start(&dir.path().join("agent"), &[])?;
    let addr = agent.addr;
    let mut probes = Probes(Vec::new());
    for p in 0..options.probes {
        let probe = Command::new(sibling("skewscope-probe")?)
            .args(["--url", &format!("ws://{addr}/ws")])
            .args(["--connections", &options.connections.to_string()])
            .args(["--name", &format!("kiosk-{p}")])
            .args(["--upload", &format!("http://{addr}")])
            .args(["--duration", "600s"])
            .arg("--out")
            .arg(dir.path().join(format!("kiosk-{p}.sklog")))
            .stderr(Stdio::null())
            .spawn()?;
        probes.0.push(probe);
    }
    let status = || -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::from_str(&get(addr, "/audit/status")?)?)
    };
    let ready = Instant::now();
    loop {
        let s = status()?;
        let uploading = s["probes"]
            .as_array()
            .map_or(0, |p| p.iter().filter(|p| p["uploading"] == true).count());
        if uploading == options.probes && s["clients"].as_u64() == Some(total as u64) {
            break;
        }
        ensure!(
            ready.elapsed() < Duration::from_secs(60),
            "probes not ready in 60 s: {s}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "bench: {} probes × {} connections uploading; {} audits of {} broadcasts",
        options.probes, options.connections, options.runs, options.broadcasts
    );

    let mut verdicts = Vec::new();
    let mut reports = Vec::new();
    for run in 0..options.runs {
        let keep = dir.path().join(format!("copy-{run}"));
        let json = dir.path().join(format!("audit-{run}.json"));
        let o = Command::new(sibling("skewscope")?)
            .args(["audit", "--agent", &format!("http://{addr}")])
            .args(["--broadcasts", &options.broadcasts.to_string()])
            .args(["--interval", "200ms", "--settle", "5s"])
            .args(["--require-probes", &options.probes.to_string()])
            .args(["--max-skew-p99", "1s", "--json"])
            .arg(&json)
            .arg("--keep")
            .arg(&keep)
            .stdout(Stdio::null())
            .output()?;
        ensure!(
            o.status.code() == Some(0),
            "audit exit {:?}: {}",
            o.status.code(),
            String::from_utf8_lossy(&o.stderr)
        );
        let audit: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
        ensure!(
            audit["audit"]["complete"] == true,
            "audit incomplete: {}",
            audit["audit"]
        );
        ensure!(
            audit["report"]["receipts"].as_u64() == Some(total as u64 * options.broadcasts),
            "receipts: {}",
            audit["report"]["receipts"]
        );
        verdicts.push(
            audit["audit"]["last_broadcast_to_verdict_ms"]
                .as_u64()
                .context("no time")?,
        );
        reports.push(time_report(&keep, &audit)?);
    }
    drop(probes);
    agent.stop()?;
    verdicts.sort_unstable();
    reports.sort_unstable();
    println!(
        "audit of {} connections ({} probes), {} broadcasts 200 ms apart, --settle 5s; {} runs\n",
        total, options.probes, options.broadcasts, options.runs
    );
    println!("| | median | min | max |");
    println!("|---|---:|---:|---:|");
    let row = |name: &str, v: &[u64]| {
        println!(
            "| {name} | {} ms | {} ms | {} ms |",
            v[v.len() / 2],
            v[0],
            v[v.len() - 1]
        )
    };
    row("last broadcast → verdict (all receipts in)", &verdicts);
    row(
        "one report of the audit's copy (the work after --settle)",
        &reports,
    );
    Ok(())
}

/// Milliseconds `skewscope report` takes on the audit's copy.
fn time_report(copy: &Path, audit: &serde_json::Value) -> anyhow::Result<u64> {
    let range = audit["audit"]["reproduce"]
        .as_str()
        .and_then(|r| r.rsplit(' ').next())
        .context("no reproduce line")?
        .to_owned();
    let start = Instant::now();
    let o = Command::new(sibling("skewscope")?)
        .arg("report")
        .arg(copy)
        .args(["--broadcasts", &range])
        .stdout(Stdio::null())
        .output()?;
    ensure!(o.status.success(), "report failed");
    Ok(start.elapsed().as_millis() as u64)
}

/// A GET to the agent, expecting 200.
fn get(addr: std::net::SocketAddr, path: &str) -> anyhow::Result<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let r = runtime.block_on(agent::http_client::request(addr, "GET", path, b"", None))?;
    ensure!(r.status == 200, "{path}: {}", r.status);
    Ok(r.body)
}
