//! A Kalman filter over offset and drift of the kind Sendspin uses (its
//! clients' time filter, written here from its published description, no
//! code of theirs), to measure against: the state is the offset θ and the
//! drift; each exchange is a measurement of θ = ((t2 − t1) + (t3 − t4)) / 2
//! at the exchange's middle whose standard deviation is taken to be half
//! its round trip less the agent's turnaround (RTT/2, "max error"); process
//! noise is on the offset alone (10 µs per √s); once 100 exchanges are in,
//! a residual beyond 0.75 × RTT/2 inflates the covariance by a forgetting
//! factor (1.001²), so a disruption is followed faster.
//!
//! Where this differs from a literal port, it is to the filter's benefit:
//! the drift starts at 0 with a ±100 ppm prior instead of a finite
//! difference of the first two exchanges (which a pair sent a millisecond
//! apart turns into nonsense), the forgetting test takes the residual's
//! magnitude, and the σ asked at a moment is the covariance carried to it
//! (Sendspin reports the one at its last update). Its interval is k·σ: a
//! statistical statement, not a bound, checked for truth coverage as one.

use skewscope_core::record::TimeSample;

/// Process noise on the offset, ns² per ns: (10 µs)² per second.
const OFFSET_PROCESS_VARIANCE_PER_NS: f64 = 0.1;
/// The drift's prior standard deviation (dimensionless): 100 ppm.
const DRIFT_PRIOR: f64 = 100e-6;
/// Exchanges before forgetting may start.
const WARM_UP: u64 = 100;
/// A residual beyond this share of RTT/2 inflates the covariance.
const FORGET_CUTOFF: f64 = 0.75;
/// By this factor.
const FORGET_VARIANCE_FACTOR: f64 = 1.001 * 1.001;

/// The filter's state.
#[derive(Clone, Debug, Default)]
pub struct Kalman {
    /// θ of the first exchange: offsets are held relative to it, so `f64`
    /// keeps nanoseconds.
    base: i64,
    /// Device monotonic time of the first exchange's middle.
    origin: u64,
    /// Of the latest update, ns after `origin`.
    at: f64,
    offset: f64,
    drift: f64,
    p_oo: f64,
    p_od: f64,
    p_dd: f64,
    count: u64,
}

impl Kalman {
    /// Takes in one exchange.
    pub fn add(&mut self, s: &TimeSample) {
        let (t1, t4) = (s.t1.mono_ns, s.t4.mono_ns);
        let turnaround = s.t3_wall_ns.saturating_sub(s.t2_wall_ns);
        let Some(rtt) = t4.checked_sub(t1).and_then(|r| r.checked_sub(turnaround)) else {
            return;
        };
        let max_error = (rtt as f64 / 2.0).max(1.0);
        let r = max_error * max_error;
        let theta = ((i128::from(s.t2_wall_ns) - i128::from(t1))
            + (i128::from(s.t3_wall_ns) - i128::from(t4)))
            / 2;
        let mid = t1 + (t4 - t1) / 2;
        if self.count == 0 {
            *self = Kalman {
                base: theta as i64,
                origin: mid,
                at: 0.0,
                offset: 0.0,
                drift: 0.0,
                p_oo: r,
                p_od: 0.0,
                p_dd: DRIFT_PRIOR * DRIFT_PRIOR,
                count: 1,
            };
            return;
        }
        let now = mid as f64 - self.origin as f64;
        let dt = now - self.at;
        if dt <= 0.0 {
            return;
        }
        // Predict.
        let mut offset = self.offset + self.drift * dt;
        let mut p_oo = self.p_oo
            + 2.0 * self.p_od * dt
            + self.p_dd * dt * dt
            + OFFSET_PROCESS_VARIANCE_PER_NS * dt;
        let mut p_od = self.p_od + self.p_dd * dt;
        let mut p_dd = self.p_dd;
        let residual = (theta - i128::from(self.base)) as f64 - offset;
        if self.count >= WARM_UP && residual.abs() > FORGET_CUTOFF * max_error {
            p_oo *= FORGET_VARIANCE_FACTOR;
            p_od *= FORGET_VARIANCE_FACTOR;
            p_dd *= FORGET_VARIANCE_FACTOR;
        }
        // Update.
        let s = p_oo + r;
        let (k_o, k_d) = (p_oo / s, p_od / s);
        offset += k_o * residual;
        self.drift += k_d * residual;
        p_dd -= k_d * p_od;
        p_od -= k_o * p_od;
        p_oo -= k_o * p_oo;
        self.offset = offset;
        (self.p_oo, self.p_od, self.p_dd) = (p_oo, p_od, p_dd);
        self.at = now;
        self.count += 1;
    }

    /// (agent − device, σ) at `mono_ns`.
    pub fn at(&self, mono_ns: u64) -> Option<(i64, f64)> {
        if self.count == 0 {
            return None;
        }
        let dt = (mono_ns as f64 - self.origin as f64) - self.at;
        let offset = self.offset + self.drift * dt;
        let variance = self.p_oo
            + 2.0 * self.p_od * dt
            + self.p_dd * dt * dt
            + OFFSET_PROCESS_VARIANCE_PER_NS * dt.abs();
        Some((
            self.base.saturating_add(offset.round() as i64),
            variance.max(0.0).sqrt(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skewscope_core::Stamp;

    fn sample(t1: u64, up: u64, down: u64, psi: impl Fn(u64) -> i64) -> TimeSample {
        let t2 = (t1 + up) as i64 + psi(t1 + up);
        let t4 = t1 + up + 10_000 + down;
        let stamp = |m: u64| Stamp {
            wall_ns: m,
            mono_ns: m,
        };
        TimeSample {
            t1: stamp(t1),
            t2_wall_ns: t2 as u64,
            t3_wall_ns: t2 as u64 + 10_000,
            t4: stamp(t4),
        }
    }

    #[test]
    fn it_follows_a_drifting_clock_on_a_symmetric_link() {
        let psi = |m: u64| 5_000_000_000 + (m as f64 * 20e-6) as i64;
        let mut k = Kalman::default();
        let mut rng = fastrand::Rng::with_seed(3);
        for i in 0..600u64 {
            let t1 = 1_000_000_000_000 + i * 1_000_000_000;
            k.add(&sample(
                t1,
                500_000 + rng.u64(0..400_000),
                500_000 + rng.u64(0..400_000),
                psi,
            ));
        }
        let q = 1_000_000_000_000 + 600 * 1_000_000_000;
        let (estimate, sigma) = k.at(q).unwrap();
        let error = (estimate - psi(q)).abs();
        assert!(error < 100_000, "{error} ns off");
        assert!(sigma > 0.0 && sigma < 300_000.0, "σ {sigma}");
        assert!((k.drift - 20e-6).abs() < 2e-6, "drift {}", k.drift);
    }
}
