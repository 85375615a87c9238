//! Log-bucketed counts of non-negative values, for quantiles over 10⁷
//! answers without keeping them: 256 buckets per octave (each value read
//! back within 0.2 %), the maximum kept exactly.

/// Sub-buckets per octave, as bits.
const SUB_BITS: u32 = 8;
/// The least octave kept (2⁻²⁰ ≈ 10⁻⁶); smaller values count in the first bucket.
const MIN_EXP: i64 = -20;
/// The greatest (2⁶⁴).
const MAX_EXP: i64 = 64;
const BUCKETS: usize = ((MAX_EXP - MIN_EXP) << SUB_BITS) as usize;
const FIRST: i64 = (1023 + MIN_EXP) << SUB_BITS;

/// Counts of values by bucket.
#[derive(Clone, Debug, Default)]
pub struct Hist {
    /// Allocated at the first value.
    counts: Vec<u64>,
    n: u64,
    max: f64,
}

fn index(v: f64) -> usize {
    if v.is_nan() || v <= 0.0 {
        return 0;
    }
    let i = (v.to_bits() >> (52 - SUB_BITS)) as i64 - FIRST;
    i.clamp(0, BUCKETS as i64 - 1) as usize
}

fn lower_edge(i: usize) -> f64 {
    f64::from_bits(((i as i64 + FIRST) as u64) << (52 - SUB_BITS))
}

impl Hist {
    /// Counts `v`.
    pub fn add(&mut self, v: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS];
        }
        self.counts[index(v)] += 1;
        self.n += 1;
        if v > self.max {
            self.max = v;
        }
    }

    /// Adds another's counts.
    pub fn merge(&mut self, other: &Hist) {
        if other.n == 0 {
            return;
        }
        if self.counts.is_empty() {
            self.counts = vec![0; BUCKETS];
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.n += other.n;
        self.max = self.max.max(other.max);
    }

    /// Values counted.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// The greatest value counted (0 with none).
    pub fn max(&self) -> f64 {
        self.max
    }

    /// The value at quantile `p` (the middle of its bucket, never over the
    /// maximum); `None` with no value.
    pub fn quantile(&self, p: f64) -> Option<f64> {
        if self.n == 0 {
            return None;
        }
        let rank = ((self.n - 1) as f64 * p).round() as u64;
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen > rank {
                if i == 0 {
                    return Some(0.0);
                }
                let middle = (lower_edge(i) + lower_edge(i + 1)) / 2.0;
                return Some(middle.min(self.max));
            }
        }
        Some(self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_a_bucket_of_the_exact_ones() {
        let mut h = Hist::default();
        let mut v: Vec<f64> = (1..=100_000).map(|i| (i as f64).powf(1.3) * 0.37).collect();
        for &x in &v {
            h.add(x);
        }
        v.sort_by(f64::total_cmp);
        for p in [0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0] {
            let exact = v[((v.len() - 1) as f64 * p).round() as usize];
            let got = h.quantile(p).unwrap();
            assert!((got / exact - 1.0).abs() < 0.004, "p{p}: {got} vs {exact}");
        }
        assert_eq!(h.max(), v[v.len() - 1]);
        let mut merged = Hist::default();
        merged.merge(&h);
        merged.merge(&h);
        assert_eq!(merged.len(), 200_000);
        assert_eq!(merged.quantile(0.5), h.quantile(0.5));
    }
}
