//! The devices' paragraphs: each probe's clock, what it claims and how it
//! was measured, and each probe's run.

use std::fmt::Write;

use skewscope_core::analysis::clock_figures::ClaimCheck;
use skewscope_core::analysis::join::RunEnd;
use skewscope_core::analysis::report::{ClockBasis, ClockNaming, ProbeSummary, Report};

use crate::sentences::{claim_text, duration, page_text, pruned_text};

/// One line per probe: its offset to the agent, what its clock claims, steps.
pub(super) fn probe_clock_line(p: &ProbeSummary) -> String {
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

pub(super) fn clocks_paragraph(out: &mut String, r: &Report, live: bool) {
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
    if let Some(line) = crate::sentences::unauthenticated_line(&r.clocks_unauthenticated) {
        let _ = writeln!(out, "  {line}.");
    }
    if r.receipts_without_kernel_stamp > 0 {
        let _ = writeln!(
            out,
            "  {} receipts had no kernel receive stamp; their userspace stamp was used.",
            r.receipts_without_kernel_stamp
        );
    }
    if let Some(a) = &r.agent {
        let unfinished = a.ended == RunEnd::NoStopRecord;
        if let Some(t) = a.time_port {
            let _ = writeln!(
                out,
                "  agent time port (as last recorded, every 10 s{}): {} answered; dropped {} malformed, {} oversized, {} replayed",
                match (unfinished, live) {
                    (false, _) => "",
                    (true, true) => "; the agent is running",
                    (true, false) => "; not the run's totals",
                },
                t.answered,
                t.malformed,
                t.oversized,
                t.replayed
            );
        }
        if let Some(line) = crate::sentences::agent_end_text(a.ended, live) {
            let _ = writeln!(out, "  {line}");
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

/// Each probe's clock and what else it said, then the probes side by side.
pub(super) fn probes_paragraph(out: &mut String, r: &Report, live: bool) {
    for p in &r.probes {
        let _ = writeln!(out, "{}", probe_clock_line(p));
        if p.tls_unverified > 0 {
            let _ = writeln!(
                out,
                "  {:<16} WARNING: {} of {} TLS connection(s) did NOT check the server's certificate (--insecure): anyone on the path could have been the server",
                p.name, p.tls_unverified, p.tls_connections
            );
        }
        if let Some(page) = &p.page {
            let _ = writeln!(out, "  {:<16} {}", p.name, page_text(page));
        }
        if let Some(app) = &p.app {
            let _ = writeln!(
                out,
                "  {:<16} an app's own run ({} in {}): it reports what it acted on, and is never counted missing the rest",
                p.name, app.module, app.runtime
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
        if let Some(pruned) = p.logs_pruned.as_ref().and_then(pruned_text) {
            let _ = writeln!(out, "  {:<16} {pruned}", p.name);
        }
        if let Some(refused) = p
            .clock_tags
            .as_ref()
            .and_then(crate::sentences::refused_text)
        {
            let _ = writeln!(out, "  {:<16} {refused}", p.name);
        }
        match p.ended {
            RunEnd::Stopped => {}
            RunEnd::LogFull => {
                let _ = writeln!(
                    out,
                    "  {:<16} stopped recording at its log size limit (--max-log-bytes, or what --keep-bytes left it); later broadcasts are not counted missing",
                    p.name
                );
            }
            // In an audit the probes upload as they run: no stop record yet.
            RunEnd::NoStopRecord if live => {}
            RunEnd::NoStopRecord => {
                let _ = writeln!(
                    out,
                    "  {:<16} log ends without a stop record (still running when read, or killed); later broadcasts are not counted missing",
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
}
