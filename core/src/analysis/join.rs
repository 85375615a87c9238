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

use std::collections::HashMap;

use crate::Stamp;
use crate::record::{
    AgentRecord, ClockState, MessageKey, ProbeRecord, RunIdentity, SendOrder, TimeSample,
    TimeServiceCounters,
};

/// One probe connection, as the report numbers them.
#[derive(Clone, Debug, PartialEq)]
pub struct Connection {
    /// Index of the probe log (in input order).
    pub probe: usize,
    /// Connection index within that probe.
    pub conn: u32,
    /// The agent's id for this connection, when the server was a skewscope agent.
    pub agent_conn: Option<u64>,
    /// Wall time the connection opened, if recorded.
    pub opened_wall_ns: Option<u64>,
    /// Wall time after which the connection no longer listened: its close record,
    /// else the probe's last record.
    pub until_wall_ns: u64,
    /// Its (local, remote) socket addresses, when recorded: what joins it to
    /// a tapped connection.
    pub addresses: Option<(String, String)>,
}

/// What names the clock a log was stamped with: receipts share a clock
/// exactly when their logs' identities are equal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum ClockIdentity {
    /// The kernel's boot id, from the log's `Identity` record: exact.
    BootId(String),
    /// Only the host name: the log predates `Identity` records or its kernel
    /// publishes no boot id. Devices made from one OS image share a name, so
    /// this can call two clocks one.
    HostName(String),
    /// Nothing recorded.
    #[default]
    Unknown,
}

impl ClockIdentity {
    /// The identity of a log with this host name and, if recorded, run identity.
    pub fn of(host: &str, identity: Option<&RunIdentity>) -> ClockIdentity {
        match identity.and_then(|i| i.boot_id.clone()) {
            Some(boot) => ClockIdentity::BootId(boot),
            None => ClockIdentity::HostName(host.to_owned()),
        }
    }
}

/// How a run's log ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RunEnd {
    /// With its stop record: a clean stop.
    Stopped,
    /// With a probe's `LogFull` record: `--max-log-bytes` ended it.
    LogFull,
    /// With neither: the writer was killed (or is still running), so its
    /// last periodic counters may be old.
    #[default]
    NoStopRecord,
}

/// A probe log's identity and its clock's records.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Probe {
    /// Its `--name`.
    pub name: String,
    /// The device's host name, for people.
    pub host: String,
    /// The run's identity, when the log records one.
    pub identity: Option<RunIdentity>,
    /// Which clock its stamps are on.
    pub clock: ClockIdentity,
    /// Every stamp it recorded, for finding clock steps.
    pub stamps: Vec<Stamp>,
    /// Its time exchanges with the agent.
    pub samples: Vec<TimeSample>,
    /// What its clock claimed, over the run.
    pub clock_states: Vec<ClockState>,
    /// How its log ends.
    pub ended: RunEnd,
    /// Connections (openings) over TLS.
    pub tls_connections: u64,
    /// Of those, opened without checking the server's certificate (`--insecure`).
    pub tls_unverified: u64,
    /// Connections (openings) on which the server compressed its messages
    /// (permessage-deflate negotiated).
    pub deflate_connections: u64,
}

/// The agent run's identity.
#[derive(Clone, Debug, PartialEq)]
pub struct Agent {
    /// The server's host name, for people.
    pub host: String,
    /// The run's identity, when the log records one.
    pub identity: Option<RunIdentity>,
    /// Which clock its stamps are on.
    pub clock: ClockIdentity,
    /// Fan-out shards.
    pub shards: u16,
    /// Send order.
    pub order: SendOrder,
    /// Whether per-client send times were recorded.
    pub per_client_times: bool,
    /// What the server clock claimed, over the run.
    pub clock_states: Vec<ClockState>,
    /// The time port's last counters.
    pub time_service: Option<TimeServiceCounters>,
    /// Broadcast start stamps, for finding steps of the server's clock.
    pub stamps: Vec<Stamp>,
    /// How its log ends.
    pub ended: RunEnd,
    /// Records it said it could not write (`RecordsLost`).
    pub records_lost: u64,
}

/// How a broadcast is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum BroadcastKey {
    /// By the agent's broadcast id within agent run `run` (0 is the first
    /// run joined; ids start again when the agent restarts).
    Agent {
        /// Which agent run, in start order.
        run: u32,
        /// The broadcast id in that run's log.
        id: u64,
    },
    /// By what the probes saw (no agent log).
    Message(MessageKey),
}

