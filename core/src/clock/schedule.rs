//! When to exchange: bursts until the bound stops improving, then a steady
//! rate, in pairs; a burst again when the bound degrades. Sans-IO: the
//! caller sends a request when [`Schedule::next_request_at`] comes, and
//! tells [`Schedule::done`] how it went and what bound the model now gives.
//!
//! Why pairs: a radio in power save holds the first packet after a quiet
//! spell (the station wakes for it, or the access point buffers it until
//! the next beacon), and stays awake a moment after. The second request of
//! a pair, sent the moment the first is answered, rides the awake radio:
//! its round trip is the link's, not the doze's. Both are kept; the model
//! takes what each proves.
//!
//! Why bursts: at start, the estimate should be good before the first
//! broadcast, and on a jittery link one exchange rarely is. A burst goes on
//! while the bound still improves (or a stall hit it: a stalled exchange
//! proves little, so the bound does not improve and more are sent), and at
//! most [`MAX_BURST_ROUNDS`]. In the steady state a bound more than twice
//! the best of the last [`HORIZON_NS`] means the link or the clocks moved:
//! a burst again, at most one per [`REBURST_GAP_NS`]. An action about to
//! be taken on a wide bound asks for one too ([`Schedule::hurry`]). A pair
//! that leaves the bound over [`LOOSE_AFTER_PAIR`] times that best did not
//! find the link at its best (a busy Wi-Fi's queues held it): the next pair
//! comes in half the interval, so a busy link is sampled more often than a
//! quiet one, where nothing more is to be learned.
//!
//! The JavaScript port (`Schedule` in `clients/js/skewscope-clock.js`) is
//! the same machine over `/clock`.

use std::collections::VecDeque;

use crate::clock::model::{Estimate, HORIZON_NS};
use crate::clock::region::WANDER;
use crate::convert;

/// Pairs in a burst before it may stop.
pub const MIN_BURST_ROUNDS: u32 = 4;
/// Pairs in a burst at most.
pub const MAX_BURST_ROUNDS: u32 = 24;
/// Pause between a burst's pairs: long enough that one stall of the link
/// does not hold them all.
pub const BURST_GAP_NS: u64 = 25_000_000;
/// A burst stops once its last [`MIN_BURST_ROUNDS`] pairs improved the bound
/// by less than this fraction.
pub const STILL_IMPROVING: f64 = 0.05;
/// Least time between a burst's end and the next one the schedule starts.
pub const REBURST_GAP_NS: u64 = 10_000_000_000;
/// Least time between bursts an action asks for.
pub const HURRY_GAP_NS: u64 = 1_000_000_000;
/// While the drift is loosely known, the bound grows quickly away from the
/// exchanges: the steady pairs come often enough that it grows by at most
/// this share of itself between them (never faster than [`FASTEST_NS`]).
pub const GROWTH_BETWEEN_PAIRS: f64 = 0.03;
/// The steady pairs' shortest interval.
pub const FASTEST_NS: u64 = 100_000_000;
/// Growth between pairs that is never worth exchanging more often for:
/// below a device's own timer error.
pub const NEGLIGIBLE_GROWTH_NS: f64 = 10_000.0;

/// A pair that leaves the bound over this many times the best of the
/// horizon did not find the link at its best: the next pair comes in half
/// the interval.
pub const LOOSE_AFTER_PAIR: f64 = 1.15;

/// Whether the schedule is bursting or keeping a steady rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Pairs [`BURST_GAP_NS`] apart; this many done.
    Burst(u32),
    /// One pair per interval.
    Steady,
}

