//! The join as records arrive, for monitoring: the agent's broadcasts and the
//! probes' uploaded receipts, each broadcast judged once it is final, in
//! bounded memory.
//!
//! The report joins whole logs; an agent that must say its receive skew on
//! `/metrics` cannot keep them. This holds only the broadcasts not yet final
//! and, per probe run, its recent time exchanges and the map of its
//! connections. A broadcast is **final** when nothing more can come for any
//! probe connection it targeted: each has its receipt, or its probe closed
//! it, stopped, or uploaded records past it (the one rule of
//! [`crate::analysis::settled`], which the audit's wait also follows); or
//! when [`FINAL_TIMEOUT_NS`] have passed. Then it
//! yields its raw skew, the upper bound of its skew in the agent's
//! timebase, and the receipts missing from connections whose probe had
//! caught up; a target whose probe had not is *unjudged*, never counted
//! missing on no evidence.
//!
//! A receipt is matched by the report's own rule (`analysis::matching`):
//! a test message by its sequence number and hash; any other payload by the
//! agent's connection id and hash, by its occurrence on that connection.
//! Only pending broadcasts are candidates, so a receipt uploaded after its
//! broadcast was final is counted unmatched (one uploaded before the
//! agent's record of it waits, up to [`MAX_EARLY`]).

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::Stamp;
use crate::analysis::fanout::{Fanout, FanoutTracker};
use crate::analysis::matching::{CopyNumbers, copy_of};
use crate::analysis::settled::moved_past;
use crate::analysis::timebase::{place, spread_of_all};
use crate::clock::{ClockModel, Correction, Exchange, HORIZON_NS};
use crate::page_ingest::parse_page_label;
use crate::record::{AgentRecord, ClockState, MessageKey, ProbeRecord, TimeSample};

use targets::{Arrival, Placed, Targets};

mod targets;

/// A broadcast is final this long after its start whatever has arrived.
pub const FINAL_TIMEOUT_NS: u64 = 30_000_000_000;
/// Broadcasts held at most; past it the oldest is judged early.
pub const MAX_PENDING: usize = 1_024;
/// Time exchanges kept per run at most: the clock model keeps those within
/// its horizon of the moments still asked about, and this caps a probe that
/// exchanges far faster than its schedule would.
pub const MAX_EXCHANGES_PER_RUN: usize = 4_096;
/// Receipts held at most while their broadcast's record is not here yet.
pub const MAX_EARLY: usize = 50_000;
/// Probe runs followed at most (their names label metrics).
pub const MAX_RUNS: usize = 256;
/// How far a device clock may be off the agent's for its records to count
/// as this agent run's (earlier runs' come from probes uploading old logs).
pub const CLOCK_TOLERANCE_NS: u64 = 60_000_000_000;
/// Payload counts per probe connection kept at most (the matching rule's
/// occurrence numbers, `CopyNumbers`): about 100 bytes each. Past it, the
/// counts of payloads sent longest ago are dropped, and counted.
pub const MAX_COPY_COUNTS: usize = 65_536;
/// A run silent this long is forgotten.
pub const RUN_FORGOTTEN_AFTER_NS: u64 = 600_000_000_000;

/// A broadcast the agent sent, waiting to be final.
#[derive(Debug)]
struct Pending {
    id: u64,
    seq: Option<u64>,
    hash: u64,
    start: Stamp,
    /// The probes' connections it was sent to, and their receipts.
    targets: Targets,
    /// Actions on it (probes, pages, apps): agent connection, and the action.
    actions: Vec<(u64, Acted)>,
    /// Its first receipt on a probe's clock, once one came: what a probe's
    /// records must move past before nothing more of it can come.
    first_receipt_wall_ns: Option<u64>,
    /// The (agent conn, key) of its receipts, kept in [`LiveJoin::placed`]
    /// until it is judged (only for runs that act).
    placed_keys: Vec<(u64, MessageKey)>,
}

