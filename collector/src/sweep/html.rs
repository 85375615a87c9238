//! A sweep as one self-contained HTML page: the knee, the curve of receive
//! skew against connections (and of latency from the trigger, and of the
//! server's CPU), a row a stage, and everything it ran with. Several
//! results side by side (`sweep-compare`) are one page with a curve each.
//! The report page's chart writer and style, and its rules: no script,
//! nothing fetched, light and dark.

use std::fmt::Write;

use skewscope_core::analysis::stats::Summary;

use super::knee::short_duration;
use super::plan::thousands;
use super::result::SweepResult;
use crate::html::svg::{Chart, escape};

const STYLE: &str = include_str!("../html/report.css");

/// Lines of the curves: the report's series colours, drawn as strokes.
const CURVES: &str = "
svg .curve { fill: none; stroke-width: 2; }
svg .curve.s0 { stroke: var(--s0); } svg .curve.s1 { stroke: var(--s1); } svg .curve.s2 { stroke: var(--s2); }
svg .curve.s3 { stroke: var(--s3); } svg .curve.s4 { stroke: var(--s4); } svg .curve.s5 { stroke: var(--s5); }
svg .curve.s6 { stroke: var(--s6); } svg .curve.s7 { stroke: var(--s7); }
svg .curve.dashed { stroke-dasharray: 5 4; stroke-width: 1.5; }
svg .threshold { stroke: var(--bad); stroke-dasharray: 6 4; fill: none; }
.knee { background: var(--panel); padding: 8px 14px; border-left: 6px solid var(--accent); }
dl.settings { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; font-size: 0.92em; }
dl.settings dt { color: var(--muted); } dl.settings dd { margin: 0; overflow-wrap: anywhere; }
";

/// Series colours available (CSS classes `s0`…`s7`).
const COLOURS: usize = 8;
const SIZE: (f64, f64) = (900.0, 340.0);
/// The lowest time a log axis shows: a smaller figure is drawn on it.
const FLOOR_NS: f64 = 1_000.0;

/// One curve: its name, its colour, and (clients, ns) points.
struct Curve {
    name: String,
    class: String,
    points: Vec<(u32, u64)>,
}

/// The page of one sweep.
pub fn page(result: &SweepResult, made: &str) -> String {
    let title = format!("skewscope sweep of {}", result.settings.label);
    let mut out = head(&title, made);
    let _ = writeln!(
        out,
        r#"<p class="knee"><b>{}</b></p>"#,
        escape(&upper_first(&result.knee.sentence))
    );
    let pick = |name: &str, class: &str, f: fn(&Summary) -> i64, of: Of| Curve {
        name: name.to_owned(),
        class: class.to_owned(),
        points: points(result, of, f),
    };
    let mut skew = vec![
        pick("p50", "s0", |s| s.p50, Of::Skew),
        pick("p99", "s1", |s| s.p99, Of::Skew),
        pick("max", "s2 dashed", |s| s.max, Of::Skew),
    ];
    let tapped = result.settings.agent.is_some();
    if tapped {
        skew.push(pick(
            "server's fan-out span p99 (tap)",
            "s3",
            |s| s.p99,
            Of::FanoutSpan,
        ));
    }
    section(
        &mut out,
        "sweep-skew",
        "Receive skew against connections",
        chart(
            "sweep-skew",
            &skew,
            Some(result.settings.max_skew_p99_ns),
            "receive skew",
        ),
        &format!(
            "Each stage's broadcasts: how far apart its connections received each one (last receipt − first, {}), at p50, p99 and the largest. The dashed line is the threshold, {}. Both axes are logarithmic.{}",
            if result.settings.workers > 0 {
                "each machine's receipts placed on the agent's clock: the stages' notes give the bounds"
            } else {
                "on this host's one clock"
            },
            short_duration(result.settings.max_skew_p99_ns),
            if tapped {
                " The server's fan-out span is how far apart it sent the copies (its last copy's first byte on the wire − its first's, as the agent's tap saw them): the part of the skew the server made before the network or the clients had a say."
            } else {
                ""
            }
        ),
    );
    key(&mut out, &skew);
    let latency = [
        pick("p50", "s0", |s| s.p50, Of::Latency),
        pick("p99", "s1", |s| s.p99, Of::Latency),
    ];
    section(
        &mut out,
        "sweep-latency",
        "Latency from the trigger against connections",
        chart("sweep-latency", &latency, None, "latency from trigger"),
        "Per receipt: its arrival less the moment its broadcast was asked for (the trigger sent), at p50 and p99.",
    );
    key(&mut out, &latency);
    cpu_section(&mut out, std::slice::from_ref(result));
    stages_table(&mut out, result);
    settings(&mut out, result);
    out.push_str("</body></html>\n");
    out
}

