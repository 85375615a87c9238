//! What an audit found and how it ends: the outcome printed and written as
//! JSON, the whole exit-status policy, and the two judgements only the
//! audit can make (whether every uploading probe reported, and the report
//! command that reproduces its figures).

use serde::Serialize;
use skewscope_core::analysis::join::Window;
use skewscope_core::analysis::report::Report;
use skewscope_core::analysis::verdict::{Check, Unit, Verdict};

/// What the audit found.
#[derive(Debug, Serialize)]
pub struct AuditOutcome {
    /// The audit itself: what it did and how long it waited.
    pub audit: AuditFacts,
    /// The thresholds, judged.
    pub verdict: Verdict,
    /// The full report of the audited broadcasts.
    pub report: Report,
    /// Its plot series, when [`crate::audit::AuditOptions::figures`] asked for them.
    #[serde(skip)]
    pub figures: Option<skewscope_core::analysis::figures::Figures>,
}

/// What the audit did.
#[derive(Debug, Serialize)]
pub struct AuditFacts {
    /// The agent asked.
    pub agent: String,
    /// The foreign trigger, when the agent was not the server.
    pub trigger: Option<String>,
    /// Broadcasts triggered (0 for a passive audit).
    pub triggered: u64,
    /// A passive audit: it triggered nothing and judged the site's own
    /// broadcasts in its window.
    pub passive: bool,
    /// Probe runs uploading when the audit started.
    pub probes_uploading: usize,
    /// Every connection reported every audited broadcast before `--settle`.
    pub complete: bool,
    /// Milliseconds from the last trigger to the verdict.
    pub last_broadcast_to_verdict_ms: u64,
    /// `skewscope report` arguments that reproduce this report from the
    /// logs (`DIR` is the copy, or the agent's data directory).
    pub reproduce: String,
    /// Where the copy of the agent's logs is, when kept.
    pub kept: Option<String>,
    /// The probe runs the agent keeps that did not upload during the audit
    /// (a probe restarted since, a device gone), left out of the report:
    /// `NAME (run RUNID8)`.
    pub earlier_runs: Vec<String>,
}

/// The audit's exit status, the whole policy (docs/audit.md, `--help`).
pub mod exit {
    /// Every threshold passes.
    pub const PASS: u8 = 0;
    /// A threshold fails (the report and the failing lines are printed).
    pub const FAIL: u8 = 1;
    /// The audit could not run, or ran and had nothing to judge.
    pub const CANNOT_AUDIT: u8 = 2;
}

impl AuditOutcome {
    /// Why the audit ran but has nothing to judge, when so: no broadcast
    /// reached two connections, so there is no skew to hold a threshold to.
    pub fn nothing_to_judge(&self) -> Option<&'static str> {
        self.report
            .skew_ns
            .is_none()
            .then_some("no broadcast reached two connections")
    }

    /// [`exit::PASS`] when every threshold passes, [`exit::FAIL`] when one
    /// fails, [`exit::CANNOT_AUDIT`] when there was nothing to judge.
    pub fn exit_code(&self) -> u8 {
        if self.nothing_to_judge().is_some() {
            exit::CANNOT_AUDIT
        } else if self.verdict.pass {
            exit::PASS
        } else {
            exit::FAIL
        }
    }
}

/// The check only the audit can make: which probes were uploading (when
/// it began or at its end) and whose records since the last broadcast
/// never arrived (one that sent nothing would otherwise just be absent
/// from the report). `lagging` still upload; `stopped` were uploading when
/// the audit began and no longer are: a kiosk that died or lost its link.
pub(super) fn probes_reported(lagging: &[String], stopped: &[String]) -> Check {
    let mut said = Vec::new();
    if !lagging.is_empty() {
        said.push(format!(
            "records since the last broadcast had not arrived within --settle from: {}",
            lagging.join(", ")
        ));
    }
    if !stopped.is_empty() {
        said.push(format!(
            "stopped uploading during the audit, before reporting the last broadcast \
             (the device or its probe ended, or lost its link to the agent; see its log): {}",
            stopped.join(", ")
        ));
    }
    let short = lagging.len() + stopped.len();
    Check {
        check: "probes-reported",
        unit: Unit::Count,
        limit: 0,
        measured: Some(short as i64),
        pass: short == 0,
        basis: if said.is_empty() {
            "uploading probes whose records since the last broadcast had not arrived".into()
        } else {
            said.join("; ")
        },
    }
}

/// The `skewscope report` arguments that give the same report from the
/// logs: the audit's window, and its `--match`. `DIR` stands for the
/// directory; with `logs`, the audit read only these of it (others are
/// earlier runs), and they are named: `DIR/NAME`.
pub(super) fn reproduce_line(
    window: Option<Window>,
    matching: Option<&str>,
    logs: Option<&[String]>,
) -> String {
    let dir = match logs {
        Some(names) if !names.is_empty() => names
            .iter()
            .map(|n| format!("DIR/{n}"))
            .collect::<Vec<_>>()
            .join(" "),
        _ => "DIR".to_owned(),
    };
    let line = match window {
        Some(Window::AgentIds { first, last }) => {
            format!("report {dir} --broadcasts {first}-{last}")
        }
        Some(Window::FirstReceiptBetween {
            from_wall_ns,
            to_wall_ns,
        }) => format!("report {dir} --agent-as-reference --between {from_wall_ns}-{to_wall_ns}"),
        None => format!("report {dir}"),
    };
    match matching {
        Some(expression) => format!("{line} --match '{expression}'"),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reproduce_line_names_the_window_and_the_match() {
        let ids = Some(Window::AgentIds { first: 3, last: 7 });
        assert_eq!(
            reproduce_line(ids, None, None),
            "report DIR --broadcasts 3-7"
        );
        let between = Some(Window::FirstReceiptBetween {
            from_wall_ns: 1,
            to_wall_ns: 2,
        });
        assert_eq!(
            reproduce_line(between, Some("type=go"), None),
            "report DIR --agent-as-reference --between 1-2 --match 'type=go'"
        );
        // Earlier runs in the directory: the logs read are named.
        let logs = [
            "agent-1-0000.sklog".to_owned(),
            "probes/probe-ab.sklog".into(),
        ];
        assert_eq!(
            reproduce_line(ids, None, Some(&logs)),
            "report DIR/agent-1-0000.sklog DIR/probes/probe-ab.sklog --broadcasts 3-7"
        );
    }

    #[test]
    fn a_lagging_probe_fails_the_check_by_name() {
        let c = probes_reported(&["kiosk-2".into()], &[]);
        assert!(!c.pass && c.basis.contains("kiosk-2"), "{c:?}");
        assert!(probes_reported(&[], &[]).pass);
    }

    #[test]
    fn a_probe_that_stopped_during_the_audit_fails_the_check_by_name() {
        let c = probes_reported(&["kiosk-1".into()], &["kiosk-3".into()]);
        assert!(!c.pass, "{c:?}");
        assert_eq!(c.measured, Some(2));
        assert!(c.basis.contains("within --settle from: kiosk-1"), "{c:?}");
        assert!(
            c.basis.contains("stopped uploading during the audit") && c.basis.contains("kiosk-3"),
            "{c:?}"
        );
    }
}