/// One connection's receipt of one broadcast.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JoinedReceipt {
    /// Index into [`Joined::connections`].
    pub connection: usize,
    /// Wall time of receipt (userspace), on the device's clock.
    pub wall_ns: u64,
    /// Monotonic time of receipt, on the device's clock.
    pub mono_ns: u64,
    /// How long before `wall_ns` the kernel had the frame, if it said.
    pub kernel_delay_ns: Option<u64>,
    /// Agent wall time its write of this copy completed, when recorded.
    pub sent_wall_ns: Option<u64>,
    /// Agent wall time of the kernel's software TX stamp, when recorded.
    pub tx_wall_ns: Option<u64>,
}

impl JoinedReceipt {
    /// The best receipt time on the device's clock: the kernel's when known.
    pub fn arrival_wall_ns(&self) -> u64 {
        self.wall_ns - self.kernel_delay_ns.unwrap_or(0).min(self.wall_ns)
    }
}

/// The agent's side of one broadcast.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AgentSide {
    /// Broadcast start.
    pub start: Stamp,
    /// Clients targeted, over all shards.
    pub targets: u32,
    /// Clients whose copy was queued because their send buffer was full.
    pub queued: u32,
    /// Clients dropped or failed during this broadcast.
    pub dropped: u32,
    /// Start to the last completed write, on the agent's monotonic clock.
    pub fanout_span_ns: Option<u64>,
}

/// One broadcast with everything known about its delivery.
#[derive(Clone, Debug, PartialEq)]
pub struct JoinedBroadcast {
    /// Its identity.
    pub key: BroadcastKey,
    /// The agent's side, when an agent log was given.
    pub agent: Option<AgentSide>,
    /// One receipt per connection that got it (duplicates are counted, not kept).
    pub receipts: Vec<JoinedReceipt>,
    /// Connections (indices into [`Joined::connections`]) that should have got it
    /// and did not.
    pub missing: Vec<usize>,
}

impl JoinedBroadcast {
    /// max − min receipt time (kernel arrival where known) over the connections
    /// that got it, raw device clocks; `None` with fewer than two receipts.
    pub fn skew_ns(&self) -> Option<u64> {
        if self.receipts.len() < 2 {
            return None;
        }
        let min = self
            .receipts
            .iter()
            .map(JoinedReceipt::arrival_wall_ns)
            .min()?;
        let max = self
            .receipts
            .iter()
            .map(JoinedReceipt::arrival_wall_ns)
            .max()?;
        Some(max - min)
    }
}

/// The joined run.
#[derive(Clone, Debug, PartialEq)]
pub struct Joined {
    /// The agent run, if an agent log was given.
    pub agent: Option<Agent>,
    /// The probe logs, in input order.
    pub probes: Vec<Probe>,
    /// Every probe connection.
    pub connections: Vec<Connection>,
    /// Every broadcast, in start order.
    pub broadcasts: Vec<JoinedBroadcast>,
    /// Receipts of a broadcast a connection had already received.
    pub duplicates: u64,
    /// Receipts that match no broadcast in the agent log (another run's traffic,
    /// or a payload the agent did not send).
    pub unmatched: u64,
    /// Agent runs joined (the agent restarted between them).
    pub agent_runs: u32,
    /// What the agent's tap of the server saw, when it tapped one.
    pub tap: Option<crate::analysis::tapped::TapSummary>,
    /// The most receipts a streamed join held at once (of broadcasts still
    /// arriving): what its memory grows with, rather than the run's receipts.
    pub most_receipts_held: u64,
}

/// Which broadcasts a report is about: an audit judges its own, not the
/// whole history of the logs it read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    /// The agent's broadcasts with ids `first..=last`, in the latest agent
    /// run joined.
    AgentIds {
        /// First id kept.
        first: u64,
        /// Last id kept.
        last: u64,
    },
    /// Broadcasts whose first receipt (device wall clock) falls within
    /// `from_wall_ns..=to_wall_ns`: for servers that are not the agent.
    FirstReceiptBetween {
        /// Earliest first receipt kept.
        from_wall_ns: u64,
        /// Latest first receipt kept.
        to_wall_ns: u64,
    },
}

impl Window {
    /// Whether `broadcast` is inside, `latest_run` being the index of the
    /// latest agent run joined.
    pub fn contains(&self, broadcast: &JoinedBroadcast, latest_run: u32) -> bool {
        match *self {
            Window::AgentIds { first, last } => matches!(
                broadcast.key,
                BroadcastKey::Agent { run, id } if run == latest_run && (first..=last).contains(&id)
            ),
            Window::FirstReceiptBetween {
                from_wall_ns,
                to_wall_ns,
            } => broadcast
                .receipts
                .iter()
                .map(|r| r.wall_ns)
                .min()
                .is_some_and(|t| (from_wall_ns..=to_wall_ns).contains(&t)),
        }
    }
}

