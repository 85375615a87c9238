//! Other projects' clock filters, written from their published descriptions
//! (no code of theirs), to measure against:
//!
//! - **Snapcast**: the client's offset is the median of its latest 200
//!   offsets θ = ((t2 − t1) + (t3 − t4)) / 2, with no round-trip filtering
//!   and no bound;
//! - **NTP's clock filter** (RFC 5905, §10): of the latest 8 exchanges the
//!   one with the least round trip gives the offset, and the bound (root
//!   distance from a stratum-0 server) is half its round trip plus the
//!   dispersion that grows at 15 ppm (PHI) since it was taken.

use std::collections::VecDeque;

use skewscope_core::record::TimeSample;

fn theta(s: &TimeSample) -> i64 {
    (((s.t2_wall_ns as i128 - s.t1.wall_ns as i128)
        + (s.t3_wall_ns as i128 - s.t4.wall_ns as i128))
        / 2) as i64
}

/// Snapcast's filter.
#[derive(Default)]
pub struct MedianOf200 {
    offsets: VecDeque<i64>,
}

impl MedianOf200 {
    /// Takes in one exchange.
    pub fn add(&mut self, s: &TimeSample) {
        self.offsets.push_back(theta(s));
        if self.offsets.len() > 200 {
            self.offsets.pop_front();
        }
    }

    /// The offset; it has no bound.
    pub fn at(&self) -> Option<i64> {
        let mut v: Vec<i64> = self.offsets.iter().copied().collect();
        if v.is_empty() {
            return None;
        }
        v.sort_unstable();
        Some(v[v.len() / 2])
    }
}

/// NTP's clock filter.
#[derive(Default)]
pub struct NtpFilter {
    /// (midpoint, offset, delay).
    samples: VecDeque<(u64, i64, u64)>,
}

/// NTP's frequency tolerance.
const PHI: f64 = 15e-6;

impl NtpFilter {
    /// Takes in one exchange.
    pub fn add(&mut self, s: &TimeSample) {
        let rtt = s.t4.mono_ns - s.t1.mono_ns;
        let delay = rtt.saturating_sub(s.t3_wall_ns - s.t2_wall_ns);
        self.samples
            .push_back((s.t1.mono_ns + rtt / 2, theta(s), delay));
        if self.samples.len() > 8 {
            self.samples.pop_front();
        }
    }

    /// (offset, bound) at `mono_ns`.
    pub fn at(&self, mono_ns: u64) -> Option<(i64, u64)> {
        let &(at, offset, delay) = self.samples.iter().min_by_key(|s| s.2)?;
        let age = mono_ns.saturating_sub(at) as f64;
        Some((offset, (delay as f64 / 2.0 + PHI * age).ceil() as u64))
    }
}
