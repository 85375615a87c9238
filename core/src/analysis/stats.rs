//! Distributions as the report shows them: p50, p90, p99, p99.9 and max from an
//! HDR histogram, never a mean alone.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Percentiles of a set of nanosecond values.
///
/// Values may be negative (a latency measured across two unsynchronised clocks),
/// so they are shifted by the minimum before entering the histogram, which only
/// holds non-negative numbers. Quantiles carry the histogram's 3 significant
/// digits of precision; `min` and `max` are exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
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
        let min = *values.iter().min()?;
        let max = *values.iter().max()?;
        let span = (max as i128 - min as i128) as u64;
        let mut h = Histogram::<u64>::new_with_max(span.max(2), 3)
            .expect("3 significant digits is a valid histogram precision");
        for &v in values {
            h.record((v as i128 - min as i128) as u64)
                .expect("values lie within [min, max]");
        }
        let at = |q: f64| -> i64 {
            let shifted = h.value_at_quantile(q).min(span);
            (min as i128 + shifted as i128) as i64
        };
        Some(Summary {
            count: values.len() as u64,
            min,
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            p999: at(0.999),
            max,
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
    fn negative_values_are_kept() {
        let s = Summary::of(&[-3_000_000, -1_000_000, 2_000_000]).unwrap();
        assert_eq!(s.min, -3_000_000);
        assert_eq!(s.max, 2_000_000);
        assert!((s.p50 - -1_000_000).abs() < 5_000, "{s:?}");
    }
}
