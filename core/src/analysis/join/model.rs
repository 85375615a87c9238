//! The join's data model: the rows a join hands on ([`JoinedBroadcast`],
//! each with its [`JoinedReceipt`]s), the run they belong to ([`Joined`]:
//! the agent, the probes, every connection), and the agent's side of a
//! broadcast as the join indexes it. Plain data: the entry points that
//! build it are in [`super`], the passes in `probes` and `stream`.

use std::collections::HashMap;

use serde::Serialize;

use crate::Stamp;
use crate::analysis::fanout::Fanout;
use crate::convert;
use crate::record::{
    ClockState, MessageKey, RunIdentity, SendOrder, TapCountersRecord, TimePortTotals, TimeSample,
};

/// One probe connection, as the report numbers them.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeConnection {
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
    /// The app beside the probe whose actions these are (`--act-notify`):
    /// such a connection holds only that app's actions on the messages the
    /// probe's connection of the same index received, so an app's action
    /// and the probe's on one broadcast are two actions. It receives
    /// nothing itself and is never missing anything.
    pub app: Option<String>,
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
    /// Where it read each broadcast's time to act, when it acted (`--act-at`).
    pub act_plan: Option<crate::record::ActPlan>,
    /// The page it ran in, when it is the browser probe (`/probe`).
    pub page: Option<crate::record::PageProbe>,
    /// What it deleted from its `--out-dir` at start to stay within its
    /// limits, and what it kept.
    pub logs_pruned: Option<crate::record::LogsPruned>,
    /// Its time exchange's authentication, as its last record said.
    pub clock_tags: Option<crate::record::ClockTags>,
    /// When the run is an app's own (the clock module in a site's app):
    /// what it is. Its actions are the app's, not a probe's.
    pub app: Option<crate::record::AppRun>,
    /// `--act-notify`'s last counts, per app beside the probe.
    pub notices: Vec<crate::record::NoticeTotals>,
}

/// Who did an action: what the report lists as the actor.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum ActorKind {
    /// The native probe (`--act-at`).
    Probe,
    /// The browser probe page (`/probe`).
    ProbePage,
    /// An app's own code through the clock module (Python or a page's).
    App,
    /// A native app beside a probe that answered its notices (`--act-notify`).
    NativeApp,
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
    pub time_port: Option<TimePortTotals>,
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

impl BroadcastKey {
    /// The broadcast's name, as the report's tables write it: `id 12`
    /// (`run 2 id 12` after a restart), `seq 12`, or `hash 0123… #0`.
    pub fn describe(&self) -> String {
        match *self {
            BroadcastKey::Agent { run: 0, id } => format!("id {id}"),
            BroadcastKey::Agent { run, id } => format!("run {} id {id}", run + 1),
            BroadcastKey::Message(MessageKey::Seq(seq)) => format!("seq {seq}"),
            BroadcastKey::Message(MessageKey::Hash { hash, occurrence }) => {
                format!("hash {hash:016x} #{occurrence}")
            }
        }
    }
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
        crate::analysis::timebase::arrival_ns(self.wall_ns, self.kernel_delay_ns)
    }
}

/// One connection's action on one broadcast, on its device's clocks.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JoinedAction {
    /// Index into [`Joined::connections`].
    pub connection: usize,
    /// The time to act the broadcast carried (the server's wall clock).
    pub act_at_ns: u64,
    /// The moment aimed at, on the device's clocks.
    pub target: Stamp,
    /// The moment it acted, on the device's clocks.
    pub done: Stamp,
    /// How long after its target the message came (0: in time).
    pub late_ns: u64,
    /// The clock bound the device acted on (`None`: it had no estimate and
    /// took its own clock for the server's).
    pub bound_acted_on_ns: Option<u64>,
    /// The frame the action was drawn in, on the device's clocks, where a
    /// page reported it.
    pub frame: Option<Stamp>,
}

impl JoinedAction {
    /// The action `a` a record of `connection` holds (its frame, if any,
    /// comes in a later record).
    pub fn of(connection: usize, a: &crate::record::Action) -> JoinedAction {
        JoinedAction {
            connection,
            act_at_ns: a.act_at_ns,
            target: a.target,
            done: a.done,
            late_ns: a.late_ns,
            bound_acted_on_ns: a.offset_bound_ns,
            frame: None,
        }
    }

    /// Actual minus target on the device's monotonic clock: what its timer
    /// missed by (for an action in time).
    pub fn timer_error_ns(&self) -> i64 {
        convert::signed(self.done.mono_ns) - convert::signed(self.target.mono_ns)
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
    /// How its time to act was set (`?lead=`), when the agent recorded it.
    pub lead: Option<crate::record::LeadChosen>,
    /// For `lead=auto`: what it weighed (wanted before the ceiling, the
    /// readiness, the evidence), when the agent recorded it.
    pub auto_terms: Option<AutoLeadTerms>,
}

/// What `lead=auto` weighed for a broadcast, as the join keeps it (the
/// devices left out are in [`JoinedBroadcast::auto_left_out`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AutoLeadTerms {
    /// What the reads asked for before the ceiling.
    pub wanted_ns: u64,
    /// The ceiling.
    pub ceiling_ns: u64,
    /// The readiness within it.
    pub readiness_ns: u64,
    /// Reads it rested on.
    pub reads: u64,
    /// Too few reads for the quantile: a tail model.
    pub tail_model: bool,
}

