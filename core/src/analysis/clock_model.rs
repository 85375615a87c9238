//! Clock math: a device's offset to the agent's clock, with an error bound it
//! can defend, and the steps its wall clock took.
//!
//! From each exchange (probe sends t1, agent receives t2 and answers t3, probe
//! receives t4): θ = ((t2−t1)+(t3−t4))/2 is the agent's clock minus the probe's,
//! wrong by at most δ/2 where δ = (t4−t1)−(t3−t2) is the round trip. The
//! estimate at time t uses the exchange that bounds it best: the one minimising
//! δ/2 + ρ·|t − t_k|, with ρ the rate the two clocks may drift apart (measured
//! by a fit over a long enough run, else a conservative default), and the fitted
//! drift applied over the gap. Times within the probe are on its monotonic
//! clock, so a wall-clock step cannot corrupt an interval; steps split the run
//! into epochs, each with its own estimate.

use crate::Stamp;
use crate::record::TimeSample;

/// Smallest jump of the wall clock against the monotonic clock reported as a step.
pub const STEP_THRESHOLD_NS: u64 = 1_000_000;
/// Fastest legitimate slew (the kernel slews at most 500 ppm): a change of
/// wall − monotonic slower than this is discipline, not a step.
pub const MAX_SLEW_PPB: u64 = 500_000;
/// Stamps after a jump that must agree with it before it counts as a step (one
/// stamp preempted between its two clock reads is not a step).
pub const STEP_CONFIRMATIONS: usize = 2;
/// Rate two clocks may drift apart when it could not be measured: 100 ppm covers
/// an undisciplined crystal.
pub const DEFAULT_RATE_BOUND_PPB: f64 = 100_000.0;
/// Allowance for frequency wander on top of a measured drift.
pub const WANDER_PPB: f64 = 1_000.0;
/// A drift is fitted only over runs at least this long.
pub const MIN_FIT_SPAN_NS: u64 = 4_000_000_000;

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
    let level = |s: &Stamp| s.wall_ns as i128 - s.mono_ns as i128;
    let tolerance = |from: &Stamp, to: &Stamp| -> i128 {
        let gap = to.mono_ns.abs_diff(from.mono_ns) as u128;
        (STEP_THRESHOLD_NS as u128 + gap * MAX_SLEW_PPB as u128 / 1_000_000_000) as i128
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
                size_ns: (level(&s) - level(&anchor)) as i64,
            });
            anchor = s;
        }
        // Unconfirmed: a stamp torn by preemption; skip it.
        i += 1;
    }
    steps
}

/// One usable exchange.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Exchange {
    /// Probe monotonic time halfway through the exchange.
    pub mono_ns: u64,
    /// Agent clock minus probe clock.
    pub theta_ns: i64,
    /// Round trip less the agent's turnaround.
    pub delay_ns: u64,
}

impl Exchange {
    /// The exchange a sample describes; `None` when it cannot be trusted (the
    /// probe's wall clock stepped during it, or the agent's times are reversed).
    pub fn from_sample(s: &TimeSample) -> Option<Exchange> {
        let mono_rtt = s.t4.mono_ns.checked_sub(s.t1.mono_ns)? as i128;
        let wall_rtt = s.t4.wall_ns as i128 - s.t1.wall_ns as i128;
        if (wall_rtt - mono_rtt).abs() > STEP_THRESHOLD_NS as i128 {
            return None;
        }
        let turnaround = s.t3_wall_ns.checked_sub(s.t2_wall_ns)? as i128;
        let delay = mono_rtt - turnaround;
        if delay < 0 {
            return None;
        }
        let theta = ((s.t2_wall_ns as i128 - s.t1.wall_ns as i128)
            + (s.t3_wall_ns as i128 - s.t4.wall_ns as i128))
            / 2;
        Some(Exchange {
            mono_ns: s.t1.mono_ns + (mono_rtt / 2) as u64,
            theta_ns: theta as i64,
            delay_ns: delay as u64,
        })
    }
}

/// The correction for one moment: add `theta_ns` to a probe wall time to get
/// agent time; the truth lies within `bound_ns` of the result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Correction {
    /// Agent clock minus probe clock.
    pub theta_ns: i64,
    /// Error bound of `theta_ns`.
    pub bound_ns: u64,
}

