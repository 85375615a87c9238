//! The report's sentences that more than one output says alike: the text
//! report (`table`), the HTML page and the audit's lines take them from
//! here, so a figure reads the same wherever it is printed.

use skewscope_core::analysis::actions::LeadAdvice;
use skewscope_core::analysis::report::{MatchCounts, Reference, ReferenceKind};

/// Formats nanoseconds at a readable scale: the unit is chosen after
/// rounding, so 999,960 ns reads `1.00 ms`, not `1000.0 µs`; a negative
/// value keeps its sign in every unit, and one that rounds to nothing
/// reads `0 ns`, never `-0.0 µs`.
pub fn duration(ns: i64) -> String {
    let a = ns.unsigned_abs() as f64;
    let sign = if ns < 0 { "-" } else { "" };
    if a < 1_000.0 {
        format!("{ns} ns")
    } else if a < 999_950.0 {
        format!("{sign}{:.1} µs", a / 1e3)
    } else if a < 999_995_000.0 {
        format!("{sign}{:.2} ms", a / 1e6)
    } else {
        format!("{sign}{:.3} s", a / 1e9)
    }
}

/// How often a connection was the very last of its broadcast's copies:
/// `last in 3 of 20`, or, when it never was, `never the very last (of 20)`
/// (a connection can be near the end every time and last in none).
pub fn last_of(last: u64, of: u64) -> String {
    if last == 0 {
        format!("never the very last (of {of})")
    } else {
        format!("the very last in {last} of {of}")
    }
}

/// How much of the skew the server's send order explains, and the rest;
/// a share over 100 % means the network narrowed the spread.
pub fn share_sentence(share: f64) -> String {
    let order = (share * 100.0).round();
    let rest = 100.0 - order;
    let head = "of their skew summed, the order the server sent copies in explains";
    if rest >= 1.0 {
        format!("{head} {order:.0} %; the network and the clocks {rest:.0} %")
    } else if rest > -1.0 {
        format!("{head} all of it; the network and the clocks less than 1 %")
    } else {
        format!(
            "{head} {order:.0} %: the network and the clocks narrowed the spread by {:.0} %",
            -rest
        )
    }
}

/// Why a network time in the agent's timebase can be below zero, said
/// under the row when its median is.
pub const NETWORK_BELOW_ZERO: &str = "(a network time below 0: the agent stamps a copy when its write() returns, and a receiver can have it before that; on one host it often does. The agent's --tx-timestamps stamps when the copy left instead)";

/// How the agent's log ends, for people; `None` when it stopped cleanly,
/// or when the agent is known to be running (`live`: an audit reads it
/// as it runs, so no stop record is no news).
pub fn agent_end_text(ended: skewscope_core::analysis::join::RunEnd, live: bool) -> Option<String> {
    use skewscope_core::analysis::join::RunEnd;
    match ended {
        RunEnd::NoStopRecord if !live => Some(
            "the agent's log ends without a stop record: it was still running when the log was read, or it was killed; its counters are as last recorded".to_owned(),
        ),
        _ => None,
    }
}

/// Receipts whose message had no time to act where the probe looked.
pub fn without_action_text(receipts: u64, actions: u64) -> String {
    let pointer_hint = "check --act-at against the messages: the agent's test message (/start_test?lead=, audit --lead) carries its time at /at_ns, /publish?lead= writes /at (or its pointer=), an app's own message where the app puts it";
    if actions == 0 {
        format!(
            "none of the {receipts} receipts carried a time to act where the probes looked (--act-at): {pointer_hint}"
        )
    } else {
        format!(
            "{receipts} receipts carried no time to act where the probe looked (--act-at); if they should have, {pointer_hint}"
        )
    }
}

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

/// The lead to give a broadcast's time to act, from the latencies measured.
pub fn lead_line(lead: &LeadAdvice) -> String {
    use skewscope_core::analysis::lead_rule::{Evidence, MIN_EVIDENCE};
    let reads = match (lead.worst_bound_ns, lead.from) {
        (0, "trigger") => "the p99.9 of the reads from the triggers".to_owned(),
        (0, _) => "the p99.9 of the reads (one clock)".to_owned(),
        (bound, _) => format!(
            "the p99.9 of the reads at their clock bounds' latest (worst bound {})",
            duration(bound as i64)
        ),
    };
    let evidence = match lead.evidence {
        Evidence::Quantile { .. } => String::new(),
        Evidence::TailModel { reads } => format!(
            "; from {reads} reads a tail model, never below their largest: the p99.9 itself needs {MIN_EVIDENCE}"
        ),
    };
    let readiness = if lead.readiness_ns > 0 {
        format!(
            ", plus {} the slowest device needs from read to act",
            duration(lead.readiness_ns as i64)
        )
    } else {
        String::new()
    };
    format!(
        "  lead: act {} after the {}: by then 99.9 % of copies are read and their devices ready\n        ({reads}{evidence}{readiness}, and a margin);\n        every one of the {} copies was read by {}",
        duration(lead.p999_ns),
        lead.from,
        lead.copies,
        duration(lead.every_copy_ns)
    )
}

