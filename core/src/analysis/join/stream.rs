//! The join proper, with probe logs read as they come.
//!
//! A first pass reads each probe log's own side ([`super::probes`]) and
//! counts, for every broadcast, the receipts that will be matched to it. A
//! second pass reads every probe log at once, merged by wall time, and holds
//! a broadcast's receipts only until its count is reached: then the
//! broadcast is final, goes to the sink and is forgotten. Memory is the
//! agent's own records, a count per broadcast, and the receipts of
//! broadcasts still arriving, never every receipt of the run.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};

use super::model::{
    Agent, AgentBroadcast, AgentSide, AutoLeadTerms, BroadcastKey, ClockIdentity, Joined,
    JoinedAction, JoinedBroadcast, JoinedReceipt, RunEnd, Slot, listening,
};
use super::probes::{Episodes, StampThinner, collect_probes};
use super::source::{AgentSource, ProbeSource};
use crate::analysis::fanout::{Fanout, FanoutTracker};
use crate::analysis::matching::{CopyNumbers, copy_of, numbered_by_copy};
use crate::page_ingest::parse_page_label;
use crate::record::{AgentRecord, MessageKey, ProbeRecord, Receipt, SendOutcome, TxKind};

/// The agent run's broadcasts, and the indices receipts are matched by.
struct AgentIndex {
    broadcasts: BTreeMap<u64, AgentBroadcast>,
    by_seq: HashMap<u64, u64>,
    /// Each payload's copies on each agent connection, numbered.
    copies: CopyNumbers,
    /// An agent's connection ids start again at 1 when it restarts, so a
    /// probe that reconnected to a later run has episodes with the same id.
    by_agent_conn: HashMap<u64, Vec<usize>>,
}

/// Which broadcast a receipt belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Target {
    /// The agent's broadcast with this id.
    Agent(u64),
    /// The broadcast the probes know by this key (no agent log).
    Message(MessageKey),
}

/// A broadcast's 32-bit fingerprint: what its receipt count is kept under.
/// Four bytes instead of a key of twenty-four keep a run of ten million
/// broadcasts' counts in about 150 MB. Two broadcasts that share one have
/// their counts summed, so neither reaches it before the end of the pass:
/// they are handed over then, whole, at the cost of holding them.
fn fingerprint(t: &Target) -> u32 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    t.hash(&mut h);
    #[expect(
        clippy::cast_possible_truncation,
        reason = "a fingerprint: the hash's low 32 bits are the point"
    )]
    let low = h.finish() as u32;
    low
}

/// Receipt counts by fingerprint. The fingerprint is already a hash: it is
/// only spread over 64 bits, not hashed again.
type Counts = HashMap<u32, u32, std::hash::BuildHasherDefault<Spread>>;

/// The hasher of [`Counts`]: a multiplication, so the table's control bits
/// (the hash's top ones) vary.
#[derive(Default)]
struct Spread(u64);