/// A device's clock relative to the agent's over one epoch.
#[derive(Clone, Debug, PartialEq)]
pub struct OffsetModel {
    /// In monotonic-time order.
    exchanges: Vec<Exchange>,
    /// For each i, the exchange among `exchanges[..=i]` that bounds a moment
    /// after all of them best (least δ/2 − ρ·t_k): see [`OffsetModel::at`].
    best_before: Vec<usize>,
    /// For each i, the exchange among `exchanges[i..]` that bounds a moment
    /// before all of them best (least δ/2 + ρ·t_k).
    best_after: Vec<usize>,
    /// Measured drift of agent − probe, in parts per billion (0 when not fitted).
    pub drift_ppb: f64,
    /// Rate the bound grows with distance from an exchange, in ppb.
    pub rate_bound_ppb: f64,
    /// Whether the drift was measured rather than assumed.
    pub drift_fitted: bool,
}

impl OffsetModel {
    /// Builds the model from a set of exchanges; `None` with none.
    pub fn fit(mut exchanges: Vec<Exchange>) -> Option<OffsetModel> {
        if exchanges.is_empty() {
            return None;
        }
        exchanges.sort_by_key(|e| e.mono_ns);
        let span = exchanges.last()?.mono_ns - exchanges.first()?.mono_ns;
        let (drift_ppb, rate_bound_ppb, drift_fitted) = match fit_drift(&exchanges, span) {
            Some((slope, sigma)) => (slope * 1e9, 3.0 * sigma * 1e9 + WANDER_PPB, true),
            None => (0.0, DEFAULT_RATE_BOUND_PPB, false),
        };
        let (best_before, best_after) = best_indices(&exchanges, rate_bound_ppb);
        Some(OffsetModel {
            exchanges,
            best_before,
            best_after,
            drift_ppb,
            rate_bound_ppb,
            drift_fitted,
        })
    }

    /// The correction at probe monotonic time `mono_ns`: from the exchange
    /// minimising δ/2 + ρ·|t − t_k|, in O(log n).
    ///
    /// For exchanges at or before t the cost is (δ/2 − ρ·t_k) + ρ·t, so the
    /// best of them is the one with the least δ/2 − ρ·t_k, whatever t is; after
    /// t it is the least δ/2 + ρ·t_k. Both are precomputed per prefix and
    /// suffix, so a query is a binary search and two candidates. A day-long
    /// probe run has ~86k exchanges: a scan per receipt made reports quadratic.
    pub fn at(&self, mono_ns: u64) -> Correction {
        let split = self.exchanges.partition_point(|e| e.mono_ns <= mono_ns);
        let before = split.checked_sub(1).map(|i| self.best_before[i]);
        let after = self.best_after.get(split).copied();
        let best = match (before, after) {
            (Some(b), Some(a)) => {
                // Ties go to the earlier exchange, as a scan in time order would.
                if self.cost(a, mono_ns) < self.cost(b, mono_ns) {
                    a
                } else {
                    b
                }
            }
            (Some(only), None) | (None, Some(only)) => only,
            (None, None) => unreachable!("a model has exchanges"),
        };
        self.correction_from(best, mono_ns)
    }

    /// How loosely exchange `k` bounds the offset at `mono_ns`.
    fn cost(&self, k: usize, mono_ns: u64) -> f64 {
        let e = &self.exchanges[k];
        e.delay_ns as f64 / 2.0 + self.rate_bound_ppb * e.mono_ns.abs_diff(mono_ns) as f64 / 1e9
    }

    /// The correction at `mono_ns` carried from exchange `k` with the drift.
    fn correction_from(&self, k: usize, mono_ns: u64) -> Correction {
        let best = &self.exchanges[k];
        let gap = mono_ns as f64 - best.mono_ns as f64;
        Correction {
            theta_ns: best.theta_ns + (self.drift_ppb * gap / 1e9).round() as i64,
            bound_ns: self.cost(k, mono_ns).ceil() as u64,
        }
    }

    /// [`OffsetModel::at`] by scanning every exchange: the definition, kept
    /// to test the fast path against.
    #[cfg(test)]
    fn at_by_scan(&self, mono_ns: u64) -> Correction {
        let best = (0..self.exchanges.len())
            .min_by(|&a, &b| self.cost(a, mono_ns).total_cmp(&self.cost(b, mono_ns)))
            .expect("a model has exchanges");
        self.correction_from(best, mono_ns)
    }

