//! The report as one self-contained HTML page (`--html OUT`): the verdict,
//! the summary, five plots as inline SVG, the probes and the inputs.
//!
//! Nothing is fetched: no script, no font, no image; a Content Security
//! Policy of `default-src 'none'` makes the browser refuse any fetch a
//! future edit might add. Tooltips are SVG `<title>`s. Colours follow the
//! reader's light or dark preference.

mod plots;
pub mod svg;

use std::fmt::Write;

use skewscope_core::analysis::clock_figures::{BoundedSummary, ClaimCheck};
use skewscope_core::analysis::figures::Figures;
use skewscope_core::analysis::join::RunEnd;
use skewscope_core::analysis::report::{ClockBasis, Report};
use skewscope_core::analysis::stats::Summary;
use skewscope_core::analysis::verdict::Verdict;

use crate::sentences::duration;
use svg::escape;

/// What a page is about, for its heading.
pub struct Page<'a> {
    /// The heading, e.g. "skewscope audit of ws://lobby:8080".
    pub title: &'a str,
    /// When it was made, as people read it.
    pub made: &'a str,
    /// The report.
    pub report: &'a Report,
    /// Its plot series.
    pub figures: &'a Figures,
    /// An audit's verdict, when there is one.
    pub verdict: Option<&'a Verdict>,
    /// The agent and the uploading probes were running as their logs were
    /// read (an audit): a log without a stop record is no news then.
    pub live: bool,
}

const STYLE: &str = include_str!("report.css");

/// Renders the page.
pub fn render(page: &Page) -> String {
    let r = page.report;
    let f = page.figures;
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>{title}</title><style>{STYLE}</style></head><body>
<header><h1>{title}</h1><p class="made">made {made} by skewscope {version}</p></header>
"#,
        title = escape(page.title),
        made = escape(page.made),
        version = env!("CARGO_PKG_VERSION"),
    );
    if let Some(v) = page.verdict {
        verdict(&mut out, v);
    }
    summary(&mut out, r, page.live);
    if let Some(w) = &r.why {
        // The same lines as the table's: one wording of the diagnosis.
        let mut text = String::new();
        crate::table::why_paragraph(&mut text, w);
        let _ = writeln!(
            out,
            r#"<section id="why"><h2>Why</h2><pre class="why">{}</pre></section>"#,
            escape(text.trim_end())
        );
    }
    // On one clock the raw figure has no clock error: no band to draw.
    let corrected = r.clock_basis == ClockBasis::CorrectedToAgent;

    section(
        &mut out,
        "skew-time",
        "Skew per broadcast over time",
        plots::skew_over_time(f, corrected),
        &format!(
            "Each mark is one broadcast: the time between its first and last receipt. {} {}",
            match r.clock_basis {
                ClockBasis::CorrectedToAgent =>
                    "Receipts are moved into the agent's clock; the band is the interval that contains the true skew.",
                ClockBasis::SingleHost => "Every receipt is on one clock: no clock error.",
                ClockBasis::UncorrectedDeviceClocks =>
                    "Some device clocks could not be bounded: the figure is on the devices' clocks as they are and includes their offsets.",
            },
            thinned(f.broadcasts.len(), f.broadcasts_total, "broadcasts")
        ),
    );
    section(
        &mut out,
        "skew-cdf",
        "Distribution of skew",
        plots::skew_cdf(f, corrected),
        if corrected {
            "The fraction of broadcasts with at most this skew; the dashed line is the upper bound of each broadcast's interval, what an audit judges."
        } else {
            "The fraction of broadcasts with at most this skew."
        },
    );
    if f.broadcasts.iter().any(|b| b.actions.is_some()) {
        let chart = plots::actions_over_time(f, corrected);
        let drawn = chart.is_some();
        section(
            &mut out,
            "actions-time",
            "Acting together: action skew beside receive skew",
            chart,
            &format!(
                "Each broadcast carried a time to act; its probes acted then. Each broadcast has two marks: how far apart the copies arrived (receive skew) and how far apart the devices acted (action skew){}. A red mark: some copy came after its time, and its device acted late. What a screen or speaker adds after the action is not in it.",
                if corrected {
                    ", both on the upper bound of their interval in the agent's clock"
                } else {
                    ""
                }
            ),
        );
        if drawn {
            key(
                &mut out,
                &[
                    ("received", "receive skew"),
                    ("acted", "action skew"),
                    ("acted late", "action skew, some acted late"),
                ],
            );
        }
    }
    section(
        &mut out,
        "latency-position",
        "Latency against fan-out position",
        plots::latency_by_position(f),
        &format!(
            "One mark per receipt, coloured by probe: when the agent finished writing that copy, and when the device received it. A rising line is the fan-out itself; marks far above it are the network or the device. {}",
            thinned(f.receipts.len(), f.receipts_total, "receipts")
        ),
    );
    if !f.receipts.is_empty() {
        legend(&mut out, f);
    }
    let heat = plots::lateness_heatmap(f);
    let top = heat.as_ref().map(|h| h.1);
    section(
        &mut out,
        "lateness",
        "Lateness per connection and broadcast",
        heat.map(|h| h.0),
        &format!(
            "Each row is a connection, each column a broadcast{}: how long after the broadcast's first receipt it arrived. Rows are the connections as their probes' logs recorded them opening, one probe after another, top to bottom (NAME #n is a probe's connection n). A device that is always late is a bright row; grey is nothing received.{}",
            if f.heatmap.broadcasts_per_column > 1 {
                format!(
                    " (a column is the mean of {} broadcasts)",
                    f.heatmap.broadcasts_per_column
                )
            } else {
                String::new()
            },
            if f.heatmap.rows.len() < f.heatmap.connections_total {
                format!(
                    " Shown: the {} connections latest on average, of {}.",
                    f.heatmap.rows.len(),
                    f.heatmap.connections_total
                )
            } else {
                String::new()
            }
        ),
    );
    if let Some(top) = top {
        out.push_str(&plots::ramp_key(top));
    }
    section(
        &mut out,
        "offsets",
        "Probe clocks against the agent's",
        plots::probe_offsets(f),
        &offsets_caption(f),
    );
    probes(&mut out, r, page.live);
    inputs(&mut out, r);
    out.push_str("</body></html>\n");
    out
}

