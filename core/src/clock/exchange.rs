//! One time exchange as the clock model reads it: two causality constraints
//! on the agent's wall clock against this device's monotonic clock.

use crate::convert;
use crate::record::TimeSample;

/// What one exchange proves. The probe sent at `sent_mono_ns` (t1) and had
/// the reply at `received_mono_ns` (t4), both on its monotonic clock; the
/// agent read the request at t2 and wrote the reply at t3 on its wall clock.
///
/// The model works on the device's *monotonic* clock, not its wall clock:
/// the monotonic clock never steps, so a wall-clock step (`date -s`, NTP's
/// step, libfaketime) neither splits the model nor widens it, and an action
/// planned across a step still lands on the agent's time. Both clocks run
/// at the same rate under NTP's slewing, so nothing is lost: a stamp's wall
/// time is found again from its own (wall, monotonic) pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exchange {
    /// Device monotonic time the request left (t1).
    pub sent_mono_ns: u64,
    /// Device monotonic time the reply came (t4).
    pub received_mono_ns: u64,
    /// t2 − t1: the agent's wall clock minus this device's monotonic clock
    /// was at most this when the request left (the agent read it later).
    pub upper_ns: i64,
    /// t3 − t4: it was at least this when the reply came (the agent wrote
    /// it earlier).
    pub lower_ns: i64,
}

impl Exchange {
    /// The exchange a sample records; `None` when it cannot be true: the
    /// reply came before the request left, the agent's times are reversed,
    /// the agent's turnaround is longer than the round trip, or a time is
    /// out of range.
    pub fn from_sample(s: &TimeSample) -> Option<Exchange> {
        Exchange::from_times(s.t1.mono_ns, s.t2_wall_ns, s.t3_wall_ns, s.t4.mono_ns)
    }

    /// The exchange of these four times: `t1` and `t4` on the device's
    /// monotonic clock, `t2` and `t3` on the agent's wall clock (how the
    /// shared vectors give them); `None` as for [`Exchange::from_sample`].
    pub fn from_times(t1: u64, t2: u64, t3: u64, t4: u64) -> Option<Exchange> {
        if t4 < t1 || t3 < t2 {
            return None;
        }
        let upper = i64::try_from(i128::from(t2) - i128::from(t1)).ok()?;
        let lower = i64::try_from(i128::from(t3) - i128::from(t4)).ok()?;
        // upper − lower is the round trip less the agent's turnaround.
        if upper < lower {
            return None;
        }
        Some(Exchange {
            sent_mono_ns: t1,
            received_mono_ns: t4,
            upper_ns: upper,
            lower_ns: lower,
        })
    }

    /// The round trip less the agent's turnaround: the width this exchange
    /// alone leaves the offset.
    pub fn delay_ns(&self) -> u64 {
        convert::narrow_unsigned(i128::from(self.upper_ns) - i128::from(self.lower_ns))
    }

    /// Device monotonic time halfway through the exchange.
    pub fn mid_mono_ns(&self) -> u64 {
        self.sent_mono_ns + (self.received_mono_ns - self.sent_mono_ns) / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stamp;

    fn sample(t1: u64, t2: u64, t3: u64, t4: u64) -> TimeSample {
        TimeSample {
            t1: Stamp {
                wall_ns: t1 + 7,
                mono_ns: t1,
            },
            t2_wall_ns: t2,
            t3_wall_ns: t3,
            t4: Stamp {
                wall_ns: t4 + 7,
                mono_ns: t4,
            },
        }
    }

    #[test]
    fn the_constraints_are_the_agent_times_less_the_device_monotonic_ones() {
        let e = Exchange::from_sample(&sample(1_000, 5_400, 5_500, 1_900)).unwrap();
        assert_eq!(e.upper_ns, 4_400);
        assert_eq!(e.lower_ns, 3_600);
        assert_eq!(e.delay_ns(), 800);
        assert_eq!(e.mid_mono_ns(), 1_450);
    }

    #[test]
    fn impossible_exchanges_are_refused() {
        assert_eq!(
            Exchange::from_sample(&sample(1_000, 5_400, 5_300, 1_900)),
            None
        );
        assert_eq!(
            Exchange::from_sample(&sample(1_000, 5_400, 5_500, 900)),
            None
        );
        // A turnaround longer than the round trip.
        assert_eq!(
            Exchange::from_sample(&sample(1_000, 5_000, 6_000, 1_100)),
            None
        );
    }
}
