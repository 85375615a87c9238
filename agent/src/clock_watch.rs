//! Records what the server clock claims about itself (and the time port's
//! counters) at start and every [`EVERY`], so a report can compare each
//! device's measured offset with both clocks' claims.
//!
//! Its own small thread, asleep between readings: `chronyc` may take a
//! moment, which must not hold up the HTTP runtime, and a plain sleeping
//! thread is the fewest wake-ups an idle agent can spend on it (one per
//! reading).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use skewscope_core::record::AgentRecord;

use crate::counters::TimePortCounters;
use crate::recorder::Recorder;

/// How often the clock's state is recorded.
pub const EVERY: Duration = Duration::from_secs(10);

/// The running clock watch.
#[derive(Debug)]
pub struct ClockWatch {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ClockWatch {
    /// Starts recording into `recorder` (the time port's `counters` too,
    /// when it runs).
    pub fn start(
        recorder: Recorder,
        counters: Option<TimePortCounters>,
    ) -> std::io::Result<ClockWatch> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::Builder::new()
            .name("clock-watch".into())
            .spawn(move || {
                while !stopping.load(Ordering::Acquire) {
                    recorder.record(AgentRecord::ClockState(skewscope_os::clock_claims::read(
                        skewscope_os::clock::now(),
                    )));
                    if let Some(c) = &counters {
                        recorder.record(AgentRecord::TimePort(c.snapshot()));
                    }
                    let until = Instant::now() + EVERY;
                    while !stopping.load(Ordering::Acquire) {
                        let left = until.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            break;
                        }
                        std::thread::park_timeout(left);
                    }
                }
            })?;
        Ok(ClockWatch {
            stop,
            thread: Some(thread),
        })
    }

    /// Records nothing more; waits for the thread.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}
