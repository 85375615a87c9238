//! The benchmarks' child processes: finding the release binaries beside
//! this one, killing a child when a run fails half way, waiting on a
//! condition with a limit, and reading a probe's log as it grows.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::ensure;
use skewscope_core::log::AnyLog;
use skewscope_core::record::ProbeRecord;
use skewscope_os::log_files::read_file;

/// A sibling release binary of this benchmark.
pub fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe()?;
    let path = me.with_file_name(name);
    ensure!(
        path.exists(),
        "{} is missing: build it first (cargo build --release --bins)",
        path.display()
    );
    Ok(path)
}

/// A child killed and reaped when dropped, so a run that fails half way
/// leaves no process behind.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `done` until it holds, or fails after `limit`.
pub fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> anyhow::Result<()> {
    let start = Instant::now();
    while !done() {
        ensure!(
            start.elapsed() < limit,
            "{what} did not happen in {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Asks every probe of `probes` to stop (SIGTERM, so each writes its stop
/// record), then waits for them all.
pub fn stop_probes(probes: &mut [(Reaped, PathBuf)]) -> anyhow::Result<()> {
    for (p, _) in probes.iter() {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(p.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )?;
    }
    for (p, _) in probes.iter_mut() {
        p.0.wait()?;
    }
    Ok(())
}

/// A probe log's records on disk (none while it has no header).
pub fn probe_records(path: &Path) -> Vec<ProbeRecord> {
    match read_file(path) {
        Ok(AnyLog::Probe(d)) => d.records,
        _ => Vec::new(),
    }
}

/// The release agent on an ephemeral loopback port, its data under `dir`:
/// the process and the address it listens on.
pub fn start_agent(dir: &Path) -> anyhow::Result<(Reaped, std::net::SocketAddr)> {
    use anyhow::Context;
    let mut agent = std::process::Command::new(sibling("skewscope-agent")?)
        .args(["--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.join("agent"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut out = std::io::BufReader::new(agent.stdout.take().context("agent stdout")?);
    let agent = Reaped(agent);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line)?;
    let addr = line.trim().trim_start_matches("listening on ").parse()?;
    // The rest of what it prints, read to the end: a closed pipe would
    // end the agent at its next line.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    Ok((agent, addr))
}

/// Debian's libfaketime, to shift a probe's wall clock (with
/// `FAKETIME_DONT_FAKE_MONOTONIC=1`, as a real device's clock is off).
pub fn faketime() -> anyhow::Result<PathBuf> {
    use anyhow::Context;
    std::fs::read_dir("/usr/lib")?
        .flatten()
        .map(|e| e.path().join("faketime/libfaketimeMT.so.1"))
        .find(|p| p.exists())
        .context("libfaketime not found: install Debian's faketime")
}