/// One action, as the live join keeps it.
#[derive(Clone, Copy, Debug)]
struct Acted {
    run: u128,
    /// An app beside the probe acted (`--act-notify`), not the probe.
    by_app: bool,
    done: Stamp,
    late: bool,
    /// When it was late, its reaction (read to acted, on the device's
    /// clock): what `lead=auto` takes the device's readiness from.
    reaction_ns: Option<i64>,
}

/// A receipt waiting for its broadcast's record.
#[derive(Clone, Copy, Debug)]
struct Early {
    key: MessageKey,
    hash: u64,
    agent_conn: Option<u64>,
    arrival: Arrival,
}

/// An agent connection that named its probe.
#[derive(Clone, Debug)]
struct Labelled {
    name: String,
    /// The agent has seen it close.
    closed: bool,
}

/// The probe connection an agent connection is.
#[derive(Clone, Copy, Debug)]
struct Holder {
    run: u128,
    /// When the probe closed it (its clock): not missing anything after.
    closed_wall_ns: Option<u64>,
}

/// A probe run being followed.
#[derive(Debug, Default)]
struct Run {
    name: String,
    /// Probe connection index → agent connection of its latest opening.
    conns: HashMap<u32, u64>,
    /// Its clock against the agent's: the one clock model, fed as its
    /// exchanges upload.
    clock: ClockModel,
    /// Its latest exchange's reply, on its clocks: where its offset is
    /// shown on `/metrics`.
    latest_exchange: Option<Stamp>,
    claim: Option<ClockState>,
    /// Latest wall stamp among its uploaded records (its own clock).
    through_wall_ns: u64,
    /// Its stop (or log-full) record came: nothing more will.
    stopped: bool,
    /// Agent wall time it last uploaded.
    last_upload_wall_ns: u64,
    /// It acts on broadcasts (its `ActPlan` came): a receipt is complete
    /// only with its action.
    acts: bool,
    /// Connections it opened that no agent connection was known for yet
    /// (a page's or an app's, whose hub label the agent's record of the
    /// connection brings, which can come after the upload).
    unbound: std::collections::HashSet<u32>,
}

impl Run {
    /// The correction of a stamp this run took.
    fn correction(&self, stamp: Stamp) -> Option<Correction> {
        Some(self.clock.at(stamp.mono_ns)?.correction(stamp))
    }

    /// Takes in one exchange, keeping those a moment still judged can need.
    fn add_exchange(&mut self, sample: &TimeSample) {
        let Some(exchange) = Exchange::from_sample(sample) else {
            return;
        };
        self.latest_exchange = Some(sample.t4);
        self.clock.add(exchange);
        let keep_from = exchange
            .sent_mono_ns
            .saturating_sub(HORIZON_NS + FINAL_TIMEOUT_NS);
        self.clock.forget_before(keep_from);
        if self.clock.len() > MAX_EXCHANGES_PER_RUN {
            let oldest_kept = self
                .clock
                .exchanges()
                .nth(self.clock.len() - MAX_EXCHANGES_PER_RUN)
                .map_or(0, |e| e.sent_mono_ns);
            self.clock.forget_before(oldest_kept);
        }
    }
}

/// One broadcast, judged.
#[derive(Clone, Debug, PartialEq)]
pub struct Judged {
    /// The agent's broadcast id.
    pub id: u64,
    /// max − min kernel arrival over its receipts, device clocks as they
    /// are; `None` below two receipts.
    pub skew_ns: Option<u64>,
    /// Upper bound of its skew in the agent's timebase; `None` unless every
    /// receipt's clock was bounded (and there were two).
    pub skew_upper_ns: Option<u64>,
    /// Receipts joined.
    pub receipts: u32,
    /// Target connections of caught-up runs that did not receive it.
    pub missing: u32,
    /// Target connections of runs that had not uploaded past it.
    pub unjudged: u32,
    /// Actions on it (`--act-at` probes).
    pub actions: u32,
    /// Of those, late (the message came after its time to act).
    pub late: u32,
    /// Upper bound of its action skew in the agent's timebase; `None`
    /// unless two actions came and every one's clock was bounded.
    pub action_skew_upper_ns: Option<u64>,
    /// Each copy's read, start to read in the agent's clock at the
    /// latest and earliest its clock's bound allows, for copies whose
    /// clock was bounded: what `lead=auto` ([`crate::analysis::auto_lead`])
    /// must cover.
    pub reads: Vec<crate::analysis::auto_lead::Read>,
    /// Each late action's reaction, read to acted, by run
    /// ([`crate::analysis::lead_rule::reaction_ns`]): the devices'
    /// readiness.
    pub act_delays: Vec<(u128, i64)>,
    /// The names of the runs in `reads` and `act_delays`.
    pub names: Vec<(u128, String)>,
}

