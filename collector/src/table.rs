//! The report for people: a plain-text table.

use std::fmt::Write;

use skewscope_core::analysis::clock_figures::{BoundedSummary, ClaimCheck};
use skewscope_core::analysis::join::RunEnd;
use skewscope_core::analysis::report::{ClockBasis, ClockNaming, ProbeSummary, Report};
use skewscope_core::analysis::stats::Summary;

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

fn bounded_row(out: &mut String, name: &str, s: &Option<BoundedSummary>, absent: &str) {
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

/// What the agent's tap of the server saw: its broadcasts, what it could
/// not follow, and the clients the server sent to last.
fn tap_paragraph(out: &mut String, t: &skewscope_core::analysis::tapped::TapSummary) {
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  tap of port {}: {} broadcasts to {} clients, from the server's packets",
        t.port, t.broadcasts, t.clients
    );
    if let Some(c) = &t.counters {
        let _ = writeln!(
            out,
            "    connections: {} followed; skipped {} open before the tap, {} plain HTTP, {} TLS; {} broken, {} lost",
            c.tap.followed,
            c.tap.open_before_tap,
            c.tap.not_websocket,
            c.tap.tls,
            c.tap.broken,
            c.tap.lost
        );
        let _ = writeln!(
            out,
            "    segments: {} read, {} resent, {} out of order; capture ring: {} dropped; {} messages inflated ({} KiB of inflaters), {} compressed not identified",
            c.tap.segments,
            c.tap.retransmitted,
            c.tap.reordered,
            c.ring_drops,
            c.tap.inflated,
            c.inflater_bytes / 1024,
            c.tap.compressed
        );
    }
    // The table names the few sent to latest; `--json` has every client.
    for l in t.per_client.iter().take(LATEST_CLIENTS) {
        let Some(position) = l.mean_position else {
            continue;
        };
        let resent = if l.resent > 0 {
            format!(", {} of {} segments resent", l.resent, l.segments)
        } else {
            String::new()
        };
        let _ = writeln!(
            out,
            "    sent to late: {:<22} mean position {position:.2} (0 first, 1 last), last in {} of {}{resent}",
            l.client, l.last, l.copies
        );
    }
    let resent: Vec<_> = t.per_client.iter().filter(|c| c.resent > 0).collect();
    if !resent.is_empty() {
        let worst = resent.iter().max_by_key(|c| c.resent).expect("not empty");
        let _ = writeln!(
            out,
            "    resends: {} of {} clients had segments resent, most {} ({} of {})",
            resent.len(),
            t.clients,
            worst.client,
            worst.resent,
            worst.segments
        );
    }
}

/// How many of the clients sent to latest the table names.
const LATEST_CLIENTS: usize = 5;

/// What a clock claims about its own error: `claims ±1.00 ms`, `NOT
/// synchronised`, or `state unknown`.
pub fn claim_text(claim: Option<&skewscope_core::record::ClockState>) -> String {
    match claim {
        None => "state unknown".to_owned(),
        Some(state) => match state.claimed_bound_ns() {
            Some(b) => format!("claims ±{}", duration(b as i64)),
            None => "NOT synchronised".to_owned(),
        },
    }
}

/// One line per probe: its offset to the agent, what its clock claims, steps.
fn probe_clock_line(p: &ProbeSummary) -> String {
    let c = &p.clock;
    let offset = match (c.offset_ns, c.offset_bound_ns) {
        (Some(o), Some(b)) => format!("offset {} ± {}", duration(o), duration(b as i64)),
        _ if c.time_samples == 0 => "no offset estimate (no time exchange answered)".into(),
        _ => "no usable time exchange".into(),
    };
    let drift = c
        .drift_ppb
        .map(|d| format!(", drift {:.2} ppm", d / 1000.0))
        .unwrap_or_default();
    let claim = format!("clock {}", claim_text(c.claim.as_ref()));
    let check = match c.offset_vs_claim {
        ClaimCheck::Exceeds => "; MEASURED OFFSET EXCEEDS WHAT THE CLOCKS CLAIM",
        ClaimCheck::Consistent => "; within the claims",
        ClaimCheck::Unknown => "",
    };
    let steps = if c.clock_steps.is_empty() {
        String::new()
    } else {
        let sizes: Vec<String> = c.clock_steps.iter().map(|s| duration(s.size_ns)).collect();
        format!("; CLOCK STEPPED by {}", sizes.join(", "))
    };
    format!(
        "  {:<16} {offset}{drift} ({} exchanges); {claim}{check}{steps}",
        p.name, c.time_samples
    )
}

