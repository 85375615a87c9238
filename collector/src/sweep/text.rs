//! A sweep's result as printed: what was swept, one line a stage, what
//! went wrong where, the knee, the machine, and how to run it again.

use std::fmt::Write;

use skewscope_core::analysis::stats::Summary;

use super::knee::short_duration;
use super::plan::thousands;
use super::result::{StageResult, SweepResult};

/// The whole result, as printed.
pub fn render(result: &SweepResult) -> String {
    let s = &result.settings;
    let e = &result.environment;
    let mut out = String::new();
    let protocol = s
        .protocol
        .get("protocol")
        .and_then(|p| p.as_str())
        .unwrap_or("ws");
    let _ = writeln!(
        out,
        "skewscope sweep of {} ({protocol}), {} broadcast(s) a stage, each asked for by {} {}",
        s.url, s.broadcasts, s.trigger.method, s.trigger.url
    );
    let server = match (&e.server_header, s.server_pid, &e.server_command) {
        (Some(h), Some(pid), Some(cmd)) => format!("server: {h} (pid {pid}: {cmd})"),
        (None, Some(pid), Some(cmd)) => format!("server: pid {pid}: {cmd}"),
        (Some(h), _, _) => format!("server: {h}"),
        _ => "server: it names itself nowhere (no Server: header, no --server-pid)".to_owned(),
    };
    let _ = writeln!(out, "{server}");
    if s.workers > 0 {
        let _ = writeln!(
            out,
            "connections from this machine and {} worker(s) (skewscope sweep-worker), every receipt placed on the agent's clock",
            s.workers
        );
    }
    out.push('\n');
    let tapped = s.agent.is_some();
    let _ = writeln!(out, "{}", header(tapped));
    for stage in &result.stages {
        let _ = writeln!(out, "{}", row(stage, tapped));
    }
    let notes = notes(result);
    if !notes.is_empty() {
        out.push('\n');
        for note in notes {
            let _ = writeln!(out, "  {note}");
        }
    }
    let _ = writeln!(out, "\nknee: {}", result.knee.sentence);
    let _ = writeln!(
        out,
        "machine: {} ({}, {} core(s){}), kernel {}, {} open files, local ports {}",
        e.host,
        e.cpu.as_deref().unwrap_or("CPU unknown"),
        e.cores,
        e.memory_mib
            .map(|m| format!(", {} MiB", thousands(m)))
            .unwrap_or_default(),
        e.kernel.as_deref().unwrap_or("unknown"),
        thousands(e.open_file_limit),
        e.local_ports
            .map(|(a, b)| format!("{a}-{b}"))
            .unwrap_or_else(|| "unknown".to_owned()),
    );
    let _ = writeln!(
        out,
        "took {:.1} s; run again: {}",
        result.took_ms as f64 / 1e3,
        e.command
    );
    out
}

/// The table's head; with the server's fan-out span when a tap gave it.
fn header(tapped: bool) -> String {
    let head = format!(
        "{:>8} {:>8} {:>7} {:>7} {:>17} {:>7} {:>4}   {:>9} {:>9} {:>9}   {:>16} {:>9}   {:>12} {:>14}",
        "clients",
        "opened",
        "refused",
        "dropped",
        "receipts/expected",
        "missing",
        "dup",
        "skew p50",
        "p99",
        "max",
        "from trigger p50",
        "p99",
        "server CPU/b",
        "own CPU/receipt",
    );
    if tapped {
        format!("{head}   {:>14} {:>9}", "fan-out p50", "p99")
    } else {
        head
    }
}

/// One stage's line.
fn row(stage: &StageResult, tapped: bool) -> String {
    let f = stage.figures.as_ref();
    let q = |s: Option<Summary>, pick: fn(&Summary) -> i64| {
        s.map_or("–".to_owned(), |s| short_duration(pick(&s).max(0) as u64))
    };
    let skew = f.and_then(|f| f.skew_ns);
    let latency = f.and_then(|f| f.latency_from_trigger_ns);
    let line = format!(
        "{:>8} {:>8} {:>7} {:>7} {:>17} {:>7} {:>4}   {:>9} {:>9} {:>9}   {:>16} {:>9}   {:>12} {:>14}",
        thousands(u64::from(stage.connections)),
        thousands(u64::from(stage.opened)),
        stage.refused,
        stage.dropped,
        f.map_or("–".to_owned(), |f| format!(
            "{}/{}",
            thousands(f.receipts),
            thousands(f.expected)
        )),
        f.map_or("–".to_owned(), |f| thousands(f.missing)),
        f.map_or("–".to_owned(), |f| f.duplicates.to_string()),
        q(skew, |s| s.p50),
        q(skew, |s| s.p99),
        q(skew, |s| s.max),
        q(latency, |s| s.p50),
        q(latency, |s| s.p99),
        stage.server_cpu.map_or("–".to_owned(), |c| format!(
            "{:.1} ms",
            c.per_broadcast_ms
        )),
        stage
            .probe_cpu
            .map_or("–".to_owned(), |c| format!("{:.1} µs", c.per_receipt_us)),
    );
    if tapped {
        let span = fanout_span(stage);
        format!(
            "{line}   {:>14} {:>9}",
            q(span, |s| s.p50),
            q(span, |s| s.p99)
        )
    } else {
        line
    }
}