/// The page of several sweeps side by side: a skew p99 curve each.
pub fn compare_page(results: &[SweepResult], made: &str) -> String {
    let names: Vec<&str> = results.iter().map(|r| r.settings.label.as_str()).collect();
    let title = format!("skewscope sweeps side by side: {}", names.join(", "));
    let mut out = head(&title, made);
    out.push_str("<ul class=\"knees\">");
    for r in results {
        let _ = write!(
            out,
            "<li><b>{}</b>: {}</li>",
            escape(&r.settings.label),
            escape(&r.knee.sentence)
        );
    }
    out.push_str("</ul>\n");
    let curves = |of: Of, f: fn(&Summary) -> i64| -> Vec<Curve> {
        results
            .iter()
            .enumerate()
            .map(|(i, r)| Curve {
                name: r.settings.label.clone(),
                class: format!("s{}", i % COLOURS),
                points: points(r, of, f),
            })
            .collect()
    };
    let thresholds: Vec<u64> = results.iter().map(|r| r.settings.max_skew_p99_ns).collect();
    let threshold = thresholds
        .iter()
        .all(|t| *t == thresholds[0])
        .then(|| thresholds[0]);
    let skew = curves(Of::Skew, |s| s.p99);
    section(
        &mut out,
        "sweep-skew",
        "Receive skew p99 against connections",
        chart("sweep-skew", &skew, threshold, "receive skew p99"),
        "Each server's receive skew p99 per stage: how far apart its connections received a broadcast, the worst but one in a hundred. Both axes are logarithmic; the dashed line is the threshold.",
    );
    key(&mut out, &skew);
    let latency = curves(Of::Latency, |s| s.p99);
    section(
        &mut out,
        "sweep-latency",
        "Latency from the trigger, p99, against connections",
        chart("sweep-latency", &latency, None, "latency p99"),
        "Per receipt: its arrival less the moment its broadcast was asked for, p99.",
    );
    key(&mut out, &latency);
    cpu_section(&mut out, results);
    for r in results {
        let _ = writeln!(out, "<h2>{}</h2>", escape(&r.settings.label));
        stages_table(&mut out, r);
    }
    out.push_str("</body></html>\n");
    out
}

/// Which figure a curve follows.
#[derive(Clone, Copy)]
enum Of {
    Skew,
    Latency,
    FanoutSpan,
}

/// (clients, ns) of each measured stage.
fn points(result: &SweepResult, of: Of, f: fn(&Summary) -> i64) -> Vec<(u32, u64)> {
    result
        .stages
        .iter()
        .filter_map(|s| {
            let figures = s.figures.as_ref()?;
            let summary = match of {
                Of::Skew => figures.skew_ns,
                Of::Latency => figures.latency_from_trigger_ns,
                Of::FanoutSpan => figures.tap.as_ref()?.fanout_span_ns,
            }?;
            Some((s.opened, f(&summary).max(0) as u64))
        })
        .collect()
}

/// A log-log chart of `curves`, with `threshold` as a dashed line.
fn chart(id: &'static str, curves: &[Curve], threshold: Option<u64>, what: &str) -> Option<String> {
    let all: Vec<(u32, u64)> = curves.iter().flat_map(|c| c.points.clone()).collect();
    if all.is_empty() {
        return None;
    }
    let log_ns = |ns: u64| (ns as f64).max(FLOOR_NS).log10();
    let clients: Vec<u32> = {
        let mut c: Vec<u32> = all.iter().map(|p| p.0.max(1)).collect();
        c.sort_unstable();
        c.dedup();
        c
    };
    let x_lo = f64::from(clients[0]).log10();
    let x_hi = f64::from(*clients.last().expect("not empty")).log10();
    let ys = all
        .iter()
        .map(|p| p.1)
        .chain(threshold)
        .map(log_ns)
        .collect::<Vec<_>>();
    let y_lo = ys.iter().copied().fold(f64::INFINITY, f64::min).floor();
    let y_hi = ys.iter().copied().fold(f64::NEG_INFINITY, f64::max).ceil();
    let pad = 0.05 * (x_hi - x_lo).max(0.5);
    let mut chart = Chart::new(
        id,
        SIZE,
        (x_lo - pad, x_hi + pad),
        (y_lo, y_hi.max(y_lo + 1.0)),
        "connections (log scale)",
        &format!("{what} (log scale)"),
    );
    chart.label_x_at(
        clients
            .iter()
            .map(|&c| (f64::from(c).log10(), thousands(u64::from(c))))
            .collect(),
    );
    chart.label_y_at(
        (y_lo as i32..=y_hi.max(y_lo + 1.0) as i32)
            .map(|p| (f64::from(p), short_duration(10u64.pow(p.max(0) as u32))))
            .collect(),
    );
    if let Some(t) = threshold {
        let (x0, x1) = chart.x.range();
        chart.line(&[(x0, log_ns(t)), (x1, log_ns(t))], "threshold");
    }
    for curve in curves {
        let line: Vec<(f64, f64)> = curve
            .points
            .iter()
            .map(|&(c, ns)| (f64::from(c.max(1)).log10(), log_ns(ns)))
            .collect();
        chart.line(&line, &format!("curve {}", curve.class));
        for &(c, ns) in &curve.points {
            chart.point(
                f64::from(c.max(1)).log10(),
                log_ns(ns),
                &curve.class,
                &format!(
                    "{}: {} at {} connections",
                    curve.name,
                    short_duration(ns),
                    thousands(u64::from(c))
                ),
            );
        }
    }
    Some(chart.finish(what))
}