    /// When the least-delayed exchange happened (probe monotonic time): where the
    /// model's bound is tightest.
    pub fn best_exchange_mono(&self) -> u64 {
        self.exchanges
            .iter()
            .min_by_key(|e| e.delay_ns)
            .map_or(0, |e| e.mono_ns)
    }

    /// Exchanges used.
    pub fn len(&self) -> usize {
        self.exchanges.len()
    }

    /// Whether there are no exchanges (never true for a fitted model).
    pub fn is_empty(&self) -> bool {
        self.exchanges.is_empty()
    }
}

/// The prefix and suffix argmins behind [`OffsetModel::at`]; ties keep the
/// earlier exchange.
fn best_indices(exchanges: &[Exchange], rate_bound_ppb: f64) -> (Vec<usize>, Vec<usize>) {
    let rate = rate_bound_ppb / 1e9;
    let key_before = |e: &Exchange| e.delay_ns as f64 / 2.0 - rate * e.mono_ns as f64;
    let key_after = |e: &Exchange| e.delay_ns as f64 / 2.0 + rate * e.mono_ns as f64;
    let mut before = Vec::with_capacity(exchanges.len());
    for (i, e) in exchanges.iter().enumerate() {
        let keep = match before.last() {
            Some(&b) if key_before(&exchanges[b]) <= key_before(e) => b,
            _ => i,
        };
        before.push(keep);
    }
    let mut after = vec![0; exchanges.len()];
    for i in (0..exchanges.len()).rev() {
        after[i] = match after.get(i + 1) {
            Some(&a) if key_after(&exchanges[a]) < key_after(&exchanges[i]) => a,
            _ => i,
        };
    }
    (before, after)
}

/// Least-squares slope of θ over time through the best exchange of each of up
/// to 16 windows; returns (slope, its standard error), dimensionless.
fn fit_drift(exchanges: &[Exchange], span: u64) -> Option<(f64, f64)> {
    if span < MIN_FIT_SPAN_NS || exchanges.len() < 3 {
        return None;
    }
    let windows = exchanges.len().min(16) as u64;
    let start = exchanges[0].mono_ns;
    let mut best: Vec<Option<Exchange>> = vec![None; windows as usize];
    for e in exchanges {
        let w = (((e.mono_ns - start) as u128 * windows as u128) / (span as u128 + 1)) as usize;
        if best[w].is_none_or(|b| e.delay_ns < b.delay_ns) {
            best[w] = Some(*e);
        }
    }
    let points: Vec<(f64, f64)> = best
        .into_iter()
        .flatten()
        .map(|e| ((e.mono_ns - start) as f64, e.theta_ns as f64))
        .collect();
    let n = points.len() as f64;
    if n < 3.0 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = sxy / sxx;
    let residual: f64 = points
        .iter()
        .map(|p| (p.1 - my - slope * (p.0 - mx)).powi(2))
        .sum();
    let sigma = (residual / (n - 2.0) / sxx).sqrt();
    Some((slope, sigma))
}

/// A device's clock against the agent's over a whole run: its steps, and a
/// model per epoch between them (`None` where an epoch has no exchange).
///
/// A stamp near a step is placed in the epoch whose wall-vs-monotonic level it
/// matches, not merely by time: threads of one process can see a step at
/// slightly different moments, and a receipt must never be corrected with the
/// other side's offset.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceClock {
    /// Steps, in time order.
    pub steps: Vec<ClockStep>,
    /// One model per epoch: before the first step, between steps, after the last.
    pub epochs: Vec<Option<OffsetModel>>,
    /// wall − monotonic at the start of each epoch.
    levels: Vec<i128>,
}

