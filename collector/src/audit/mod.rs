//! `skewscope audit`: a post-deployment sync audit in one command. It checks
//! the agent answers and enough probes upload to it, triggers K broadcasts
//! (the agent's `/start_test`, or a foreign server's trigger URL with the
//! agent as clock reference and collector), waits until every connection
//! has reported each broadcast or `--settle` passes, and judges the report
//! against the thresholds.
//!
//! [`agent_api`] is the HTTP side, [`mirror`] the local copy of the agent's
//! logs, [`progress`] what stderr shows; [`options`] what the operator asked,
//! `observe` triggers or watches, `wait` waits (its `Completion` is when),
//! [`outcome`] is what it found and its exit status, [`error`] why it could
//! not run. The report and the
//! verdict are the same engine as `skewscope report`.

pub mod agent_api;
pub mod error;
pub mod mirror;
mod observe;
pub mod options;
pub mod outcome;
pub mod progress;
mod wait;

use skewscope_core::analysis::verdict::judge;

use crate::joined::{self, Scope};
use agent_api::AgentApi;
pub use error::CannotAudit;
use mirror::Mirror;
pub use options::{AuditOptions, Passive};
pub use outcome::{AuditFacts, AuditOutcome, exit};
use progress::Progress;

/// Runs the audit: waits for the probes, triggers or watches, waits for
/// the receipts, and judges the report of what came.
pub fn run(options: &AuditOptions, progress: &mut Progress) -> Result<AuditOutcome, CannotAudit> {
    let http = agent_api::http_client(options.ca_file.as_deref())?;
    let api = AgentApi::new(&options.agent, options.token.clone(), http)
        .token_from(options.token_file.clone());
    let temp;
    let dir = match &options.keep {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::tempdir().map_err(|e| CannotAudit::CopyDir {
                dir: std::env::temp_dir(),
                source: e.into(),
            })?;
            temp.path().to_owned()
        }
    };
    let mirror = Mirror::new(&dir).map_err(|source| CannotAudit::CopyDir {
        dir: dir.clone(),
        source,
    })?;

    let status = wait::wait_for_probes(&api, options, progress)?;
    let uploading: Vec<String> = status
        .probes
        .iter()
        .filter(|p| p.uploading)
        .map(|p| p.label())
        .collect();
    let run = &status.agent_run;
    progress.say(&format!(
        "audit: agent {} answers (run {}, {} clients); {} probe(s) uploading: {}",
        options.agent,
        &run[..8.min(run.len())],
        status.clients,
        uploading.len(),
        uploading.join(", ")
    ));
    let observed = match &options.passive {
        None => observe::trigger(&api, &mirror, options, &status, progress)?,
        Some(passive) => observe::observe(&api, &mirror, options, passive, &status, progress)?,
    };
    let waited = wait::wait_for_receipts(&api, &mirror, options, &status, &observed, progress)?;
    let earlier = mirror.earlier_runs();
    if !earlier.is_empty() {
        progress.say(&format!(
            "audit: left out {} earlier probe run(s) the agent keeps, which did not upload during this audit: {}",
            earlier.len(),
            earlier.join(", ")
        ));
    }

    let triggers =
        (!observed.trigger_times.is_empty()).then_some(observed.trigger_times.as_slice());
    let scope = Scope {
        window: waited.window,
        agent_as_reference: observed.foreign,
    };
    let (mut report, figures) = joined::analyse(waited.inputs, triggers, scope, options.figures)
        .map_err(CannotAudit::Logs)?;
    // Name the logs as the agent does, not by the copy's (maybe temporary) path.
    for input in &mut report.inputs {
        if let Ok(name) = std::path::Path::new(&input.file).strip_prefix(&dir) {
            input.file = name.display().to_string();
        }
    }
    if let Some(line) = acting_note(&report, options.lead.is_some()) {
        progress.say(&format!("audit: {line}"));
    }
    let mut verdict = judge(&report, &options.thresholds);
    let reported = outcome::probes_reported(&waited.state.lagging, &waited.state.stopped);
    verdict.pass &= reported.pass;
    verdict.checks.push(reported);
    let matching = options.matching.as_ref().map(|(e, _)| e.as_str());
    Ok(AuditOutcome {
        audit: AuditFacts {
            agent: options.agent.clone(),
            trigger: options.trigger.clone(),
            triggered: if options.passive.is_some() {
                0
            } else {
                options.broadcasts
            },
            passive: options.passive.is_some(),
            probes_uploading: uploading.len(),
            complete: waited.state.done,
            last_broadcast_to_verdict_ms: waited.since.elapsed().as_millis() as u64,
            reproduce: outcome::reproduce_line(
                waited.window,
                matching,
                mirror.logs_read_among_others().as_deref(),
            ),
            kept: options.keep.as_ref().map(|d| d.display().to_string()),
            earlier_runs: earlier,
        },
        verdict,
        report,
        figures,
    })
}

/// What the audit says when a time to act went unused: the broadcasts
/// carried one (`--lead`) and no probe acts, or the probes act and found
/// none where they look. Either way no action is judged, whatever passes.
fn acting_note(report: &skewscope_core::analysis::report::Report, lead: bool) -> Option<String> {
    match &report.actions {
        None if lead => Some(
            "the broadcasts carried a time to act (--lead, at /at_ns), but no probe acts on it: start the probes with --act-at /at_ns to have their actions judged".to_owned(),
        ),
        Some(a) if a.actions == 0 && a.receipts_without_action > 0 => Some(format!(
            "NO ACTION was judged: {}",
            crate::sentences::without_action_text(a.receipts_without_action, 0)
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::acting_note;
    use skewscope_core::Stamp;
    use skewscope_core::analysis::join::join;
    use skewscope_core::analysis::report::Report;
    use skewscope_core::record::*;

    fn at(ns: u64) -> Stamp {
        Stamp {
            wall_ns: 1_764_000_000_000_000_000 + ns,
            mono_ns: ns,
        }
    }

    /// A probe that received two broadcasts on two connections, acting
    /// (`--act-at /at`) when `acting`, on messages with no `/at`.
    fn report(acting: bool) -> Report {
        let mut probe = vec![skewscope_core::fixtures::probe_started_on(
            "kiosk",
            "device",
            2,
            at(1),
        )];
        if acting {
            probe.push(ProbeRecord::ActPlan(ActPlan {
                pointer: "/at".into(),
                unit: "auto".into(),
                at: at(1),
            }));
        }
        for conn in 0..2 {
            probe.push(skewscope_core::fixtures::connection_opened(
                conn,
                None,
                at(2),
            ));
        }
        for seq in 0..2u64 {
            for conn in 0..2 {
                probe.push(ProbeRecord::Receipt(Receipt {
                    len: 10,
                    ..skewscope_core::fixtures::receipt(
                        conn,
                        MessageKey::Seq(seq),
                        seq,
                        at(1_000_000 * (seq + 1) + u64::from(conn)),
                    )
                }));
            }
        }
        Report::build(&join(None, &[&probe]), vec![])
    }

    #[test]
    fn a_time_to_act_nobody_used_is_said() {
        let none_found = acting_note(&report(true), true).unwrap();
        assert!(
            none_found.starts_with("NO ACTION was judged"),
            "{none_found}"
        );
        assert!(none_found.contains("/at_ns"), "{none_found}");
        let nobody_acts = acting_note(&report(false), true).unwrap();
        assert!(nobody_acts.contains("--act-at /at_ns"), "{nobody_acts}");
        assert_eq!(acting_note(&report(false), false), None);
    }
}
