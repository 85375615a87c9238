//! `skewscope-bench idle`: what an agent with nothing to do costs a
//! low-power box. Each agent binary given runs with no client and no
//! broadcast; after it settles, every thread's scheduler counters
//! (`/proc/PID/task/*/schedstat`: time on a CPU, and times it was run) are
//! read twice, `--secs` apart. Runs of several builds are interleaved, so
//! they share the machine's noise.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, ensure};

/// One thread's counters at one moment.
#[derive(Clone, Debug, Default)]
struct ThreadStat {
    name: String,
    cpu_ns: u64,
    runs: u64,
}

/// What one agent cost over the window.
#[derive(Debug, serde::Serialize)]
struct Idle {
    agent: String,
    secs: f64,
    wakeups_per_sec: f64,
    cpu_ms_per_sec: f64,
    /// Threads that ran at all, with their runs per second.
    busy_threads: Vec<(String, f64)>,
}

/// Measures each agent binary in `agents` for `secs`, `rounds` times.
pub fn run(agents: Vec<PathBuf>, secs: u64, rounds: usize, json: bool) -> anyhow::Result<()> {
    let agents = if agents.is_empty() {
        let own = std::env::current_exe()?
            .parent()
            .context("the bench binary has no directory")?
            .join("skewscope-agent");
        vec![own]
    } else {
        agents
    };
    let mut results = Vec::new();
    for round in 0..rounds {
        for agent in &agents {
            eprintln!("bench: idle round {}: {}", round + 1, agent.display());
            results.push(measure(agent, Duration::from_secs(secs))?);
        }
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&results)?);
        return Ok(());
    }
    println!("an idle agent (no client, no broadcast), {secs} s per sitting\n");
    println!("| agent | wake-ups / s | CPU ms / s | threads that ran (runs / s) |");
    println!("|---|---:|---:|---|");
    for r in &results {
        let threads: Vec<String> = r
            .busy_threads
            .iter()
            .map(|(name, per_sec)| format!("{name} {per_sec:.1}"))
            .collect();
        println!(
            "| {} | {:.2} | {:.3} | {} |",
            r.agent,
            r.wakeups_per_sec,
            r.cpu_ms_per_sec,
            threads.join(", ")
        );
    }
    Ok(())
}

fn measure(agent: &Path, window: Duration) -> anyhow::Result<Idle> {
    let dir = tempfile::tempdir()?;
    let mut child = Command::new(agent)
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("cannot start {}", agent.display()))?;
    let result = (|| {
        let stdout = child.stdout.take().context("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        // Started once it says where it records.
        loop {
            let line = lines
                .next()
                .context("the agent exited before it started")??;
            if line.starts_with("recording to") {
                break;
            }
        }
        // Let start-up work (the first clock reading, the first records) pass.
        std::thread::sleep(Duration::from_secs(2));
        let pid = child.id();
        let before = threads(pid)?;
        let started = std::time::Instant::now();
        std::thread::sleep(window);
        let after = threads(pid)?;
        let secs = started.elapsed().as_secs_f64();
        let mut busy = Vec::new();
        let (mut runs, mut cpu_ns) = (0u64, 0u64);
        for (tid, a) in &after {
            let b = before.iter().find(|(t, _)| t == tid).map(|(_, b)| b);
            let (r, c) = match b {
                Some(b) => (a.runs - b.runs, a.cpu_ns - b.cpu_ns),
                None => (a.runs, a.cpu_ns),
            };
            runs += r;
            cpu_ns += c;
            if r > 0 {
                busy.push((a.name.clone(), r as f64 / secs));
            }
        }
        busy.sort_by(|a, b| b.1.total_cmp(&a.1));
        Ok(Idle {
            agent: agent.display().to_string(),
            secs,
            wakeups_per_sec: runs as f64 / secs,
            cpu_ms_per_sec: cpu_ns as f64 / 1e6 / secs,
            busy_threads: busy,
        })
    })();
    stop(&mut child);
    result
}

/// Every thread of `pid`: its id and counters.
fn threads(pid: u32) -> anyhow::Result<Vec<(String, ThreadStat)>> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        let task = task?.path();
        let tid = task
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let (Ok(sched), Ok(comm)) = (
            std::fs::read_to_string(task.join("schedstat")),
            std::fs::read_to_string(task.join("comm")),
        ) else {
            continue; // the thread ended meanwhile
        };
        let fields: Vec<u64> = sched
            .split_whitespace()
            .filter_map(|f| f.parse().ok())
            .collect();
        ensure!(fields.len() >= 3, "unexpected schedstat: {sched}");
        out.push((
            tid,
            ThreadStat {
                name: comm.trim().to_owned(),
                cpu_ns: fields[0],
                runs: fields[2],
            },
        ));
    }
    Ok(out)
}

/// SIGTERM, then wait (it flushes and exits).
fn stop(child: &mut Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
}