impl std::hash::Hasher for Spread {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A broadcast whose receipts (and actions) are still arriving.
#[derive(Default)]
struct Pending {
    receipts: BTreeMap<usize, JoinedReceipt>,
    actions: BTreeMap<usize, JoinedAction>,
    /// The frames actions were drawn in, by connection.
    frames: BTreeMap<usize, crate::Stamp>,
    seen: u32,
    /// The payload hash its receipts carried.
    hash: Option<u64>,
}

/// One join of at most one agent run with probe logs, after the first pass.
pub(super) struct Plan {
    /// Everything but the broadcasts.
    pub joined: Joined,
    agent: Option<AgentIndex>,
    /// Per probe, the connections its records made, in order.
    made: Vec<Vec<usize>>,
    /// Receipts each broadcast will be matched, duplicates included, by the
    /// broadcast's [`fingerprint`].
    expected: Counts,
    /// Connections with a receipt matched to this agent run.
    matched_episodes: HashSet<usize>,
}

/// Reads the agent's records and the probe logs' own side, then counts each
/// broadcast's receipts.
pub(super) fn plan(agent: Option<&dyn AgentSource>, probes: &[&dyn ProbeSource]) -> Plan {
    let side = collect_probes(probes);
    let mut joined = Joined {
        agent: None,
        probes: side.probes,
        connections: side.connections,
        broadcasts: Vec::new(),
        duplicates: 0,
        unmatched: 0,
        unmatched_actions: 0,
        agent_runs: u32::from(agent.is_some()),
        tap: None,
        most_receipts_held: 0,
    };
    let index = agent.map(|source| index_agent(&mut joined, source.records(), side.hash_keyed));
    let mut expected = Counts::default();
    expected.reserve(side.broadcasts_estimate);
    let mut matched_episodes = HashSet::new();
    for (p, source) in probes.iter().enumerate() {
        let mut episodes = Episodes::replay(side.made[p].clone());
        for record in source.records() {
            let Some(o) = observed(&mut episodes, &record) else {
                continue;
            };
            if o.named_on.max(o.held_by) >= joined.connections.len() {
                continue;
            }
            if let Some(t) = target(&joined, index.as_ref(), o.named_on, o.key, o.hash) {
                *expected.entry(fingerprint(&t)).or_insert(0) += 1;
                if index.is_some() && o.is_receipt {
                    matched_episodes.insert(o.named_on);
                }
            }
        }
    }
    Plan {
        joined,
        agent: index,
        made: side.made,
        expected,
        matched_episodes,
    }
}

/// A record about one message on one connection, as the join matches it.
struct Observed {
    /// The connection whose receipts name the message.
    named_on: usize,
    /// The connection the record belongs to (an app's beside the probe
    /// holds its actions on messages the probe's connection received).
    held_by: usize,
    key: MessageKey,
    hash: u64,
    /// A receipt (else an action or a frame).
    is_receipt: bool,
}

/// A receipt's, an action's or a frame's connections and message; `None`
/// for any other record.
fn observed(episodes: &mut Episodes, record: &ProbeRecord) -> Option<Observed> {
    let (named_on, held_by) = episodes.follow(record)?;
    let (key, hash, is_receipt) = match record {
        ProbeRecord::Receipt(r) => (r.key, r.hash, true),
        ProbeRecord::Action(a) => (a.key, a.hash, false),
        ProbeRecord::AppAction(a) => (a.action.key, a.action.hash, false),
        ProbeRecord::Frame(f) => (f.key, f.hash, false),
        _ => return None,
    };
    Some(Observed {
        named_on,
        held_by,
        key,
        hash,
        is_receipt,
    })
}

/// The broadcast a receipt or an action on `connection` of the message
/// `key` (payload `hash`) belongs to, if any.
fn target(
    joined: &Joined,
    index: Option<&AgentIndex>,
    connection: usize,
    key: MessageKey,
    hash: u64,
) -> Option<Target> {
    let Some(ix) = index else {
        return Some(Target::Message(key));
    };
    let agent_conn = joined.connections.get(connection)?.agent_conn;
    let by_seq = |seq| {
        let id = *ix.by_seq.get(&seq)?;
        Some((id, ix.broadcasts.get(&id)?.hash))
    };
    let id = copy_of(key, hash, agent_conn, by_seq, &ix.copies);
    // A broadcast already handed over takes no more (only if a log grew
    // between the passes): its late receipts are unmatched, and counted.
    id.filter(|id| ix.broadcasts.contains_key(id))
        .map(Target::Agent)
}

/// One probe log in the merge: its next record and the wall time it is at.
struct Stream<'a> {
    records: Box<dyn Iterator<Item = ProbeRecord> + 'a>,
    episodes: Episodes,
    next: Option<ProbeRecord>,
    at: u64,
}

impl Stream<'_> {
    fn advance(&mut self) {
        self.next = self.records.next();
        if let Some(s) = self.next.as_ref().and_then(ProbeRecord::stamp) {
            self.at = self.at.max(s.wall_ns);
        }
    }
}