/// One probe run's clock, as monitoring shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeHealth {
    /// Its `--name`.
    pub name: String,
    /// Device minus agent clock now, and its error bound.
    pub offset_ns: Option<(i64, u64)>,
    /// Whether its clock claims to be synchronised (`None`: not read yet).
    pub synced: Option<bool>,
    /// Agent wall time of its last upload.
    pub last_upload_wall_ns: u64,
}

/// Counts of what could not be joined.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveCounts {
    /// Receipts that matched no pending broadcast.
    pub unmatched: u64,
    /// Broadcasts judged before they were final (more than [`MAX_PENDING`]).
    pub judged_early: u64,
    /// Probe runs not followed (more than [`MAX_RUNS`]).
    pub runs_refused: u64,
    /// Actions whose broadcast was judged already (their lead outlasted the
    /// largest seen before, plus [`crate::analysis::settled::SETTLE_MARGIN_NS`]),
    /// or that matched none.
    pub unmatched_actions: u64,
    /// Payload counts dropped past [`MAX_COPY_COUNTS`]: a later copy of
    /// such a payload on that connection is unmatched (counted above).
    pub copy_counts_dropped: u64,
}

/// The live join.
#[derive(Debug, Default)]
pub struct LiveJoin {
    pending: BTreeMap<u64, Pending>,
    by_seq: HashMap<u64, u64>,
    /// Each payload's copies on each probe connection, numbered.
    copies: CopyNumbers,
    /// Agent connection → the probe connection holding it.
    holder: HashMap<u64, Holder>,
    /// Agent connections that said they are a probe's (`?probe=NAME`): a
    /// target whose open the probe has not uploaded yet is waited for.
    labelled: HashMap<u64, Labelled>,
    /// (page run, its connection) → the open agent connection its
    /// `page.RUN.CONN` label names: a browser probe cannot name it itself.
    page_conns: HashMap<(u128, u32), u64>,
    runs: HashMap<u128, Run>,
    /// Receipts uploaded before the agent's record of their broadcast
    /// reached the join (its recorder lags), retried at each judgement.
    early: VecDeque<Early>,
    /// Broadcast and send records taken in, and that count when `early`
    /// was last tried.
    agent_progress: u64,
    early_tried_at: u64,
    /// The highest connection id the agent has opened (ids only grow).
    highest_conn: u64,
    /// (agent conn, message key) → the pending broadcast its receipt was
    /// placed in: where the action on it goes.
    placed: HashMap<(u64, MessageKey), u64>,
    counts: LiveCounts,
    /// The longest any action came after its broadcast's first receipt:
    /// how much longer a probe that acts may lag (see [`moved_past`]).
    lead_seen_ns: u64,
    agent_started_wall_ns: u64,
    /// Each broadcast's fan-out until settled: until its shards have all
    /// reported, its targets are not all known.
    fanouts: FanoutTracker,
}

impl LiveJoin {
    /// An empty join.
    pub fn new() -> LiveJoin {
        LiveJoin::since(0, 1)
    }

    /// An empty join for an agent run of `shards` shards that started at
    /// `wall_ns`: receipts stamped before it are earlier runs' traffic.
    pub fn since(wall_ns: u64, shards: usize) -> LiveJoin {
        LiveJoin {
            agent_started_wall_ns: wall_ns,
            fanouts: FanoutTracker::new(shards, MAX_PENDING),
            ..LiveJoin::default()
        }
    }