fn clocks_paragraph(out: &mut String, r: &Report) {
    let _ = match r.clock_basis {
        ClockBasis::SingleHost => writeln!(
            out,
            "  clocks: every record came from one {} and no measurement says otherwise:\n  one clock, so raw skew carries no clock-offset error.",
            match r.clocks_named_by {
                ClockNaming::BootId => "boot of one host (same kernel boot id)",
                ClockNaming::HostName =>
                    "host name (these logs record no boot id, and devices of\n  one OS image share a name)",
            }
        ),
        ClockBasis::CorrectedToAgent => writeln!(
            out,
            "  clocks: several clocks; every receipt was mapped into the agent's timebase with a\n  bound. Trust the corrected figures and their intervals, not the raw skew."
        ),
        ClockBasis::UncorrectedDeviceClocks => writeln!(
            out,
            "  clocks: {} receipts come from clocks that could not be bounded; raw skew includes\n  their offsets and is NOT a true figure.",
            r.uncorrected_receipts
        ),
    };
    if r.receipts_without_kernel_stamp > 0 {
        let _ = writeln!(
            out,
            "  {} receipts had no kernel receive stamp; their userspace stamp was used.",
            r.receipts_without_kernel_stamp
        );
    }
    if let Some(a) = &r.agent {
        let unfinished = a.ended == RunEnd::NoStopRecord;
        if let Some(t) = a.time_service {
            let _ = writeln!(
                out,
                "  agent time port (as last recorded, every 10 s{}): {} answered; dropped {} malformed, {} oversized, {} replayed",
                if unfinished {
                    "; not the run's totals"
                } else {
                    ""
                },
                t.answered,
                t.malformed,
                t.oversized,
                t.replayed
            );
        }
        if unfinished {
            let _ = writeln!(
                out,
                "  the agent's log ends without a stop record: it was killed or is still running"
            );
        }
        if a.records_lost > 0 {
            let _ = writeln!(
                out,
                "  THE AGENT LOST {} RECORDS: its log could not be written for a while (a full disk?); broadcasts then may be missing here",
                a.records_lost
            );
        }
        if !a.clock_steps.is_empty() {
            let _ = writeln!(
                out,
                "  THE AGENT'S CLOCK STEPPED {} time(s) during the run",
                a.clock_steps.len()
            );
        }
    }
}

/// Renders the whole report.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "skewscope report");
    for i in &r.inputs {
        let damage = if i.skipped_bytes > 0 {
            let torn = if i.torn_tail {
                " (torn tail: writer stopped mid-record)"
            } else {
                ""
            };
            format!("; skipped {} damaged bytes{torn}", i.skipped_bytes)
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
    if r.reconnects > 0 {
        let _ = writeln!(
            out,
            "  reconnects {}: broadcasts sent while a connection was down are not counted missing for it",
            r.reconnects
        );
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  {:<16} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "", "p50", "p90", "p99", "p99.9", "max"
    );
    // With an agent log but no broadcasts of its own joined, the probes
    // listened to another server (the agent was their clock reference).
    let agent_log = if r.agent.is_some() && r.fanout_ns.is_none() {
        "the probes' server is not the agent"
    } else {
        "needs the agent's log"
    };
    row(
        &mut out,
        "skew (raw)",
        &r.skew_ns,
        "no broadcast reached two connections",
    );
    row(&mut out, "  at userspace", &r.skew_userspace_ns, "-");
    row(
        &mut out,
        "skew in-device",
        &r.skew_intra_device_ns,
        "no probe had two connections",
    );
    row(&mut out, "latency (raw)", &r.latency_ns, agent_log);
    if let Some(t) = &r.latency_from_trigger {
        row(
            &mut out,
            "  from trigger",
            &t.latency_ns,
            "no broadcast after a trigger",
        );
        if t.before_any_trigger > 0 || t.unused_triggers > 0 {
            let _ = writeln!(
                out,
                "    {} broadcasts paired with a trigger; {} first seen before every trigger; {} triggers unused",
                t.broadcasts, t.before_any_trigger, t.unused_triggers
            );
        }
    }
    row(&mut out, "fan-out span", &r.fanout_ns, agent_log);
    row(&mut out, "  position", &r.fanout_position_ns, agent_log);
    row(
        &mut out,
        "  delivery",
        &r.delivery_ns,
        "no kernel receive stamps",
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  in the agent's timebase: estimate [interval that contains the truth]"
    );
    let no_offsets = "no offset estimates (no time exchange with an agent)";
    bounded_row(&mut out, "skew corrected", &r.skew_corrected_ns, no_offsets);
    let no_starts = if r.skew_corrected_ns.is_some() {
        agent_log
    } else {
        no_offsets
    };
    bounded_row(&mut out, "latency", &r.latency_corrected_ns, no_starts);
    bounded_row(&mut out, "  network", &r.network_ns, no_starts);
    let _ = writeln!(out);
    clocks_paragraph(&mut out, r);
    let _ = writeln!(out);
    for p in &r.probes {
        let _ = writeln!(out, "{}", probe_clock_line(p));
        if p.tls_unverified > 0 {
            let _ = writeln!(
                out,
                "  {:<16} WARNING: {} of {} TLS connection(s) did NOT check the server's certificate (--insecure): anyone on the path could have been the server",
                p.name, p.tls_unverified, p.tls_connections
            );
        }
        if p.deflate_connections > 0 {
            let _ = writeln!(
                out,
                "  {:<16} permessage-deflate on {} of {} connection opening(s): the server compressed what it sent them",
                p.name,
                p.deflate_connections,
                p.connections + p.reconnects
            );
        }
        match p.ended {
            RunEnd::Stopped => {}
            RunEnd::LogFull => {
                let _ = writeln!(
                    out,
                    "  {:<16} stopped recording at --max-log-bytes; later broadcasts are not counted missing",
                    p.name
                );
            }
            RunEnd::NoStopRecord => {
                let _ = writeln!(
                    out,
                    "  {:<16} log ends without a stop record (killed, or still running); later broadcasts are not counted missing",
                    p.name
                );
            }
        }
    }
    if r.probes.len() > 1 {
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "  {:<20} {:<20} {:>6} {:>9} {:>8} {:>10}",
            "probe", "host", "conns", "receipts", "missing", "reconnects"
        );
        for p in &r.probes {
            let _ = writeln!(
                out,
                "  {:<20} {:<20} {:>6} {:>9} {:>8} {:>10}",
                p.name, p.host, p.connections, p.receipts, p.missing, p.reconnects
            );
        }
    }
    if let Some(t) = &r.tap {
        tap_paragraph(&mut out, t);
    }
    if r.worst_broadcasts.iter().any(|b| b.skew_ns.is_some()) {
        let _ = writeln!(out);
        let _ = writeln!(out, "  worst broadcasts by raw skew:");
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
