//! What names a run and its clock, and what a clock says of its own error:
//! written by the agent and the probes alike.

use serde::{Deserialize, Serialize};

use crate::Stamp;

/// What names a run and the clock it was stamped with. Appended after the
/// first records were defined, so logs written before it lack it, and a
/// report then falls back to the host name and says so.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunIdentity {
    /// Random per run, 128 bits: tells runs apart when names repeat.
    pub run_id: u128,
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`): names the
    /// clock exactly. Host names do not: every device made from one OS image
    /// carries the same one. `None` where the kernel does not publish it.
    pub boot_id: Option<String>,
}

/// What a clock says about its own error: the kernel's NTP state and, when
/// chronyd answers, its tracking figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClockState {
    /// When it was read.
    pub at: Stamp,
    /// `adjtimex` with modes 0; `None` if the call failed.
    pub kernel: Option<KernelClock>,
    /// `chronyc -c tracking`; `None` when chronyd is absent or silent.
    pub chrony: Option<ChronyTracking>,
}

/// The kernel's NTP discipline state (`adjtimex`, read only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KernelClock {
    /// `STA_UNSYNC` is clear: a time daemon disciplines the clock.
    pub synchronized: bool,
    /// The raw status bits.
    pub status: i32,
    /// Maximum error the kernel claims, in nanoseconds.
    pub max_error_ns: u64,
    /// Estimated error the kernel claims, in nanoseconds.
    pub est_error_ns: u64,
    /// Current offset being slewed away, in nanoseconds.
    pub offset_ns: i64,
    /// Frequency correction, in parts per billion.
    pub freq_ppb: i64,
}

/// chronyd's tracking report, the fields that bound the clock's error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChronyTracking {
    /// Reference (server) name or id.
    pub reference: String,
    /// Stratum of this clock.
    pub stratum: u32,
    /// Offset of the system clock from chrony's estimate of true time, in ns.
    pub system_offset_ns: i64,
    /// Last measured offset, in ns.
    pub last_offset_ns: i64,
    /// RMS of recent offsets, in ns.
    pub rms_offset_ns: u64,
    /// Root delay to the reference, in ns.
    pub root_delay_ns: u64,
    /// Root dispersion, in ns.
    pub root_dispersion_ns: u64,
    /// Leap status text ("Normal", "Not synchronised", ...).
    pub leap: String,
}

impl ClockState {
    /// The error bound the clock itself claims, if it claims one: chrony's
    /// root dispersion plus half the root delay plus its system offset, else the
    /// kernel's maximum error; `None` for an unsynchronised clock.
    pub fn claimed_bound_ns(&self) -> Option<u64> {
        if let Some(c) = &self.chrony
            && c.leap != "Not synchronised"
        {
            return Some(
                c.root_dispersion_ns + c.root_delay_ns / 2 + c.system_offset_ns.unsigned_abs(),
            );
        }
        self.kernel
            .filter(|k| k.synchronized)
            .map(|k| k.max_error_ns)
    }
}
