//! Saved sweeps side by side (`skewscope sweep-compare`): one table of
//! skew and latency per stage with a column per server, each knee, and
//! what differed between the runs besides the server, so a comparison of
//! unlike runs says it is one.

use std::collections::BTreeSet;
use std::fmt::Write;

use super::knee::short_duration;
use super::plan::thousands;
use super::result::SweepResult;

/// The results side by side, as printed.
pub fn render(results: &[SweepResult]) -> String {
    const UNDER: &str = "skew p50 / p99 / max · from trigger p99";
    let clients: BTreeSet<u32> = results
        .iter()
        .flat_map(|r| r.stages.iter().map(|s| s.connections))
        .collect();
    let rows: Vec<(u32, Vec<String>)> = clients
        .into_iter()
        .map(|n| (n, results.iter().map(|r| cell(r, n)).collect()))
        .collect();
    // Each column as wide as its widest cell.
    let widths: Vec<usize> = (0..results.len())
        .map(|i| {
            rows.iter()
                .map(|(_, cells)| cells[i].chars().count())
                .chain([
                    UNDER.chars().count(),
                    results[i].settings.label.chars().count(),
                ])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let _ = write!(out, "{:>8}", "clients");
    for (r, w) in results.iter().zip(&widths) {
        let _ = write!(out, "   {:>w$}", r.settings.label);
    }
    out.push('\n');
    let _ = write!(out, "{:>8}", "");
    for w in &widths {
        let _ = write!(out, "   {UNDER:>w$}");
    }
    out.push('\n');
    for (n, cells) in &rows {
        let _ = write!(out, "{:>8}", thousands(u64::from(*n)));
        for (cell, w) in cells.iter().zip(&widths) {
            let _ = write!(out, "   {cell:>w$}");
        }
        out.push('\n');
    }
    out.push('\n');
    for r in results {
        let _ = writeln!(out, "{}: {}", r.settings.label, r.knee.sentence);
    }
    let differences = differences(results);
    if !differences.is_empty() {
        let _ = writeln!(out, "\nnot alike, besides the server:");
        for d in differences {
            let _ = writeln!(out, "  {d}");
        }
    }
    out
}

/// One result's figures at `n` connections, or a dash.
fn cell(r: &SweepResult, n: u32) -> String {
    let q = |v: Option<i64>| v.map_or("–".to_owned(), |v| short_duration(v.max(0) as u64));
    r.stages
        .iter()
        .find(|s| s.connections == n)
        .and_then(|s| s.figures.as_ref())
        .map_or("–".to_owned(), |f| {
            format!(
                "{} / {} / {} · {}",
                q(f.skew_ns.map(|s| s.p50)),
                q(f.skew_ns.map(|s| s.p99)),
                q(f.skew_ns.map(|s| s.max)),
                q(f.latency_from_trigger_ns.map(|s| s.p99)),
            )
        })
}

/// What differs between the runs besides the server: the settings that
/// change the figures, and the machine.
pub fn differences(results: &[SweepResult]) -> Vec<String> {
    let Some(first) = results.first() else {
        return Vec::new();
    };
    let mut said = Vec::new();
    let mut compare = |what: &str, value: &dyn Fn(&SweepResult) -> String| {
        let base = value(first);
        let differing: Vec<String> = results
            .iter()
            .filter(|r| value(r) != base)
            .map(|r| format!("{} {}", r.settings.label, value(r)))
            .collect();
        if !differing.is_empty() {
            said.push(format!(
                "{what}: {} {base}; {}",
                first.settings.label,
                differing.join("; ")
            ));
        }
    };
    compare("broadcasts a stage", &|r| r.settings.broadcasts.to_string());
    compare("settle", &|r| format!("{} ms", r.settings.settle_ms));
    compare("interval", &|r| format!("{} ms", r.settings.interval_ms));
    compare("threshold", &|r| short_duration(r.settings.max_skew_p99_ns));
    compare("deflate offered", &|r| r.settings.probe.deflate.to_string());
    compare("host", &|r| r.environment.host.clone());
    compare("kernel", &|r| {
        r.environment.kernel.clone().unwrap_or_default()
    });
    compare("CPU", &|r| r.environment.cpu.clone().unwrap_or_default());
    compare("cores", &|r| r.environment.cores.to_string());
    compare("skewscope", &|r| r.environment.skewscope_version.clone());
    said
}