/// What the least time to spare says about the lead, on any server.
pub fn spare_sentence(least_spare_ns: i64) -> String {
    if least_spare_ns >= 0 {
        format!(
            "every copy was read at least {} before its time to act: the same lead less that (plus the worst clock bound, for safety) would have put every action in time",
            duration(least_spare_ns)
        )
    } else {
        format!(
            "a copy was read {} after its time to act: the lead needed that much more (plus the worst clock bound, for safety)",
            duration(-least_spare_ns)
        )
    }
}

/// What `--match` judged and left out, in one line.
pub fn match_line(m: &MatchCounts) -> String {
    format!(
        "--match {}: {} broadcast(s) judged; left out {} that did not match and {} whose payload no probe recorded whole enough to tell",
        m.expression, m.matched, m.left_out, m.unknown
    )
}

/// Which reference the report used, and why, in one line.
pub fn reference_line(reference: &Reference) -> String {
    let kind = match reference.kind {
        ReferenceKind::Hub => "the agent's hub",
        ReferenceKind::Tap => "the agent's tap",
        ReferenceKind::Clock => "the agent's clock only",
        ReferenceKind::None => "none",
    };
    format!("reference: {kind} ({})", reference.why)
}

/// What a probe deleted from and kept in its `--out-dir`, for people: one
/// line (the text report and the HTML say the same); `None` when it
/// deleted nothing (then there is nothing to say).
pub fn pruned_text(p: &skewscope_core::record::LogsPruned) -> Option<String> {
    if p.runs == 0 {
        return None;
    }
    let mib = |b: u64| {
        if b < 1024 * 1024 {
            format!("{:.1} KiB", b as f64 / 1024.0)
        } else {
            format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
        }
    };
    let limit = |n: u64, what: String| {
        if n == 0 { "no limit".to_owned() } else { what }
    };
    Some(format!(
        "--out-dir: deleted {} earlier run log(s) ({}) the agent had in full; kept {} ({}); limits {} runs, {}",
        p.runs,
        mib(p.bytes),
        p.kept_runs,
        mib(p.kept_bytes),
        limit(u64::from(p.max_runs), p.max_runs.to_string()),
        limit(p.max_bytes, mib(p.max_bytes)),
    ))
}

/// What a browser probe's stamps are, for people: one line.
pub fn page_text(page: &skewscope_core::record::PageProbe) -> String {
    let isolated = if page.isolated {
        "cross-origin isolated"
    } else {
        "not cross-origin isolated"
    };
    format!(
        "a page in a browser: userspace stamps of the page's clock (steps of {}, {isolated}), bound by the WebSocket time exchange; {}",
        duration(page.clock_step_ns as i64),
        page.user_agent.chars().take(120).collect::<String>()
    )
}

/// Which probes' clocks an unauthenticated time exchange set, for people;
/// `None` when every one that exchanged held the token.
/// Each name once, in the order first given: a probe restarted (two
/// runs of one name) is one device.
pub fn unauthenticated_line(names: &[String]) -> Option<String> {
    let mut once: Vec<&str> = Vec::new();
    for n in names {
        if !once.contains(&n.as_str()) {
            once.push(n);
        }
    }
    (!once.is_empty()).then(|| {
        format!(
            "UNAUTHENTICATED CLOCK on {}: their time exchange ran without the agent's token, so anyone on the LAN path could have moved their clocks (and every bound would still look fine); give the agent --token-file and the probes the same token",
            once.join(", ")
        )
    })
}

/// A probe's refused time replies, for people; `None` when it refused none.
pub fn refused_text(tags: &skewscope_core::record::ClockTags) -> Option<String> {
    (tags.refused > 0).then(|| {
        format!(
            "refused {} time repl{} whose tag did not verify (altered on the way, or an agent with another token or none); none was used",
            tags.refused,
            if tags.refused == 1 { "y" } else { "ies" }
        )
    })
}

