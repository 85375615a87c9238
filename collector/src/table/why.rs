//! Why the copies spread: the diagnosis, said as a paragraph (the HTML
//! page prints the same).

use std::fmt::Write;

use skewscope_core::analysis::diagnosis::{Diagnosis, LATE_EVERY_TIME_PLACE};

use super::rows::row;

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
