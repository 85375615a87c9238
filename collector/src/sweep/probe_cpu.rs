//! What the sweep's own connections cost this machine, per receipt: the CPU
//! of this process (the probe's connections, their protocol layer and
//! recording, and the sweep following their log) over a stage's measured
//! broadcasts. A load generator that is near its limit measures itself,
//! not the server: this says how far it is, and how each `--protocol`
//! compares with a raw WebSocket.

use serde::{Deserialize, Serialize};

use super::server_cpu::CpuMeter;

/// What a stage's receipts cost this process.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeCpu {
    /// CPU time of this process's threads over the measured broadcasts.
    pub cpu_ms: f64,
    /// Receipts recorded over the same span.
    pub receipts: u64,
    /// The first over the second, µs.
    pub per_receipt_us: f64,
}

/// A reading of this process's CPU and receipts, started before a stage's
/// first measured trigger.
pub struct ProbeCpuMeter {
    meter: CpuMeter,
    receipts: u64,
}

impl ProbeCpuMeter {
    /// Reads this process's CPU time now, with the receipts recorded so far.
    pub fn start(receipts: u64) -> std::io::Result<ProbeCpuMeter> {
        Ok(ProbeCpuMeter {
            meter: CpuMeter::start(std::process::id())?,
            receipts,
        })
    }

    /// What it used since [`ProbeCpuMeter::start`], with `receipts` recorded
    /// by now; `None` when none were recorded meanwhile.
    pub fn finish(self, receipts: u64) -> std::io::Result<Option<ProbeCpu>> {
        let spent = self.meter.finish(1)?;
        let receipts = receipts.saturating_sub(self.receipts);
        Ok((receipts > 0).then(|| ProbeCpu {
            cpu_ms: spent.cpu_ms,
            receipts,
            per_receipt_us: spent.cpu_ms * 1e3 / receipts as f64,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cost_is_spread_over_the_receipts_recorded_meanwhile() {
        let meter = ProbeCpuMeter::start(1_000).unwrap();
        // Some work of this process, so its CPU time moves.
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let cpu = meter.finish(1_400).unwrap().unwrap();
        assert_eq!(cpu.receipts, 400);
        assert!(cpu.cpu_ms > 0.0);
        assert!((cpu.per_receipt_us - cpu.cpu_ms * 1e3 / 400.0).abs() < 1e-9);
        // No receipt meanwhile: no figure, rather than an infinite one.
        let meter = ProbeCpuMeter::start(7).unwrap();
        assert_eq!(meter.finish(7).unwrap(), None);
    }
}