/// What `lead=auto` chose, for people: one line (the text and the HTML).
pub fn auto_lead_line(a: &skewscope_core::analysis::actions::AutoLeadFigures) -> String {
    let basis = if a.on_probe_reads == a.broadcasts {
        "each on the devices' measured reads".to_owned()
    } else {
        format!(
            "{} on the devices' measured reads, {} on the hub's fan-out span and a network allowance",
            a.on_probe_reads,
            a.broadcasts - a.on_probe_reads
        )
    };
    let mut line = format!(
        "lead=auto chose the lead of {} broadcast(s): {} to {} (p50 {}, one per broadcast; \
         \"lead given\" counts one per action, of every broadcast acted on), {basis}; {} of their {} actions late",
        a.broadcasts,
        duration(a.lead_ns.min),
        duration(a.lead_ns.max),
        duration(a.lead_ns.p50),
        a.late,
        a.actions
    );
    if a.on_tail_model > 0 {
        line += &format!(
            "\n    {} of them on a tail model: too few reads yet for the p99.9 itself",
            a.on_tail_model
        );
    }
    if a.capped > 0
        && let (Some(ceiling), Some(wanted)) = (a.ceiling_ns, a.wanted_max_ns)
    {
        line += &format!(
            "\n    CEILING: {} broadcast(s) needed more than --max-lead {} (up to {}) and were given the ceiling: their slowest copies are late",
            a.capped,
            duration(ceiling as i64),
            duration(wanted as i64)
        );
    }
    if !a.left_out.is_empty() {
        line += &format!(
            "\n    left out of the lead for implausible reads: {}",
            a.left_out.join(", ")
        );
    }
    line
}

/// What one actor is, for people: whose actions a row of the report's
/// "who acted" holds.
pub fn actor_kind_text(a: &skewscope_core::analysis::actions::ActorFigures) -> String {
    use skewscope_core::analysis::join::ActorKind;
    match a.kind {
        ActorKind::Probe => "probe".to_owned(),
        ActorKind::ProbePage => "browser probe".to_owned(),
        ActorKind::App => match &a.app {
            Some(app) => format!("app ({})", app.module),
            None => "app".to_owned(),
        },
        ActorKind::NativeApp => "app beside its probe".to_owned(),
    }
}

/// An app beside a probe's notices, for people; `None` when all went out
/// and every one was answered.
pub fn notices_text(n: &skewscope_core::record::NoticeTotals) -> Option<String> {
    if n.undelivered == 0 && n.unanswered == 0 && n.bad_answers == 0 {
        return None;
    }
    let mut parts = vec![format!("{} notice(s) sent", n.sent)];
    if n.undelivered > 0 {
        parts.push(format!(
            "{} NOT DELIVERED (the app was not listening or not reading)",
            n.undelivered
        ));
    }
    if n.unanswered > 0 {
        parts.push(format!(
            "{} NEVER ANSWERED (the app did not say it acted: those actions are not audited)",
            n.unanswered
        ));
    }
    if n.bad_answers > 0 {
        parts.push(format!(
            "{} answer(s) refused as malformed or unknown",
            n.bad_answers
        ));
    }
    Some(parts.join(", "))
}

/// What one frame is, next to the frames' skew.
pub const FRAME_SENTENCE: &str = "a display shows an action at its next refresh: one frame is 16.7 ms at 60 Hz, and two displays' refreshes are not aligned, so what people see can differ by up to a frame more than this";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_into_the_next_unit_and_keep_their_sign() {
        assert_eq!(duration(999_960), "1.00 ms");
        assert_eq!(duration(-999_960), "-1.00 ms");
        assert_eq!(duration(999_996_000), "1.000 s");
        assert_eq!(duration(-5_000), "-5.0 µs");
        assert_eq!(duration(-999), "-999 ns");
        assert_eq!(duration(0), "0 ns");
    }

    #[test]
    fn the_share_of_the_order_never_reads_minus_zero() {
        let all = share_sentence(1.003);
        assert!(all.contains("explains all of it"), "{all}");
        assert!(!all.contains("-0"), "{all}");
        let over = share_sentence(1.05);
        assert!(
            over.contains("explains 105 %") && over.contains("narrowed the spread by 5 %"),
            "{over}"
        );
        let most = share_sentence(0.96);
        assert!(
            most.ends_with("explains 96 %; the network and the clocks 4 %"),
            "{most}"
        );
    }

    #[test]
    fn never_last_is_said_as_such() {
        assert_eq!(last_of(0, 20), "never the very last (of 20)");
        assert_eq!(last_of(3, 20), "the very last in 3 of 20");
    }

    #[test]
    fn an_unauthenticated_clock_is_named_once() {
        let names: Vec<String> = ["kiosk-a", "kiosk-b", "kiosk-a"].map(String::from).into();
        let line = unauthenticated_line(&names).unwrap();
        assert!(
            line.starts_with("UNAUTHENTICATED CLOCK on kiosk-a, kiosk-b:"),
            "{line}"
        );
        assert_eq!(unauthenticated_line(&[]), None);
    }

    #[test]
    fn a_running_agent_is_no_fault() {
        use skewscope_core::analysis::join::RunEnd;
        assert_eq!(agent_end_text(RunEnd::NoStopRecord, true), None);
        assert!(agent_end_text(RunEnd::NoStopRecord, false).is_some());
        assert_eq!(agent_end_text(RunEnd::Stopped, false), None);
    }

    #[test]
    fn receipts_without_a_time_to_act_name_where_times_are() {
        let none = without_action_text(25, 0);
        assert!(none.starts_with("none of the 25 receipts"), "{none}");
        assert!(none.contains("/at_ns"), "{none}");
    }
}
