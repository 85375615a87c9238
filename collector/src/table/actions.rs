//! The actions' paragraph: when devices and apps acted, against when
//! they were told to, and who acted.

use std::fmt::Write;

use skewscope_core::analysis::actions::ActionFigures;
use skewscope_core::analysis::clock_figures::BoundedSummary;
use skewscope_core::analysis::stats::Summary;

use crate::sentences::{duration, spare_sentence};

use super::rows::{bounded_row, row};

/// What the probes' actions came to: action skew beside receive skew,
/// late actions, the timers' error.
pub(super) fn actions_paragraph(
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
pub(super) fn who_acted(out: &mut String, a: &ActionFigures) {
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