impl Joined {
    /// Keeps only the broadcasts inside `window`. Clock samples, claims and
    /// connections stay whole: they bound the clocks over the window too.
    pub fn keep(&mut self, window: &Window) {
        let latest = self.agent_runs.saturating_sub(1);
        self.broadcasts.retain(|b| window.contains(b, latest));
    }

    /// The clock of every log joined: each probe's, then the agent's.
    pub fn clocks(&self) -> impl Iterator<Item = &ClockIdentity> {
        self.probes
            .iter()
            .map(|p| &p.clock)
            .chain(self.agent.as_ref().map(|a| &a.clock))
    }
}

/// One broadcast as the agent recorded it.
struct AgentBroadcast {
    seq: Option<u64>,
    hash: u64,
    start: Stamp,
    /// The copies to connections a probe named, by agent connection id.
    slots: HashMap<u64, Slot>,
    /// Clients targeted.
    targets: u32,
    /// Of those, copies queued behind a full send buffer.
    queued: u32,
    /// Of those, clients dropped or failed.
    dropped: u32,
    /// The last completed write of any copy, on the agent's monotonic clock.
    last_done_mono: Option<u64>,
}

/// One target's copy as the agent recorded it.
#[derive(Clone, Copy)]
struct Slot {
    /// Monotonic time the write finished, if it did.
    done_mono: Option<u64>,
    /// Monotonic time of the kernel's software TX stamp, if taken.
    tx_mono: Option<u64>,
}

mod probes;
mod stream;
#[cfg(test)]
pub(crate) mod tests;

/// A probe log the join can read more than once: the first pass reads its
/// own side, the second its receipts. Files are read as they come, so a
/// long log is never held whole.
pub trait ProbeSource {
    /// Its records, in log order, from the start.
    fn records(&self) -> Box<dyn Iterator<Item = ProbeRecord> + '_>;
}

/// Records in memory: a slice, a Vec, or a reference to either.
impl<R: AsRef<[ProbeRecord]>> ProbeSource for R {
    fn records(&self) -> Box<dyn Iterator<Item = ProbeRecord> + '_> {
        Box::new(self.as_ref().iter().cloned())
    }
}

/// An agent run's records, read once by the join for its index of the
/// broadcasts: in memory, or files read as they come.
pub trait AgentSource {
    /// Its records, in log order (its segments in turn), from the start.
    fn records(&self) -> Box<dyn Iterator<Item = AgentRecord> + '_>;
}

/// Records in memory: a slice, a Vec, or a reference to either.
impl<R: AsRef<[AgentRecord]>> AgentSource for R {
    fn records(&self) -> Box<dyn Iterator<Item = AgentRecord> + '_> {
        Box::new(self.as_ref().iter().cloned())
    }
}

/// Where a streamed join hands each broadcast once it is final, with the run
/// it belongs to (connections, probes, agent; not yet its final counts).
pub trait BroadcastSink {
    /// One final broadcast.
    fn broadcast(&mut self, run: &Joined, broadcast: JoinedBroadcast);
}

impl BroadcastSink for Vec<JoinedBroadcast> {
    fn broadcast(&mut self, _run: &Joined, broadcast: JoinedBroadcast) {
        self.push(broadcast);
    }
}

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

/// Joins probe logs of a server that is not the agent, with an agent run as
/// the clock reference (the probes' time exchange) and collector: broadcasts
/// are what the probes received, as without an agent; the agent's own
/// broadcasts, if any, are left out (they went to other connections). What
/// the agent's tap of the server recorded regroups the receipts by copy.
pub fn join_with_reference(agent: &[AgentRecord], probes: &[&[ProbeRecord]]) -> Joined {
    let sources: Vec<&dyn ProbeSource> = probes.iter().map(|p| p as &dyn ProbeSource).collect();
    let mut rows: Vec<JoinedBroadcast> = Vec::new();
    let mut joined = join_sources_with_reference(&agent, &sources, &mut rows);
    // By start: the tap's broadcasts by their first byte, the rest by
    // their first receipt.
    rows.sort_by_cached_key(|b| {
        let first = b.receipts.iter().map(|r| r.wall_ns).min();
        let start = b.agent.map(|a| a.start.wall_ns).or(first).unwrap_or(0);
        (start, b.agent.is_some(), first, b.key)
    });
    joined.broadcasts = rows;
    joined
}