/// What the clock plot shows: the shaded spans only where both clocks
/// claim a bound (a clock that claims no synchronisation has none).
fn offsets_caption(f: &Figures) -> String {
    const BAR: &str = "Each probe's measured offset with its error bar (its clock bound from the clock model: the truth lies within it).";
    let spans = f.agent_claim_ns.is_some() && f.probes.iter().any(|p| p.claim_ns.is_some());
    let unclaimed = f.agent_claim_ns.is_none() || f.probes.iter().any(|p| p.claim_ns.is_none());
    let mut caption = BAR.to_owned();
    if spans {
        caption.push_str(" Shaded: the span the two clocks claim to be within of each other; a bar outside its span means one clock is wrong about itself.");
    }
    if unclaimed {
        caption.push_str(if spans {
            " A probe without a shaded span: its clock or the agent's claims no bound (not synchronised, or not known)."
        } else {
            " No span is shaded: the clocks claim no bound to compare with (not synchronised, or not known), so only the measurement is shown."
        });
    }
    caption
}

/// A key under a chart: a swatch of each mark's class and what it is
/// (swatches are styled as the marks, and are not marks).
fn key(out: &mut String, items: &[(&str, &str)]) {
    out.push_str(r#"<p class="legend">"#);
    for (class, text) in items {
        let _ = write!(
            out,
            r#"<span><svg viewBox="0 0 10 10" width="10" height="10"><circle class="swatch {class}" cx="5" cy="5" r="4"/></svg> {}</span> "#,
            escape(text)
        );
    }
    out.push_str("</p>\n");
}

fn thinned(drawn: usize, total: usize, what: &str) -> String {
    if drawn < total {
        format!("Drawn: {drawn} of {total} {what}, evenly spaced.")
    } else {
        String::new()
    }
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
        None => out.push_str(r#"<p class="absent">Not enough data for this plot.</p>"#),
    }
    out.push_str("</section>\n");
}

fn legend(out: &mut String, f: &Figures) {
    out.push_str(r#"<p class="legend">"#);
    for (i, p) in f.probes.iter().enumerate() {
        let _ = write!(
            out,
            r#"<span><svg viewBox="0 0 10 10" width="10" height="10"><circle class="s{}" cx="5" cy="5" r="4"/></svg> {}</span> "#,
            i % plots::PROBE_COLOURS,
            escape(&p.name)
        );
    }
    out.push_str("</p>\n");
}

fn verdict(out: &mut String, v: &Verdict) {
    let failed = v.checks.iter().filter(|c| !c.pass).count();
    let _ = write!(
        out,
        r#"<section id="verdict" class="{}"><h2>{}</h2><div class="wide"><table><tr><th></th><th>check</th><th>limit</th><th>measured</th><th>judged on</th></tr>"#,
        if v.pass { "pass" } else { "fail" },
        if v.pass {
            format!("PASS: all {} checks passed", v.checks.len())
        } else {
            format!("FAIL: {failed} of {} checks failed", v.checks.len())
        }
    );
    for c in &v.checks {
        let _ = write!(
            out,
            r#"<tr class="{}"><td>{}</td><td>{}</td><td>≤ {}</td><td>{}</td><td>{}</td></tr>"#,
            if c.pass { "pass" } else { "fail" },
            if c.pass { "PASS" } else { "FAIL" },
            escape(c.check),
            crate::verdict_lines::figure(c.unit, c.limit),
            c.measured.map_or_else(
                || "not measured".to_owned(),
                |m| crate::verdict_lines::figure(c.unit, m)
            ),
            escape(&c.basis)
        );
    }
    out.push_str("</table></div></section>\n");
}

fn summary(out: &mut String, r: &Report, live: bool) {
    let _ = write!(
        out,
        r#"<section id="summary"><h2>Summary</h2><p class="counts">broadcasts <b>{}</b> · connections <b>{}</b> · receipts <b>{}</b> · missing <b class="{}">{}</b> · duplicates <b>{}</b> · unmatched <b>{}</b> · reconnects <b>{}</b></p>"#,
        r.broadcasts,
        r.connections,
        r.receipts,
        if r.missing > 0 { "bad" } else { "" },
        r.missing,
        r.duplicates,
        r.unmatched,
        r.reconnects
    );
    out.push_str(
        r#"<div class="wide"><table><tr><th></th><th>p50</th><th>p90</th><th>p99</th><th>max</th><th>n</th></tr>"#,
    );
    let mut plain = |name: &str, s: &Option<Summary>| {
        if let Some(s) = s {
            let _ = write!(
                out,
                "<tr><th>{name}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                duration(s.p50),
                duration(s.p90),
                duration(s.p99),
                duration(s.max),
                s.count
            );
        }
    };
    plain("skew (raw clocks)", &r.skew_ns);
    plain("skew, one device", &r.skew_intra_device_ns);
    plain("latency (raw clocks)", &r.latency_ns);
    plain("fan-out span", &r.fanout_ns);
    plain("fan-out position", &r.fanout_position_ns);
    plain("device delivery", &r.delivery_ns);
    if let Some(a) = &r.actions {
        plain("action skew (raw clocks)", &a.action_skew_ns);
        plain("frame skew (raw clocks)", &a.frame_skew_ns);
        plain("timer error", &a.timer_error_ns);
    }
    let mut bounded = |name: &str, s: &Option<BoundedSummary>| {
        if let Some(b) = s {
            let cell = |e: i64, lo: i64, hi: i64| {
                format!(
                    r#"{}<br><span class="interval">[{}, {}]</span>"#,
                    duration(e),
                    duration(lo),
                    duration(hi)
                )
            };
            let _ = write!(
                out,
                "<tr><th>{name}</th><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                cell(b.estimate.p50, b.lo.p50, b.hi.p50),
                cell(b.estimate.p90, b.lo.p90, b.hi.p90),
                cell(b.estimate.p99, b.lo.p99, b.hi.p99),
                cell(b.estimate.max, b.lo.max, b.hi.max),
                b.estimate.count
            );
        }
    };
    bounded("skew, agent's clock", &r.skew_corrected_ns);
    bounded("latency, agent's clock", &r.latency_corrected_ns);
    bounded("network", &r.network_ns);
    if let Some(a) = &r.actions {
        bounded("action skew, agent's clock", &a.action_skew_corrected_ns);
        bounded("frame skew, agent's clock", &a.frame_skew_corrected_ns);
    }
    out.push_str("</table></div>");
    if r.network_ns.as_ref().is_some_and(|n| n.estimate.p50 < 0) {
        let _ = write!(
            out,
            r#"<p class="basis">{}</p>"#,
            escape(crate::sentences::NETWORK_BELOW_ZERO)
        );
    }
    if r.actions.as_ref().is_some_and(|a| a.frames > 0) {
        let _ = write!(
            out,
            r#"<p class="lead">Frame skew: {}.</p>"#,
            escape(crate::sentences::FRAME_SENTENCE)
        );
    }
    if let Some(a) = &r.actions {
        who_acted(out, a);
    }
    if let Some(a) = &r.actions {
        let _ = write!(
            out,
            r#"<p class="counts">actions <b>{}</b> · late <b class="{}">{}</b> · receipts with no time to act <b>{}</b></p>"#,
            a.actions,
            if a.late > 0 { "bad" } else { "" },
            a.late,
            a.receipts_without_action
        );
    }
    if let Some(lead) = &r.lead {
        let _ = write!(
            out,
            r#"<p class="lead">{}</p>"#,
            escape(crate::sentences::lead_line(lead).trim())
        );
    }
    if let Some(spare) = r.actions.as_ref().and_then(|a| a.spare_ns.as_ref()) {
        let _ = write!(
            out,
            r#"<p class="lead">{}</p>"#,
            escape(&crate::sentences::spare_sentence(spare.min))
        );
    }
    if let Some(auto) = r.actions.as_ref().and_then(|a| a.auto_lead.as_ref()) {
        let _ = write!(
            out,
            r#"<p class="lead">{}.</p>"#,
            escape(&crate::sentences::auto_lead_line(auto))
        );
    }
    if let Some(reference) = &r.reference {
        let left_out = reference
            .left_out
            .as_ref()
            .map(|l| format!(" Left out: {l}."))
            .unwrap_or_default();
        let _ = write!(
            out,
            r#"<p class="reference">{}.{}</p>"#,
            escape(&crate::sentences::reference_line(reference)),
            escape(&left_out)
        );
    }
    let basis = match r.clock_basis {
        ClockBasis::SingleHost => "One clock: every receipt and the agent are on one host.",
        ClockBasis::CorrectedToAgent => {
            "Every receipt was moved into the agent's clock with a bound: [lo, hi] contains the truth."
        }
        ClockBasis::UncorrectedDeviceClocks => {
            "Some device clocks had no time exchange: raw skew includes their offsets."
        }
    };
    let _ = write!(out, r#"<p class="basis">{basis}"#);
    if let Some(line) = crate::sentences::unauthenticated_line(&r.clocks_unauthenticated) {
        let _ = write!(out, r#" <b class="bad">{}.</b>"#, escape(&line));
    }
    if r.uncorrected_receipts > 0 {
        let _ = write!(
            out,
            " {} receipts had no clock bound and are left out of the agent-clock rows.",
            r.uncorrected_receipts
        );
    }
    if let Some(a) = &r.agent {
        let _ = write!(
            out,
            " Agent on {}: {} shard(s), order {}, {} copies queued, {} clients dropped.",
            escape(&a.host),
            a.shards,
            a.order,
            a.queued,
            a.dropped
        );
        if a.records_lost > 0 {
            let _ = write!(
                out,
                r#" <b class="bad">The agent lost {} records (disk full).</b>"#,
                a.records_lost
            );
        }
        // No news for a running agent; for a copied log, a plain fact.
        if let Some(end) = crate::sentences::agent_end_text(a.ended, live) {
            let _ = write!(out, " {}.", escape(&upper_first(&end)));
        }
    }
    out.push_str("</p></section>\n");
}

fn probes(out: &mut String, r: &Report, live: bool) {
    if r.probes.is_empty() {
        return;
    }
    out.push_str(r#"<section id="probes"><h2>Probes</h2><div class="wide"><table><tr><th>probe</th><th>host</th><th>connections</th><th>receipts</th><th>missing</th><th>offset to agent</th><th>clock claims</th><th>check</th><th>log</th></tr>"#);
    for p in &r.probes {
        let c = &p.clock;
        let offset = match (c.offset_ns, c.offset_bound_ns) {
            (Some(o), Some(b)) => format!("{} ± {}", duration(o), duration(b as i64)),
            _ => "not measured".to_owned(),
        };
        let claim = crate::sentences::claim_text(c.claim.as_ref());
        let check = match c.offset_vs_claim {
            ClaimCheck::Exceeds => r#"<b class="bad">exceeds the claims</b>"#,
            ClaimCheck::Consistent => "within the claims",
            ClaimCheck::Unknown => "",
        };
        let tls = if p.tls_unverified > 0 {
            format!(
                r#" <b class="bad">{} TLS connection(s) without a certificate check (--insecure)</b>"#,
                p.tls_unverified
            )
        } else {
            String::new()
        };
        let tls = match p
            .clock_tags
            .as_ref()
            .and_then(crate::sentences::refused_text)
        {
            Some(refused) => format!(r#"{tls} <b class="bad">{}</b>"#, escape(&refused)),
            None => tls,
        };
        let deflate = if p.deflate_connections > 0 {
            format!(
                "; compressed (permessage-deflate) on {} of {} connection(s)",
                p.deflate_connections,
                p.connections + p.reconnects
            )
        } else {
            String::new()
        };
        let page = p
            .page
            .as_ref()
            .map(|page| format!("; {}", escape(&crate::sentences::page_text(page))))
            .unwrap_or_default();
        let pruned = p
            .logs_pruned
            .as_ref()
            .and_then(crate::sentences::pruned_text)
            .map(|l| format!("; {}", escape(&l)))
            .unwrap_or_default();
        let ended = match p.ended {
            RunEnd::Stopped => "stopped",
            RunEnd::LogFull => {
                r#"<b class="bad">log size limit reached (--max-log-bytes or --keep-bytes)</b>"#
            }
            RunEnd::NoStopRecord if live => "running",
            RunEnd::NoStopRecord => "no stop record (still running when read, or killed)",
        };
        let _ = write!(
            out,
            r#"<tr><td class="name">{}</td><td class="name">{}</td><td>{}</td><td>{}</td><td class="{}">{}</td><td class="name">{offset}</td><td>{claim}</td><td>{check}{}</td><td>{ended}{deflate}{page}{pruned}{tls}</td></tr>"#,
            escape(&p.name),
            escape(&p.host),
            p.connections,
            p.receipts,
            if p.missing > 0 { "bad" } else { "" },
            p.missing,
            if c.clock_steps.is_empty() {
                String::new()
            } else {
                format!(
                    r#" <b class="bad">clock stepped {} time(s)</b>"#,
                    c.clock_steps.len()
                )
            }
        );
    }
    out.push_str("</table></div></section>\n");
}

fn inputs(out: &mut String, r: &Report) {
    out.push_str(r#"<section id="inputs"><h2>Inputs</h2><div class="wide"><table><tr><th>file</th><th>kind</th><th>records</th><th>skipped bytes</th><th></th></tr>"#);
    for i in &r.inputs {
        let _ = write!(
            out,
            r#"<tr><td>{}</td><td>{}</td><td>{}</td><td class="{}">{}</td><td>{}</td></tr>"#,
            escape(&i.file),
            i.kind,
            i.records,
            if i.skipped_bytes > 0 { "bad" } else { "" },
            i.skipped_bytes,
            if i.torn_tail { "ends mid-record" } else { "" }
        );
    }
    out.push_str("</table></div></section>\n");
}

/// `text` with its first letter in capitals: a sentence of its own.
fn upper_first(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests;

/// Whose actions were whose: a row per probe, page and app, when any actor
/// is not a plain probe.
fn who_acted(out: &mut String, a: &skewscope_core::analysis::actions::ActionFigures) {
    use skewscope_core::analysis::join::ActorKind;
    if a.by_actor.iter().all(|x| x.kind == ActorKind::Probe) {
        return;
    }
    out.push_str(
        r#"<div class="table"><table><caption>Who acted</caption><tr><th></th><th>kind</th><th>actions</th><th>late</th><th>timer p50</th><th>timer p99</th><th>frames</th></tr>"#,
    );
    for x in &a.by_actor {
        let timer = |q: fn(&Summary) -> i64| {
            x.timer_error_ns
                .as_ref()
                .map_or_else(|| "-".to_owned(), |t| duration(q(t)))
        };
        let notices = x
            .notices
            .as_ref()
            .and_then(crate::sentences::notices_text)
            .map(|n| format!(r#"<br><span class="bad">{}</span>"#, escape(&n)))
            .unwrap_or_default();
        let _ = write!(
            out,
            r#"<tr><th class="name">{}{notices}</th><td>{}</td><td>{}</td><td class="{}">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            escape(&x.name),
            escape(&crate::sentences::actor_kind_text(x)),
            x.actions,
            if x.late > 0 { "bad" } else { "" },
            x.late,
            timer(|t| t.p50),
            timer(|t| t.p99),
            if x.frames > 0 {
                x.frames.to_string()
            } else {
                "-".to_owned()
            }
        );
    }
    out.push_str("</table></div>");
}
