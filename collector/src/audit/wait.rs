//! The audit's waits: for enough probes before it begins, and for every
//! connection's receipts (and actions) of the audited broadcasts after, each
//! poll copying what is new of the agent's logs. When the wait is over is
//! [`Completion`]'s rule.

use std::time::{Duration, Instant};

use skewscope_core::analysis::join::{BroadcastKey, Joined, Window};
use skewscope_core::analysis::settled::moved_past;

use super::agent_api::{self, AgentApi, Status};
use super::error::CannotAudit;
use super::mirror::Mirror;
use super::observe::Observed;
use super::options::AuditOptions;
use super::progress::Progress;
use crate::inputs;
use crate::joined::{self, Scope};

/// How often the audit looks for new receipts while it waits.
const POLL: Duration = Duration::from_millis(250);

/// A probe run: its id, and its name as the audit says it.
type NamedRun = (u128, String);

/// How long the audit waits, once enough probes upload, for the agent to
/// know their names (from their first batch).
const NAME_WAIT: Duration = Duration::from_secs(2);

/// How far before the first trigger (and after the last look) a foreign
/// server's broadcast may be first received and still be the audit's: the
/// device clocks are NTP-synced, so a receipt is never this far off.
const FOREIGN_MARGIN_NS: u64 = 100_000_000;

/// What the wait ended with: the logs as last read, how complete they
/// were, and the window (a foreign server's grows with the wait).
pub(super) struct Waited {
    pub(super) inputs: inputs::Inputs,
    pub(super) state: Completion,
    pub(super) window: Option<Window>,
    /// When the last trigger was sent (or the window closed).
    pub(super) since: Instant,
}

