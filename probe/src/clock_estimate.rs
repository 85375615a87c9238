//! The probe's running idea of the agent's clock, from its latest time
//! exchanges: what maps a broadcast's time to act (the server's wall clock)
//! into this device's clocks.
//!
//! The same clock model the report uses ([`DeviceClock`]), over the latest
//! [`SAMPLES_KEPT`] exchanges, refitted when one arrives. The time exchange
//! writes into it; connections read it when a message names a time.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use skewscope_core::Stamp;
use skewscope_core::analysis::clock_model::{Correction, DeviceClock};
use skewscope_core::record::TimeSample;

/// Exchanges the estimate is fitted over: a minute of them at the default
/// interval, as the agent's live join keeps.
pub const SAMPLES_KEPT: usize = 64;

/// The shared estimate; clones share it.
#[derive(Clone, Debug, Default)]
pub struct ClockEstimate(Arc<Mutex<Estimate>>);

#[derive(Debug, Default)]
struct Estimate {
    samples: VecDeque<TimeSample>,
    clock: Option<DeviceClock>,
}

impl ClockEstimate {
    /// No exchange yet.
    pub fn new() -> ClockEstimate {
        ClockEstimate::default()
    }

    /// Takes in one exchange.
    pub fn add(&self, sample: TimeSample) {
        let mut e = self.0.lock().unwrap_or_else(|p| p.into_inner());
        e.samples.push_back(sample);
        while e.samples.len() > SAMPLES_KEPT {
            e.samples.pop_front();
        }
        let samples: Vec<TimeSample> = e.samples.iter().copied().collect();
        let stamps: Vec<Stamp> = samples.iter().flat_map(|s| [s.t1, s.t4]).collect();
        e.clock = Some(DeviceClock::build(&stamps, &samples));
    }

    /// The agent's clock minus this one's at `now`, with its bound; `None`
    /// before the first exchange.
    pub fn at(&self, now: Stamp) -> Option<Correction> {
        let e = self.0.lock().unwrap_or_else(|p| p.into_inner());
        e.clock.as_ref()?.at(now)
    }
}
