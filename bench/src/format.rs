//! How the benchmarks print figures.

/// Nanoseconds as microseconds with one decimal.
pub(crate) fn us(ns: i64) -> String {
    format!("{:.1} µs", ns as f64 / 1e3)
}
