//! The tapped server's paragraph: what the tap saw it send, and to whom.

use std::fmt::Write;

/// What the agent's tap of the server saw: its broadcasts, what it could
/// not follow, and the clients the server sent to last.
pub(super) fn tap_paragraph(out: &mut String, t: &skewscope_core::analysis::tapped::TapSummary) {
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
