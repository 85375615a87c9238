//! One stage's figures, from its probe log by the report's own engine:
//! the join (which broadcast each receipt is a copy of), the skew and its
//! HDR summaries, the latency from the trigger times. Nothing here derives
//! a statistic of its own; it only adds the counts a load test needs that
//! a report of probe logs alone cannot know (how many broadcasts were
//! asked for, how many connections listened).

use std::path::Path;

use serde::{Deserialize, Serialize};
use skewscope_core::analysis::join::Window;
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
    pub skew_ns: Option<Summary>,
    /// The same at the probe's userspace stamps.
    pub skew_userspace_ns: Option<Summary>,
    /// Per receipt: its arrival − the time its broadcast was asked for.
    pub latency_from_trigger_ns: Option<Summary>,
    /// Receipts without a kernel stamp (their userspace one is used).
    pub without_kernel_stamp: u64,
}

/// The figures of the stage logged at `log`: the broadcasts first received
/// after `triggers[0]` (the warm-up's come before it), paired with
/// `triggers` (wall-clock ns, sorted), `listening` connections expected to
/// receive each.
pub fn measure(log: &Path, triggers: &[u64], listening: u32) -> anyhow::Result<StageFigures> {
    let Some(&first) = triggers.first() else {
        anyhow::bail!("no broadcast was asked for");
    };
    let read = inputs::read_inputs(&[log.to_owned()])?;
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
    Ok(StageFigures {
        triggered: triggers.len() as u32,
        heard,
        unexplained: report.broadcasts.saturating_sub(heard),
        listening,
        expected: triggers.len() as u64 * u64::from(listening),
        receipts: report.receipts,
        missing: report.missing + unheard * u64::from(listening),
        duplicates: report.duplicates,
        skew_ns: report.skew_ns,
        skew_userspace_ns: report.skew_userspace_ns,
        latency_from_trigger_ns: from_trigger.and_then(|t| t.latency_ns),
        without_kernel_stamp: report.receipts_without_kernel_stamp,
    })
}