    /// Takes in one of the agent's own records; returns the broadcasts
    /// whose fan-out it settled (for `/metrics`' span, as the report
    /// counts it).
    pub fn add_agent_record(&mut self, record: &AgentRecord) -> Vec<(u64, Fanout)> {
        let settled = self.fanouts.observe(record);
        match record {
            AgentRecord::Started(s) => {
                self.agent_started_wall_ns = s.at.wall_ns;
            }
            AgentRecord::Broadcast(b) => {
                self.agent_progress += 1;
                self.pending.insert(
                    b.id,
                    Pending {
                        id: b.id,
                        seq: b.seq,
                        hash: b.hash,
                        start: b.at,
                        targets: Targets::default(),
                        actions: Vec::new(),
                        placed_keys: Vec::new(),
                        first_receipt_wall_ns: None,
                    },
                );
                if let Some(seq) = b.seq {
                    self.by_seq.insert(seq, b.id);
                }
            }
            AgentRecord::ShardSends(s) => {
                self.agent_progress += 1;
                if let Some(p) = self.pending.get_mut(&s.broadcast) {
                    // Only probes' connections: memory follows the probes,
                    // not the audience.
                    let labelled = &self.labelled;
                    let probes = s
                        .slots
                        .iter()
                        .filter(|slot| labelled.contains_key(&slot.conn))
                        .map(|slot| slot.conn);
                    p.targets.extend(probes.clone());
                    for conn in probes {
                        self.copies.sent(conn, p.hash, p.id);
                    }
                }
            }
            AgentRecord::ConnectionOpened(o) => {
                self.highest_conn = self.highest_conn.max(o.conn);
                if let Some(name) = &o.label {
                    if let Some(page) = parse_page_label(name) {
                        self.page_conns.insert(page, o.conn);
                        // Its run may have uploaded the opening already.
                        if let Some(run) = self.runs.get_mut(&page.0)
                            && run.unbound.remove(&page.1)
                        {
                            run.conns.insert(page.1, o.conn);
                            self.holder.insert(
                                o.conn,
                                Holder {
                                    run: page.0,
                                    closed_wall_ns: None,
                                },
                            );
                        }
                    }
                    let name = name.clone();
                    self.labelled.insert(
                        o.conn,
                        Labelled {
                            name,
                            closed: false,
                        },
                    );
                }
            }
            AgentRecord::ConnectionClosed(c) => {
                if let Some(l) = self.labelled.get_mut(&c.conn) {
                    l.closed = true;
                    if let Some(page) = parse_page_label(&l.name)
                        && self.page_conns.get(&page) == Some(&c.conn)
                    {
                        self.page_conns.remove(&page);
                    }
                }
            }
            _ => {}
        }
        settled
    }

