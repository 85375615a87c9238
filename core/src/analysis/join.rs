//! Joining: agent and probe records in, one row per broadcast out, each with the
//! receipts of every connection that got it and the connections that should have
//! but did not.
//!
//! With an agent log, a receipt is matched to its broadcast by sequence number
//! (test messages) or by the agent's connection id plus the payload hash and its
//! occurrence on that connection; the broadcast's target list says who should
//! have received it. Without one (a foreign server), broadcasts are the distinct
//! message keys the probes saw, and a connection misses a broadcast that arrived
//! elsewhere while it was connected.

use crate::convert;
use crate::record::{AgentRecord, ProbeRecord};

mod model;
mod probes;
mod source;
mod stream;
#[cfg(test)]
pub(crate) mod tests;

pub use model::{
    ActorKind, Agent, AgentSide, BroadcastKey, ClockIdentity, Joined, JoinedAction,
    JoinedBroadcast, JoinedReceipt, Probe, ProbeConnection, RunEnd, TapSummary, TappedClient,
    Window,
};
pub use source::{AgentSource, BroadcastSink, ProbeSource};

/// Joins one agent run (optional) with any number of probe logs, every
/// broadcast kept: agent broadcasts in id order, the others by first receipt.
pub fn join(agent: Option<&[AgentRecord]>, probes: &[&[ProbeRecord]]) -> Joined {
    let sources: Vec<&dyn ProbeSource> = probes.iter().map(|p| p as &dyn ProbeSource).collect();
    let agent = agent.as_ref().map(|a| a as &dyn AgentSource);
    collected(|sink| join_sources(agent, &sources, sink))
}

/// Runs a streamed join into a Vec and returns the run with its broadcasts
/// in the order [`join`] documents.
fn collected(run: impl FnOnce(&mut dyn BroadcastSink) -> Joined) -> Joined {
    let mut rows: Vec<JoinedBroadcast> = Vec::new();
    let mut joined = run(&mut rows);
    rows.sort_by_cached_key(|b| {
        let first = match b.key {
            BroadcastKey::Agent { .. } => 0,
            BroadcastKey::Message(_) => b.receipts.iter().map(|r| r.wall_ns).min().unwrap_or(0),
        };
        (first, b.key)
    });
    joined.broadcasts = rows;
    joined
}

/// [`join`] with probe logs read as they come, each broadcast handed to
/// `sink` once final; the run is returned without broadcasts.
pub fn join_sources(
    agent: Option<&dyn AgentSource>,
    probes: &[&dyn ProbeSource],
    sink: &mut dyn BroadcastSink,
) -> Joined {
    stream::plan(agent, probes).stream(probes, &mut |run, b| sink.broadcast(run, b))
}

/// Joins several agent runs (the agent restarted; its data directory holds
/// each run's segments) with the probe logs. A probe's connection records
/// and receipts go to the run that was up when they happened: run k from its
/// `Started` until the next run's. Broadcast ids are per run.
pub fn join_runs(agents: &[&[AgentRecord]], probes: &[&[ProbeRecord]]) -> Joined {
    let sources: Vec<&dyn ProbeSource> = probes.iter().map(|p| p as &dyn ProbeSource).collect();
    let agents: Vec<&dyn AgentSource> = agents.iter().map(|a| a as &dyn AgentSource).collect();
    collected(|sink| join_runs_sources(&agents, &sources, sink))
}

/// A probe log's records about connections during one agent run, with the
/// run's own records (identity, clock, time exchange) whole.
struct DuringRun<'a> {
    log: &'a dyn ProbeSource,
    from_wall_ns: u64,
    until_wall_ns: u64,
}

impl ProbeSource for DuringRun<'_> {
    fn records(&self) -> Box<dyn Iterator<Item = ProbeRecord> + '_> {
        Box::new(self.log.records().filter(|r| {
            probes::connection_time(r)
                .is_none_or(|t| (self.from_wall_ns..self.until_wall_ns).contains(&t))
        }))
    }
}

/// [`join_runs`] over any sources, handing each broadcast to `sink`.
pub fn join_runs_sources(
    agents: &[&dyn AgentSource],
    probes: &[&dyn ProbeSource],
    sink: &mut dyn BroadcastSink,
) -> Joined {
    if agents.len() < 2 {
        return join_sources(agents.first().copied(), probes, sink);
    }
    let started = |records: &dyn AgentSource| {
        records.records().find_map(|r| match r {
            AgentRecord::Started(s) => Some(s.at.wall_ns),
            _ => None,
        })
    };
    let mut runs: Vec<(u64, &dyn AgentSource)> = agents
        .iter()
        .map(|a| (started(*a).unwrap_or(0), *a))
        .collect();
    runs.sort_by_key(|r| r.0);
    // Each probe whole: its clock records and stamps belong to every run.
    let whole = probes::collect_probes(probes);
    let mut merged = Joined {
        agent: None,
        probes: whole.probes,
        connections: Vec::new(),
        broadcasts: Vec::new(),
        duplicates: 0,
        unmatched: 0,
        unmatched_actions: 0,
        agent_runs: convert::count(runs.len()),
        tap: None,
        most_receipts_held: 0,
    };
    let spans: Vec<Vec<DuringRun>> = runs
        .iter()
        .enumerate()
        .map(|(k, &(start, _))| {
            let end = runs.get(k + 1).map_or(u64::MAX, |r| r.0);
            probes
                .iter()
                .map(|&log| DuringRun {
                    log,
                    from_wall_ns: start,
                    until_wall_ns: end,
                })
                .collect()
        })
        .collect();
    let mut plans = Vec::new();
    for (k, &(_, records)) in runs.iter().enumerate() {
        let sources: Vec<&dyn ProbeSource> =
            spans[k].iter().map(|s| s as &dyn ProbeSource).collect();
        let plan = stream::plan(Some(records), &sources);
        let offset = merged.connections.len();
        merged
            .connections
            .extend(plan.joined.connections.iter().cloned());
        merged.agent = match (merged.agent.take(), plan.joined.agent.clone()) {
            (None, agent) => agent,
            (Some(mut earlier), Some(later)) => {
                earlier.clock_states.extend(later.clock_states);
                earlier.stamps.extend(later.stamps);
                earlier.time_port = later.time_port.or(earlier.time_port);
                Some(earlier)
            }
            (earlier, None) => earlier,
        };
        plans.push((offset, plan));
    }
    let (mut duplicates, mut unmatched, mut unmatched_actions, mut most_held) = (0, 0, 0, 0);
    for (k, (offset, plan)) in plans.into_iter().enumerate() {
        let sources: Vec<&dyn ProbeSource> =
            spans[k].iter().map(|s| s as &dyn ProbeSource).collect();
        let run = plan.stream(&sources, &mut |_, mut b| {
            if let BroadcastKey::Agent { run, .. } = &mut b.key {
                *run = convert::count(k);
            }
            for r in &mut b.receipts {
                r.connection += offset;
            }
            for m in &mut b.missing {
                *m += offset;
            }
            for a in &mut b.actions {
                a.connection += offset;
            }
            sink.broadcast(&merged, b);
        });
        duplicates += run.duplicates;
        unmatched += run.unmatched;
        unmatched_actions += run.unmatched_actions;
        most_held = most_held.max(run.most_receipts_held);
    }
    merged.duplicates = duplicates;
    merged.unmatched = unmatched;
    merged.unmatched_actions = unmatched_actions;
    merged.most_receipts_held = most_held;
    merged
}
