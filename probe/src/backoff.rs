//! The pause before trying again, for the uploader and for reconnecting
//! measurement connections: doubling from 250 ms to at most 10 s, with up to
//! half of it again at random, so devices that lost one server together do
//! not come back at the same instant.

use std::time::Duration;

/// First pause.
pub const BACKOFF_MIN: Duration = Duration::from_millis(250);
/// Longest pause before the jitter.
pub const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// A back-off that grows with each failure and starts over after a success.
#[derive(Clone, Debug)]
pub struct Backoff {
    next: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff { next: BACKOFF_MIN }
    }
}

impl Backoff {
    /// The pause before the next attempt; the one after is twice as long.
    pub fn pause(&mut self) -> Duration {
        let jitter = fastrand::u64(0..=self.next.as_millis() as u64 / 2);
        let pause = self.next + Duration::from_millis(jitter);
        self.next = (self.next * 2).min(BACKOFF_MAX);
        pause
    }

    /// After a success: the next failure waits the shortest pause again.
    pub fn reset(&mut self) {
        self.next = BACKOFF_MIN;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_double_up_to_the_bound_with_at_most_half_again_of_jitter() {
        let mut b = Backoff::default();
        let mut base = BACKOFF_MIN;
        for _ in 0..12 {
            let p = b.pause();
            assert!(p >= base && p <= base + base / 2, "{p:?} for {base:?}");
            base = (base * 2).min(BACKOFF_MAX);
        }
        b.reset();
        assert!(b.pause() <= BACKOFF_MIN + BACKOFF_MIN / 2);
    }
}
