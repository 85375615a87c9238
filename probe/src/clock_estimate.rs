//! The probe's running idea of the agent's clock: what maps a broadcast's
//! time to act (the server's wall clock) onto this device's clocks.
//!
//! It is the core's one clock model ([`ClockModel`]), fed as exchanges come,
//! keeping those within its horizon of now: the report, given this run's
//! log, answers the same at the same moment. The time exchange writes into
//! it; connections and the actor read it; an action about to be taken on a
//! bound wider than its time to spare asks the exchange for a burst
//! ([`ClockEstimate::hurry`]).

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
    model: Mutex<ClockModel>,
    hurry: Notify,
    wide_actions: AtomicU64,
}

impl ClockEstimate {
    /// No exchange yet.
    pub fn new() -> ClockEstimate {
        ClockEstimate::default()
    }

    /// Takes in one exchange.
    pub fn add(&self, sample: &TimeSample) {
        let Some(exchange) = Exchange::from_sample(sample) else {
            return;
        };
        let mut model = self.0.model.lock().unwrap_or_else(|p| p.into_inner());
        model.add(exchange);
        // Every later question is about now or ahead of it.
        model.forget_before(sample.t4.mono_ns.saturating_sub(HORIZON_NS));
    }

    /// The estimate of the agent's clock at `mono_ns`; `None` before the
    /// first exchange.
    pub fn estimate_at(&self, mono_ns: u64) -> Option<Estimate> {
        let model = self.0.model.lock().unwrap_or_else(|p| p.into_inner());
        model.at(mono_ns)
    }

    /// The moment on this device's clocks when the agent's wall clock reads
    /// `agent_ns`, asked at `now`, with the correction there; `None` before
    /// the first exchange.
    pub fn moment_of(&self, agent_ns: u64, now: Stamp) -> Option<(Stamp, Correction)> {
        let model = self.0.model.lock().unwrap_or_else(|p| p.into_inner());
        let (mono, estimate) = model.mono_of_agent_time(agent_ns, now.mono_ns)?;
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
}