/// Polls the agent until every connection reported each audited broadcast
/// (and every acting probe its actions) or `--settle` passes after the last
/// trigger; an agent that restarts ends the audit. `began` is the agent's
/// status when the audit began: a probe uploading then that stops before
/// it reported the last broadcast is named, not forgotten.
pub(super) fn wait_for_receipts(
    api: &AgentApi,
    mirror: &Mirror,
    options: &AuditOptions,
    began: &Status,
    observed: &Observed,
    progress: &mut Progress,
) -> Result<Waited, CannotAudit> {
    let run = &began.agent_run;
    let since = Instant::now();
    let deadline = since + options.settle;
    let mut window = observed.window;
    // The copy is read again only when a poll fetched something new.
    let mut read: Option<inputs::Inputs> = None;
    loop {
        let status = match api.status() {
            Ok(s) => s,
            // The agent may be restarting: keep trying until the deadline.
            Err(e) if Instant::now() < deadline => {
                progress.waiting(&format!("the agent did not answer ({e}); trying again"));
                std::thread::sleep(POLL);
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        if status.agent_run != *run {
            return Err(CannotAudit::AgentRestarted {
                was: run.to_owned(),
                now: status.agent_run,
            });
        }
        if observed.foreign && options.passive.is_none() {
            window = Some(Window::FirstReceiptBetween {
                from_wall_ns: observed.first_wall.saturating_sub(FOREIGN_MARGIN_NS),
                to_wall_ns: status.now_wall_ns + FOREIGN_MARGIN_NS,
            });
        }
        let (files, fetched) = mirror.sync_run(api, &status)?;
        if fetched > 0 || read.is_none() {
            read = Some(options.read_copy(&files)?);
        }
        let inputs = read.as_ref().expect("read above");
        let scope = Scope {
            window,
            agent_as_reference: observed.foreign,
        };
        let joined = joined::join(inputs, scope).map_err(CannotAudit::Logs)?;
        let uploading = in_scope(
            status.probes.iter().filter(|p| p.uploading),
            inputs,
            &joined,
        );
        // Named as the agent knows them now: a run's name comes with its
        // first batch, which may have been after the audit began.
        let was_uploading = |run: &str| began.probes.iter().any(|b| b.run == run && b.uploading);
        let stopped = in_scope(
            status
                .probes
                .iter()
                .filter(|p| !p.uploading && was_uploading(&p.run)),
            inputs,
            &joined,
        );
        let state = Completion::of(
            &joined,
            &observed.sent,
            observed.expected,
            (&uploading, &stopped),
            observed.last_wall,
        );
        let probes_uploading = status.probes.iter().filter(|p| p.uploading).count();
        progress.waiting(&format!(
            "waiting for receipts: {} received, {} outstanding over {} broadcasts; {probes_uploading} probe(s) uploading",
            state.receipts, state.outstanding, state.broadcasts
        ));
        if state.done || Instant::now() >= deadline {
            return Ok(Waited {
                inputs: read.take().expect("read above"),
                state,
                window,
                since,
            });
        }
        std::thread::sleep(POLL);
    }
}

/// Of `runs`, by run id and name, all but those whose records are here and
/// left out of this audit's scope (probes of the hub during an audit of
/// another server, or the other way round): those are not waited for.
fn in_scope<'a>(
    runs: impl Iterator<Item = &'a agent_api::ProbeRun>,
    inputs: &inputs::Inputs,
    joined: &Joined,
) -> Vec<NamedRun> {
    let in_scope = |run: &u128| {
        joined
            .probes
            .iter()
            .any(|p| p.identity.as_ref().is_some_and(|i| i.run_id == *run))
    };
    let out_of_scope: Vec<u128> = inputs
        .probes
        .iter()
        .filter_map(|log| log.run_id)
        .filter(|run| !in_scope(run))
        .collect();
    runs.filter_map(|p| Some((u128::from_str_radix(&p.run, 16).ok()?, p.label())))
        .filter(|(run, _)| !out_of_scope.contains(run))
        .collect()
}
/// Asks for the agent's status until `--require-probes` probes upload, or
/// `--settle` passes.
pub(super) fn wait_for_probes(
    api: &AgentApi,
    options: &AuditOptions,
    progress: &mut Progress,
) -> Result<Status, CannotAudit> {
    let deadline = Instant::now() + options.settle;
    let mut enough_since: Option<Instant> = None;
    loop {
        let status = api.status()?;
        let uploading = status.probes.iter().filter(|p| p.uploading).count();
        if uploading >= options.require_probes {
            // A run's name comes with its first batch, a moment after its
            // hello: the audit's first line names the probes it began with.
            let since = *enough_since.get_or_insert_with(Instant::now);
            let unnamed = status
                .probes
                .iter()
                .any(|p| p.uploading && p.name.is_empty());
            if !unnamed || since.elapsed() >= NAME_WAIT {
                return Ok(status);
            }
            std::thread::sleep(POLL);
            continue;
        }
        if Instant::now() >= deadline {
            return Err(CannotAudit::TooFewProbes {
                uploading,
                names: status
                    .probes
                    .iter()
                    .filter(|p| p.uploading)
                    .map(|p| p.label())
                    .collect(),
                required: options.require_probes,
                agent: options.agent.clone(),
            });
        }
        progress.waiting(&format!(
            "waiting for probes: {uploading} of {} uploading",
            options.require_probes
        ));
        std::thread::sleep(POLL);
    }
}

/// How far the audited broadcasts have been reported.
pub(super) struct Completion {
    /// Probes uploading whose records since the last trigger have not arrived.
    pub(super) lagging: Vec<String>,
    /// Probes uploading when the audit began that stopped uploading before
    /// their records reached the last trigger (a kiosk that died or lost
    /// its link during the audit).
    pub(super) stopped: Vec<String>,
    broadcasts: usize,
    receipts: usize,
    outstanding: usize,
    pub(super) done: bool,
}

/// Receipts on connections of probes that act (`--act-at`) whose action has
/// not arrived and may still: their probe's records have not moved past
/// them (the one rule of [`skewscope_core::analysis::settled`], which the
/// agent's live join follows too), the margin on top of the largest lead
/// seen.
fn awaiting_actions(joined: &Joined) -> usize {
    let acting = |c: usize| {
        joined.probes[joined.connections[c].probe]
            .act_plan
            .is_some()
    };
    if !joined.probes.iter().any(|p| p.act_plan.is_some()) {
        return 0;
    }
    let latest: Vec<u64> = joined
        .probes
        .iter()
        .map(|p| p.stamps.iter().map(|s| s.wall_ns).max().unwrap_or(0))
        .collect();
    // How long after its broadcast's first receipt an action has come.
    let mut seen = skewscope_core::analysis::settled::LeadSeen::default();
    for b in &joined.broadcasts {
        if let Some(first) = b.receipts.iter().map(|r| r.wall_ns).min() {
            for a in &b.actions {
                seen.add(first, a.done.wall_ns);
            }
        }
    }
    let lead = seen.ns();
    joined
        .broadcasts
        .iter()
        .flat_map(|b| {
            let first = b.receipts.iter().map(|r| r.wall_ns).min().unwrap_or(0);
            b.receipts.iter().map(move |r| (b, r, first))
        })
        .filter(|(b, r, first)| {
            acting(r.connection)
                && !b.actions.iter().any(|a| a.connection == r.connection)
                && !moved_past(latest[joined.connections[r.connection].probe], *first, lead)
        })
        .count()
}

impl Completion {
    /// Every probe uploading now or when the audit began has reported
    /// something after the last trigger (so one whose upload lags, or that
    /// stopped during the audit, is not taken for one that was not
    /// connected), no probe connection is missing an audited broadcast, and:
    /// hub, each triggered broadcast has all its targets recorded; foreign
    /// server, at least `k` broadcasts arrived.
    fn of(
        joined: &Joined,
        sent: &[agent_api::Sent],
        k: u64,
        (uploading, stopped): (&[NamedRun], &[NamedRun]),
        last_trigger_wall_ns: u64,
    ) -> Completion {
        let receipts = joined.broadcasts.iter().map(|b| b.receipts.len()).sum();
        let missing: usize = joined.broadcasts.iter().map(|b| b.missing.len()).sum();
        // Runs that have a receipt of the last broadcast the audit sent
        // (a hub audit): they reported it, whatever their stamps say (a
        // probe log's stamps are thinned to one a second for finding clock
        // steps, so its newest second may not show in them).
        let last_sent = sent.iter().map(|s| s.broadcast).max();
        let received_last: Vec<u128> = joined
            .broadcasts
            .iter()
            .filter(|b| matches!(b.key, BroadcastKey::Agent { id, .. } if Some(id) == last_sent))
            .flat_map(|b| &b.receipts)
            .filter_map(|r| {
                let probe = &joined.probes[joined.connections[r.connection].probe];
                probe.identity.as_ref().map(|i| i.run_id)
            })
            .collect();
        let behind = |runs: &[NamedRun]| -> Vec<String> {
            runs.iter()
                .filter(|(run, _)| !received_last.contains(run))
                .filter(|(run, _)| {
                    let latest = joined
                        .probes
                        .iter()
                        .filter(|p| p.identity.as_ref().is_some_and(|i| i.run_id == *run))
                        .flat_map(|p| p.stamps.iter().map(|s| s.wall_ns))
                        .max();
                    latest.is_none_or(|t| t < last_trigger_wall_ns)
                })
                .map(|(_, name)| name.clone())
                .collect()
        };
        let (lagging, stopped) = (behind(uploading), behind(stopped));
        // One that stopped may be back (its upload reconnects): wait for it.
        let caught_up = lagging.is_empty() && stopped.is_empty() && awaiting_actions(joined) == 0;
        let broadcasts_done = if sent.is_empty() {
            // With the agent tapping the server (and following these
            // probes' connections), wait for its record of each broadcast.
            let tapped =
                joined.tap.is_some() && joined.broadcasts.iter().any(|b| b.agent.is_some());
            joined.broadcasts.len() as u64 >= k
                && (!tapped || joined.broadcasts.iter().all(|b| b.agent.is_some()))
        } else {
            sent.iter().all(|s| {
                joined.broadcasts.iter().any(|b| {
                    matches!(b.key, BroadcastKey::Agent { id, .. } if id == s.broadcast)
                        && b.agent.is_some_and(|a| u64::from(a.targets) == s.clients)
                })
            })
        };
        let done = caught_up && missing == 0 && broadcasts_done;
        Completion {
            lagging,
            stopped,
            broadcasts: joined.broadcasts.len(),
            receipts,
            outstanding: missing,
            done,
        }
    }
}
