//! The clock model as it was before the region model (commit 49441c1), kept
//! only to be measured against: the least-delayed exchange, δ/2 grown by a
//! rate bound with the distance to it, and a least-squares drift through
//! the best exchange of up to 16 windows (the bound 3σ + 1 ppm once the run
//! spans 4 s, else 100 ppm), over the probe's latest 64 exchanges.

use std::collections::VecDeque;

use skewscope_core::record::TimeSample;

const DEFAULT_RATE_BOUND_PPB: f64 = 100_000.0;
const WANDER_PPB: f64 = 1_000.0;
const MIN_FIT_SPAN_NS: u64 = 4_000_000_000;
/// What the probe kept.
const SAMPLES_KEPT: usize = 64;

#[derive(Clone, Copy)]
struct Exchange {
    mono_ns: u64,
    theta_ns: i64,
    delay_ns: u64,
}

/// The probe's rolling estimate, as it was.
#[derive(Default)]
pub struct Before {
    samples: VecDeque<Exchange>,
    drift_ppb: f64,
    rate_ppb: f64,
}

impl Before {
    /// Takes in one exchange and refits, as the probe did.
    pub fn add(&mut self, s: &TimeSample) {
        let mono_rtt = s.t4.mono_ns - s.t1.mono_ns;
        let turnaround = s.t3_wall_ns - s.t2_wall_ns;
        let Some(delay) = mono_rtt.checked_sub(turnaround) else {
            return;
        };
        let theta = ((s.t2_wall_ns as i128 - s.t1.wall_ns as i128)
            + (s.t3_wall_ns as i128 - s.t4.wall_ns as i128))
            / 2;
        self.samples.push_back(Exchange {
            mono_ns: s.t1.mono_ns + mono_rtt / 2,
            theta_ns: theta as i64,
            delay_ns: delay,
        });
        while self.samples.len() > SAMPLES_KEPT {
            self.samples.pop_front();
        }
        let span = self.samples.back().map_or(0, |e| e.mono_ns)
            - self.samples.front().map_or(0, |e| e.mono_ns);
        (self.drift_ppb, self.rate_ppb) = match fit_drift(&self.samples, span) {
            Some((slope, sigma)) => (slope * 1e9, 3.0 * sigma * 1e9 + WANDER_PPB),
            None => (0.0, DEFAULT_RATE_BOUND_PPB),
        };
    }

    /// (agent − device, bound) at `mono_ns`.
    pub fn at(&self, mono_ns: u64) -> Option<(i64, u64)> {
        let cost = |e: &Exchange| {
            e.delay_ns as f64 / 2.0 + self.rate_ppb * e.mono_ns.abs_diff(mono_ns) as f64 / 1e9
        };
        let best = self
            .samples
            .iter()
            .min_by(|a, b| cost(a).total_cmp(&cost(b)))?;
        let gap = mono_ns as f64 - best.mono_ns as f64;
        Some((
            best.theta_ns + (self.drift_ppb * gap / 1e9).round() as i64,
            cost(best).ceil() as u64,
        ))
    }
}

fn fit_drift(exchanges: &VecDeque<Exchange>, span: u64) -> Option<(f64, f64)> {
    if span < MIN_FIT_SPAN_NS || exchanges.len() < 3 {
        return None;
    }
    let windows = exchanges.len().min(16) as u64;
    let start = exchanges[0].mono_ns;
    let mut best: Vec<Option<Exchange>> = vec![None; windows as usize];
    for e in exchanges {
        let w = (((e.mono_ns - start) as u128 * windows as u128) / (span as u128 + 1)) as usize;
        if best[w].is_none_or(|b| e.delay_ns < b.delay_ns) {
            best[w] = Some(*e);
        }
    }
    let points: Vec<(f64, f64)> = best
        .into_iter()
        .flatten()
        .map(|e| ((e.mono_ns - start) as f64, e.theta_ns as f64))
        .collect();
    let n = points.len() as f64;
    if n < 3.0 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = sxy / sxx;
    let residual: f64 = points
        .iter()
        .map(|p| (p.1 - my - slope * (p.0 - mx)).powi(2))
        .sum();
    Some((slope, (residual / (n - 2.0) / sxx).sqrt()))
}