impl DeviceClock {
    /// Builds from every stamp the device recorded and its time samples.
    pub fn build(stamps: &[Stamp], samples: &[TimeSample]) -> DeviceClock {
        let steps = find_steps(stamps);
        let first = stamps.iter().min_by_key(|s| s.mono_ns).map_or(0, level);
        let levels: Vec<i128> = std::iter::once(first)
            .chain(
                steps
                    .iter()
                    .map(|s| s.at_wall_ns as i128 - s.at_mono_ns as i128),
            )
            .collect();
        let mut clock = DeviceClock {
            epochs: Vec::new(),
            steps,
            levels,
        };
        let mut per_epoch: Vec<Vec<Exchange>> = vec![Vec::new(); clock.steps.len() + 1];
        for s in samples {
            // An exchange straddling a step is rejected by its wall/mono check.
            if let Some(e) = Exchange::from_sample(s) {
                per_epoch[clock.epoch_of(&s.t1)].push(e);
            }
        }
        clock.epochs = per_epoch.into_iter().map(OffsetModel::fit).collect();
        clock
    }

    /// The correction for a stamp taken on this device, if its epoch has one.
    pub fn at(&self, stamp: Stamp) -> Option<Correction> {
        self.epochs[self.epoch_of(&stamp)]
            .as_ref()
            .map(|m| m.at(stamp.mono_ns))
    }

    /// The epoch by time, or a neighbour whose level the stamp matches better.
    fn epoch_of(&self, stamp: &Stamp) -> usize {
        let by_time = self
            .steps
            .iter()
            .take_while(|s| s.at_mono_ns <= stamp.mono_ns)
            .count();
        let own = level(stamp);
        (by_time.saturating_sub(1)..=(by_time + 1).min(self.steps.len()))
            .min_by_key(|&k| (self.levels[k] - own).unsigned_abs())
            .unwrap_or(by_time)
    }

    /// The model of the longest-lived epoch with one, for a one-line summary.
    pub fn main_model(&self) -> Option<&OffsetModel> {
        self.epochs.iter().flatten().max_by_key(|m| m.len())
    }
}

