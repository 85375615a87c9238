//! The verdict for people: one PASS or FAIL line per threshold, each with
//! the figure it was judged on, then the overall line.

use std::fmt::Write;

use skewscope_core::analysis::verdict::{Check, Unit, Verdict};

use crate::sentences::duration;

/// A threshold's figure as people read it: a duration or a count.
pub fn figure(unit: Unit, value: i64) -> String {
    match unit {
        Unit::Ns => duration(value),
        Unit::Count => value.to_string(),
    }
}

fn line(c: &Check) -> String {
    let measured = c
        .measured
        .map_or_else(|| "not measured".to_owned(), |m| figure(c.unit, m));
    format!(
        "{}  {} ≤ {}: {measured}  ({})",
        if c.pass { "PASS" } else { "FAIL" },
        c.check,
        figure(c.unit, c.limit),
        c.basis
    )
}

/// Renders the verdict below a report.
pub fn render(v: &Verdict) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "audit verdict");
    for c in &v.checks {
        let _ = writeln!(out, "  {}", line(c));
    }
    let failed = v.checks.iter().filter(|c| !c.pass).count();
    let _ = if v.pass {
        writeln!(out, "PASS: all {} checks passed", v.checks.len())
    } else {
        writeln!(out, "FAIL: {failed} of {} checks failed", v.checks.len())
    };
    out
}
