//! One row of the report's table: a figure's name and its summary, or
//! why it is absent; and the same with its bound.

use std::fmt::Write;

use skewscope_core::analysis::clock_figures::BoundedSummary;
use skewscope_core::analysis::stats::Summary;

use crate::sentences::duration;

/// A figure's row: p50, p99 and max, or `absent` when not measured.
pub(super) fn row(out: &mut String, name: &str, s: &Option<Summary>, absent: &str) {
    let _ = match s {
        Some(s) => writeln!(
            out,
            "  {name:<16} {:>10} {:>10} {:>10} {:>10} {:>10}   (n={})",
            duration(s.p50),
            duration(s.p90),
            duration(s.p99),
            duration(s.p999),
            duration(s.max),
            s.count
        ),
        None => writeln!(out, "  {name:<16} {absent}"),
    };
}

/// A figure with bounds: each quantile's estimate and its interval.
pub(super) fn bounded_row(out: &mut String, name: &str, s: &Option<BoundedSummary>, absent: &str) {
    let cell =
        |e: i64, lo: i64, hi: i64| format!("{} [{}, {}]", duration(e), duration(lo), duration(hi));
    let _ = match s {
        Some(b) => writeln!(
            out,
            "  {name:<16} p50 {}   p99 {}   max {}   (n={})",
            cell(b.estimate.p50, b.lo.p50, b.hi.p50),
            cell(b.estimate.p99, b.lo.p99, b.hi.p99),
            cell(b.estimate.max, b.lo.max, b.hi.max),
            b.estimate.count
        ),
        None => writeln!(out, "  {name:<16} {absent}"),
    };
}
