//! How the benchmarks print figures.

/// p50, p99 and the largest of `v` (nearest rank); zeros when empty.
pub(crate) fn quantiles(mut v: Vec<u64>) -> (u64, u64, u64) {
    if v.is_empty() {
        return (0, 0, 0);
    }
    v.sort_unstable();
    let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    (at(0.5), at(0.99), v[v.len() - 1])
}

/// Nanoseconds as microseconds with one decimal.
pub(crate) fn us(ns: i64) -> String {
    format!("{:.1} µs", ns as f64 / 1e3)
}