    /// Takes in one record uploaded by probe run `run_id`, at agent wall
    /// time `now_wall_ns`.
    pub fn add_probe_record(&mut self, run_id: u128, record: &ProbeRecord, now_wall_ns: u64) {
        if !self.runs.contains_key(&run_id) {
            if self.runs.len() >= MAX_RUNS {
                self.counts.runs_refused += 1;
                return;
            }
            self.runs.insert(run_id, Run::default());
        }
        let started = self.agent_started_wall_ns;
        let run = self.runs.get_mut(&run_id).expect("inserted above");
        run.last_upload_wall_ns = now_wall_ns;
        if let Some(wall) = record.stamp().map(|s| s.wall_ns) {
            run.through_wall_ns = run.through_wall_ns.max(wall);
        }
        match record {
            ProbeRecord::Started(s) => run.name = s.name.clone(),
            // Connection ids restart with the agent: an earlier run's are not ours.
            ProbeRecord::ConnectionOpened(o) if !before_run(started, o.at.wall_ns) => {
                let by_label = self.page_conns.get(&(run_id, o.conn)).copied();
                match o.agent_conn.or(by_label) {
                    Some(agent_conn) => {
                        run.unbound.remove(&o.conn);
                        run.conns.insert(o.conn, agent_conn);
                        self.holder.insert(
                            agent_conn,
                            Holder {
                                run: run_id,
                                closed_wall_ns: None,
                            },
                        );
                    }
                    None => {
                        run.conns.remove(&o.conn);
                        run.unbound.insert(o.conn);
                    }
                }
            }
            ProbeRecord::ConnectionClosed(c) => {
                // Its receipts may be logged after its close record: the
                // map holds until the index opens again. The holder stays
                // until its broadcasts are judged (it may have missed one).
                if let Some(agent_conn) = run.conns.get(&c.conn)
                    && let Some(h) = self.holder.get_mut(agent_conn)
                {
                    h.closed_wall_ns = Some(c.at.wall_ns);
                }
            }
            ProbeRecord::TimeSample(t) => run.add_exchange(t),
            ProbeRecord::ClockState(c) => run.claim = Some((**c).clone()),
            // A probe that acts, or an app's own run (it records only what
            // it acted on): a receipt is complete with its action.
            ProbeRecord::ActPlan(_) | ProbeRecord::App(_) => run.acts = true,
            ProbeRecord::Action(a) => self.add_action(run_id, a, false),
            ProbeRecord::AppAction(a) => self.add_action(run_id, &a.action, true),
            ProbeRecord::Stopped(_) | ProbeRecord::LogFull(_) => run.stopped = true,
            ProbeRecord::Receipt(r) => {
                // A previous agent run's traffic (a probe uploading an old log).
                if before_run(started, r.at.wall_ns) {
                    self.counts.unmatched += 1;
                    return;
                }
                // A connection the agent did not name (another server's):
                // nothing here will ever match it.
                let Some(agent_conn) = run.conns.get(&r.conn).copied() else {
                    self.counts.unmatched += 1;
                    return;
                };
                // One the agent saw open without `?probe=` is never a target
                // here (ids only grow, so an id at most the highest seen
                // was seen).
                if agent_conn <= self.highest_conn && !self.labelled.contains_key(&agent_conn) {
                    self.counts.unmatched += 1;
                    return;
                }
                let early = Early {
                    key: r.key,
                    hash: r.hash,
                    agent_conn: Some(agent_conn),
                    arrival: Arrival {
                        run: run_id,
                        at: r.at,
                        kernel_delay_ns: r.kernel_delay_ns.unwrap_or(0),
                    },
                };
                if !self.place(early) {
                    // The agent's record of its broadcast may not be here yet.
                    if self.early.len() >= MAX_EARLY {
                        self.early.pop_front();
                        self.counts.unmatched += 1;
                    }
                    self.early.push_back(early);
                }
            }
            _ => {}
        }
    }

    /// An action of run `run_id` (of the app beside it when `by_app`) into
    /// the broadcast its connection's receipt was placed in.
    fn add_action(&mut self, run_id: u128, a: &crate::record::Action, by_app: bool) {
        let Some(agent_conn) = self
            .runs
            .get(&run_id)
            .and_then(|r| r.conns.get(&a.conn))
            .copied()
        else {
            return;
        };
        match self
            .placed
            .get(&(agent_conn, a.key))
            .and_then(|id| self.pending.get_mut(id))
        {
            Some(p)
                if !p
                    .actions
                    .iter()
                    .any(|(c, x)| *c == agent_conn && x.by_app == by_app) =>
            {
                if let Some(first) = p.first_receipt_wall_ns {
                    self.lead_seen_ns = self.lead_seen_ns.max(a.done.wall_ns.saturating_sub(first));
                }
                p.actions.push((
                    agent_conn,
                    Acted {
                        run: run_id,
                        by_app,
                        done: a.done,
                        late: a.late_ns > 0,
                        reaction_ns: crate::analysis::lead_rule::reaction_ns(
                            a.target.mono_ns,
                            a.late_ns,
                            a.done.mono_ns,
                        ),
                    },
                ));
            }
            // Its broadcast was judged, or a second action: counted.
            _ => self.counts.unmatched_actions += 1,
        }
    }