/// wall − monotonic: constant while the clock neither steps nor slews.
fn level(s: &Stamp) -> i128 {
    s.wall_ns as i128 - s.mono_ns as i128
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_764_000_000_000_000_000;

    /// A sample at probe mono `t` (ns) for a probe whose clock is `offset` ahead
    /// of the agent, with one-way delays `out` and `back` and 10 µs turnaround.
    fn sample(t: u64, offset: i64, out: u64, back: u64) -> TimeSample {
        let probe_wall = |mono: u64| (T0 as i64 + mono as i64 + offset) as u64;
        let agent_wall = |mono: u64| T0 + mono;
        TimeSample {
            t1: Stamp {
                wall_ns: probe_wall(t),
                mono_ns: t,
            },
            t2_wall_ns: agent_wall(t + out),
            t3_wall_ns: agent_wall(t + out + 10_000),
            t4: Stamp {
                wall_ns: probe_wall(t + out + 10_000 + back),
                mono_ns: t + out + 10_000 + back,
            },
        }
    }

    #[test]
    fn symmetric_exchange_recovers_the_offset_exactly() {
        let e = Exchange::from_sample(&sample(1_000_000, 5_000_000, 40_000, 40_000)).unwrap();
        assert_eq!(e.theta_ns, -5_000_000);
        assert_eq!(e.delay_ns, 80_000);
    }

    #[test]
    fn asymmetry_stays_within_half_the_delay() {
        let e = Exchange::from_sample(&sample(1_000_000, -3_000_000, 70_000, 10_000)).unwrap();
        let truth = 3_000_000i64;
        assert!(
            (e.theta_ns - truth).unsigned_abs() <= e.delay_ns / 2,
            "{e:?}"
        );
    }

    #[test]
    fn the_least_delayed_exchange_wins_and_the_bound_covers_the_truth() {
        let samples = [
            sample(0, 2_000_000, 400_000, 100_000),
            sample(100_000_000, 2_000_000, 30_000, 30_000),
            sample(200_000_000, 2_000_000, 900_000, 50_000),
        ];
        let exchanges = samples.iter().filter_map(Exchange::from_sample).collect();
        let model = OffsetModel::fit(exchanges).unwrap();
        let c = model.at(150_000_000);
        assert!(
            (c.theta_ns + 2_000_000).unsigned_abs() <= c.bound_ns,
            "{c:?}"
        );
        // 30 µs half-delay plus (50 ms less the 35 µs to the exchange's midpoint) at 100 ppm.
        assert_eq!(c.bound_ns, 30_000 + 4_997);
    }

    #[test]
    fn drift_is_measured_over_a_long_run() {
        // Probe gains 20 ppm on the agent: offset grows 20 µs per second.
        let samples: Vec<TimeSample> = (0..20u64)
            .map(|i| {
                let t = i * 1_000_000_000;
                sample(t, 20 * (t / 1_000_000) as i64, 25_000, 25_000)
            })
            .collect();
        let exchanges = samples.iter().filter_map(Exchange::from_sample).collect();
        let model = OffsetModel::fit(exchanges).unwrap();
        assert!(model.drift_fitted);
        assert!(
            (model.drift_ppb + 20_000.0).abs() < 100.0,
            "{}",
            model.drift_ppb
        );
        // Halfway between two exchanges the drift is applied.
        let c = model.at(10_500_000_000);
        let truth = -210_000i64; // 20 µs/s × 10.5 s, probe ahead
        assert!((c.theta_ns - truth).unsigned_abs() <= c.bound_ns, "{c:?}");
        assert!(c.bound_ns < 40_000, "{c:?}");
    }

    #[test]
    fn the_fast_lookup_agrees_with_a_scan_of_every_exchange() {
        let mut rng = fastrand::Rng::with_seed(0x5eed);
        for round in 0..200 {
            let n = rng.usize(1..60);
            let exchanges: Vec<Exchange> = (0..n)
                .map(|_| Exchange {
                    // Some share a moment, to exercise ties.
                    mono_ns: rng.u64(0..20) * 500_000_000,
                    theta_ns: rng.i64(-5_000_000..5_000_000),
                    delay_ns: rng.u64(10_000..2_000_000),
                })
                .collect();
            let model = OffsetModel::fit(exchanges).unwrap();
            for _ in 0..50 {
                let t = rng.u64(0..11_000_000_000);
                assert_eq!(model.at(t), model.at_by_scan(t), "round {round}, t {t}");
            }
            for e in model.exchanges.clone() {
                assert_eq!(model.at(e.mono_ns), model.at_by_scan(e.mono_ns));
            }
        }
    }

    #[test]
    fn reversed_or_stepped_exchanges_are_rejected() {
        let mut s = sample(0, 0, 10_000, 10_000);
        s.t3_wall_ns = s.t2_wall_ns - 1;
        assert_eq!(Exchange::from_sample(&s), None);
        let mut s = sample(0, 0, 10_000, 10_000);
        s.t4.wall_ns += 50_000_000; // the wall clock stepped mid-exchange
        assert_eq!(Exchange::from_sample(&s), None);
    }

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

    #[test]
    fn epochs_split_at_steps_and_keep_their_own_offsets() {
        let mut stamps: Vec<Stamp> = (0..10).map(|i| stamp(i * 100, 5)).collect();
        stamps.extend((10..20).map(|i| stamp(i * 100, 105)));
        let samples = [
            sample(200_000_000, 5_000_000, 20_000, 20_000),
            sample(1_500_000_000, 105_000_000, 20_000, 20_000),
        ];
        let clock = DeviceClock::build(&stamps, &samples);
        assert_eq!(clock.steps.len(), 1);
        assert_eq!(clock.at(stamp(300, 5)).unwrap().theta_ns, -5_000_000);
        assert_eq!(clock.at(stamp(1_600, 105)).unwrap().theta_ns, -105_000_000);
        // A stamp from a thread that saw the step late belongs to the old epoch
        // by its level, though it comes after the step in time.
        assert_eq!(clock.at(stamp(1_050, 5)).unwrap().theta_ns, -5_000_000);
        // And one that saw it early, to the new epoch.
        assert_eq!(clock.at(stamp(950, 105)).unwrap().theta_ns, -105_000_000);
    }

    #[test]
    fn an_epoch_without_exchanges_has_no_correction() {
        let mut stamps: Vec<Stamp> = (0..10).map(|i| stamp(i * 100, 0)).collect();
        stamps.extend((10..20).map(|i| stamp(i * 100, 50)));
        let clock = DeviceClock::build(&stamps, &[sample(100_000_000, 0, 10_000, 10_000)]);
        assert!(clock.at(stamp(500, 0)).is_some());
        assert_eq!(clock.at(stamp(1_500, 50)), None);
    }
}
