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

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::Stamp;
use crate::record::{
    AgentRecord, ClockState, LogFull, MessageKey, ProbeRecord, RunIdentity, SendOrder, SendOutcome,
    TimeSample, TimeServiceCounters, TxKind,
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

struct AgentBroadcast {
    seq: Option<u64>,
    hash: u64,
    start: Stamp,
    slots: HashMap<u64, Slot>,
}

/// One target's copy as the agent recorded it.
#[derive(Clone, Copy)]
struct Slot {
    outcome: SendOutcome,
    /// Monotonic time the write finished, if it did.
    done_mono: Option<u64>,
    /// Monotonic time of the kernel's software TX stamp, if taken.
    tx_mono: Option<u64>,
}

#[cfg(test)]
pub(crate) mod tests;

/// Joins one agent run (optional) with any number of probe logs.
pub fn join(agent: Option<&[AgentRecord]>, probes: &[&[ProbeRecord]]) -> Joined {
    let (connections, probe_infos, receipts) = collect_probes(probes);
    let mut joined = Joined {
        agent: None,
        probes: probe_infos,
        connections,
        broadcasts: Vec::new(),
        duplicates: 0,
        unmatched: 0,
        agent_runs: u32::from(agent.is_some()),
        tap: None,
    };
    match agent {
        Some(records) => join_with_agent(&mut joined, records, &receipts),
        None => join_probes_only(&mut joined, &receipts),
    }
    joined
}

/// Joins probe logs of a server that is not the agent, with an agent run as
/// the clock reference (the probes' time exchange) and collector: broadcasts
/// are what the probes received, as without an agent; the agent's own
/// broadcasts, if any, are left out (they went to other connections).
pub fn join_with_reference(agent: &[AgentRecord], probes: &[&[ProbeRecord]]) -> Joined {
    let mut joined = join(None, probes);
    let clock_only: Vec<AgentRecord> = agent
        .iter()
        .filter(|r| {
            !matches!(
                r,
                AgentRecord::Broadcast(_)
                    | AgentRecord::ShardSends(_)
                    | AgentRecord::SendCompleted(_)
                    | AgentRecord::TxStamp(_)
                    | AgentRecord::TapBroadcast(_)
            )
        })
        .cloned()
        .collect();
    joined.agent = join(Some(&clock_only), &[]).agent;
    joined.agent_runs = 1;
    crate::analysis::tapped::add_tap(&mut joined, agent);
    joined
}

/// Joins several agent runs (the agent restarted; its data directory holds
/// each run's segments) with the probe logs. A probe's connection records
/// and receipts go to the run that was up when they happened: run k from its
/// `Started` until the next run's. Broadcast ids are per run.
pub fn join_runs(agents: &[&[AgentRecord]], probes: &[&[ProbeRecord]]) -> Joined {
    if agents.len() < 2 {
        return join(agents.first().copied(), probes);
    }
    let started = |records: &[AgentRecord]| {
        records.iter().find_map(|r| match r {
            AgentRecord::Started(s) => Some(s.at.wall_ns),
            _ => None,
        })
    };
    let mut runs: Vec<(u64, &[AgentRecord])> = agents
        .iter()
        .map(|a| (started(a).unwrap_or(0), *a))
        .collect();
    runs.sort_by_key(|r| r.0);
    // Each probe whole: its clock records and stamps belong to every run.
    let mut merged = join(None, probes);
    merged.broadcasts.clear();
    merged.connections.clear();
    (merged.duplicates, merged.unmatched) = (0, 0);
    merged.agent_runs = runs.len() as u32;
    for (k, &(start, records)) in runs.iter().enumerate() {
        let end = runs.get(k + 1).map_or(u64::MAX, |r| r.0);
        let spans: Vec<Vec<ProbeRecord>> = probes
            .iter()
            .map(|p| {
                p.iter()
                    .filter(|r| connection_time(r).is_none_or(|t| (start..end).contains(&t)))
                    .cloned()
                    .collect()
            })
            .collect();
        let spans: Vec<&[ProbeRecord]> = spans.iter().map(Vec::as_slice).collect();
        let mut run = join(Some(records), &spans);
        let offset = merged.connections.len();
        merged.connections.append(&mut run.connections);
        for mut b in run.broadcasts {
            if let BroadcastKey::Agent { run, .. } = &mut b.key {
                *run = k as u32;
            }
            for r in &mut b.receipts {
                r.connection += offset;
            }
            for m in &mut b.missing {
                *m += offset;
            }
            merged.broadcasts.push(b);
        }
        merged.duplicates += run.duplicates;
        merged.unmatched += run.unmatched;
        merged.agent = match (merged.agent.take(), run.agent) {
            (None, agent) => agent,
            (Some(mut earlier), Some(later)) => {
                earlier.clock_states.extend(later.clock_states);
                earlier.stamps.extend(later.stamps);
                earlier.time_service = later.time_service.or(earlier.time_service);
                Some(earlier)
            }
            (earlier, None) => earlier,
        };
    }
    merged
}

/// When a record about a connection happened; `None` for the run's own
/// records (identity, clock, time exchange), which every agent run keeps.
fn connection_time(record: &ProbeRecord) -> Option<u64> {
    match record {
        ProbeRecord::ConnectionOpened(o) => Some(o.at.wall_ns),
        ProbeRecord::ConnectionFailed(f) => Some(f.at.wall_ns),
        ProbeRecord::ConnectionClosed(c) => Some(c.at.wall_ns),
        ProbeRecord::Receipt(r) => Some(r.at.wall_ns),
        ProbeRecord::Started(_)
        | ProbeRecord::Stopped(_)
        | ProbeRecord::ClockState(_)
        | ProbeRecord::TimeSample(_)
        | ProbeRecord::Identity(_)
        | ProbeRecord::ConnectionAddresses(_)
        | ProbeRecord::ConnectionTls(_)
        | ProbeRecord::ConnectionDeflate(_)
        | ProbeRecord::LogFull(_) => None,
    }
}

struct RawReceipt {
    connection: usize,
    key: MessageKey,
    hash: u64,
    at: Stamp,
    kernel_delay_ns: Option<u64>,
}

fn collect_probes(probes: &[&[ProbeRecord]]) -> (Vec<Connection>, Vec<Probe>, Vec<RawReceipt>) {
    let mut connections: Vec<Connection> = Vec::new();
    let mut infos = Vec::new();
    let mut receipts = Vec::new();
    for (p, records) in probes.iter().enumerate() {
        // Each time a connection index opens is its own connection here (a
        // reconnect after the server closed it): its own agent id and its own
        // window, so broadcasts sent while it was down are not missing for it.
        let mut current: BTreeMap<u32, usize> = BTreeMap::new();
        let mut info = Probe::default();
        let mut last_wall = 0u64;
        let mut closed: HashMap<usize, u64> = HashMap::new();
        let new_episode = |conn: u32, connections: &mut Vec<Connection>| -> usize {
            connections.push(Connection {
                probe: p,
                conn,
                agent_conn: None,
                opened_wall_ns: None,
                until_wall_ns: 0,
                addresses: None,
            });
            connections.len() - 1
        };
        for record in records.iter() {
            if let Some(at) = stamp_of(record) {
                info.stamps.push(at);
            }
            match record {
                ProbeRecord::Started(s) => {
                    info.name = s.name.clone();
                    info.host = s.host.clone();
                    last_wall = last_wall.max(s.at.wall_ns);
                }
                ProbeRecord::ConnectionOpened(o) => {
                    let i = match current.get(&o.conn) {
                        // Receipts came before its open record: the same one.
                        Some(&i) if connections[i].opened_wall_ns.is_none() => i,
                        _ => {
                            let i = new_episode(o.conn, &mut connections);
                            current.insert(o.conn, i);
                            i
                        }
                    };
                    connections[i].agent_conn = o.agent_conn;
                    connections[i].opened_wall_ns = Some(o.at.wall_ns);
                    last_wall = last_wall.max(o.at.wall_ns);
                }
                ProbeRecord::ConnectionFailed(f) => last_wall = last_wall.max(f.at.wall_ns),
                ProbeRecord::ConnectionClosed(c) => {
                    if let Some(&i) = current.get(&c.conn) {
                        closed.insert(i, c.at.wall_ns);
                    }
                    last_wall = last_wall.max(c.at.wall_ns);
                }
                ProbeRecord::Receipt(r) => {
                    let connection = *current
                        .entry(r.conn)
                        .or_insert_with(|| new_episode(r.conn, &mut connections));
                    receipts.push(RawReceipt {
                        connection,
                        key: r.key,
                        hash: r.hash,
                        at: r.at,
                        kernel_delay_ns: r.kernel_delay_ns,
                    });
                    last_wall = last_wall.max(r.at.wall_ns);
                }
                // Recording ended there: later broadcasts are not missing.
                ProbeRecord::Stopped(at) => {
                    last_wall = last_wall.max(at.wall_ns);
                    info.ended = RunEnd::Stopped;
                }
                ProbeRecord::LogFull(LogFull { at, .. }) => {
                    last_wall = last_wall.max(at.wall_ns);
                    info.ended = RunEnd::LogFull;
                }
                ProbeRecord::ClockState(c) => info.clock_states.push((**c).clone()),
                ProbeRecord::TimeSample(t) => info.samples.push(*t),
                ProbeRecord::Identity(i) => {
                    info.identity.get_or_insert_with(|| i.clone());
                }
                ProbeRecord::ConnectionTls(t) => {
                    info.tls_connections += 1;
                    info.tls_unverified += u64::from(!t.verified);
                }
                ProbeRecord::ConnectionDeflate(_) => info.deflate_connections += 1,
                ProbeRecord::ConnectionAddresses(a) => {
                    if let Some(&i) = current.get(&a.conn) {
                        connections[i].addresses = Some((a.local.clone(), a.remote.clone()));
                    }
                }
            }
        }
        info.clock = ClockIdentity::of(&info.host, info.identity.as_ref());
        for (i, c) in connections.iter_mut().enumerate() {
            if c.probe == p {
                c.until_wall_ns = closed.get(&i).copied().unwrap_or(last_wall);
            }
        }
        infos.push(info);
    }
    (connections, infos, receipts)
}

/// The stamp a probe record carries, for clock-step detection.
fn stamp_of(record: &ProbeRecord) -> Option<Stamp> {
    match record {
        ProbeRecord::Started(s) => Some(s.at),
        ProbeRecord::ConnectionOpened(o) => Some(o.at),
        ProbeRecord::ConnectionFailed(f) => Some(f.at),
        ProbeRecord::ConnectionClosed(c) => Some(c.at),
        ProbeRecord::Receipt(r) => Some(r.at),
        ProbeRecord::Stopped(at) => Some(*at),
        ProbeRecord::ClockState(c) => Some(c.at),
        // Its two stamps are checked by the exchange itself.
        ProbeRecord::TimeSample(t) => Some(t.t4),
        ProbeRecord::LogFull(l) => Some(l.at),
        ProbeRecord::Identity(_)
        | ProbeRecord::ConnectionAddresses(_)
        | ProbeRecord::ConnectionTls(_)
        | ProbeRecord::ConnectionDeflate(_) => None,
    }
}

fn join_with_agent(joined: &mut Joined, records: &[AgentRecord], receipts: &[RawReceipt]) {
    let mut broadcasts: BTreeMap<u64, AgentBroadcast> = BTreeMap::new();
    for record in records {
        match record {
            // Every segment of a run repeats it: keep what earlier ones built.
            AgentRecord::Started(s) if joined.agent.is_none() => {
                joined.agent = Some(Agent {
                    host: s.host.clone(),
                    identity: None,
                    clock: ClockIdentity::HostName(s.host.clone()),
                    shards: s.shards,
                    order: s.order,
                    per_client_times: s.per_client_times,
                    clock_states: Vec::new(),
                    time_service: None,
                    stamps: Vec::new(),
                    ended: RunEnd::NoStopRecord,
                    records_lost: 0,
                })
            }
            AgentRecord::Stopped(_) => {
                if let Some(a) = joined.agent.as_mut() {
                    a.ended = RunEnd::Stopped;
                }
            }
            AgentRecord::Broadcast(b) => {
                if let Some(a) = joined.agent.as_mut() {
                    a.stamps.push(b.at);
                }
                broadcasts.insert(
                    b.id,
                    AgentBroadcast {
                        seq: b.seq,
                        hash: b.hash,
                        start: b.at,
                        slots: HashMap::new(),
                    },
                );
            }
            AgentRecord::ShardSends(s) => {
                if let Some(b) = broadcasts.get_mut(&s.broadcast) {
                    for slot in &s.slots {
                        let done_mono = (slot.outcome == SendOutcome::Written && slot.mono_ns != 0)
                            .then_some(slot.mono_ns);
                        b.slots.insert(
                            slot.conn,
                            Slot {
                                outcome: slot.outcome,
                                done_mono,
                                tx_mono: None,
                            },
                        );
                    }
                }
            }
            AgentRecord::SendCompleted(c) => {
                if let Some(slot) = broadcasts
                    .get_mut(&c.broadcast)
                    .and_then(|b| b.slots.get_mut(&c.conn))
                {
                    slot.done_mono = Some(c.mono_ns);
                }
            }
            AgentRecord::TxStamp(t) if t.kind == TxKind::Software => {
                if let Some(slot) = broadcasts
                    .get_mut(&t.broadcast)
                    .and_then(|b| b.slots.get_mut(&t.conn))
                {
                    slot.tx_mono = Some(t.mono_ns);
                }
            }
            AgentRecord::ClockState(c) => {
                if let Some(a) = joined.agent.as_mut() {
                    a.clock_states.push(c.clone());
                }
            }
            AgentRecord::TimeService(t) => {
                if let Some(a) = joined.agent.as_mut() {
                    a.time_service = Some(*t);
                }
            }
            AgentRecord::Identity(i) => {
                if let Some(a) = joined.agent.as_mut()
                    && a.identity.is_none()
                {
                    a.identity = Some(i.clone());
                    a.clock = ClockIdentity::of(&a.host, Some(i));
                }
            }
            // The tap's records are joined in `analysis::tapped`.
            AgentRecord::Started(_)
            | AgentRecord::ConnectionOpened(_)
            | AgentRecord::ConnectionClosed(_)
            | AgentRecord::TxStamp(_)
            | AgentRecord::TapStarted(_)
            | AgentRecord::TapConnectionOpened(_)
            | AgentRecord::TapConnectionClosed(_)
            | AgentRecord::TapBroadcast(_)
            | AgentRecord::TapCounters(_)
            | AgentRecord::TapConnectionTotals(_)
            | AgentRecord::ConnectionSubprotocol(_) => {}
            AgentRecord::RecordsLost(l) => {
                if let Some(a) = joined.agent.as_mut() {
                    a.records_lost += l.count;
                }
            }
        }
    }

    let by_seq: HashMap<u64, u64> = broadcasts
        .iter()
        .filter_map(|(&id, b)| b.seq.map(|s| (s, id)))
        .collect();
    // (agent conn, hash) → the broadcasts with that payload sent to that conn, in order.
    let mut by_conn_hash: HashMap<(u64, u64), Vec<u64>> = HashMap::new();
    for (&id, b) in &broadcasts {
        for &conn in b.slots.keys() {
            by_conn_hash.entry((conn, b.hash)).or_default().push(id);
        }
    }
    for ids in by_conn_hash.values_mut() {
        ids.sort_unstable();
    }
    // An agent's connection ids start again at 1 when it restarts, so a
    // probe that reconnected to a later run has episodes with the same id.
    let mut by_agent_conn: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, c) in joined.connections.iter().enumerate() {
        if let Some(a) = c.agent_conn {
            by_agent_conn.entry(a).or_default().push(i);
        }
    }

    let mut got: HashMap<u64, BTreeMap<usize, JoinedReceipt>> = HashMap::new();
    // Episodes with a receipt of this run: where an id is shared, the one
    // this run's broadcasts went to.
    let mut matched_episodes: HashSet<usize> = HashSet::new();
    for r in receipts {
        let agent_conn = joined.connections[r.connection].agent_conn;
        let id = match r.key {
            MessageKey::Seq(seq) => by_seq
                .get(&seq)
                .copied()
                .filter(|id| broadcasts[id].hash == r.hash),
            MessageKey::Hash { hash, occurrence } => agent_conn.and_then(|a| {
                by_conn_hash
                    .get(&(a, hash))
                    .and_then(|ids| ids.get(occurrence as usize).copied())
            }),
        };
        let Some(id) = id else {
            joined.unmatched += 1;
            continue;
        };
        matched_episodes.insert(r.connection);
        let b = &broadcasts[&id];
        let slot = agent_conn.and_then(|a| b.slots.get(&a));
        let mut joined_receipt = plain_receipt(r);
        joined_receipt.sent_wall_ns = slot.and_then(|s| s.done_mono).map(|m| b.start.wall_at(m));
        joined_receipt.tx_wall_ns = slot.and_then(|s| s.tx_mono).map(|m| b.start.wall_at(m));
        keep_first(
            got.entry(id).or_default(),
            joined_receipt,
            &mut joined.duplicates,
        );
    }

    for (id, b) in &broadcasts {
        let receipts_of = got.remove(id).unwrap_or_default();
        let episode_of = |a: &u64| -> Option<usize> {
            let episodes = by_agent_conn.get(a)?;
            match episodes.as_slice() {
                [one] => Some(*one),
                _ => episodes
                    .iter()
                    .copied()
                    .find(|i| matched_episodes.contains(i))
                    .or_else(|| {
                        episodes
                            .iter()
                            .copied()
                            .find(|&i| listening(&joined.connections[i], b.start.wall_ns))
                    }),
            }
        };
        let mut missing: Vec<usize> = b
            .slots
            .keys()
            .filter_map(episode_of)
            // The agent saw it connected; the probe's own clock only says when it
            // stopped listening (a probe that stopped early is not missing later ones).
            .filter(|&i| {
                !receipts_of.contains_key(&i)
                    && b.start.wall_ns <= joined.connections[i].until_wall_ns
            })
            .collect();
        // Probe connections the agent could not name: judge them by their window.
        missing.extend(
            joined
                .connections
                .iter()
                .enumerate()
                .filter(|(i, c)| {
                    c.agent_conn.is_none()
                        && !receipts_of.contains_key(i)
                        && listening(c, b.start.wall_ns)
                })
                .map(|(i, _)| i),
        );
        missing.sort_unstable();
        let last_done = b.slots.values().filter_map(|s| s.done_mono).max();
        let count = |o: SendOutcome| b.slots.values().filter(|s| s.outcome == o).count() as u32;
        joined.broadcasts.push(JoinedBroadcast {
            key: BroadcastKey::Agent { run: 0, id: *id },
            agent: Some(AgentSide {
                start: b.start,
                targets: b.slots.len() as u32,
                queued: count(SendOutcome::Queued),
                dropped: count(SendOutcome::Dropped) + count(SendOutcome::Failed),
                fanout_span_ns: last_done.map(|t| t.saturating_sub(b.start.mono_ns)),
            }),
            receipts: receipts_of.into_values().collect(),
            missing,
        });
    }
}

