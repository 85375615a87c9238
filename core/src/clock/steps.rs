//! Steps of a clock: where its wall clock jumped against its monotonic
//! clock. The clock model never needs them (it works on the monotonic
//! clock), but a report names them: a device whose clock steps is a device
//! whose raw times cannot be compared across the step.

use crate::Stamp;
use crate::convert;

/// Smallest jump of the wall clock against the monotonic clock reported as a step.
pub const STEP_THRESHOLD_NS: u64 = 1_000_000;
/// Fastest legitimate slew (the kernel slews at most 500 ppm): a change of
/// wall − monotonic slower than this is discipline, not a step.
pub const MAX_SLEW_PPB: u64 = 500_000;
/// Stamps after a jump that must agree with it before it counts as a step (one
/// stamp preempted between its two clock reads is not a step).
pub const STEP_CONFIRMATIONS: usize = 2;

/// A jump of the wall clock relative to the monotonic clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockStep {
    /// Monotonic time of the first stamp after the step.
    pub at_mono_ns: u64,
    /// Wall time of that stamp.
    pub at_wall_ns: u64,
    /// How far the wall clock jumped (positive: forward).
    pub size_ns: i64,
}

/// Finds the steps in a device's stamps (any order).
pub fn find_steps(stamps: &[Stamp]) -> Vec<ClockStep> {
    let mut sorted: Vec<Stamp> = stamps.to_vec();
    sorted.sort_by_key(|s| s.mono_ns);
    let tolerance = |from: &Stamp, to: &Stamp| -> i128 {
        let gap = to.mono_ns.abs_diff(from.mono_ns) as u128;
        let slew = gap.saturating_mul(MAX_SLEW_PPB as u128) / 1_000_000_000;
        i128::try_from(STEP_THRESHOLD_NS as u128 + slew).unwrap_or(i128::MAX)
    };
    let mut steps = Vec::new();
    let Some(first) = sorted.first() else {
        return steps;
    };
    let mut anchor = *first;
    let mut i = 1;
    while i < sorted.len() {
        let s = sorted[i];
        if (level(&s) - level(&anchor)).abs() <= tolerance(&anchor, &s) {
            anchor = s;
            i += 1;
            continue;
        }
        let followers = &sorted[i + 1..(i + 1 + STEP_CONFIRMATIONS).min(sorted.len())];
        let confirmed = followers.len() == STEP_CONFIRMATIONS
            && followers
                .iter()
                .all(|f| (level(f) - level(&s)).abs() <= tolerance(&s, f));
        if confirmed {
            steps.push(ClockStep {
                at_mono_ns: s.mono_ns,
                at_wall_ns: s.wall_ns,
                size_ns: convert::narrow(level(&s) - level(&anchor)),
            });
            anchor = s;
        }
        // Unconfirmed: a stamp torn by preemption; skip it.
        i += 1;
    }
    steps
}

/// wall − monotonic: constant while the clock neither steps nor slews.
pub(crate) fn level(s: &Stamp) -> i128 {
    s.wall_ns as i128 - s.mono_ns as i128
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_764_000_000_000_000_000;

    fn stamp(mono_ms: u64, offset_ms: i64) -> Stamp {
        Stamp {
            wall_ns: (T0 as i64 + (mono_ms as i64 + offset_ms) * 1_000_000) as u64,
            mono_ns: mono_ms * 1_000_000,
        }
    }

    #[test]
    fn a_step_is_found_and_a_torn_stamp_is_not() {
        let mut stamps: Vec<Stamp> = (0..10).map(|i| stamp(i * 100, 0)).collect();
        stamps.push(stamp(1_050, 7)); // one preempted stamp
        stamps.extend((11..20).map(|i| stamp(i * 100, 0)));
        stamps.extend((20..30).map(|i| stamp(i * 100, 100)));
        let steps = find_steps(&stamps);
        assert_eq!(steps.len(), 1, "{steps:?}");
        assert_eq!(steps[0].at_mono_ns, 2_000_000_000);
        assert_eq!(steps[0].size_ns, 100_000_000);
    }

    #[test]
    fn slewing_is_not_a_step() {
        // 400 ppm slew for 10 s: 4 ms in all, never a jump.
        let stamps: Vec<Stamp> = (0..100)
            .map(|i| {
                let mono = i * 100_000_000u64;
                Stamp {
                    wall_ns: T0 + mono + mono * 400 / 1_000_000,
                    mono_ns: mono,
                }
            })
            .collect();
        assert!(find_steps(&stamps).is_empty());
    }
}
