//! The server's CPU over a stage's broadcasts (`--server-pid`): what the
//! fan-out cost it, per broadcast, read from the kernel's accounting of
//! its process. The probe's own CPU is not in it (another process).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// What a stage's broadcasts cost the server.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ServerCpu {
    /// CPU time (the run time of its threads, to the nanosecond) from just
    /// before the first measured trigger to the last broadcast's completion.
    pub cpu_ms: f64,
    /// That over the broadcasts measured.
    pub per_broadcast_ms: f64,
    /// That over the wall time it spans, in % of one core (waits for
    /// receipts and pauses included: it is diluted by them).
    pub busy_percent: f64,
    /// The wall time it spans.
    pub window_ms: f64,
}

/// A CPU reading started before a stage's first measured trigger.
pub struct CpuMeter {
    pid: u32,
    cpu: Duration,
    at: Instant,
}

impl CpuMeter {
    /// Reads the server's CPU time now.
    pub fn start(pid: u32) -> std::io::Result<CpuMeter> {
        Ok(CpuMeter {
            pid,
            cpu: skewscope_os::process::cpu_time(pid)?,
            at: Instant::now(),
        })
    }

    /// What it used since [`CpuMeter::start`], over `broadcasts`.
    pub fn finish(self, broadcasts: u32) -> std::io::Result<ServerCpu> {
        let cpu = skewscope_os::process::cpu_time(self.pid)?.saturating_sub(self.cpu);
        let window = self.at.elapsed();
        let cpu_ms = cpu.as_secs_f64() * 1e3;
        Ok(ServerCpu {
            cpu_ms,
            per_broadcast_ms: cpu_ms / f64::from(broadcasts.max(1)),
            busy_percent: 100.0 * cpu.as_secs_f64() / window.as_secs_f64().max(1e-9),
            window_ms: window.as_secs_f64() * 1e3,
        })
    }
}