/// A receipt with what the probe knows; the agent's side is filled in by the caller.
fn plain_receipt(r: &RawReceipt) -> JoinedReceipt {
    JoinedReceipt {
        connection: r.connection,
        wall_ns: r.at.wall_ns,
        mono_ns: r.at.mono_ns,
        kernel_delay_ns: r.kernel_delay_ns,
        sent_wall_ns: None,
        tx_wall_ns: None,
    }
}

/// Keeps a connection's first receipt of a broadcast; later ones are duplicates.
fn keep_first(
    receipts_of: &mut BTreeMap<usize, JoinedReceipt>,
    r: JoinedReceipt,
    duplicates: &mut u64,
) {
    match receipts_of.entry(r.connection) {
        std::collections::btree_map::Entry::Occupied(_) => *duplicates += 1,
        std::collections::btree_map::Entry::Vacant(v) => {
            v.insert(r);
        }
    }
}

/// Whether a connection was open and listening at wall time `t`.
fn listening(c: &Connection, t: u64) -> bool {
    c.opened_wall_ns.is_some_and(|o| o <= t) && t <= c.until_wall_ns
}

fn join_probes_only(joined: &mut Joined, receipts: &[RawReceipt]) {
    let mut got: BTreeMap<MessageKey, BTreeMap<usize, JoinedReceipt>> = BTreeMap::new();
    for r in receipts {
        keep_first(
            got.entry(r.key).or_default(),
            plain_receipt(r),
            &mut joined.duplicates,
        );
    }
    let mut rows: Vec<(u64, JoinedBroadcast)> = got
        .into_iter()
        .map(|(key, receipts_of)| {
            let first = receipts_of.values().map(|r| r.wall_ns).min().unwrap_or(0);
            let missing = joined
                .connections
                .iter()
                .enumerate()
                .filter(|(i, c)| !receipts_of.contains_key(i) && listening(c, first))
                .map(|(i, _)| i)
                .collect();
            let row = JoinedBroadcast {
                key: BroadcastKey::Message(key),
                agent: None,
                receipts: receipts_of.into_values().collect(),
                missing,
            };
            (first, row)
        })
        .collect();
    rows.sort_by_key(|(first, row)| (*first, row.key));
    joined.broadcasts = rows.into_iter().map(|(_, row)| row).collect();
}