    /// Puts a receipt in its broadcast; `false` when no pending broadcast
    /// is its yet. A duplicate, or a copy of a broadcast its connection was
    /// not sent, is counted unmatched (and placed: it will not match later).
    fn place(&mut self, e: Early) -> bool {
        let Some(id) = self.match_receipt(e.key, e.hash, e.agent_conn) else {
            return false;
        };
        let placed =
            e.agent_conn
                .zip(self.pending.get_mut(&id))
                .map_or(Placed::NotATarget, |(conn, p)| {
                    let placed = p.targets.place(conn, e.arrival);
                    if placed == Placed::Taken {
                        let at = e.arrival.at.wall_ns;
                        p.first_receipt_wall_ns =
                            Some(p.first_receipt_wall_ns.map_or(at, |f| f.min(at)));
                    }
                    placed
                });
        match placed {
            Placed::Taken => {
                let acts = self.runs.get(&e.arrival.run).is_some_and(|r| r.acts);
                if let (Some(conn), true) = (e.agent_conn, acts) {
                    self.placed.insert((conn, e.key), id);
                    if let Some(p) = self.pending.get_mut(&id) {
                        p.placed_keys.push((conn, e.key));
                    }
                }
                true
            }
            Placed::Duplicate => {
                self.counts.unmatched += 1;
                true
            }
            // Its shard's record of the sends may not be here yet.
            Placed::NotATarget => false,
        }
    }

    fn match_receipt(&self, key: MessageKey, hash: u64, conn: Option<u64>) -> Option<u64> {
        let by_seq = |seq| {
            let id = *self.by_seq.get(&seq)?;
            Some((id, self.pending.get(&id)?.hash))
        };
        copy_of(key, hash, conn, by_seq, &self.copies).filter(|id| self.pending.contains_key(id))
    }

    /// Judges every broadcast that is final at agent wall time `now_wall_ns`.
    pub fn judge_final(&mut self, now_wall_ns: u64) -> Vec<Judged> {
        // Receipts that came before their broadcast's record, first; tried
        // again only when the agent's records have moved on.
        let waiting = if self.agent_progress != self.early_tried_at {
            self.early_tried_at = self.agent_progress;
            std::mem::take(&mut self.early)
        } else {
            let now_stale =
                |e: &Early| e.arrival.at.wall_ns.saturating_add(FINAL_TIMEOUT_NS) < now_wall_ns;
            let before = self.early.len();
            self.early.retain(|e| !now_stale(e));
            self.counts.unmatched += (before - self.early.len()) as u64;
            VecDeque::new()
        };
        for e in waiting {
            if !self.place(e) {
                let stale = e.arrival.at.wall_ns.saturating_add(FINAL_TIMEOUT_NS) < now_wall_ns;
                if stale {
                    self.counts.unmatched += 1;
                } else {
                    self.early.push_back(e);
                }
            }
        }
        let mut judged = Vec::new();
        while let Some((&id, p)) = self.pending.first_key_value() {
            let early = self.pending.len() > MAX_PENDING;
            if !early && !self.is_final(p, now_wall_ns) {
                break;
            }
            self.counts.judged_early += u64::from(early);
            let p = self.pending.remove(&id).expect("first key");
            judged.push(self.judge_one(id, &p));
            if let Some(seq) = p.seq {
                self.by_seq.remove(&seq);
            }
            self.copies
                .forget(p.targets.iter().map(|(conn, _)| conn), p.hash, id);
            for key in &p.placed_keys {
                self.placed.remove(key);
            }
        }
        self.forget(now_wall_ns);
        judged
    }

