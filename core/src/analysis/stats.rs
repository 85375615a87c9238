//! Distributions as the report shows them: p50, p90, p99, p99.9 and max from an
//! HDR histogram, never a mean alone.

use crate::convert;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Percentiles of a set of nanosecond values.
///
/// Values may be negative (a latency measured across two unsynchronised clocks),
/// so they are shifted by the minimum before entering the histogram, which only
/// holds non-negative numbers. Quantiles carry the histogram's 3 significant
/// digits of precision; `min` and `max` are exact.
// It reads back from JSON too: a saved result (`skewscope sweep --json`)
// is compared with a later one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Summary {
    /// How many values.
    pub count: u64,
    /// Smallest value.
    pub min: i64,
    /// Median.
    pub p50: i64,
    /// 90th percentile.
    pub p90: i64,
    /// 99th percentile.
    pub p99: i64,
    /// 99.9th percentile.
    pub p999: i64,
    /// Largest value.
    pub max: i64,
}

impl Summary {
    /// Summarises `values`; `None` when there are none.
    pub fn of(values: &[i64]) -> Option<Summary> {
        let mut builder = SummaryBuilder::new();
        for &v in values {
            builder.add(v);
        }
        builder.finish()
    }
}

/// How many values a [`SummaryBuilder`] holds before it chooses its origin.
pub const ORIGIN_SAMPLE: usize = 1024;

/// A [`Summary`] built one value at a time, in memory that does not grow
/// with the values: a report over millions of receipts keeps histograms, not
/// the receipts.
///
/// Values are measured from an origin, in two histograms: those at or above
/// it and those below. The origin is the smallest of the first
/// [`ORIGIN_SAMPLE`] values (all of them, for a short run: then this is the
/// old shift by the minimum exactly). Quantiles carry 3 significant digits of
/// the distance from it, which for the clustered values a report sees is
/// close to the spread, not to the values' size; one early outlier cannot
/// set it.
#[derive(Clone, Debug)]
pub struct SummaryBuilder {
    /// The first values, until the origin is chosen.
    first: Vec<i64>,
    origin: Option<i64>,
    above: Histogram<u64>,
    below: Histogram<u64>,
    min: i64,
    max: i64,
}

impl Default for SummaryBuilder {
    fn default() -> Self {
        SummaryBuilder::new()
    }
}

impl SummaryBuilder {
    /// An empty summary.
    pub fn new() -> SummaryBuilder {
        let histogram = || {
            Histogram::<u64>::new(3).expect("3 significant digits is a valid histogram precision")
        };
        SummaryBuilder {
            first: Vec::new(),
            origin: None,
            above: histogram(),
            below: histogram(),
            min: i64::MAX,
            max: i64::MIN,
        }
    }

    /// Adds one value.
    pub fn add(&mut self, v: i64) {
        let Some(origin) = self.origin else {
            self.first.push(v);
            if self.first.len() == ORIGIN_SAMPLE {
                self.settle();
            }
            return;
        };
        self.record(origin, v);
    }

    /// Chooses the origin from the values so far, and records them.
    fn settle(&mut self) {
        let Some(&origin) = self.first.iter().min() else {
            return;
        };
        self.origin = Some(origin);
        for v in std::mem::take(&mut self.first) {
            self.record(origin, v);
        }
    }

    fn record(&mut self, origin: i64, v: i64) {
        let distance = v as i128 - origin as i128;
        // Distances of i64 values fit in u64; the histogram resizes itself.
        let recorded = if distance >= 0 {
            self.above.record(convert::narrow_unsigned(distance))
        } else {
            self.below.record(convert::narrow_unsigned(-distance))
        };
        recorded.expect("an auto-resizing histogram takes any u64");
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// How many values were added.
    pub fn count(&self) -> u64 {
        self.above.len() + self.below.len() + self.first.len() as u64
    }

    /// The summary; `None` when nothing was added.
    pub fn finish(&self) -> Option<Summary> {
        let Some(origin) = self.origin else {
            if self.first.is_empty() {
                return None;
            }
            let mut settled = self.clone();
            settled.settle();
            return settled.finish();
        };
        let (below, total) = (self.below.len(), self.count());
        let at = |q: f64| -> i64 {
            // The rank-th smallest value, 1-based.
            let rank = convert::from_float((q * total as f64).ceil()).clamp(1, total);
            // Half a rank below, so float rounding cannot skip to the next.
            let value = if rank <= below {
                let from_largest = below - rank + 1;
                let distance = self
                    .below
                    .value_at_quantile((from_largest as f64 - 0.5) / below as f64);
                origin as i128 - distance as i128
            } else {
                let above = total - below;
                let distance = self
                    .above
                    .value_at_quantile(((rank - below) as f64 - 0.5) / above as f64);
                origin as i128 + distance as i128
            };
            convert::narrow(value.clamp(self.min as i128, self.max as i128))
        };
        Some(Summary {
            count: total,
            min: self.min,
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            p999: at(0.999),
            max: self.max,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_has_no_summary() {
        assert_eq!(Summary::of(&[]), None);
    }

    #[test]
    fn one_value_is_every_percentile() {
        let s = Summary::of(&[1234]).unwrap();
        assert_eq!((s.min, s.p50, s.p99, s.max), (1234, 1234, 1234, 1234));
    }

    #[test]
    fn percentiles_of_a_uniform_range() {
        let values: Vec<i64> = (1..=10_000).collect();
        let s = Summary::of(&values).unwrap();
        assert_eq!(s.count, 10_000);
        assert_eq!(s.max, 10_000);
        // 3 significant digits: within 0.1 %.
        assert!((s.p50 - 5_000).abs() <= 5, "{s:?}");
        assert!((s.p90 - 9_000).abs() <= 9, "{s:?}");
        assert!((s.p99 - 9_900).abs() <= 10, "{s:?}");
    }

    #[test]
    fn built_one_at_a_time_in_any_order_it_is_the_same_within_precision() {
        let mut values: Vec<i64> = (0..20_000)
            .map(|i| 3_000_000_000 + (i * 37) % 9_973)
            .collect();
        let sorted = Summary::of(&values).unwrap();
        values.reverse();
        let reversed = Summary::of(&values).unwrap();
        for (a, b) in [
            (sorted.p50, reversed.p50),
            (sorted.p90, reversed.p90),
            (sorted.p99, reversed.p99),
        ] {
            // Clustered far from zero: precision is of the spread (~10 µs), not of 3 s.
            assert!((a - b).abs() <= 10, "{sorted:?} {reversed:?}");
        }
        assert_eq!((sorted.min, sorted.max), (reversed.min, reversed.max));
        assert_eq!(sorted.count, 20_000);
    }

    #[test]
    fn an_early_outlier_does_not_cost_the_rest_their_precision() {
        // A 200 ms skew first, then 10^5 of 50 ± 10 µs.
        let mut values = vec![200_000_000i64];
        values.extend((0..100_000).map(|i| 40_000 + (i * 7_919) % 20_000));
        let s = Summary::of(&values).unwrap();
        assert!((s.p50 - 50_000).abs() <= 100, "{s:?}");
        assert!((s.p90 - 58_000).abs() <= 100, "{s:?}");
        assert_eq!(s.max, 200_000_000);
    }

    #[test]
    fn negative_values_are_kept() {
        let s = Summary::of(&[-3_000_000, -1_000_000, 2_000_000]).unwrap();
        assert_eq!(s.min, -3_000_000);
        assert_eq!(s.max, 2_000_000);
        assert!((s.p50 - -1_000_000).abs() < 5_000, "{s:?}");
    }
}
