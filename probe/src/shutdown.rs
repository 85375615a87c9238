//! The one stop signal every connection listens to: a request (SIGINT, SIGTERM,
//! [`crate::RunningProbe::stop`]), the end of `--duration`, or a failed record log.

use std::fmt;

use tokio::sync::watch;
use tokio::time::Instant;

/// Why the run is stopping; written as the connections' close reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StopReason {
    /// Someone asked: a signal or [`crate::RunningProbe::stop`].
    Requested,
    /// `--duration` is over.
    DurationOver,
    /// The record log cannot be written: measuring on would lose data silently.
    RecorderFailed,
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StopReason::Requested => "stopped",
            StopReason::DurationOver => "duration over",
            StopReason::RecorderFailed => "record log failed",
        })
    }
}

/// Asks every connection of a run to stop; cheap to clone and safe to call from
/// a signal handler task, any number of times (the first reason wins).
#[derive(Clone, Debug)]
pub struct StopHandle {
    tx: watch::Sender<Option<StopReason>>,
}

impl StopHandle {
    /// Asks all connections to close cleanly, as SIGTERM does.
    pub fn stop(&self) {
        self.raise(StopReason::Requested);
    }

    pub(crate) fn raise(&self, reason: StopReason) {
        self.tx.send_if_modified(|current| {
            if current.is_some() {
                return false;
            }
            *current = Some(reason);
            true
        });
    }
}

/// A connection's view of the stop signal, including the run's deadline.
#[derive(Clone, Debug)]
pub(crate) struct Shutdown {
    rx: watch::Receiver<Option<StopReason>>,
    deadline: Option<Instant>,
}

impl Shutdown {
    /// Resolves when the run must stop, with the reason. Cancel-safe, so it can
    /// sit in a `select!` next to a socket read.
    pub(crate) async fn wait(&mut self) -> StopReason {
        let requested = async {
            let raised = self.rx.wait_for(Option::is_some).await.map(|r| *r);
            match raised {
                Ok(reason) => reason.unwrap_or(StopReason::Requested),
                // The handle is gone, so nobody can stop the run any more: only the
                // deadline (if any) ends it.
                Err(_) => std::future::pending().await,
            }
        };
        match self.deadline {
            Some(deadline) => tokio::select! {
                reason = requested => reason,
                () = tokio::time::sleep_until(deadline) => StopReason::DurationOver,
            },
            None => requested.await,
        }
    }
}

/// Creates the stop signal for a run that must end by `deadline`, if any.
pub(crate) fn channel(deadline: Option<Instant>) -> (StopHandle, Shutdown) {
    let (tx, rx) = watch::channel(None);
    (StopHandle { tx }, Shutdown { rx, deadline })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn the_first_reason_wins() {
        let (handle, mut shutdown) = channel(None);
        handle.raise(StopReason::DurationOver);
        handle.stop();
        assert_eq!(shutdown.wait().await, StopReason::DurationOver);
        assert_eq!(shutdown.clone().wait().await, StopReason::DurationOver);
    }

    #[tokio::test]
    async fn the_deadline_stops_without_a_request() {
        let (_handle, mut shutdown) = channel(Some(Instant::now() + Duration::from_millis(20)));
        assert_eq!(shutdown.wait().await, StopReason::DurationOver);
    }
}