/// The server's CPU per broadcast against connections, when measured.
fn cpu_section(out: &mut String, results: &[SweepResult]) {
    let curves: Vec<Curve> = results
        .iter()
        .enumerate()
        .map(|(i, r)| Curve {
            name: r.settings.label.clone(),
            class: format!("s{}", i % COLOURS),
            points: r
                .stages
                .iter()
                .filter_map(|s| Some((s.opened, (s.server_cpu?.per_broadcast_ms * 1e6) as u64)))
                .collect(),
        })
        .filter(|c| !c.points.is_empty())
        .collect();
    if curves.is_empty() {
        return;
    }
    section(
        out,
        "sweep-cpu",
        "The server's CPU per broadcast against connections",
        chart("sweep-cpu", &curves, None, "server CPU per broadcast"),
        "The server process's CPU time (its threads' run time) over a stage's broadcasts, divided by them.",
    );
    key(out, &curves);
}

fn head(title: &str, made: &str) -> String {
    format!(
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>{title}</title><style>{STYLE}{CURVES}</style></head><body>
<header><h1>{title}</h1><p class="made">made {made} by skewscope {version}</p></header>
"#,
        title = escape(title),
        made = escape(made),
        version = env!("CARGO_PKG_VERSION"),
    )
}

fn section(out: &mut String, id: &str, heading: &str, chart: Option<String>, caption: &str) {
    let _ = write!(out, r#"<section id="{id}"><h2>{heading}</h2>"#);
    match chart {
        Some(svg) => {
            let _ = write!(
                out,
                "<figure>{svg}<figcaption>{}</figcaption></figure>",
                escape(caption)
            );
        }
        None => out.push_str(r#"<p class="absent">No stage was measured.</p>"#),
    }
    out.push_str("</section>\n");
}

fn key(out: &mut String, curves: &[Curve]) {
    out.push_str(r#"<p class="legend">"#);
    for c in curves {
        let _ = write!(
            out,
            r#"<span><svg viewBox="0 0 10 10" width="10" height="10"><circle class="{}" cx="5" cy="5" r="4"/></svg> {}</span> "#,
            c.class,
            escape(&c.name)
        );
    }
    out.push_str("</p>\n");
}

fn stages_table(out: &mut String, r: &SweepResult) {
    out.push_str(
        r#"<div class="wide"><table class="stages"><tr><th>clients</th><th>opened</th><th>refused</th><th>dropped</th><th>receipts / expected</th><th>missing</th><th>skew p50</th><th>p99</th><th>max</th><th>from trigger p50</th><th>p99</th><th>server CPU / broadcast</th><th>own CPU / receipt</th>"#,
    );
    let tapped = r.settings.agent.is_some();
    if tapped {
        out.push_str("<th>server's fan-out span p50</th><th>p99</th>");
    }
    out.push_str("<th>notes</th></tr>");
    let q = |s: Option<Summary>, f: fn(&Summary) -> i64| {
        s.map_or("–".to_owned(), |s| short_duration(f(&s).max(0) as u64))
    };
    for s in &r.stages {
        let f = s.figures.as_ref();
        let skew = f.and_then(|f| f.skew_ns);
        let lat = f.and_then(|f| f.latency_from_trigger_ns);
        let over = s
            .skew_p99_ns()
            .is_some_and(|p| p > r.settings.max_skew_p99_ns);
        let compressed = s.compressed.note(s.opened);
        let machines = super::text::machines_note(s);
        let bounds = super::text::bounds_note(s);
        let notes: Vec<&str> = [
            s.cut.as_deref(),
            s.stopped.as_deref(),
            machines.as_deref(),
            bounds.as_deref(),
            compressed.as_deref(),
            s.tap_short.as_deref(),
        ]
        .into_iter()
        .flatten()
        .collect();
        let _ = write!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td{}>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>{}<td>{}</td></tr>",
            thousands(u64::from(s.connections)),
            thousands(u64::from(s.opened)),
            s.refused,
            s.dropped,
            f.map_or("–".to_owned(), |f| format!(
                "{} / {}",
                thousands(f.receipts),
                thousands(f.expected)
            )),
            f.map_or("–".to_owned(), |f| thousands(f.missing)),
            q(skew, |s| s.p50),
            if over { r#" class="bad""# } else { "" },
            q(skew, |s| s.p99),
            q(skew, |s| s.max),
            q(lat, |s| s.p50),
            q(lat, |s| s.p99),
            s.server_cpu.map_or("–".to_owned(), |c| format!(
                "{:.1} ms",
                c.per_broadcast_ms
            )),
            s.probe_cpu
                .map_or("–".to_owned(), |c| format!("{:.1} µs", c.per_receipt_us)),
            if tapped {
                let span = super::text::fanout_span(s);
                format!(
                    "<td>{}</td><td>{}</td>",
                    q(span, |s| s.p50),
                    q(span, |s| s.p99)
                )
            } else {
                String::new()
            },
            escape(&notes.join("; ")),
        );
    }
    out.push_str("</table></div>\n");
    for n in &r.not_run {
        let _ = writeln!(
            out,
            r#"<p class="absent">{} not run: {}</p>"#,
            thousands(u64::from(n.asked)),
            escape(&n.why)
        );
    }
}

fn settings(out: &mut String, r: &SweepResult) {
    let s = &r.settings;
    let e = &r.environment;
    let rows: Vec<(&str, String)> = vec![
        ("server URL", s.url.clone()),
        ("protocol", s.protocol.to_string()),
        (
            "trigger",
            format!(
                "{} {}{}",
                s.trigger.method,
                s.trigger.url,
                s.trigger
                    .body
                    .as_deref()
                    .map(|b| format!(" with body {b}"))
                    .unwrap_or_default()
            ),
        ),
        (
            "stages asked",
            s.stages
                .iter()
                .map(|n| thousands(u64::from(*n)))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        (
            "broadcasts a stage",
            format!(
                "{} (after up to {} warm-up), {} ms apart, {} ms to settle",
                s.broadcasts, s.warmup_tries, s.interval_ms, s.settle_ms
            ),
        ),
        (
            "threshold",
            format!("skew p99 {}", short_duration(s.max_skew_p99_ns)),
        ),
        (
            "server's own side",
            s.agent.as_ref().map_or_else(
                || "not tapped (no --agent)".to_owned(),
                |a| format!("the agent at {a} tapped it"),
            ),
        ),
        (
            "probe",
            format!(
                "deflate offered: {}; connect timeout {} ms; stamps: {}",
                s.probe.deflate, s.probe.connect_timeout_ms, s.probe.stamps
            ),
        ),
        (
            "server",
            [
                e.server_header.clone(),
                s.server_pid.map(|p| format!("pid {p}")),
                e.server_command.clone(),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join("; "),
        ),
        ("host", e.host.clone()),
        ("kernel", e.kernel.clone().unwrap_or_default()),
        (
            "CPU",
            format!(
                "{} ({} cores)",
                e.cpu.as_deref().unwrap_or("unknown"),
                e.cores
            ),
        ),
        ("open-file limit", thousands(e.open_file_limit)),
        ("began", e.started_at.clone()),
        ("took", format!("{:.1} s", r.took_ms as f64 / 1e3)),
        ("run again", e.command.clone()),
    ];
    out.push_str(r#"<section id="settings"><h2>Settings and machine</h2><dl class="settings">"#);
    for (k, v) in rows {
        let _ = write!(out, "<dt>{}</dt><dd>{}</dd>", escape(k), escape(&v));
    }
    out.push_str("</dl></section>\n");
}

fn upper_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().collect::<String>() + chars.as_str(),
        None => String::new(),
    }
}
