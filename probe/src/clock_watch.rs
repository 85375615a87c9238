//! Records what the device clock claims about itself at start and every
//! [`EVERY`]: the kernel's NTP state and chrony's figures when chronyd answers.
//! An unsynchronised clock is recorded as such, not hidden.

use std::time::Duration;

use skewscope_core::record::ProbeRecord;

use crate::recorder::Recorder;
use crate::shutdown::Shutdown;

/// How often the clock's state is recorded.
pub const EVERY: Duration = Duration::from_secs(5);

/// Records the clock's claim once. The run's first is taken before any
/// connection opens, so that even a run that ends at once (`--count 1`)
/// has it: the periodic reader is aborted with the run, and a read still in
/// flight then (chronyc may take a moment) would be lost.
pub(crate) async fn record_once(recorder: &Recorder) {
    // chronyc may take a moment: keep it off the runtime threads.
    if let Ok(state) = tokio::task::spawn_blocking(|| {
        skewscope_os::clock_claims::read(skewscope_os::clock::now_raw())
    })
    .await
    {
        recorder.record(ProbeRecord::ClockState(Box::new(state)));
    }
}

/// After the first ([`record_once`]), every [`EVERY`] until the run stops.
pub(crate) async fn run(recorder: Recorder, mut shutdown: Shutdown) {
    let stopped = shutdown.wait();
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = &mut stopped => return,
        }
        record_once(&recorder).await;
    }
}
