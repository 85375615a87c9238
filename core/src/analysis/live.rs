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

//!
//! One file an idea: `identity` (who is who: the agent's connections,
//! the runs and their clocks, what each record changes), `judging`
//! (placing receipts by the matching rule, and judging a final broadcast),
//! `finality` (when a broadcast is final, and what is forgotten), `targets`
//! (a pending broadcast's probe targets). This file holds the state they
//! share.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::Stamp;
use crate::analysis::fanout::{Fanout, FanoutTracker};
use crate::analysis::matching::{CopyNumbers, copy_of, numbered_by_copy};
use crate::analysis::settled::moved_past;
use crate::analysis::timebase::{place, spread_of_all};
use crate::clock::{ClockModel, Correction, Exchange, HORIZON_NS};
use crate::page_ingest::parse_page_label;
use crate::record::{AgentRecord, ClockState, MessageKey, ProbeRecord, TimeSample};

use targets::{Arrival, Placed, Targets};

mod finality;
mod identity;
mod judging;
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
    lead_seen: crate::analysis::settled::LeadSeen,
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

#[cfg(test)]
mod agreement_tests;
#[cfg(test)]
mod tests;