impl Plan {
    /// The second pass: every broadcast to `sink` once its receipts are in.
    /// Returns the run with its final counts and no broadcasts.
    pub(super) fn stream(
        mut self,
        probes: &[&dyn ProbeSource],
        sink: &mut dyn FnMut(&Joined, JoinedBroadcast),
    ) -> Joined {
        let mut streams: Vec<Stream> = probes
            .iter()
            .zip(std::mem::take(&mut self.made))
            .map(|(source, made)| {
                let mut s = Stream {
                    records: source.records(),
                    episodes: Episodes::replay(made),
                    next: None,
                    at: 0,
                };
                s.advance();
                s
            })
            .collect();
        let mut heap: BinaryHeap<Reverse<(u64, usize)>> = streams
            .iter()
            .enumerate()
            .filter(|(_, s)| s.next.is_some())
            .map(|(i, s)| Reverse((s.at, i)))
            .collect();
        // The agent's broadcasts no receipt will complete, by start time.
        let mut unreceived: Vec<(u64, u64)> = self
            .agent
            .as_ref()
            .map(|ix| {
                ix.broadcasts
                    .iter()
                    .filter(|(id, _)| {
                        !self
                            .expected
                            .contains_key(&fingerprint(&Target::Agent(**id)))
                    })
                    .map(|(&id, b)| (b.start.wall_ns, id))
                    .collect()
            })
            .unwrap_or_default();
        unreceived.sort_unstable_by(|a, b| b.cmp(a));
        let mut pending: HashMap<Target, Pending> = HashMap::new();
        let (mut duplicates, mut unmatched, mut unmatched_actions) = (0u64, 0u64, 0u64);
        let (mut held, mut most_held) = (0u64, 0u64);

        while let Some(Reverse((_, i))) = heap.pop() {
            let stream = &mut streams[i];
            let Some(record) = stream.next.take() else {
                continue;
            };
            let seen = observed(&mut stream.episodes, &record);
            stream.advance();
            if stream.next.is_some() {
                heap.push(Reverse((stream.at, i)));
            }
            let Some(Observed {
                named_on,
                held_by: connection,
                key,
                hash,
                is_receipt,
            }) = seen
            else {
                continue;
            };
            // A connection the first pass never saw: the log changed
            // between the passes (the collector checks for that too).
            if named_on.max(connection) >= self.joined.connections.len() {
                if is_receipt {
                    unmatched += 1;
                } else {
                    unmatched_actions += 1;
                }
                continue;
            }
            let at_wall_ns = record.stamp().map_or(0, |s| s.wall_ns);
            while unreceived
                .last()
                .is_some_and(|&(start, _)| start <= at_wall_ns)
            {
                let (_, id) = unreceived.pop().expect("just looked");
                self.finish(Target::Agent(id), Pending::default(), sink);
            }
            let Some(t) = target(&self.joined, self.agent.as_ref(), named_on, key, hash) else {
                if is_receipt {
                    unmatched += 1;
                } else {
                    unmatched_actions += 1;
                }
                continue;
            };
            let entry = pending.entry(t).or_default();
            entry.hash.get_or_insert(hash);
            match record {
                ProbeRecord::Receipt(r) => {
                    let receipt = self.receipt(t, connection, &r);
                    match entry.receipts.entry(connection) {
                        std::collections::btree_map::Entry::Occupied(_) => duplicates += 1,
                        std::collections::btree_map::Entry::Vacant(v) => {
                            v.insert(receipt);
                        }
                    }
                }
                ProbeRecord::Action(a)
                | ProbeRecord::AppAction(crate::record::AppAction { action: a, .. }) => {
                    match entry.actions.entry(connection) {
                        std::collections::btree_map::Entry::Occupied(_) => unmatched_actions += 1,
                        std::collections::btree_map::Entry::Vacant(v) => {
                            v.insert(JoinedAction::of(connection, &a));
                        }
                    }
                }
                ProbeRecord::Frame(f) => {
                    entry.frames.entry(connection).or_insert(f.at);
                }
                _ => unreachable!("observed() takes receipts, actions and frames only"),
            }
            entry.seen += 1;
            held += 1;
            most_held = most_held.max(held);
            let fp = fingerprint(&t);
            if self.expected.get(&fp).is_some_and(|&n| entry.seen >= n) {
                let done = pending.remove(&t).expect("just updated");
                held -= u64::from(done.seen);
                self.expected.remove(&fp);
                self.finish(t, done, sink);
            }
        }
        while let Some((_, id)) = unreceived.pop() {
            self.finish(Target::Agent(id), Pending::default(), sink);
        }
        // Broadcasts whose fingerprints collided (their counts were summed),
        // or, if a log changed between the passes, ones still short of their
        // count: what arrived is final now.
        let mut left: Vec<(Target, Pending)> = pending.into_iter().collect();
        left.sort_unstable_by_key(|(t, _)| *t);
        for (t, p) in left {
            self.finish(t, p, sink);
        }
        // The agent's broadcasts no receipt came for, that collided with one
        // a receipt came for.
        let unfinished: Vec<u64> = self
            .agent
            .as_ref()
            .map(|ix| ix.broadcasts.keys().copied().collect())
            .unwrap_or_default();
        for id in unfinished {
            self.finish(Target::Agent(id), Pending::default(), sink);
        }
        self.joined.duplicates = duplicates;
        self.joined.unmatched = unmatched;
        self.joined.unmatched_actions = unmatched_actions;
        self.joined.most_receipts_held = most_held;
        self.joined
    }

