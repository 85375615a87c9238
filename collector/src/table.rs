//! The report for people: a plain-text table.

use std::fmt::Write;

use skewscope_core::analysis::actions::ActionFigures;
use skewscope_core::analysis::clock_figures::{BoundedSummary, ClaimCheck};
use skewscope_core::analysis::diagnosis::{Diagnosis, LATE_EVERY_TIME_PLACE};
use skewscope_core::analysis::join::RunEnd;
use skewscope_core::analysis::report::{ClockBasis, ClockNaming, ProbeSummary, Report};
use skewscope_core::analysis::stats::Summary;

use crate::sentences::{
    claim_text, duration, lead_line, match_line, page_text, pruned_text, reference_line,
    spare_sentence,
};

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
            "    since the tap started: connections {} followed; skipped {} open before the tap, {} plain HTTP, {} TLS; {} broken, {} lost",
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
            "    sent to late: {:<22} mean position {position:.2} (0 first, 1 last); {}{resent}",
            l.client,
            crate::sentences::last_of(l.last, l.copies)
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

fn clocks_paragraph(out: &mut String, r: &Report, live: bool) {
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

/// What the probes' actions came to: action skew beside receive skew,
/// late actions, the timers' error.
fn actions_paragraph(
    out: &mut String,
    a: &ActionFigures,
    receive_corrected: Option<&BoundedSummary>,
    one_clock: bool,
) {
    let _ = writeln!(
        out,
        "  acting together ({} actions at their time to act; {} late)",
        a.actions, a.late
    );
    // With no action at all, every row below would be absent for that
    // one reason: said once, not as five different ones.
    let none = a.actions == 0;
    let absent = |why: &'static str| if none { "-" } else { why };
    row(
        out,
        "action skew",
        &a.action_skew_ns,
        if none {
            "no actions: no probe acted on these broadcasts"
        } else {
            "no broadcast acted on by two connections"
        },
    );
    row(out, "  receive skew", &a.receive_skew_ns, "-");
    bounded_row(
        out,
        "  corrected",
        &a.action_skew_corrected_ns,
        absent(
            "no offset estimates: no time exchange with an agent (give the probes --time-server)",
        ),
    );
    if a.frames > 0 {
        row(
            out,
            "frame skew",
            &a.frame_skew_ns,
            "no broadcast drawn by two pages",
        );
        bounded_row(out, "  corrected", &a.frame_skew_corrected_ns, "-");
        let _ = writeln!(out, "    {}", crate::sentences::FRAME_SENTENCE);
    }
    row(
        out,
        "timer error",
        &a.timer_error_ns,
        absent("no action in time"),
    );
    row(
        out,
        "lead given",
        &a.lead_given_ns,
        absent("the agent's log records no lead for these broadcasts"),
    );
    if let Some(auto) = &a.auto_lead {
        let _ = writeln!(out, "    {}", crate::sentences::auto_lead_line(auto));
    }
    row(
        out,
        "time to spare",
        &a.spare_ns,
        absent("no receipt with its action"),
    );
    if let Some(spare) = &a.spare_ns {
        let _ = writeln!(out, "    {}", spare_sentence(spare.min));
    }
    // Compared in the agent's clock when the devices' clocks differ: raw,
    // each device's offset would be in both.
    let compared = match (receive_corrected, &a.action_skew_corrected_ns) {
        (Some(recv), Some(act)) => {
            Some((recv.estimate.p50, act.estimate.p50, "in the agent's clock"))
        }
        _ if one_clock => a
            .receive_skew_ns
            .as_ref()
            .zip(a.action_skew_ns.as_ref())
            .map(|(recv, act)| (recv.p50, act.p50, "on one clock")),
        _ => None,
    };
    if let Some((recv, act, basis)) = compared
        && act > 0
    {
        let _ = writeln!(
            out,
            "    scheduling took the p50 skew from {} (receipt) to {} (action), {basis}: {:.0}x",
            duration(recv),
            duration(act),
            recv as f64 / act as f64
        );
    }
    if a.late > 0 {
        let _ = writeln!(
            out,
            "    {} LATE: the message came after its time to act, so the action happened at once:",
            a.late
        );
        for l in &a.late_listed {
            let _ = writeln!(
                out,
                "      {:<28} {:<24} late by {}",
                l.broadcast,
                l.connection,
                duration(l.late_ns as i64)
            );
        }
    }
    if a.receipts_without_action > 0 {
        let _ = writeln!(
            out,
            "    {}",
            crate::sentences::without_action_text(a.receipts_without_action, a.actions)
        );
    }
    if a.on_wide_bound > 0 {
        let _ = writeln!(
            out,
            "    {} actions taken on a clock bound wider than the time their message left (or before any time exchange): the device could not tell whether it was in time",
            a.on_wide_bound
        );
    }
    if a.uncorrected_actions > 0 {
        let _ = writeln!(
            out,
            "    {} actions left out of the corrected figures: their clock had no time exchange",
            a.uncorrected_actions
        );
    }
    if a.unmatched_actions > 0 {
        let _ = writeln!(
            out,
            "    {} actions matched no broadcast",
            a.unmatched_actions
        );
    }
    who_acted(out, a);
}

/// Whose actions were whose: one row per probe, page and app, when any
/// actor is not a plain probe (else the probes' own table says it).
fn who_acted(out: &mut String, a: &ActionFigures) {
    use skewscope_core::analysis::join::ActorKind;
    if a.by_actor.iter().all(|x| x.kind == ActorKind::Probe) {
        return;
    }
    let _ = writeln!(out, "  who acted:");
    let _ = writeln!(
        out,
        "    {:<24} {:<30} {:>7} {:>5} {:>12} {:>12} {:>7}",
        "", "", "actions", "late", "timer p50", "timer p99", "frames"
    );
    for x in &a.by_actor {
        let timer = |q: fn(&Summary) -> i64| {
            x.timer_error_ns
                .as_ref()
                .map_or_else(|| "-".to_owned(), |t| duration(q(t)))
        };
        let _ = writeln!(
            out,
            "    {:<24} {:<30} {:>7} {:>5} {:>12} {:>12} {:>7}",
            x.name,
            crate::sentences::actor_kind_text(x),
            x.actions,
            x.late,
            timer(|t| t.p50),
            timer(|t| t.p99),
            if x.frames > 0 {
                x.frames.to_string()
            } else {
                "-".to_owned()
            }
        );
        if let Some(n) = x.notices.as_ref().and_then(crate::sentences::notices_text) {
            let _ = writeln!(out, "      {n}");
        }
    }
}

/// Why the devices received apart: the skew split, what delivery adds,
/// and the connections late every time.
pub fn why_paragraph(out: &mut String, w: &Diagnosis) {
    let unsplit = if w.unsplit_broadcasts > 0 {
        format!(
            "; {} not: a receipt without a send time or a clock bound",
            w.unsplit_broadcasts
        )
    } else {
        String::new()
    };
    if w.split_broadcasts == 0 {
        let _ = writeln!(
            out,
            "  why: the skew cannot be split into the server's order and the network: no send time per copy (tap the server with --tap-port, or broadcast through the agent's hub), or no clock bound"
        );
    } else {
        let _ = writeln!(
            out,
            "  why ({} broadcast(s) split into the server's order and the network{unsplit})",
            w.split_broadcasts
        );
    }
    if let Some(share) = w.fanout_share {
        let _ = writeln!(out, "    {}", crate::sentences::share_sentence(share));
    }
    if w.split_broadcasts > 0 {
        row(out, "  skew", &w.skew_ns, "-");
        row(out, "    sent later", &w.fanout_ns, "-");
        row(out, "    network", &w.network_ns, "-");
        if w.network_ns.as_ref().is_some_and(|n| n.p50 < 0) {
            let _ = writeln!(
                out,
                "      (below 0: the later copies' network was the faster, and narrowed the spread)"
            );
        }
        row(
            out,
            "  + delivery",
            &w.delivery_ns,
            "no kernel receive stamps: the devices' delivery is not measured",
        );
    }
    if w.late_every_time.is_empty() {
        if w.connections_ranked > 0 {
            let _ = writeln!(
                out,
                "    no connection is always among the last: of {} ranked, none has a mean place of {} or more (0 first, 1 last)",
                w.connections_ranked, LATE_EVERY_TIME_PLACE
            );
        }
    } else {
        for l in &w.late_every_time {
            let address = l
                .address
                .as_ref()
                .map(|a| format!(" ({a})"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "    always among the last: {}{address}: mean place {:.2} (0 first, 1 last); {}",
                l.connection,
                l.mean_place,
                crate::sentences::last_of(l.last, l.of)
            );
        }
    }
}

/// Why a figure that needs the agent's sends is absent. With an agent log
/// but no broadcasts of its own joined, the probes listened to another
/// server (the agent was their clock reference).
fn without_agent_sends(r: &Report) -> &'static str {
    if r.agent.is_some() && r.fanout_ns.is_none() {
        "the probes' server is not the agent: tap it (--tap-port) for its sends"
    } else {
        "needs the agent's log: give its data directory too"
    }
}

/// What was read, and what it is measured against.
fn inputs_paragraph(out: &mut String, r: &Report) {
    let _ = writeln!(out, "skewscope report");
    for i in &r.inputs {
        if i.kind == "empty" {
            let _ = writeln!(
                out,
                "  passed over {}: empty (its writer never wrote a header)",
                i.file
            );
            continue;
        }
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
    if let Some(reference) = &r.reference {
        let _ = writeln!(out, "  {}", reference_line(reference));
        if let Some(left_out) = &reference.left_out {
            let _ = writeln!(out, "    left out: {left_out}");
        }
    }
    if let Some(m) = &r.matched {
        let _ = writeln!(out, "  {}", match_line(m));
    }
}

/// Broadcasts, connections, receipts and what is missing.
fn counts_paragraph(out: &mut String, r: &Report) {
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
}

/// The figures as measured (raw), p50 to max.
fn figures_table(out: &mut String, r: &Report) {
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  {:<16} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "", "p50", "p90", "p99", "p99.9", "max"
    );
    let agent_log = without_agent_sends(r);
    row(
        out,
        "skew (raw)",
        &r.skew_ns,
        "no broadcast reached two connections",
    );
    row(out, "  at userspace", &r.skew_userspace_ns, "-");
    row(
        out,
        "skew in-device",
        &r.skew_intra_device_ns,
        "no probe had two connections",
    );
    row(out, "latency (raw)", &r.latency_ns, agent_log);
    if let Some(t) = &r.latency_from_trigger {
        row(
            out,
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
    row(out, "fan-out span", &r.fanout_ns, agent_log);
    row(out, "  position", &r.fanout_position_ns, agent_log);
    row(
        out,
        "  delivery",
        &r.delivery_ns,
        "no kernel receive stamps: the devices' kernels gave none (SO_TIMESTAMPING)",
    );
}

/// The figures in the agent's timebase, each with the interval that holds the truth.
fn corrected_table(out: &mut String, r: &Report) {
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "  in the agent's timebase: estimate [interval that contains the truth]"
    );
    let no_offsets =
        "no offset estimates: no time exchange with an agent (give the probes --time-server)";
    bounded_row(out, "skew corrected", &r.skew_corrected_ns, no_offsets);
    let no_starts = if r.skew_corrected_ns.is_some() {
        without_agent_sends(r)
    } else {
        no_offsets
    };
    bounded_row(out, "latency", &r.latency_corrected_ns, no_starts);
    bounded_row(out, "  network", &r.network_ns, no_starts);
    if r.network_ns.as_ref().is_some_and(|n| n.estimate.p50 < 0) {
        let _ = writeln!(out, "    {}", crate::sentences::NETWORK_BELOW_ZERO);
    }
    if r.network_acausal > 0 {
        let _ = writeln!(
            out,
            "    {} receipt(s) arrived, by their clock's interval, before their copy was sent: that device's offset bound did not hold (intervals raised to what causality allows)",
            r.network_acausal
        );
    }
}

/// Each probe's clock and what else it said, then the probes side by side.
fn probes_paragraph(out: &mut String, r: &Report, live: bool) {
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

/// The broadcasts with the largest raw skew, each with its split.
fn worst_broadcasts(out: &mut String, r: &Report) {
    if r.worst_broadcasts.iter().any(|b| b.skew_ns.is_some()) {
        let _ = writeln!(out);
        let _ = writeln!(out, "  worst broadcasts by raw skew:");
        for b in r.worst_broadcasts.iter().filter(|b| b.skew_ns.is_some()) {
            let mut fanout = b
                .fanout_ns
                .map(|f| format!(", fan-out {}", duration(f as i64)))
                .unwrap_or_default();
            if let Some(split) = &b.split {
                fanout += &format!(
                    "; its skew: {} the order sent, {} network",
                    duration(split.fanout_ns),
                    duration(split.network_ns)
                );
            }
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
}

/// Renders the whole report.
pub fn render(r: &Report) -> String {
    render_with(r, false)
}

/// Renders the report of an audit: the agent and the uploading probes are
/// running as it is read, so their logs have no stop record yet, which is
/// then no news.
pub fn render_live(r: &Report) -> String {
    render_with(r, true)
}

fn render_with(r: &Report, live: bool) -> String {
    let mut out = String::new();
    inputs_paragraph(&mut out, r);
    counts_paragraph(&mut out, r);
    figures_table(&mut out, r);
    corrected_table(&mut out, r);
    if let Some(w) = &r.why {
        let _ = writeln!(out);
        why_paragraph(&mut out, w);
    }
    if let Some(lead) = &r.lead {
        let _ = writeln!(out);
        let _ = writeln!(out, "{}", lead_line(lead));
    }
    if let Some(a) = &r.actions {
        let _ = writeln!(out);
        let one_clock = r.clock_basis == ClockBasis::SingleHost;
        let receive_corrected = r.skew_corrected_ns.as_ref().filter(|_| !one_clock);
        actions_paragraph(&mut out, a, receive_corrected, one_clock);
    }
    let _ = writeln!(out);
    clocks_paragraph(&mut out, r, live);
    let _ = writeln!(out);
    probes_paragraph(&mut out, r, live);
    if let Some(t) = &r.tap {
        tap_paragraph(&mut out, t);
    }
    worst_broadcasts(&mut out, r);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use skewscope_core::Stamp;
    use skewscope_core::analysis::join::join;
    use skewscope_core::record::*;

    fn at(ns: u64) -> Stamp {
        Stamp {
            wall_ns: 1_764_000_000_000_000_000 + ns,
            mono_ns: ns,
        }
    }

    /// A running agent's log (no stop record) and a probe's that pruned
    /// nothing from its --out-dir.
    fn report() -> Report {
        let agent = vec![AgentRecord::Started(AgentStarted {
            host: "server".into(),
            version: "t".into(),
            at: at(0),
            shards: 1,
            order: SendOrder::Fixed,
            per_client_times: true,
        })];
        let probe = vec![
            skewscope_core::fixtures::probe_started_on("kiosk", "device", 1, at(1)),
            ProbeRecord::LogsPruned(LogsPruned {
                at: at(2),
                runs: 0,
                bytes: 0,
                kept_runs: 0,
                kept_bytes: 0,
                max_runs: 20,
                max_bytes: 64 << 20,
            }),
        ];
        Report::build(&join(Some(&agent), &[&probe]), vec![])
    }

    #[test]
    fn an_audit_says_nothing_of_stop_records_a_report_says_what_they_mean() {
        let live = render_live(&report());
        assert!(!live.contains("stop record"), "{live}");
        let copied = render(&report());
        assert!(
            copied.contains("the agent's log ends without a stop record: it was still running when the log was read, or it was killed"),
            "{copied}"
        );
        // Nothing pruned: nothing said.
        assert!(!copied.contains("--out-dir: deleted 0"), "{copied}");
    }

    #[test]
    fn durations_pick_a_readable_unit() {
        assert_eq!(duration(999), "999 ns");
        assert_eq!(duration(12_345), "12.3 µs");
        assert_eq!(duration(-2_500_000), "-2.50 ms");
        assert_eq!(duration(3_000_000_000), "3.000 s");
    }
}
