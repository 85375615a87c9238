//! One stage's figures, from its probe log by the report's own engine:
//! the join (which broadcast each receipt is a copy of), the skew and its
//! HDR summaries, the latency from the trigger times. Nothing here derives
//! a statistic of its own; it only adds the counts a load test needs that
//! a report of probe logs alone cannot know (how many broadcasts were
//! asked for, how many connections listened). Given the segments of an
//! agent that tapped the server, the same engine joins them too, and the
//! stage has the server's fan-out span.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use skewscope_core::analysis::clock_figures::BoundedSummary;
use skewscope_core::analysis::join::Window;
use skewscope_core::analysis::report::ReferenceKind;
use skewscope_core::analysis::stats::Summary;

use crate::inputs;
use crate::joined::{self, Scope};

/// What one stage measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageFigures {
    /// Broadcasts asked for (the triggers measured, warm-up left out).
    pub triggered: u32,
    /// Of those, broadcasts some connection received.
    pub heard: u64,
    /// Messages the connections received that no trigger explains (the
    /// server's own chatter, or copies a connection got out of order).
    pub unexplained: u64,
    /// Connections open when the first measured broadcast was asked for.
    pub listening: u32,
    /// Receipts expected: `triggered` × `listening`.
    pub expected: u64,
    /// Receipts joined to a broadcast, each (broadcast, connection) once.
    pub receipts: u64,
    /// Receipts a listening connection never got (whole broadcasts nobody
    /// heard included).
    pub missing: u64,
    /// Receipts of a broadcast a connection had already received.
    pub duplicates: u64,
    /// Receive skew per broadcast: its last receipt − its first, all on
    /// this host's one clock (the kernel's RX stamp where there is one).
    /// With workers (several machines' clocks), each receipt placed on
    /// the agent's clock first: the estimates of `skew_bounds_ns`.
    pub skew_ns: Option<Summary>,
    /// The same at the probe's userspace stamps (one machine only).
    pub skew_userspace_ns: Option<Summary>,
    /// With workers: the skew placed on the agent's clock with its lower
    /// and upper bounds per broadcast (every machine's clock known only
    /// within its time exchange's bound). Absent for one machine, whose
    /// one clock needs no bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skew_bounds_ns: Option<BoundedSummary>,
    /// Per receipt: its arrival − the time its broadcast was asked for.
    pub latency_from_trigger_ns: Option<Summary>,
    /// Receipts without a kernel stamp (their userspace one is used).
    pub without_kernel_stamp: u64,
    /// What the agent's tap of the server saw of these broadcasts, when
    /// the sweep was given one (`--agent`) and it tapped this server
    /// (absent from sweeps saved before the sweep joined a tap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tap: Option<StageTap>,
}

/// The server's side of a stage, from the packets the agent's tap saw
/// leave it: the fan-out span the receive skew is made of, in part.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageTap {
    /// The server's port the tap followed.
    pub port: u16,
    /// Measured broadcasts the tap recorded leaving the server.
    pub broadcasts: u64,
    /// Clients it saw their copies go to (the stage's connections, and
    /// any other client of the server).
    pub clients: u64,
    /// Per broadcast: the first byte of its last copy on the wire − that
    /// of its first, on the agent's clock. The part of the receive skew
    /// the server made before any network or client had a say.
    pub fanout_span_ns: Option<Summary>,
    /// Packets the kernel dropped from the tap's ring since it started
    /// (cumulative: a stage's own are its figure less the stage before's).
    /// Copies in dropped packets are missing from the span.
    pub ring_drops: u64,
}

/// The figures of the stage logged at `logs` (this machine's, then each
/// worker's): the broadcasts first received after `triggers[0]` (the
/// warm-up's come before it), paired with `triggers` (wall-clock ns,
/// sorted), `listening` connections expected to receive each. `agent` are
/// copies of the agent's segments (none without `--agent`): when it tapped
/// the server, the report's engine joins each receipt to the copy the tap
/// saw leave, and the figures carry the tap's; when its log joins as no
/// tap of this server, the reason is returned beside them. With several
/// logs, each machine's receipts are placed on the agent's clock (every
/// machine exchanged time with it) and the skew is of those.
pub fn measure(
    logs: &[PathBuf],
    triggers: &[u64],
    listening: u32,
    agent: &[PathBuf],
) -> anyhow::Result<(StageFigures, Option<String>)> {
    let Some(&first) = triggers.first() else {
        anyhow::bail!("no broadcast was asked for");
    };
    let across_machines = logs.len() > 1;
    let mut files = logs.to_vec();
    files.extend_from_slice(agent);
    let read = inputs::read_inputs(&files)?;
    let scope = Scope {
        window: Some(Window::FirstReceiptBetween {
            from_wall_ns: first,
            to_wall_ns: u64::MAX,
        }),
        agent_as_reference: false,
    };
    let (report, _) = joined::analyse(read, Some(triggers), scope, false)?;
    let from_trigger = report.latency_from_trigger.as_ref();
    // A trigger no broadcast was paired with went unheard by everyone.
    let unheard = from_trigger.map_or(triggers.len() as u64, |t| t.unused_triggers);
    let heard = triggers.len() as u64 - unheard;
    let is_tap = report
        .reference
        .as_ref()
        .is_some_and(|r| r.kind == ReferenceKind::Tap);
    let tap = match (&report.tap, is_tap) {
        (Some(t), true) => Some(StageTap {
            port: t.port,
            broadcasts: t.broadcasts,
            clients: t.clients,
            fanout_span_ns: report.fanout_ns,
            ring_drops: t.counters.as_ref().map_or(0, |c| c.ring_drops),
        }),
        _ => None,
    };
    let not_tapped = (!agent.is_empty() && tap.is_none()).then(|| {
        report.reference.as_ref().map_or_else(
            || "the agent's log joined no tap".to_owned(),
            |r| r.why.clone(),
        )
    });
    let figures = StageFigures {
        triggered: triggers.len() as u32,
        heard,
        unexplained: report.broadcasts.saturating_sub(heard),
        listening,
        expected: triggers.len() as u64 * u64::from(listening),
        receipts: report.receipts,
        missing: report.missing + unheard * u64::from(listening),
        duplicates: report.duplicates,
        skew_ns: if across_machines {
            report.skew_corrected_ns.map(|b| b.estimate)
        } else {
            report.skew_ns
        },
        skew_userspace_ns: if across_machines {
            None
        } else {
            report.skew_userspace_ns
        },
        skew_bounds_ns: if across_machines {
            report.skew_corrected_ns
        } else {
            None
        },
        latency_from_trigger_ns: from_trigger.and_then(|t| t.latency_ns),
        without_kernel_stamp: report.receipts_without_kernel_stamp,
        tap,
    };
    Ok((figures, not_tapped))
}
