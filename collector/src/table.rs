//! The report for people: a plain-text table.

use std::fmt::Write;

use wire::report::{ClockBasis, Report};
use wire::stats::Summary;

/// Formats nanoseconds at a readable scale.
pub fn duration(ns: i64) -> String {
    let a = ns.unsigned_abs() as f64;
    let sign = if ns < 0 { "-" } else { "" };
    if a < 1_000.0 {
        format!("{ns} ns")
    } else if a < 1_000_000.0 {
        format!("{sign}{:.1} µs", a / 1e3)
    } else if a < 1_000_000_000.0 {
        format!("{sign}{:.2} ms", a / 1e6)
    } else {
        format!("{sign}{:.3} s", a / 1e9)
    }
}

fn row(out: &mut String, name: &str, s: &Option<Summary>, absent: &str) {
    match s {
        Some(s) => {
            let _ = writeln!(
                out,
                "  {name:<10} {:>10} {:>10} {:>10} {:>10} {:>10}   (n={})",
                duration(s.p50),
                duration(s.p90),
                duration(s.p99),
                duration(s.p999),
                duration(s.max),
                s.count
            );
        }
        None => {
            let _ = writeln!(out, "  {name:<10} {absent}");
        }
    }
}

/// Renders the whole report.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "skewscope report");
    for i in &r.inputs {
        let damage = if i.skipped_bytes > 0 {
            format!(
                "; skipped {} damaged bytes{}",
                i.skipped_bytes,
                if i.torn_tail {
                    " (torn tail: writer stopped mid-record)"
                } else {
                    ""
                }
            )
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "  {} log {}: {} records{damage}",
            i.kind, i.file, i.records
        );
    }
    if let Some(a) = &r.agent {
        let _ = writeln!(
            out,
            "  agent on {}: {} shard(s), {} order; {} copies queued, {} clients dropped",
            a.host, a.shards, a.order, a.queued, a.dropped
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  broadcasts {}   connections {}   receipts {}   missing {}   duplicates {}   unmatched {}",
        r.broadcasts, r.connections, r.receipts, r.missing, r.duplicates, r.unmatched
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  {:<10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "", "p50", "p90", "p99", "p99.9", "max"
    );
    row(
        &mut out,
        "skew",
        &r.skew_ns,
        "not measurable: no broadcast reached two connections",
    );
    row(&mut out, "latency", &r.latency_ns, "needs the agent's log");
    row(
        &mut out,
        "fan-out",
        &r.fanout_ns,
        "needs the agent's log (with send times)",
    );
    let _ = writeln!(out);
    match r.clock_basis {
        ClockBasis::SingleHost => {
            let _ = writeln!(
                out,
                "  clocks: every record came from one host, so skew carries no clock-offset error."
            );
        }
        ClockBasis::CorrectedToAgent => {
            let _ = writeln!(
                out,
                "  clocks: every receipt was mapped into the agent's timebase with a bound."
            );
        }
        ClockBasis::UncorrectedDeviceClocks => {
            let _ = writeln!(
                out,
                "  clocks: receipts come from several hosts and are NOT corrected for their clock\n  offsets; cross-device skew includes those offsets and is not bounded here."
            );
        }
    }
    if r.probes.len() > 1 {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "  {:<20} {:<20} {:>6} {:>9} {:>8}",
            "probe", "host", "conns", "receipts", "missing"
        );
        for p in &r.probes {
            let _ = writeln!(
                out,
                "  {:<20} {:<20} {:>6} {:>9} {:>8}",
                p.name, p.host, p.connections, p.receipts, p.missing
            );
        }
    }
    if r.worst_broadcasts.iter().any(|b| b.skew_ns.is_some()) {
        let _ = writeln!(out);
        let _ = writeln!(out, "  worst broadcasts by skew:");
        for b in r.worst_broadcasts.iter().filter(|b| b.skew_ns.is_some()) {
            let fanout = b
                .fanout_ns
                .map(|f| format!(", fan-out {}", duration(f as i64)))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "    {:<28} skew {:>10}  receipts {}  missing {}{fanout}",
                b.broadcast,
                duration(b.skew_ns.unwrap_or(0) as i64),
                b.receipts,
                b.missing
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_pick_a_readable_unit() {
        assert_eq!(duration(999), "999 ns");
        assert_eq!(duration(12_345), "12.3 µs");
        assert_eq!(duration(-2_500_000), "-2.50 ms");
        assert_eq!(duration(3_000_000_000), "3.000 s");
    }
}
