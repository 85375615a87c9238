//! The benchmarks' child processes: finding the release binaries beside
//! this one, killing a child when a run fails half way, waiting on a
//! condition with a limit, and reading a probe's log as it grows.

use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use anyhow::ensure;
use skewscope_core::log::{AnyLog, read_file};
use skewscope_core::record::ProbeRecord;

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

/// A probe log's records on disk (none while it has no header).
pub fn probe_records(path: &Path) -> Vec<ProbeRecord> {
    match read_file(path) {
        Ok(AnyLog::Probe(d)) => d.records,
        _ => Vec::new(),
    }
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