    /// Whether nothing more can come for any target: each has its receipt,
    /// or is not a probe's, or its probe closed it, stopped, or uploaded
    /// past the broadcast; or the broadcast timed out.
    fn is_final(&self, p: &Pending, now_wall_ns: u64) -> bool {
        if now_wall_ns >= p.start.wall_ns.saturating_add(FINAL_TIMEOUT_NS) {
            return true;
        }
        self.fanouts.get(p.id).is_none_or(Fanout::shards_reported)
            && p.targets.iter().all(|(conn, arrival)| {
                arrival.is_some_and(|a| {
                    // A probe that acts: its action comes after the receipt.
                    !self.runs.get(&a.run).is_some_and(|r| r.acts)
                        || p.actions.iter().any(|(c, _)| *c == conn)
                        || self.run_done(a.run, p)
                }) || arrival.is_none()
                    && match self.holder.get(&conn) {
                        Some(h) => h.closed_wall_ns.is_some() || self.run_done(h.run, p),
                        // A probe's connection whose open has not been uploaded
                        // (its probe may upload late, even after it closed):
                        // wait, unless a run of that name has uploaded past
                        // the broadcast without it.
                        None => self.labelled.get(&conn).is_none_or(|l| {
                            self.runs
                                .iter()
                                .any(|(&id, r)| r.name == l.name && self.run_done(id, p))
                        }),
                    }
            })
    }

    /// Whether run `run` can send nothing more about broadcast `p`: it
    /// stopped, or its records moved past it ([`moved_past`], from its first
    /// receipt, or its start before any).
    fn run_done(&self, run: u128, p: &Pending) -> bool {
        let since = p.first_receipt_wall_ns.unwrap_or(p.start.wall_ns);
        self.runs
            .get(&run)
            .is_none_or(|r| r.stopped || moved_past(r.through_wall_ns, since, self.lead_seen_ns))
    }

    fn judge_one(&mut self, id: u64, p: &Pending) -> Judged {
        let mut raw = Vec::new();
        let mut corrected = Vec::new();
        let mut reads = Vec::new();
        let (mut missing, mut unjudged) = (0u32, 0u32);
        for (conn, arrival) in p.targets.iter() {
            if let Some(a) = arrival {
                let wall = a.at.wall_ns.saturating_sub(a.kernel_delay_ns);
                raw.push(wall as i64);
                let correction = self.runs.get(&a.run).and_then(|r| r.correction(a.at));
                corrected.push(correction.map(|c| place(c, wall)));
                if let Some(c) = correction {
                    let (read, bound) = place(c, a.at.wall_ns);
                    let since_start = read - p.start.wall_ns as i64;
                    reads.push(crate::analysis::auto_lead::Read {
                        run: a.run,
                        upper_ns: since_start.saturating_add(bound),
                        lower_ns: since_start.saturating_sub(bound),
                    });
                }
                continue;
            }
            match self.holder.get(&conn) {
                // Not a probe's connection, unless it said it was.
                None if self.labelled.contains_key(&conn) => unjudged += 1,
                None => {}
                // Closed by the probe before the broadcast: not listening.
                Some(h) if h.closed_wall_ns.is_some_and(|t| t < p.start.wall_ns) => {}
                Some(h) if h.closed_wall_ns.is_some() || self.run_done(h.run, p) => missing += 1,
                Some(_) => unjudged += 1,
            }
        }
        let skew_ns = (raw.len() >= 2)
            .then(|| (raw.iter().max().unwrap_or(&0) - raw.iter().min().unwrap_or(&0)) as u64);
        let skew_upper_ns = spread_of_all(corrected).map(|(_, _, hi)| hi.max(0) as u64);
        // Actions, in the agent's timebase as receipts are.
        let acted = p.actions.iter().map(|(_, a)| {
            let run = self.runs.get(&a.run);
            run.and_then(|r| r.correction(a.done))
                .map(|c| place(c, a.done.wall_ns))
        });
        let action_skew_upper_ns = spread_of_all(acted).map(|(_, _, hi)| hi.max(0) as u64);
        Judged {
            id,
            skew_ns,
            skew_upper_ns,
            receipts: raw.len() as u32,
            missing,
            unjudged,
            actions: p.actions.len() as u32,
            late: p.actions.iter().filter(|(_, a)| a.late).count() as u32,
            action_skew_upper_ns,
            act_delays: p
                .actions
                .iter()
                .filter_map(|(_, a)| Some((a.run, a.reaction_ns?)))
                .collect(),
            names: {
                let mut runs: Vec<u128> = reads.iter().map(|r| r.run).collect();
                runs.extend(p.actions.iter().map(|(_, a)| a.run));
                runs.sort_unstable();
                runs.dedup();
                runs.into_iter()
                    .filter_map(|r| Some((r, self.runs.get(&r)?.name.clone())))
                    .collect()
            },
            reads,
        }
    }

