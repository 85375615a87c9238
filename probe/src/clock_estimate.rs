//! The probe's running idea of the agent's clock: what maps a broadcast's
//! time to act (the server's wall clock) onto this device's clocks.
//!
//! It is the core's one clock model ([`ClockModel`]), fed as exchanges come,
//! keeping those within its horizon of now: the report, given this run's
//! log, answers the same at the same moment. The time exchange writes into
//! it; connections and the actor read it; an action about to be taken on a
//! bound wider than its time to spare asks the exchange for a burst
//! ([`ClockEstimate::hurry`]).
//!
//! A device that slept with its monotonic clock stopped (suspend) wakes
//! with every exchange before the sleep off by the sleep's length: until
//! the first exchange that began after the wake, nothing is answered from
//! the model (the device's own clock stands in, as before the first
//! exchange, and the exchange is asked for a burst). Without this, the
//! question at a wake was off by the whole sleep, minutes, in 20 of 20
//! simulated wakes (docs/benchmarks.md, clock models over days).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use skewscope_core::Stamp;
use skewscope_core::clock::{ClockModel, Correction, Estimate, Exchange, HORIZON_NS};
use skewscope_core::record::TimeSample;
use tokio::sync::Notify;

/// The shared estimate; clones share it.
#[derive(Clone, Debug, Default)]
pub struct ClockEstimate(Arc<Shared>);

#[derive(Debug, Default)]
struct Shared {
    fed: Mutex<Fed>,
    hurry: Notify,
    wide_actions: AtomicU64,
    sleeps_seen: AtomicU64,
}

/// The model, and how long the device had been suspended when the latest
/// exchange it took began.
#[derive(Debug, Default)]
struct Fed {
    model: ClockModel,
    /// [`skewscope_os::clock::suspended_ns`] as the latest exchange began;
    /// `None` before the first.
    suspended_at_latest_ns: Option<u64>,
    /// Whether the sleep seen last has been said.
    sleep_said: bool,
}

/// Growth of the time suspended that counts as a sleep: it grows only in
/// suspend, so anything over the two reads' own error (a few µs) is one.
pub const SLEEP_SEEN_NS: u64 = 1_000_000;

impl ClockEstimate {
    /// No exchange yet.
    pub fn new() -> ClockEstimate {
        ClockEstimate::default()
    }

    /// Takes in one exchange, which began when the device had been
    /// suspended for `suspended_at_start_ns`
    /// ([`skewscope_os::clock::suspended_ns`] read before its request).
    pub fn add(&self, sample: &TimeSample, suspended_at_start_ns: u64) {
        let Some(exchange) = Exchange::from_sample(sample) else {
            return;
        };
        let mut fed = self.fed();
        fed.model.add(exchange);
        // Every later question is about now or ahead of it.
        fed.model
            .forget_before(sample.t4.mono_ns.saturating_sub(HORIZON_NS));
        // An exchange in flight across a sleep began before it: it does
        // not say the model knows the clock after the sleep.
        let latest = fed.suspended_at_latest_ns.unwrap_or(0);
        fed.suspended_at_latest_ns = Some(latest.max(suspended_at_start_ns));
        if suspended_at_start_ns > latest.saturating_add(SLEEP_SEEN_NS) {
            fed.sleep_said = false;
        }
    }

    /// The estimate of the agent's clock at `mono_ns`; `None` before the
    /// first exchange, and after a sleep until an exchange after it.
    pub fn estimate_at(&self, mono_ns: u64) -> Option<Estimate> {
        self.estimate_at_when(mono_ns, skewscope_os::clock::suspended_ns())
    }

    /// [`ClockEstimate::estimate_at`], the device suspended for
    /// `suspended_ns` now.
    fn estimate_at_when(&self, mono_ns: u64, suspended_ns: u64) -> Option<Estimate> {
        let mut fed = self.fed();
        if self.slept_since_latest(&mut fed, suspended_ns) {
            return None;
        }
        fed.model.at(mono_ns)
    }

    /// The moment on this device's clocks when the agent's wall clock reads
    /// `agent_ns`, asked at `now`, with the correction there; `None` before
    /// the first exchange, and after a sleep until an exchange after it.
    pub fn moment_of(&self, agent_ns: u64, now: Stamp) -> Option<(Stamp, Correction)> {
        self.moment_of_when(agent_ns, now, skewscope_os::clock::suspended_ns())
    }

    /// [`ClockEstimate::moment_of`], the device suspended for
    /// `suspended_ns` now.
    fn moment_of_when(
        &self,
        agent_ns: u64,
        now: Stamp,
        suspended_ns: u64,
    ) -> Option<(Stamp, Correction)> {
        let mut fed = self.fed();
        if self.slept_since_latest(&mut fed, suspended_ns) {
            return None;
        }
        let (mono, estimate) = fed.model.mono_of_agent_time(agent_ns, now.mono_ns)?;
        let at = Stamp {
            wall_ns: now.wall_at(mono),
            mono_ns: mono,
        };
        Some((at, estimate.correction(at)))
    }

