//! Whether a broadcast is being fanned out right now, for work that should
//! step aside meanwhile.
//!
//! On a 2-core server the shards need both cores for the few milliseconds
//! of a fan-out; storing a probe's upload can wait that long. The hub holds
//! the [`InFlight`] side and marks each broadcast; background work holds a
//! [`FanoutQuiet`] and waits on it. Neither knows the other.

use std::time::Duration;

use tokio::sync::watch;

/// Marks broadcasts in flight (the hub's side).
#[derive(Debug)]
pub struct InFlight(watch::Sender<u32>);

/// Waits for the fan-out to be quiet (background work's side).
#[derive(Clone, Debug)]
pub struct FanoutQuiet(watch::Receiver<u32>);

/// Counts one broadcast in flight until dropped, even if its task is cancelled.
#[derive(Debug)]
pub struct Broadcasting<'a>(&'a watch::Sender<u32>);

impl InFlight {
    /// No broadcast in flight yet.
    pub fn new() -> InFlight {
        InFlight(watch::Sender::new(0))
    }

    /// A broadcast starts; it ends when the guard is dropped.
    pub fn start(&self) -> Broadcasting<'_> {
        self.0.send_modify(|n| *n += 1);
        Broadcasting(&self.0)
    }

    /// A handle for work that waits for quiet.
    pub fn quiet(&self) -> FanoutQuiet {
        FanoutQuiet(self.0.subscribe())
    }
}

impl Default for InFlight {
    fn default() -> Self {
        InFlight::new()
    }
}

impl Drop for Broadcasting<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl FanoutQuiet {
    /// Resolves when no broadcast is in flight, or after `at_most` (so a
    /// stream of broadcasts back to back cannot starve the caller).
    pub async fn wait(&mut self, at_most: Duration) {
        let _ = tokio::time::timeout(at_most, self.0.wait_for(|n| *n == 0)).await;
    }

    /// Resolves when a broadcast starts (at once if one is in flight).
    pub async fn busy(&mut self) {
        if self.0.wait_for(|n| *n > 0).await.is_err() {
            // The hub is gone: no broadcast will ever start.
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn quiet_waits_for_the_broadcast_in_flight_to_end() {
        let in_flight = InFlight::new();
        let mut quiet = in_flight.quiet();
        let guard = in_flight.start();
        // Busy at once while one is in flight.
        tokio::time::timeout(Duration::from_secs(5), quiet.busy())
            .await
            .expect("busy while a broadcast is in flight");
        let waiter = tokio::spawn(async move {
            quiet.wait(Duration::from_secs(3600)).await;
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "not quiet while one is in flight");
        drop(guard);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("quiet once it ended")
            .unwrap();
    }
}
