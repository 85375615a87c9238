//! Records what the device clock claims about itself at start and every
//! [`EVERY`]: the kernel's NTP state and chrony's figures when chronyd answers.
//! An unsynchronised clock is recorded as such, not hidden.

use std::time::Duration;

use skewscope_core::record::ProbeRecord;

use crate::recorder::Recorder;
use crate::shutdown::Shutdown;

/// How often the clock's state is recorded.
pub const EVERY: Duration = Duration::from_secs(5);

/// Runs until the run stops.
pub(crate) async fn run(recorder: Recorder, mut shutdown: Shutdown) {
    let stopped = shutdown.wait();
    tokio::pin!(stopped);
    loop {
        // chronyc may take a moment: keep it off the runtime threads.
        if let Ok(state) = tokio::task::spawn_blocking(skewscope_os::clock_claims::read).await {
            recorder.record(ProbeRecord::ClockState(Box::new(state)));
        }
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = &mut stopped => return,
        }
    }
}
