//! Timestamps: what every record carries, as plain data. The clocks are read
//! by `skewscope_os::clock`; here a stamp is only a pair of numbers.
//!
//! Every timestamp skewscope records is a [`Stamp`]: the wall clock
//! (`CLOCK_REALTIME`, comparable across hosts once their offsets are known) and
//! a steady clock (for intervals inside one host, immune to clock steps),
//! read back to back. The steady clock is the writer's: `CLOCK_MONOTONIC`
//! for the agent, `CLOCK_MONOTONIC_RAW` for a probe (which no time daemon
//! slews; probes before it wrote `CLOCK_MONOTONIC`). A log's stamps are all
//! on one of them, and nothing compares steady readings across logs.

use crate::convert;
use serde::{Deserialize, Serialize};

/// A pair of clock readings taken together, in nanoseconds.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
pub struct Stamp {
    /// `CLOCK_REALTIME`: nanoseconds since the Unix epoch.
    pub wall_ns: u64,
    /// The writer's steady clock (`CLOCK_MONOTONIC`, or a probe's
    /// `CLOCK_MONOTONIC_RAW`): nanoseconds since an unspecified start (boot).
    pub mono_ns: u64,
}

impl Stamp {
    /// Maps a monotonic reading taken on the same host into wall time, using this
    /// stamp as the anchor. Used so the hot path only reads one clock per send.
    pub fn wall_at(&self, mono_ns: u64) -> u64 {
        let delta = mono_ns as i128 - self.mono_ns as i128;
        convert::narrow_unsigned(self.wall_ns as i128 + delta)
    }

    /// Maps a wall reading taken on the same host into monotonic time, using
    /// this stamp as the anchor (as if the wall clock does not step between).
    pub fn mono_at(&self, wall_ns: u64) -> u64 {
        let delta = wall_ns as i128 - self.wall_ns as i128;
        convert::narrow_unsigned(self.mono_ns as i128 + delta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_at_moves_with_the_monotonic_clock() {
        let anchor = Stamp {
            wall_ns: 1_000_000,
            mono_ns: 500,
        };
        assert_eq!(anchor.wall_at(700), 1_000_200);
        assert_eq!(anchor.wall_at(400), 999_900);
    }
}