/// [`join_with_reference`] over any sources, handing each broadcast to
/// `sink` once final: a tapped broadcast once every probe broadcast holding
/// one of its copies is.
pub fn join_sources_with_reference(
    agent: &dyn AgentSource,
    probes: &[&dyn ProbeSource],
    sink: &mut dyn BroadcastSink,
) -> Joined {
    let mut tapping = Tapping {
        agent,
        tap: None,
        clock: Vec::new(),
        inner: sink,
    };
    let mut joined = join_sources(None, probes, &mut tapping);
    if let Some(Some(tap)) = &tapping.tap {
        // At most both at once.
        joined.most_receipts_held += tap.most_receipts_held();
    }
    let (tap, clock) = tapping.finish(&joined);
    joined.tap = tap;
    joined.agent = join_sources(Some(&clock), &[], &mut Vec::new()).agent;
    joined.agent_runs = 1;
    joined
}

/// Whether the clock reference needs `r`: all of an agent's records but its
/// broadcasts and what the tap saw of them.
fn clock_record(r: &AgentRecord) -> bool {
    !matches!(
        r,
        AgentRecord::Broadcast(_)
            | AgentRecord::ShardSends(_)
            | AgentRecord::SendCompleted(_)
            | AgentRecord::TxStamp(_)
            | AgentRecord::TapBroadcast(_)
    )
}

/// Passes the probes' broadcasts through what the agent's tap saw (if it
/// tapped the server), read when the first one comes.
struct Tapping<'a> {
    agent: &'a dyn AgentSource,
    /// `None` until the agent's log is read; then `Some(None)` if it tapped
    /// no server.
    tap: Option<Option<crate::analysis::tapped::TapJoin>>,
    /// The agent's records the clock reference needs, kept as that one read
    /// goes by (the log is not read again for them).
    clock: Vec<AgentRecord>,
    inner: &'a mut dyn BroadcastSink,
}

/// The tap's join of `agent`'s log, read into `tap` the first time it is
/// wanted; the records the clock reference needs go to `clock` meanwhile.
fn read_tap<'t>(
    tap: &'t mut Option<Option<crate::analysis::tapped::TapJoin>>,
    clock: &mut Vec<AgentRecord>,
    agent: &dyn AgentSource,
    run: &Joined,
) -> Option<&'t mut crate::analysis::tapped::TapJoin> {
    tap.get_or_insert_with(|| {
        let records = agent.records().inspect(|r| {
            if clock_record(r) {
                clock.push(r.clone());
            }
        });
        crate::analysis::tapped::TapJoin::new(run, records)
    })
    .as_mut()
}

impl BroadcastSink for Tapping<'_> {
    fn broadcast(&mut self, run: &Joined, broadcast: JoinedBroadcast) {
        match read_tap(&mut self.tap, &mut self.clock, self.agent, run) {
            Some(tap) => tap.broadcast(run, broadcast, &mut *self.inner),
            None => self.inner.broadcast(run, broadcast),
        }
    }
}

impl Tapping<'_> {
    /// The tapped broadcasts still held, handed over; the tap's summary, and
    /// the agent's records for its clock reference.
    fn finish(
        mut self,
        run: &Joined,
    ) -> (
        Option<crate::analysis::tapped::TapSummary>,
        Vec<AgentRecord>,
    ) {
        read_tap(&mut self.tap, &mut self.clock, self.agent, run);
        let summary = self.tap.flatten().map(|t| t.finish(run, self.inner));
        (summary, self.clock)
    }
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
        agent_runs: runs.len() as u32,
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
                earlier.time_service = later.time_service.or(earlier.time_service);
                Some(earlier)
            }
            (earlier, None) => earlier,
        };
        plans.push((offset, plan));
    }
    let (mut duplicates, mut unmatched, mut most_held) = (0, 0, 0);
    for (k, (offset, plan)) in plans.into_iter().enumerate() {
        let sources: Vec<&dyn ProbeSource> =
            spans[k].iter().map(|s| s as &dyn ProbeSource).collect();
        let run = plan.stream(&sources, &mut |_, mut b| {
            if let BroadcastKey::Agent { run, .. } = &mut b.key {
                *run = k as u32;
            }
            for r in &mut b.receipts {
                r.connection += offset;
            }
            for m in &mut b.missing {
                *m += offset;
            }
            sink.broadcast(&merged, b);
        });
        duplicates += run.duplicates;
        unmatched += run.unmatched;
        most_held = most_held.max(run.most_receipts_held);
    }
    merged.duplicates = duplicates;
    merged.unmatched = unmatched;
    merged.most_receipts_held = most_held;
    merged
}

/// Whether a connection was open and listening at wall time `t`.
fn listening(c: &Connection, t: u64) -> bool {
    c.opened_wall_ns.is_some_and(|o| o <= t) && t <= c.until_wall_ns
}