    /// Drops connections no pending broadcast can need and runs long silent.
    fn forget(&mut self, now_wall_ns: u64) {
        let runs = &self.runs;
        let pending = &self.pending;
        // A closed connection stays while broadcasts that may have targeted
        // it can still arrive (the agent's records lag the uploads at
        // times); open ones stay, and few are closed at a time.
        let recent = |closed: u64| {
            closed.saturating_add(FINAL_TIMEOUT_NS + CLOCK_TOLERANCE_NS) > now_wall_ns
        };
        self.holder.retain(|conn, h| {
            runs.contains_key(&h.run)
                && h.closed_wall_ns.is_none_or(|t| {
                    recent(t) || pending.values().any(|p| p.targets.contains(*conn))
                })
        });
        self.labelled
            .retain(|conn, l| !l.closed || pending.values().any(|p| p.targets.contains(*conn)));
        self.runs.retain(|_, r| {
            now_wall_ns.saturating_sub(r.last_upload_wall_ns) < RUN_FORGOTTEN_AFTER_NS
        });
        let (holder, labelled) = (&self.holder, &self.labelled);
        self.copies
            .retain_conns(|conn| holder.contains_key(&conn) || labelled.contains_key(&conn));
        self.copies.cap(MAX_COPY_COUNTS);
        self.counts.copy_counts_dropped = self.copies.dropped();
    }

    /// Every probe followed, by name (of runs with one name, the latest to
    /// upload): its clock against the agent's now.
    pub fn probe_health(&mut self) -> Vec<ProbeHealth> {
        let mut out: Vec<ProbeHealth> = self
            .runs
            .values_mut()
            .map(|r| {
                let offset_ns = r
                    .latest_exchange
                    .and_then(|t| r.correction(t))
                    .map(|c| (-c.theta_ns, c.bound_ns));
                ProbeHealth {
                    name: r.name.clone(),
                    offset_ns,
                    synced: r.claim.as_ref().map(|c| c.claimed_bound_ns().is_some()),
                    last_upload_wall_ns: r.last_upload_wall_ns,
                }
            })
            .collect();
        // A restarted probe is a new run under the same name: one series.
        out.sort_by(|a, b| {
            a.name
                .cmp(&b.name)
                .then(b.last_upload_wall_ns.cmp(&a.last_upload_wall_ns))
        });
        out.dedup_by(|later, kept| later.name == kept.name);
        out
    }

    /// What could not be joined, so far.
    pub fn counts(&self) -> LiveCounts {
        self.counts
    }

    /// Probe runs followed now (a silent one is forgotten after
    /// [`RUN_FORGOTTEN_AFTER_NS`], at a judgement).
    pub fn followed_runs(&self) -> usize {
        self.runs.len()
    }

    /// Broadcasts waiting to be final.
    pub fn pending_broadcasts(&self) -> usize {
        self.pending.len()
    }
}

/// Whether a probe stamp is from before the agent run that started at
/// `agent_started_wall_ns`, device clocks being off by up to
/// [`CLOCK_TOLERANCE_NS`].
fn before_run(agent_started_wall_ns: u64, probe_wall_ns: u64) -> bool {
    probe_wall_ns.saturating_add(CLOCK_TOLERANCE_NS) < agent_started_wall_ns
}

#[cfg(test)]
mod agreement_tests;
#[cfg(test)]
mod tests;