/// The server's fan-out span in a stage, where a tap measured it.
pub fn fanout_span(stage: &StageResult) -> Option<Summary> {
    stage.figures.as_ref()?.tap.as_ref()?.fanout_span_ns
}

/// What the table cannot say: cuts, refusals, drops, late warm-ups,
/// unexplained messages, stops and stages not run.
fn notes(result: &SweepResult) -> Vec<String> {
    let mut notes = Vec::new();
    for stage in &result.stages {
        let at = format!("at {}:", thousands(u64::from(stage.connections)));
        if let Some(cut) = &stage.cut {
            notes.push(format!(
                "at {} asked: {cut}",
                thousands(u64::from(stage.asked))
            ));
        }
        if stage.refused > 0 {
            notes.push(format!(
                "{at} {} connection(s) refused, the first: {}",
                stage.refused,
                stage.first_refusal.as_deref().unwrap_or("no reason given")
            ));
        }
        if stage.dropped > 0 {
            notes.push(format!(
                "{at} {} connection(s) dropped while measuring, the first: {}",
                stage.dropped,
                stage.first_drop.as_deref().unwrap_or("no reason given")
            ));
        }
        if stage.late_to_warm > 0 {
            notes.push(format!(
                "{at} {} connection(s) received fewer of the {} warm-up broadcast(s) than the others ({} none): the server took them in late{}",
                stage.late_to_warm,
                stage.warmups,
                stage.never_warmed,
                if stage.figures.as_ref().is_some_and(|f| f.unexplained > 0) {
                    "; copies of one payload are told apart by their order on each connection, so theirs may be joined to the wrong broadcast"
                } else {
                    ""
                }
            ));
        }
        if let Some(f) = &stage.figures
            && f.unexplained > 0
        {
            notes.push(format!(
                "{at} {} message(s) that no trigger explains (the server's own, or copies joined out of order)",
                f.unexplained
            ));
        }
        for note in [machines_note(stage), bounds_note(stage)]
            .into_iter()
            .flatten()
        {
            notes.push(format!("{at} {note}"));
        }
        if let Some(note) = stage.compressed.note(stage.opened) {
            notes.push(format!("{at} {note}"));
        }
        if let Some(short) = &stage.tap_short {
            notes.push(format!("{at} {short}"));
        }
        if let Some(drops) = ring_drops_in(result, stage) {
            notes.push(format!(
                "{at} the tap's ring dropped {drops} packet(s): copies in them are missing from the fan-out span (give the agent a larger --tap-ring-bytes)"
            ));
        }
        if let Some(why) = &stage.stopped {
            notes.push(format!("{at} the sweep stopped: {why}"));
        }
    }
    for n in &result.not_run {
        notes.push(format!(
            "{} not run: {}",
            thousands(u64::from(n.asked)),
            n.why
        ));
    }
    notes
}

/// With workers: what each machine was asked for and how it ended.
pub fn machines_note(stage: &StageResult) -> Option<String> {
    if stage.machines.is_empty() {
        return None;
    }
    let theirs: u32 = stage.machines.iter().map(|m| m.connections).sum();
    Some(format!(
        "this machine asked for {}; {}",
        thousands(u64::from(stage.connections.saturating_sub(theirs))),
        stage
            .machines
            .iter()
            .map(|m| format!(
                "{} {} ({})",
                m.name,
                thousands(u64::from(m.connections)),
                m.state
            ))
            .collect::<Vec<_>>()
            .join("; ")
    ))
}

/// With workers: the skew's bounds across the machines' clocks.
pub fn bounds_note(stage: &StageResult) -> Option<String> {
    let b = stage.figures.as_ref()?.skew_bounds_ns?;
    let d = |ns: i64| short_duration(ns.max(0) as u64);
    Some(format!(
        "the skew across machines is on the agent's clock, each machine's known within its time exchange's bound: p99 {} (between {} and {}), max {} (at most {})",
        d(b.estimate.p99),
        d(b.lo.p99),
        d(b.hi.p99),
        d(b.estimate.max),
        d(b.hi.max),
    ))
}

/// Packets the tap's ring dropped during `stage` (its cumulative count
/// less the stage before's), when any.
fn ring_drops_in(result: &SweepResult, stage: &StageResult) -> Option<u64> {
    let drops = |s: &StageResult| s.figures.as_ref()?.tap.as_ref().map(|t| t.ring_drops);
    let now = drops(stage)?;
    let before = result
        .stages
        .iter()
        .take_while(|s| !std::ptr::eq(*s, stage))
        .filter_map(drops)
        .last()
        .unwrap_or(0);
    let new = now.saturating_sub(before);
    (new > 0).then_some(new)
}
