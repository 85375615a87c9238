//! How many control frames (ping, pong) one client may send: a token
//! bucket, handed the time. A hub must answer pings, but a client that
//! floods them makes its shard spend CPU on it and queue a pong per ping;
//! past the rate it is closed with 1008 (policy violation).

/// Control frames a client may send at once.
pub const CONTROL_BURST: u32 = 100;
/// Control frames per second a client may keep sending. Browsers never
/// send pings; libraries' keepalives send one every few seconds.
pub const CONTROL_PER_SECOND: u32 = 50;

/// One peer's allowance: a token bucket of `burst` at `per_second`. A
/// client's control frames use [`ControlRate::new`]; other allowances (the
/// agent's `/clock` exchanges per connection) choose their own.
#[derive(Clone, Copy, Debug)]
pub struct ControlRate {
    /// Frames allowed now, in 1/1e9 of a frame (so refills need no division
    /// per frame).
    tokens_nano: u64,
    last_ns: u64,
    burst: u32,
    per_second: u32,
}

impl ControlRate {
    /// A full bucket of control frames at `now_ns` (monotonic):
    /// [`CONTROL_BURST`] at once, [`CONTROL_PER_SECOND`] kept up.
    pub fn new(now_ns: u64) -> ControlRate {
        ControlRate::with(now_ns, CONTROL_BURST, CONTROL_PER_SECOND)
    }

    /// A full bucket of `burst`, refilled at `per_second`.
    pub fn with(now_ns: u64, burst: u32, per_second: u32) -> ControlRate {
        ControlRate {
            tokens_nano: u64::from(burst) * 1_000_000_000,
            last_ns: now_ns,
            burst,
            per_second,
        }
    }

    /// Takes one frame seen at `now_ns`; `false` once the peer is over the
    /// rate.
    pub fn allow(&mut self, now_ns: u64) -> bool {
        let elapsed = now_ns.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now_ns);
        let full = u64::from(self.burst) * 1_000_000_000;
        self.tokens_nano = self
            .tokens_nano
            .saturating_add(elapsed.saturating_mul(u64::from(self.per_second)))
            .min(full);
        match self.tokens_nano.checked_sub(1_000_000_000) {
            Some(left) => {
                self.tokens_nano = left;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn a_burst_is_allowed_then_only_the_rate() {
        let mut r = ControlRate::new(SECOND);
        assert!((0..CONTROL_BURST).all(|_| r.allow(SECOND)));
        assert!(!r.allow(SECOND), "past the burst at once");
        // A second later, the rate's worth again, and no more.
        let later = 2 * SECOND;
        let allowed = (0..2 * CONTROL_PER_SECOND)
            .filter(|_| r.allow(later))
            .count();
        assert_eq!(allowed, CONTROL_PER_SECOND as usize);
    }

    #[test]
    fn a_steady_keepalive_is_never_refused() {
        let mut r = ControlRate::new(0);
        assert!((1..10_000u64).all(|i| r.allow(i * SECOND / u64::from(CONTROL_PER_SECOND))));
    }

    #[test]
    fn a_clock_going_back_refills_nothing() {
        let mut r = ControlRate::new(10 * SECOND);
        for _ in 0..CONTROL_BURST {
            r.allow(10 * SECOND);
        }
        assert!(!r.allow(5 * SECOND));
    }
}
