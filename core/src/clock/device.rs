//! A device's clock over a whole run, as a report reads it: the clock
//! model of all its exchanges, and the steps its wall clock took.

use crate::Stamp;
use crate::clock::exchange::Exchange;
use crate::clock::model::{ClockModel, Correction, Estimate};
use crate::clock::steps::{ClockStep, find_steps};
use crate::record::TimeSample;

/// One device's clock against the agent's over a run.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceClock {
    /// Steps of its wall clock, in time order (reported; the model, on the
    /// monotonic clock, is not split by them).
    pub steps: Vec<ClockStep>,
    /// The model of every exchange of the run.
    pub model: ClockModel,
    /// The least-delayed exchange's midpoint, on both clocks: where the
    /// run's offset is best known, for a one-line summary.
    best: Option<Stamp>,
}

impl DeviceClock {
    /// Builds from every stamp the device recorded and its time samples.
    pub fn build(stamps: &[Stamp], samples: &[TimeSample]) -> DeviceClock {
        let usable: Vec<(&TimeSample, Exchange)> = samples
            .iter()
            .filter_map(|s| Some((s, Exchange::from_sample(s)?)))
            .collect();
        let best = usable
            .iter()
            .min_by_key(|(_, e)| e.delay_ns())
            .map(|(s, e)| {
                let mid = e.mid_mono_ns();
                Stamp {
                    wall_ns: s.t1.wall_at(mid),
                    mono_ns: mid,
                }
            });
        DeviceClock {
            steps: find_steps(stamps),
            model: ClockModel::from_exchanges(usable.into_iter().map(|(_, e)| e).collect()),
            best,
        }
    }

    /// The correction for a stamp taken on this device; `None` without any
    /// exchange.
    pub fn at(&self, stamp: Stamp) -> Option<Correction> {
        Some(self.model.at(stamp.mono_ns)?.correction(stamp))
    }