    /// A receipt with what the agent recorded about its copy.
    fn receipt(&self, t: Target, connection: usize, r: &Receipt) -> JoinedReceipt {
        let mut receipt = JoinedReceipt {
            connection,
            wall_ns: r.at.wall_ns,
            mono_ns: r.at.mono_ns,
            kernel_delay_ns: r.kernel_delay_ns,
            sent_wall_ns: None,
            tx_wall_ns: None,
        };
        if let (Target::Agent(id), Some(ix)) = (t, &self.agent)
            && let Some(b) = ix.broadcasts.get(&id)
        {
            let slot = self.joined.connections[connection]
                .agent_conn
                .and_then(|a| b.slots.get(&a));
            receipt.sent_wall_ns = slot.and_then(|s| s.done_mono).map(|m| b.start.wall_at(m));
            receipt.tx_wall_ns = slot.and_then(|s| s.tx_mono).map(|m| b.start.wall_at(m));
        }
        receipt
    }

    /// Makes a final broadcast of `t` with its receipts and actions and
    /// hands it on.
    fn finish(&mut self, t: Target, got: Pending, sink: &mut dyn FnMut(&Joined, JoinedBroadcast)) {
        let mut row = match t {
            Target::Message(key) => {
                let mut row = self.message_row(key, got.receipts);
                row.hash = got.hash;
                row
            }
            // Handed over once: removed from the index as it goes.
            Target::Agent(id) => match self.agent.as_mut().and_then(|ix| ix.broadcasts.remove(&id))
            {
                Some(b) => self.agent_row(id, &b, got.receipts),
                None => return,
            },
        };
        row.actions = got
            .actions
            .into_values()
            .map(|mut a| {
                a.frame = got.frames.get(&a.connection).copied();
                a
            })
            .collect();
        sink(&self.joined, row);
    }

    /// A broadcast known only by what the probes saw: missing for the
    /// connections listening at its first receipt that did not get it.
    fn message_row(
        &self,
        key: MessageKey,
        receipts_of: BTreeMap<usize, JoinedReceipt>,
    ) -> JoinedBroadcast {
        let first = receipts_of.values().map(|r| r.wall_ns).min().unwrap_or(0);
        let missing = self
            .joined
            .connections
            .iter()
            .enumerate()
            .filter(|(i, c)| !receipts_of.contains_key(i) && listening(c, first))
            .map(|(i, _)| i)
            .collect();
        JoinedBroadcast {
            key: BroadcastKey::Message(key),
            hash: None,
            agent: None,
            receipts: receipts_of.into_values().collect(),
            missing,
            actions: Vec::new(),
            auto_left_out: Vec::new(),
        }
    }

