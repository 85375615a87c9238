//! The report for people: a plain-text table.

mod actions;
mod devices;
mod rows;
mod tap;
mod why;

use std::fmt::Write;

use skewscope_core::analysis::report::{ClockBasis, Report};

use crate::sentences::{duration, lead_line, match_line, reference_line};

use actions::actions_paragraph;
use devices::{clocks_paragraph, probes_paragraph};
use rows::{bounded_row, row};
use tap::tap_paragraph;
pub use why::why_paragraph;

/// Why a figure that needs the agent's sends is absent. With an agent log
/// but no broadcasts of its own joined, the probes listened to another
/// server (the agent was their clock reference): tapping it gives the
/// sends, unless the tap is there and skipped the probes' connections
/// because they were open before it started (it reads each connection
/// from its upgrade on), which only a reconnect mends.
fn without_agent_sends(r: &Report) -> &'static str {
    let skipped_open = r
        .tap
        .as_ref()
        .and_then(|t| t.counters.as_ref())
        .is_some_and(|c| c.tap.open_before_tap > 0 && c.tap.followed == 0);
    if r.agent.is_some() && r.fanout_ns.is_none() && skipped_open {
        "the tap skipped the probes' connections, open before it started: restart the probes (or give them --reconnect and restart the server)"
    } else if r.agent.is_some() && r.fanout_ns.is_none() {
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
    fn a_tap_that_skipped_the_probes_connections_says_so_not_tap_it() {
        // The agent ran, no broadcast of its own joined: the probes'
        // server is another, and without a tap the advice is to tap it.
        let mut r = report();
        assert!(r.fanout_ns.is_none());
        assert!(without_agent_sends(&r).contains("tap it (--tap-port)"));
        // A tap that followed nothing, having found the connections open
        // before it: a restart of the probes is what mends it.
        r.tap = Some(skewscope_core::analysis::tapped::TapSummary {
            port: 8000,
            broadcasts: 0,
            clients: 0,
            counters: Some(TapCountersRecord {
                at: at(3),
                tap: TapCounters {
                    open_before_tap: 6,
                    ..TapCounters::default()
                },
                inflater_bytes: 0,
                ring_packets: 0,
                ring_drops: 0,
            }),
            per_client: Vec::new(),
        });
        let said = without_agent_sends(&r);
        assert!(
            said.contains("open before it started: restart the probes"),
            "{said}"
        );
    }

    #[test]
    fn durations_pick_a_readable_unit() {
        assert_eq!(duration(999), "999 ns");
        assert_eq!(duration(12_345), "12.3 µs");
        assert_eq!(duration(-2_500_000), "-2.50 ms");
        assert_eq!(duration(3_000_000_000), "3.000 s");
    }
}