/// The exchange schedule of one device.
#[derive(Clone, Debug)]
pub struct Schedule {
    interval_ns: u64,
    phase: Phase,
    /// The next request is the second of a pair.
    second_of_pair: bool,
    next_at: u64,
    /// When the current pair's first request was due (the steady rate keeps
    /// to these, not to when replies came).
    round_started: u64,
    last_burst_end: Option<u64>,
    /// Bounds after each pair of the current burst.
    burst_bounds: Vec<u64>,
    /// (when, bound) after each pair, increasing bounds: the front is the
    /// best of the last horizon.
    best: VecDeque<(u64, u64)>,
    bursts: u64,
}

impl Schedule {
    /// A schedule that starts with a burst at `now_mono_ns` and then
    /// exchanges a pair every `interval_ns`.
    pub fn new(now_mono_ns: u64, interval_ns: u64) -> Schedule {
        Schedule {
            interval_ns: interval_ns.max(1),
            phase: Phase::Burst(0),
            second_of_pair: false,
            next_at: now_mono_ns,
            round_started: now_mono_ns,
            last_burst_end: None,
            burst_bounds: Vec::new(),
            best: VecDeque::new(),
            bursts: 1,
        }
    }

    /// When the next request is due (device monotonic time).
    pub fn next_request_at(&self) -> u64 {
        self.next_at
    }

    /// Bursting or steady.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Bursts started so far.
    pub fn bursts(&self) -> u64 {
        self.bursts
    }

    /// A request went out at the due time and was answered or not;
    /// `estimate` is the model's at `now_mono_ns` after it (`None` with no
    /// estimate yet).
    pub fn done(&mut self, now_mono_ns: u64, estimate: Option<&Estimate>) {
        let bound_ns = estimate.map(|e| e.bound_ns);
        if !self.second_of_pair {
            self.second_of_pair = true;
            self.next_at = now_mono_ns;
            return;
        }
        self.second_of_pair = false;
        if let Some(bound) = bound_ns {
            while self.best.back().is_some_and(|&(_, b)| b >= bound) {
                self.best.pop_back();
            }
            self.best.push_back((now_mono_ns, bound));
            while self
                .best
                .front()
                .is_some_and(|&(at, _)| at + HORIZON_NS < now_mono_ns)
            {
                self.best.pop_front();
            }
        }
        match self.phase {
            Phase::Burst(rounds) => {
                let rounds = rounds + 1;
                self.burst_bounds.push(bound_ns.unwrap_or(u64::MAX));
                if self.burst_should_go_on(rounds) {
                    self.phase = Phase::Burst(rounds);
                    self.round_started = now_mono_ns + BURST_GAP_NS;
                } else {
                    self.phase = Phase::Steady;
                    self.last_burst_end = Some(now_mono_ns);
                    self.round_started = now_mono_ns + self.interval_for(estimate);
                }
            }
            Phase::Steady => {
                // The bound against the best of the horizon, past `factor`.
                let over_best = |factor: f64| match (bound_ns, self.best.front()) {
                    (Some(b), Some(&(_, best))) => b as f64 > best as f64 * factor,
                    _ => false,
                };
                let degraded = bound_ns.is_none() || over_best(2.0);
                let loose = over_best(LOOSE_AFTER_PAIR);
                let rested = self
                    .last_burst_end
                    .is_none_or(|end| now_mono_ns >= end + REBURST_GAP_NS);
                if degraded && rested {
                    self.start_burst(now_mono_ns + BURST_GAP_NS);
                } else {
                    // Keep the rate; after a long wait (a lost reply), go now.
                    let mut interval = self.interval_for(estimate);
                    if loose {
                        interval = (interval / 2).max(FASTEST_NS.min(interval));
                    }
                    self.round_started = (self.round_started + interval).max(now_mono_ns);
                }
            }
        }
        self.next_at = self.round_started;
    }

    /// An action is about to be taken on a bound its caller finds too wide:
    /// burst now, unless one runs or one ended under [`HURRY_GAP_NS`] ago.
    /// Returns whether it did.
    pub fn hurry(&mut self, now_mono_ns: u64) -> bool {
        if self.phase != Phase::Steady
            || self
                .last_burst_end
                .is_some_and(|end| now_mono_ns < end + HURRY_GAP_NS)
        {
            return false;
        }
        if !self.second_of_pair {
            self.start_burst(now_mono_ns);
            self.next_at = now_mono_ns;
        } else {
            self.start_burst(self.next_at);
        }
        true
    }