    /// An agent broadcast: missing for its targets the probes name that did
    /// not get it, and for probe connections the agent could not name that
    /// were listening.
    fn agent_row(
        &self,
        id: u64,
        b: &AgentBroadcast,
        receipts_of: BTreeMap<usize, JoinedReceipt>,
    ) -> JoinedBroadcast {
        let ix = self.agent.as_ref().expect("an agent row has an agent");
        let connections = &self.joined.connections;
        let episode_of = |a: &u64| -> Option<usize> {
            let episodes = ix.by_agent_conn.get(a)?;
            match episodes.as_slice() {
                [one] => Some(*one),
                _ => episodes
                    .iter()
                    .copied()
                    .find(|i| self.matched_episodes.contains(i))
                    .or_else(|| {
                        episodes
                            .iter()
                            .copied()
                            .find(|&i| listening(&connections[i], b.start.wall_ns))
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
                !receipts_of.contains_key(&i) && b.start.wall_ns <= connections[i].until_wall_ns
            })
            .collect();
        // Probe connections the agent could not name: judge them by their window.
        missing.extend(
            connections
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
        JoinedBroadcast {
            key: BroadcastKey::Agent { run: 0, id },
            hash: Some(b.hash),
            agent: Some(AgentSide {
                start: b.start,
                targets: b.fanout.as_ref().map_or(0, |f| f.targets),
                queued: b.fanout.as_ref().map_or(0, |f| f.queued),
                dropped: b.fanout.as_ref().map_or(0, |f| f.dropped),
                fanout_span_ns: b.fanout.as_ref().and_then(Fanout::span_ns),
                lead: b.lead,
                auto_terms: b.auto_basis.as_ref().map(|a| AutoLeadTerms {
                    wanted_ns: a.wanted_ns,
                    ceiling_ns: a.ceiling_ns,
                    readiness_ns: a.readiness_ns,
                    reads: a.reads,
                    tail_model: a.tail_model,
                }),
            }),
            receipts: receipts_of.into_values().collect(),
            missing,
            actions: Vec::new(),
            auto_left_out: b
                .auto_basis
                .as_ref()
                .map(|a| a.left_out.clone())
                .unwrap_or_default(),
        }
    }
}

/// The connection episodes of browser probes and apps (whose records name
/// no hub connection), in the order they opened, by run and connection.
fn page_openings(joined: &Joined) -> HashMap<(u128, u32), VecDeque<usize>> {
    let mut openings: HashMap<(u128, u32), VecDeque<usize>> = HashMap::new();
    for (i, c) in joined.connections.iter().enumerate() {
        let probe = &joined.probes[c.probe];
        let page_or_app = probe.page.is_some() || probe.app.is_some();
        if let (None, true, None, Some(identity)) =
            (c.agent_conn, page_or_app, &c.app, &probe.identity)
        {
            openings
                .entry((identity.run_id, c.conn))
                .or_default()
                .push_back(i);
        }
    }
    openings
}

/// Reads one agent run's records into `joined.agent` and the broadcasts'
/// index. Each broadcast keeps its counts over every target, but the copies
/// themselves only of connections a probe named: a hub's other clients are
/// most of the sends, and no receipt will ask for them. The index by payload
/// hash is built only `by_hash` (some receipt is known by its hash).
fn index_agent(
    joined: &mut Joined,
    records: impl Iterator<Item = AgentRecord>,
    by_hash: bool,
) -> AgentIndex {
    let mut by_agent_conn: HashMap<u64, Vec<usize>> = HashMap::new();
    for (i, c) in joined.connections.iter().enumerate() {
        if let Some(a) = c.agent_conn {
            by_agent_conn.entry(a).or_default().push(i);
        }
    }
    let mut page_openings = page_openings(joined);
    let mut broadcasts: BTreeMap<u64, AgentBroadcast> = BTreeMap::new();
    let mut thinner = StampThinner::default();
    let mut fanouts = FanoutTracker::default();
    for record in records {
        for (id, fanout) in fanouts.observe(&record) {
            if let Some(b) = broadcasts.get_mut(&id) {
                b.fanout = Some(fanout);
            }
        }
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
                    time_port: None,
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
                    thinner.offer(b.at, &mut a.stamps);
                }
                broadcasts.insert(
                    b.id,
                    AgentBroadcast {
                        seq: b.seq,
                        hash: b.hash,
                        start: b.at,
                        slots: HashMap::new(),
                        fanout: None,
                        lead: None,
                        auto_basis: None,
                    },
                );
            }
            AgentRecord::ShardSends(s) => {
                if let Some(b) = broadcasts.get_mut(&s.broadcast) {
                    for slot in &s.slots {
                        let done_mono = (slot.outcome == SendOutcome::Written && slot.mono_ns != 0)
                            .then_some(slot.mono_ns);
                        if by_agent_conn.contains_key(&slot.conn) {
                            b.slots.insert(
                                slot.conn,
                                Slot {
                                    done_mono,
                                    tx_mono: None,
                                },
                            );
                        }
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
                    a.clock_states.push(c);
                }
            }
            AgentRecord::TimePort(t) => {
                if let Some(a) = joined.agent.as_mut() {
                    a.time_port = Some(t);
                }
            }
            AgentRecord::Identity(i) => {
                if let Some(a) = joined.agent.as_mut()
                    && a.identity.is_none()
                {
                    a.clock = ClockIdentity::of(&a.host, Some(&i));
                    a.identity = Some(i);
                }
            }
            // A browser probe's connection, named by its label: the
            // episode the hub did not name in the page's records.
            AgentRecord::ConnectionOpened(o) => {
                let episode = o
                    .label
                    .as_deref()
                    .and_then(parse_page_label)
                    .and_then(|key| page_openings.get_mut(&key))
                    .and_then(VecDeque::pop_front);
                if let Some(i) = episode {
                    joined.connections[i].agent_conn = Some(o.conn);
                    by_agent_conn.entry(o.conn).or_default().push(i);
                }
            }
            // The tap's records are joined in `analysis::tapped`.
            AgentRecord::Started(_)
            | AgentRecord::ConnectionClosed(_)
            | AgentRecord::TxStamp(_)
            | AgentRecord::TapStarted(_)
            | AgentRecord::TapConnectionOpened(_)
            | AgentRecord::TapConnectionClosed(_)
            | AgentRecord::TapBroadcast(_)
            | AgentRecord::TapCounters(_)
            | AgentRecord::TapConnectionTotals(_)
            | AgentRecord::ConnectionSubprotocol(_) => {}
            AgentRecord::LeadChosen(l) => {
                if let Some(b) = broadcasts.get_mut(&l.broadcast) {
                    b.lead = Some(l);
                }
            }
            AgentRecord::AutoLeadBasis(a) => {
                if let Some(b) = broadcasts.get_mut(&a.broadcast) {
                    b.auto_basis = Some(a);
                }
            }
            AgentRecord::RecordsLost(l) => {
                if let Some(a) = joined.agent.as_mut() {
                    a.records_lost += l.count;
                }
            }
        }
    }
    for (id, fanout) in fanouts.finish() {
        if let Some(b) = broadcasts.get_mut(&id) {
            b.fanout = Some(fanout);
        }
    }
    let by_seq: HashMap<u64, u64> = broadcasts
        .iter()
        .filter_map(|(&id, b)| b.seq.map(|s| (s, id)))
        .collect();
    // Only receipts known by payload hash are matched through it.
    let mut copies = CopyNumbers::default();
    if by_hash {
        // In id order: the map iterates so.
        for (&id, b) in &broadcasts {
            if numbered_by_copy(b.seq) {
                for &conn in b.slots.keys() {
                    copies.sent(conn, b.hash, id);
                }
            }
        }
    }
    AgentIndex {
        broadcasts,
        by_seq,
        copies,
        by_agent_conn,
    }
}
