//! The page on small hand-made runs: every section present, names from
//! devices escaped, and one mark per broadcast, receipt and probe.

use super::*;
use skewscope_core::Stamp;
use skewscope_core::analysis::figures::figures;
use skewscope_core::analysis::join::join;
use skewscope_core::record::*;

fn at(ns: u64) -> Stamp {
    Stamp {
        wall_ns: 1_764_000_000_000_000_000 + ns,
        mono_ns: ns,
    }
}

/// One probe named `name` with `conns` connections receiving `broadcasts`
/// test messages, connection c `c` µs after the first.
fn probe_log(name: &str, conns: u32, broadcasts: u64) -> Vec<ProbeRecord> {
    let mut records = vec![skewscope_core::fixtures::probe_started_on(
        name,
        "device",
        conns,
        at(1),
    )];
    for c in 0..conns {
        records.push(skewscope_core::fixtures::connection_opened(c, None, at(2)));
    }
    for seq in 0..broadcasts {
        for c in 0..conns {
            records.push(ProbeRecord::Receipt(Receipt {
                len: 10,
                kernel_delay_ns: Some(500),
                ..skewscope_core::fixtures::receipt(
                    c,
                    MessageKey::Seq(seq),
                    seq,
                    at(1_000_000_000 + seq * 100_000_000 + u64::from(c) * 1_000),
                )
            }));
        }
    }
    records
}

fn page_of(records: &[&[ProbeRecord]]) -> String {
    let joined = join(None, records);
    let report = Report::build(&joined, vec![]);
    let figures = figures(&joined);
    render(&Page {
        title: "test",
        made: "now",
        report: &report,
        figures: &figures,
        verdict: None,
        live: false,
    })
}

#[test]
fn every_broadcast_and_connection_has_its_mark() {
    let html = page_of(&[&probe_log("lobby", 3, 7)]);
    assert_eq!(html.matches(r#"class="mark skew""#).count(), 7);
    // Three connections × seven broadcasts, one column per broadcast.
    assert_eq!(html.matches(r#"<rect class="cell""#).count(), 21);
    for id in [
        "summary",
        "skew-time",
        "skew-cdf",
        "lateness",
        "offsets",
        "inputs",
    ] {
        assert!(html.contains(&format!(r#"id="{id}""#)), "{id} missing");
    }
    // No agent log: nothing to draw against a send time, and it says so.
    assert!(html.contains(r#"<section id="latency-position"><h2>Latency against fan-out position</h2><p class="absent">"#));
    assert!(!html.contains("<script"));
    assert!(
        !html.contains("http://")
            || html.matches("http://").count()
                == html.matches("http://www.w3.org/2000/svg").count()
    );
}

#[test]
fn names_from_a_device_are_text_not_markup() {
    let html = page_of(&[&probe_log("<img src=x onerror=alert(1)>", 2, 2)]);
    assert!(!html.contains("<img"), "a probe name became markup");
    assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
}

#[test]
fn an_empty_run_still_renders_every_section() {
    let html = page_of(&[]);
    assert!(html.ends_with("</body></html>\n"));
    assert_eq!(html.matches(r#"class="absent""#).count(), 5);
}

/// The page of `records` with an agent log that has no stop record (an
/// agent still running, or killed), as an audit (`live`) or a report
/// renders it.
fn page_with_agent(live: bool) -> String {
    let agent = vec![AgentRecord::Started(AgentStarted {
        host: "server".into(),
        version: "t".into(),
        at: at(0),
        shards: 1,
        order: SendOrder::Fixed,
        per_client_times: true,
    })];
    let probe = probe_log("lobby", 2, 3);
    let joined = join(Some(&agent), &[&probe]);
    let report = Report::build(&joined, vec![]);
    let figures = figures(&joined);
    render(&Page {
        title: "test",
        made: "now",
        report: &report,
        figures: &figures,
        verdict: None,
        live,
    })
}

#[test]
fn a_running_agent_is_no_fault_and_a_copied_log_is_a_plain_fact() {
    let live = page_with_agent(true);
    assert!(!live.contains("stop record"), "an audit's agent runs");
    let copied = page_with_agent(false);
    assert!(
        copied.contains("log ends without a stop record: it was still running"),
        "{copied}"
    );
    assert!(
        !copied.contains(r#"class="bad">The agent's log"#),
        "not in red"
    );
}

#[test]
fn the_clock_plot_speaks_only_of_spans_it_draws() {
    // These probes' clocks claim nothing: no span is drawn, and the
    // caption says so rather than describing one.
    let html = page_of(&[&probe_log("lobby", 1, 2)]);
    assert!(!html.contains(r#"<rect class="claim""#));
    assert!(html.contains("No span is shaded"), "{html}");
    assert!(!html.contains("over the shaded span"), "{html}");
}

#[test]
fn names_do_not_break_and_rows_are_explained() {
    let html = page_of(&[&probe_log("demo-a", 2, 2)]);
    assert!(html.contains(r#"<td class="name">demo-a</td>"#), "{html}");
    assert!(html.contains("td.name, th.name { white-space: nowrap; }"));
    assert!(
        html.contains("Rows are the connections as their probes"),
        "{html}"
    );
}

#[test]
fn the_acting_plot_has_a_key_whose_swatches_are_not_marks() {
    let html = page_with_agent(false);
    // No probe acted here: no acting plot, no key.
    assert!(!html.contains(r#"class="swatch"#));
    let mut out = String::new();
    key(&mut out, &[("acted late", "action skew, some acted late")]);
    assert!(
        out.contains(r#"<circle class="swatch acted late""#),
        "{out}"
    );
    assert!(!out.contains("mark"), "{out}");
}