    /// The steady interval: the one asked, or shorter while the drift is
    /// so loosely known that the bound would grow by more than
    /// [`GROWTH_BETWEEN_PAIRS`] of itself in it (and more than
    /// [`NEGLIGIBLE_GROWTH_NS`]).
    fn interval_for(&self, estimate: Option<&Estimate>) -> u64 {
        let Some(e) = estimate else {
            return self.interval_ns;
        };
        let growth_per_ns = e.drift_bound_ppb * 1e-9 + WANDER;
        let allowed =
            (GROWTH_BETWEEN_PAIRS * e.bound_ns as f64).max(NEGLIGIBLE_GROWTH_NS) / growth_per_ns;
        convert::from_float(allowed).clamp(FASTEST_NS.min(self.interval_ns), self.interval_ns)
    }

    fn start_burst(&mut self, at: u64) {
        self.phase = Phase::Burst(0);
        self.burst_bounds.clear();
        self.round_started = at;
        self.bursts += 1;
    }

    fn burst_should_go_on(&self, rounds: u32) -> bool {
        if rounds >= MAX_BURST_ROUNDS {
            return false;
        }
        let n = self.burst_bounds.len();
        let k = MIN_BURST_ROUNDS as usize;
        if n <= k {
            return true;
        }
        let (then, now) = (self.burst_bounds[n - 1 - k], self.burst_bounds[n - 1]);
        now == u64::MAX || (now as f64) < (then as f64) * (1.0 - STILL_IMPROVING)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Runs the schedule against a bound that follows `bound(round)`;
    /// returns the times requests were sent.
    fn drive(s: &mut Schedule, requests: usize, bound: impl Fn(usize) -> Option<u64>) -> Vec<u64> {
        let mut sent = Vec::new();
        for i in 0..requests {
            let at = s.next_request_at();
            sent.push(at);
            let estimate = bound(i / 2).map(|bound_ns| Estimate {
                agent_minus_mono_ns: 0,
                bound_ns,
                drift_ppb: 0.0,
                drift_bound_ppb: 0.0,
            });
            s.done(at + MS, estimate.as_ref());
        }
        sent
    }

    #[test]
    fn requests_come_in_pairs_the_second_at_the_first_reply() {
        let mut s = Schedule::new(0, 1_000 * MS);
        let sent = drive(&mut s, 4, |_| Some(100_000));
        assert_eq!(sent[1], sent[0] + MS);
        assert_eq!(sent[3], sent[2] + MS);
    }

    #[test]
    fn a_burst_runs_while_the_bound_improves_then_the_rate_is_steady() {
        let mut s = Schedule::new(0, 1_000 * MS);
        // Improves a lot for ten pairs, then flat.
        let bound = |round: usize| Some(1_000_000u64 >> round.min(10));
        drive(&mut s, 2 * 14, bound);
        assert_eq!(s.phase(), Phase::Burst(14));
        drive(&mut s, 2 * 6, bound);
        assert_eq!(s.phase(), Phase::Steady);
        let sent = drive(&mut s, 6, |_| Some(1_000_000 >> 10));
        assert_eq!(sent[2] - sent[0], 1_000 * MS);
        assert_eq!(s.bursts(), 1);
    }

    #[test]
    fn a_burst_stops_at_its_cap_even_when_nothing_answers() {
        let mut s = Schedule::new(0, 1_000 * MS);
        drive(&mut s, 2 * MAX_BURST_ROUNDS as usize, |_| None);
        assert_eq!(s.phase(), Phase::Steady);
    }

    #[test]
    fn a_degraded_bound_starts_a_burst_but_not_too_often() {
        let mut s = Schedule::new(0, 1_000 * MS);
        drive(&mut s, 2 * MAX_BURST_ROUNDS as usize, |_| Some(100_000));
        assert_eq!(s.phase(), Phase::Steady);
        // Ten seconds later the bound is three times the best.
        drive(&mut s, 20, |_| Some(100_000));
        drive(&mut s, 2, |_| Some(300_000));
        assert!(matches!(s.phase(), Phase::Burst(_)), "{:?}", s.phase());
        assert_eq!(s.bursts(), 2);
        // A flat bound ends a burst after its first rounds.
        drive(&mut s, 2 * (MIN_BURST_ROUNDS as usize + 1), |_| {
            Some(300_000)
        });
        assert_eq!(s.phase(), Phase::Steady);
        // Right after, a worse bound does not burst again at once.
        drive(&mut s, 2, |_| Some(900_000));
        assert_eq!(s.phase(), Phase::Steady);
    }

    #[test]
    fn a_pair_that_missed_the_links_best_brings_the_next_sooner() {
        let mut s = Schedule::new(0, 1_000 * MS);
        drive(&mut s, 2 * MAX_BURST_ROUNDS as usize, |_| Some(100_000));
        assert_eq!(s.phase(), Phase::Steady);
        // Within LOOSE_AFTER_PAIR of the best: the interval asked.
        let at = s.next_request_at();
        drive(&mut s, 2, |_| Some(110_000));
        assert_eq!(s.next_request_at() - at, 1_000 * MS);
        // Past it (and not twice the best, which bursts): half of it.
        let at = s.next_request_at();
        drive(&mut s, 2, |_| Some(150_000));
        assert_eq!(s.phase(), Phase::Steady);
        assert_eq!(s.next_request_at() - at, 500 * MS);
        // Never under FASTEST_NS.
        let mut fast = Schedule::new(0, 150 * MS);
        drive(&mut fast, 2 * MAX_BURST_ROUNDS as usize, |_| Some(100_000));
        let at = fast.next_request_at();
        drive(&mut fast, 2, |_| Some(150_000));
        assert_eq!(fast.next_request_at() - at, FASTEST_NS);
    }

    #[test]
    fn a_loosely_known_drift_brings_the_pairs_closer_until_it_is_pinned() {
        let mut s = Schedule::new(0, 1_000 * MS);
        drive(&mut s, 2 * MAX_BURST_ROUNDS as usize, |_| Some(1_000_000));
        let loose = Estimate {
            agent_minus_mono_ns: 0,
            bound_ns: 1_000_000,
            drift_ppb: 0.0,
            drift_bound_ppb: 400_000.0,
        };
        let first = s.next_request_at();
        s.done(first + MS, Some(&loose));
        s.done(first + 2 * MS, Some(&loose));
        // 3 % of 1 ms at 401 ppm: 75 ms, but never under 100 ms.
        let gap = s.next_request_at() - first;
        assert_eq!(gap, FASTEST_NS);
        let pinned = Estimate {
            drift_bound_ppb: 20_000.0,
            ..loose
        };
        let second = s.next_request_at();
        s.done(second + MS, Some(&pinned));
        s.done(second + 2 * MS, Some(&pinned));
        // 3 % of 1 ms at 21 ppm: about 1.43 s, so the second asked.
        assert_eq!(s.next_request_at() - second, 1_000 * MS);
    }

    #[test]
    fn hurry_bursts_at_once_but_not_twice_in_a_second() {
        let mut s = Schedule::new(0, 1_000 * MS);
        drive(&mut s, 2 * MAX_BURST_ROUNDS as usize, |_| Some(100_000));
        let now = s.next_request_at() - 500 * MS;
        assert!(s.hurry(now));
        assert_eq!(s.next_request_at(), now);
        assert!(!s.hurry(now + MS));
    }
}