    /// Where the run's offset is best known (the least-delayed exchange's
    /// midpoint), with the estimate there.
    pub fn best(&self) -> Option<(Stamp, Estimate)> {
        let at = self.best?;
        Some((at, self.model.at(at.mono_ns)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_764_000_000_000_000_000;

    /// A sample at device mono `t` for a device whose wall clock is `offset`
    /// ahead of the agent's (and `level` ahead of its own monotonic clock).
    fn sample(t: u64, level: i64, offset: i64, out: u64, back: u64) -> TimeSample {
        let wall = |mono: u64| (T0 as i64 + mono as i64 + level) as u64;
        let agent = |mono: u64| (T0 as i64 + mono as i64 + level - offset) as u64;
        TimeSample {
            t1: Stamp {
                wall_ns: wall(t),
                mono_ns: t,
            },
            t2_wall_ns: agent(t + out),
            t3_wall_ns: agent(t + out + 10_000),
            t4: Stamp {
                wall_ns: wall(t + out + 10_000 + back),
                mono_ns: t + out + 10_000 + back,
            },
        }
    }

    fn stamp(mono: u64, level: i64) -> Stamp {
        Stamp {
            wall_ns: (T0 as i64 + mono as i64 + level) as u64,
            mono_ns: mono,
        }
    }

    #[test]
    fn a_wall_step_changes_the_offset_but_not_the_model() {
        // The wall clock is 5 ms ahead, then steps a further 100 ms ahead
        // at 1 s; the agent's clock never moves.
        let samples = [
            sample(200_000_000, 5_000_000, 5_000_000, 20_000, 20_000),
            sample(1_500_000_000, 105_000_000, 105_000_000, 20_000, 20_000),
        ];
        let mut stamps: Vec<Stamp> = (0..10).map(|i| stamp(i * 100_000_000, 5_000_000)).collect();
        stamps.extend((10..20).map(|i| stamp(i * 100_000_000, 105_000_000)));
        let clock = DeviceClock::build(&stamps, &samples);
        assert_eq!(clock.steps.len(), 1);
        assert_eq!(clock.model.breaks(), 0);
        let before = clock.at(stamp(300_000_000, 5_000_000)).unwrap();
        let after = clock.at(stamp(1_600_000_000, 105_000_000)).unwrap();
        assert!(
            (before.theta_ns + 5_000_000).unsigned_abs() <= before.bound_ns,
            "{before:?}"
        );
        assert!(
            (after.theta_ns + 105_000_000).unsigned_abs() <= after.bound_ns,
            "{after:?}"
        );
        // The bound after the step is as narrow as the exchanges allow.
        assert!(after.bound_ns < 100_000, "{after:?}");
        // A stamp from a thread that saw the step late keeps its own wall time.
        let late = clock.at(stamp(1_050_000_000, 5_000_000)).unwrap();
        assert!(
            (late.theta_ns + 5_000_000).unsigned_abs() <= late.bound_ns,
            "{late:?}"
        );
    }

    #[test]
    fn no_exchange_no_correction() {
        let clock = DeviceClock::build(&[stamp(0, 0)], &[]);
        assert_eq!(clock.at(stamp(0, 0)), None);
        assert_eq!(clock.best(), None);
    }
}

#[cfg(test)]
mod step_properties {
    use super::*;

    const T0: u64 = 1_764_000_000_000_000_000;
    const MS: u64 = 1_000_000;
    const S: u64 = 1_000_000_000;

    /// A device whose wall clock steps (once or twice, forwards or
    /// backwards, by 1 ms to 1 s) during a run of exchanges over a jittery
    /// link: every stamp is corrected with the truth inside, and the bound
    /// just after each step is within twice the bound just before it.
    #[test]
    fn wall_clock_steps_keep_the_bound_and_the_truth() {
        for seed in 0..200u64 {
            let mut rng = fastrand::Rng::with_seed(seed);
            let offset = rng.i64(-5 * MS as i64..5 * MS as i64);
            let mut steps: Vec<(u64, i64)> = (0..rng.usize(1..=2))
                .map(|_| {
                    let size = rng.i64(MS as i64..S as i64) * if rng.bool() { 1 } else { -1 };
                    (rng.u64(20..80) * S, size)
                })
                .collect();
            steps.sort();
            // The wall clock's level (wall − monotonic) at device time t.
            let level = |t: u64| -> i64 {
                offset
                    + steps
                        .iter()
                        .filter(|(at, _)| *at <= t)
                        .map(|(_, s)| s)
                        .sum::<i64>()
            };
            let stamp = |t: u64| Stamp {
                wall_ns: (T0 as i64 + t as i64 + level(t)) as u64,
                mono_ns: t,
            };
            let agent = |t: u64| T0 + t; // the agent's clock is the true one
            let mut samples = Vec::new();
            let mut stamps = Vec::new();
            let mut t = S;
            while t < 100 * S {
                let up = 500_000 + (-(2e6) * (1.0 - rng.f64()).ln()) as u64;
                let down = 500_000 + (-(2e6) * (1.0 - rng.f64()).ln()) as u64;
                let t4 = t + up + 20_000 + down;
                samples.push(TimeSample {
                    t1: stamp(t),
                    t2_wall_ns: agent(t + up),
                    t3_wall_ns: agent(t + up + 20_000),
                    t4: stamp(t4),
                });
                stamps.extend([stamp(t), stamp(t4)]);
                t = t4 + rng.u64(200..1_200) * MS;
            }
            let clock = DeviceClock::build(&stamps, &samples);
            // (Which steps are reported is steps.rs's to test: two steps a
            // second apart are one to it.)
            assert_eq!(clock.model.breaks(), 0, "seed {seed}");
            for q in (1..100).map(|s| s * S + 333_333) {
                let c = clock.at(stamp(q)).unwrap();
                // Agent minus device wall, truly.
                let truth = -(level(q) as i128);
                let err = (i128::from(c.theta_ns) - truth).unsigned_abs();
                assert!(
                    err <= u128::from(c.bound_ns),
                    "seed {seed}, t {q}: {c:?} vs {truth}"
                );
            }
            for (at, _) in &steps {
                let before = clock.at(stamp(at - 1)).unwrap().bound_ns;
                let after = clock.at(stamp(*at)).unwrap().bound_ns;
                assert!(
                    after <= 2 * before,
                    "seed {seed}: {before} before, {after} after"
                );
            }
        }
    }
}