/// One broadcast with everything known about its delivery.
#[derive(Clone, Debug, PartialEq)]
pub struct JoinedBroadcast {
    /// Its identity.
    pub key: BroadcastKey,
    /// [`crate::identity::payload_hash`] of its payload, when known (the
    /// agent's or the tap's record, or a receipt): what joins it to the
    /// probes' `MessagePayload` records.
    pub hash: Option<u64>,
    /// The agent's side, when an agent log was given.
    pub agent: Option<AgentSide>,
    /// One receipt per connection that got it (duplicates are counted, not kept).
    pub receipts: Vec<JoinedReceipt>,
    /// Connections (indices into [`Joined::connections`]) that should have got it
    /// and did not.
    pub missing: Vec<usize>,
    /// One action per connection that acted on it (`--act-at`).
    pub actions: Vec<JoinedAction>,
    /// Devices `lead=auto` left out of its lead, by name.
    pub auto_left_out: Vec<String>,
}

impl JoinedBroadcast {
    /// max − min receipt time (kernel arrival where known) over the connections
    /// that got it, raw device clocks; `None` with fewer than two receipts.
    pub fn skew_ns(&self) -> Option<u64> {
        crate::analysis::timebase::raw_spread(
            self.receipts.iter().map(JoinedReceipt::arrival_wall_ns),
        )
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
    pub connections: Vec<ProbeConnection>,
    /// Every broadcast, in start order.
    pub broadcasts: Vec<JoinedBroadcast>,
    /// Receipts of a broadcast a connection had already received.
    pub duplicates: u64,
    /// Receipts that match no broadcast in the agent log (another run's traffic,
    /// or a payload the agent did not send).
    pub unmatched: u64,
    /// Actions that match no broadcast (their receipt matched none either),
    /// or a second action of one connection on one broadcast.
    pub unmatched_actions: u64,
    /// Agent runs joined (the agent restarted between them).
    pub agent_runs: u32,
    /// What the agent's tap of the server saw, when it tapped one.
    pub tap: Option<TapSummary>,
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
    /// Who did the actions of `connection`.
    pub fn actor_of(&self, connection: usize) -> ActorKind {
        let c = &self.connections[connection];
        let probe = &self.probes[c.probe];
        if c.app.is_some() {
            ActorKind::NativeApp
        } else if probe.app.is_some() {
            ActorKind::App
        } else if probe.page.is_some() {
            ActorKind::ProbePage
        } else {
            ActorKind::Probe
        }
    }

    /// The name an actor is listed by: the run's name, and for an app
    /// beside a probe `PROBE/APP`.
    pub fn actor_name(&self, connection: usize) -> String {
        let c = &self.connections[connection];
        let name = &self.probes[c.probe].name;
        match &c.app {
            Some(app) => format!("{name}/{app}"),
            None => name.clone(),
        }
    }

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
pub(crate) struct AgentBroadcast {
    pub(crate) seq: Option<u64>,
    pub(crate) hash: u64,
    pub(crate) start: Stamp,
    /// The copies to connections a probe named, by agent connection id.
    pub(crate) slots: HashMap<u64, Slot>,
    /// Its fan-out over every client (targets, queued, dropped, span), once
    /// settled or once the log ended.
    pub(crate) fanout: Option<Fanout>,
    /// How its time to act was set (`?lead=`), when it had one.
    pub(crate) lead: Option<crate::record::LeadChosen>,
    /// What `lead=auto` weighed for it.
    pub(crate) auto_basis: Option<crate::record::AutoLeadBasis>,
}

/// One target's copy as the agent recorded it.
#[derive(Clone, Copy)]
pub(crate) struct Slot {
    /// Monotonic time the write finished, if it did.
    pub(crate) done_mono: Option<u64>,
    /// Monotonic time of the kernel's software TX stamp, if taken.
    pub(crate) tx_mono: Option<u64>,
}

/// What the tap saw, for the report.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct TapSummary {
    /// The server's tapped port.
    pub port: u16,
    /// Broadcasts the tap recorded.
    pub broadcasts: u64,
    /// Distinct clients it saw copies go to.
    pub clients: u64,
    /// Its last counters (connections skipped, resends, ring drops).
    pub counters: Option<TapCountersRecord>,
    /// Every client the server sent a copy to, sent to latest on average
    /// first: where the server put each device, for every real client, not
    /// only the probes.
    pub per_client: Vec<TappedClient>,
}

/// Where in the server's send order one client's copies went, and how
/// often the server had to resend to it.
#[derive(Clone, Debug, PartialEq, Serialize, schemars::JsonSchema)]
pub struct TappedClient {
    /// The client's `ADDR:PORT`.
    pub client: String,
    /// Broadcasts it got a copy of.
    pub copies: u64,
    /// Its mean position over broadcasts of two copies or more, 0 (always
    /// first) to 1 (always last); `None` when it never shared one.
    pub mean_position: Option<f64>,
    /// Broadcasts of two copies or more where it was sent to last.
    pub last: u64,
    /// Segments the server sent it, once its connection ended or the tap
    /// stopped (0 before).
    pub segments: u64,
    /// Of those, resends: a client whose copies keep being resent has a
    /// lossy link.
    pub resent: u64,
}

/// Whether a connection was open and listening at wall time `t`.
pub(crate) fn listening(c: &ProbeConnection, t: u64) -> bool {
    c.opened_wall_ns.is_some_and(|o| o <= t) && t <= c.until_wall_ns
}