    /// Asks the time exchange for a burst now (an action is planned on a
    /// bound wider than its time to spare); it bursts unless it just did.
    pub fn hurry(&self) {
        self.0.hurry.notify_one();
    }

    /// Resolves when an action asked for a burst.
    pub async fn hurried(&self) {
        self.0.hurry.notified().await;
    }

    /// Counts an action taken on a bound wider than its time to spare.
    pub fn count_wide_action(&self) {
        self.0.wide_actions.fetch_add(1, Ordering::Relaxed);
    }

    /// Actions taken on a bound wider than their time to spare (or with no
    /// estimate at all).
    pub fn wide_actions(&self) -> u64 {
        self.0.wide_actions.load(Ordering::Relaxed)
    }

    /// Sleeps seen: wakes after which the model was not asked until an
    /// exchange after them.
    pub fn sleeps_seen(&self) -> u64 {
        self.0.sleeps_seen.load(Ordering::Relaxed)
    }

    fn fed(&self) -> std::sync::MutexGuard<'_, Fed> {
        self.0.fed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the device slept since the latest exchange began (then the
    /// exchange is asked for a burst, and the sleep said once).
    fn slept_since_latest(&self, fed: &mut Fed, suspended_ns: u64) -> bool {
        let Some(latest) = fed.suspended_at_latest_ns else {
            return false;
        };
        let slept = suspended_ns.saturating_sub(latest);
        if slept <= SLEEP_SEEN_NS {
            return false;
        }
        if !fed.sleep_said {
            fed.sleep_said = true;
            self.0.sleeps_seen.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                target: "probe::time",
                "this device was suspended for {:.1} s since the last time exchange began: its monotonic clock stood still, so the agent's clock is not known until the next exchange; acting on this device's own clock meanwhile",
                slept as f64 / 1e9
            );
        }
        self.hurry();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;
    /// The agent's clock: the device's monotonic clock + this.
    const OFFSET: u64 = 1_764_000_000 * SECOND;

    /// An exchange at device time `at` with a 2 ms round trip on a clock
    /// `OFFSET` + `behind` ahead (what the agent's clock reads while the
    /// device's monotonic clock has lost `behind` in a sleep).
    fn sample(at: u64, behind: u64) -> TimeSample {
        let agent = at + OFFSET + behind;
        TimeSample {
            t1: Stamp {
                wall_ns: at + OFFSET,
                mono_ns: at,
            },
            t2_wall_ns: agent + 1_000_000,
            t3_wall_ns: agent + 1_000_000,
            t4: Stamp {
                wall_ns: at + OFFSET + 2_000_000,
                mono_ns: at + 2_000_000,
            },
        }
    }

    /// Whether `estimate` holds the true agent − monotonic, `truth`.
    fn within(estimate: &Estimate, truth: u64) -> bool {
        (i128::from(estimate.agent_minus_mono_ns) - i128::from(truth)).unsigned_abs()
            <= u128::from(estimate.bound_ns)
    }

    #[test]
    fn after_a_sleep_nothing_is_answered_until_an_exchange_after_it() {
        let clock = ClockEstimate::new();
        let asleep_before = 7 * SECOND;
        for i in 0..10 {
            clock.add(&sample(i * SECOND, 0), asleep_before);
        }
        let before = clock.estimate_at_when(10 * SECOND, asleep_before).unwrap();
        assert!(within(&before, OFFSET), "{before:?}");
        // Five minutes suspended: the monotonic clock stood still while
        // the agent's ran on. The model's answer would be 300 s off.
        let slept = 300 * SECOND;
        let unguarded = clock.fed().model.at(11 * SECOND).unwrap();
        assert!(!within(&unguarded, OFFSET + slept), "{unguarded:?}");
        let now = Stamp {
            wall_ns: 11 * SECOND + OFFSET + slept,
            mono_ns: 11 * SECOND,
        };
        assert_eq!(
            clock.estimate_at_when(11 * SECOND, asleep_before + slept),
            None
        );
        assert_eq!(
            clock.moment_of_when(12 * SECOND + OFFSET + slept, now, asleep_before + slept),
            None
        );
        assert_eq!(clock.sleeps_seen(), 1, "one sleep, said once");
        // An exchange in flight across the sleep began before it: still
        // nothing answered.
        clock.add(&sample(10 * SECOND, 0), asleep_before);
        assert_eq!(
            clock.estimate_at_when(11 * SECOND, asleep_before + slept),
            None
        );
        // The first exchange after the wake: answered again, and right.
        clock.add(&sample(11 * SECOND, slept), asleep_before + slept);
        let after = clock
            .estimate_at_when(12 * SECOND, asleep_before + slept)
            .expect("answered after an exchange after the wake");
        assert!(within(&after, OFFSET + slept), "{after:?}");
        assert_eq!(clock.sleeps_seen(), 1);
    }

    #[test]
    fn no_sleep_no_refusal() {
        let clock = ClockEstimate::new();
        for i in 0..5 {
            clock.add(&sample(i * SECOND, 0), 0);
        }
        // The two reads of the suspended time differ by their own error.
        assert!(clock.estimate_at_when(5 * SECOND, 3_000).is_some());
        assert_eq!(clock.sleeps_seen(), 0);
    }
}
