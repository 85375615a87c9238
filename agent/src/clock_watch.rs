//! Records what the server clock claims about itself (and the time port's
//! counters) at start and every [`EVERY`], so a report can compare each
//! device's measured offset with both clocks' claims.

use std::sync::Arc;
use std::time::Duration;

use skewscope_core::record::AgentRecord;
use tokio::sync::watch;

use crate::recorder::Recorder;
use crate::time_port::TimeCounters;

/// How often the clock's state is recorded.
pub const EVERY: Duration = Duration::from_secs(10);

/// Runs until `stop` turns true.
pub async fn watch(
    recorder: Recorder,
    counters: Option<Arc<TimeCounters>>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        // chronyc may take a moment: keep it off the runtime thread.
        if let Ok(state) = tokio::task::spawn_blocking(skewscope_os::clock_claims::read).await {
            recorder.record(AgentRecord::ClockState(state));
        }
        if let Some(c) = &counters {
            recorder.record(AgentRecord::TimeService(c.snapshot()));
        }
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = stop.changed() => return,
        }
    }
}
