//! The records the agent and the probes write, one enum per writer.
//!
//! Records are encoded with postcard inside the framing of [`crate::log`]. Postcard
//! tags enum variants by position, so new variants and record kinds are only ever
//! appended; anything else bumps [`crate::log::FORMAT_VERSION`].

use serde::{Deserialize, Serialize};

use crate::Stamp;

/// How the agent orders clients within one shard's send loop.
///
/// Recorded with every run so lateness can be attributed to fan-out position.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum SendOrder {
    /// Connection order, every time: the first client connected is always first.
    Fixed,
    /// Each broadcast starts one place further along, so the penalty of being
    /// last is shared.
    Rotate,
    /// A fresh random permutation per broadcast.
    Shuffle,
}

/// Everything the agent writes to its log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum AgentRecord {
    /// First record of a log: who wrote it and how it was configured.
    Started(AgentStarted),
    /// A WebSocket client finished its upgrade and joined a shard.
    ConnectionOpened(AgentConnectionOpened),
    /// A client left, or was closed by the agent; `reason` says which.
    ConnectionClosed(AgentConnectionClosed),
    /// A broadcast began: its identity and start time.
    Broadcast(BroadcastStarted),
    /// One shard's send loop for one broadcast: a slot per target client.
    ShardSends(ShardSends),
    /// A write that was queued (send buffer full) finished later.
    SendCompleted(SendCompleted),
    /// Last record of a clean shutdown.
    Stopped(Stamp),
    /// The server clock's own claim about its error, at start and periodically.
    ClockState(ClockState),
    /// The time port's totals (the UDP time exchange), written periodically
    /// and at shutdown. (Its place in this enum is its tag in the log: it
    /// was `TimeService` and reads the same.)
    TimePort(TimePortTotals),
    /// A kernel transmit timestamp for one client's copy of a broadcast
    /// (`--tx-timestamps`).
    TxStamp(TxStamp),
    /// What names this run and its clock exactly; written after `Started`.
    Identity(RunIdentity),
    /// The tap started: the agent follows another server's port
    /// (`--tap-port`), recording that server's fan-out from its packets.
    TapStarted(TapStarted),
    /// The tapped server upgraded a connection to WebSocket.
    TapConnectionOpened(TapConnectionEvent),
    /// A tapped connection ended.
    TapConnectionClosed(TapConnectionEvent),
    /// One broadcast of the tapped server: every copy, in send order.
    TapBroadcast(TapBroadcast),
    /// The tap's counters, written periodically and at shutdown.
    TapCounters(TapCountersRecord),
    /// What one tapped WebSocket connection's segments were, once it ended
    /// or the tap stopped: a client whose copies the server keeps resending
    /// has a bad link, which no send time shows.
    TapConnectionTotals(TapConnectionTotals),
    /// The subprotocol the hub chose for a connection (`--subprotocol`),
    /// written right after its `ConnectionOpened`.
    ConnectionSubprotocol(ConnectionSubprotocol),
    /// Writing the log failed (a full disk) and works again: how many
    /// records were lost in between. The first record written after.
    RecordsLost(RecordsLost),
    /// The lead a broadcast's time to act was given (`?lead=`), and whether
    /// `lead=auto` chose it: written right after its `Broadcast`.
    LeadChosen(LeadChosen),
    /// What `lead=auto` weighed for a broadcast's lead, written right after
    /// its `LeadChosen`: what the reads asked for before the ceiling, the
    /// readiness in it, its evidence, and the devices left out of it.
    AutoLeadBasis(AutoLeadBasis),
}

/// What `lead=auto` weighed for one broadcast.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AutoLeadBasis {
    /// The broadcast.
    pub broadcast: u64,
    /// What the measurements asked for; above `ceiling_ns` the ceiling was
    /// given and copies may be late.
    pub wanted_ns: u64,
    /// The ceiling (`--max-lead`).
    pub ceiling_ns: u64,
    /// The slowest included device's readiness, within the lead.
    pub readiness_ns: u64,
    /// Reads the rule rested on.
    pub reads: u64,
    /// Too few reads for the quantile: a tail model was used.
    pub tail_model: bool,
    /// Devices left out of the lead (implausible reads), by name.
    pub left_out: Vec<String>,
}

/// How a broadcast's time to act was set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LeadChosen {
    /// The broadcast.
    pub broadcast: u64,
    /// Its time to act minus the moment it was built, ns.
    pub lead_ns: u64,
    /// `lead=auto` chose it from the live join's measurements; else the
    /// caller gave it.
    pub auto: bool,
    /// For `lead=auto`: probe copies its quantile was over; 0 when it rested
    /// on the hub's fan-out span and the network allowance (no probe
    /// uploads) or on nothing yet.
    pub basis_copies: u64,
}

/// Records the agent could not write.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RecordsLost {
    /// Records lost since writing last worked.
    pub count: u64,
    /// When writing first failed.
    pub since: Stamp,
    /// When it worked again.
    pub at: Stamp,
}

/// A connection's WebSocket subprotocol.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConnectionSubprotocol {
    /// The connection id from [`AgentConnectionOpened`].
    pub conn: u64,
    /// The subprotocol, as answered in `Sec-WebSocket-Protocol`.
    pub subprotocol: String,
}

/// What the tap follows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TapStarted {
    /// The server's local TCP port.
    pub port: u16,
    /// The interface captured on; `None` for all.
    pub interface: Option<String>,
    /// When the capture began.
    pub at: Stamp,
}

/// A tapped connection's start or end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TapConnectionEvent {
    /// The client's `ADDR:PORT`.
    pub client: String,
    /// The capture's stamp (wall clock, ns since 1970).
    pub at_wall_ns: u64,
    /// Opened: whether it negotiated permessage-deflate. Closed: why.
    pub detail: String,
}

/// One tapped connection's segment counts, over the time it was followed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TapConnectionTotals {
    /// The client's `ADDR:PORT`.
    pub client: String,
    /// When it ended, or the tap stopped (wall ns).
    pub at_wall_ns: u64,
    /// Segments the server sent it.
    pub segments: u64,
    /// Of those, resends of bytes already captured.
    pub resent: u64,
    /// Segments captured ahead of a gap.
    pub reordered: u64,
}

/// One broadcast of a tapped server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TapBroadcast {
    /// Numbered in the order broadcasts began, from 1, within the tap's run.
    pub id: u64,
    /// The test message's sequence number, when it is one.
    pub seq: Option<u64>,
    /// Hash of the payload as sent.
    pub hash: u64,
    /// Payload bytes.
    pub len: u32,
    /// Every copy, in the order the server began sending them.
    pub copies: Vec<TapCopy>,
}

/// One client's copy of a tapped broadcast.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TapCopy {
    /// The client's `ADDR:PORT`.
    pub client: String,
    /// Capture stamp of the segment carrying the copy's first byte (wall ns).
    pub first_byte_wall_ns: u64,
    /// Capture stamp of the segment carrying its last byte (wall ns): when
    /// the server's kernel sent the whole copy.
    pub last_byte_wall_ns: u64,
}

/// What the tap counted, for its records and for people.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
pub struct TapCounters {
    /// Segments read.
    pub segments: u64,
    /// Packets that were not TCP segments of the tapped port.
    pub ignored_packets: u64,
    /// Connections followed from their SYN-ACK.
    pub followed: u64,
    /// Connections already open when the tap started: skipped.
    pub open_before_tap: u64,
    /// Connections whose response was not `101` (plain HTTP on the port).
    pub not_websocket: u64,
    /// Connections that spoke TLS: cannot be decoded.
    pub tls: u64,
    /// Connections whose stream broke the WebSocket protocol or a bound.
    pub broken: u64,
    /// Connections given up because the capture missed a segment.
    pub lost: u64,
    /// Segments that were resends of bytes already seen.
    pub retransmitted: u64,
    /// Segments captured ahead of a gap.
    pub reordered: u64,
    /// Data messages decoded.
    pub messages: u64,
    /// Of those, compressed ones that could not be inflated (no inflater:
    /// over the memory bound), so not identified.
    pub compressed: u64,
    /// Compressed messages inflated (permessage-deflate) and identified.
    pub inflated: u64,
}

/// The tap's counters and the capture ring's, written periodically.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TapCountersRecord {
    /// When they were read.
    pub at: Stamp,
    /// What following the connections counted.
    pub tap: TapCounters,
    /// Memory the inflaters hold (about 43 KiB per deflate connection).
    pub inflater_bytes: u64,
    /// Packets the capture's filter passed (kernel count).
    pub ring_packets: u64,
    /// Packets the kernel dropped because the ring was full.
    pub ring_drops: u64,
}

/// Identity and configuration of an agent run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AgentStarted {
    /// Host name of the server, so reports can tell whether probes share its clock.
    pub host: String,
    /// skewscope version that wrote the log.
    pub version: String,
    /// When the agent started.
    pub at: Stamp,
    /// Number of fan-out shards (threads).
    pub shards: u16,
    /// Send order within a shard.
    pub order: SendOrder,
    /// Whether per-client send times are recorded (off only for overhead benchmarks).
    pub per_client_times: bool,
}

/// A client joined the hub.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AgentConnectionOpened {
    /// The agent's connection id; also sent to the client in the
    /// `X-Skewscope-Conn` upgrade response header so probes can join on it.
    pub conn: u64,
    /// The `?probe=NAME` label, if the client gave one.
    pub label: Option<String>,
    /// The client's socket address.
    pub peer: String,
    /// The shard that serves it.
    pub shard: u16,
    /// When the upgrade completed.
    pub at: Stamp,
}

/// Why a connection ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum CloseReason {
    /// The client sent a close frame or closed its socket.
    ClientClosed,
    /// The client broke the WebSocket protocol (garbage, unmasked frames, bad opcodes).
    ProtocolError(String),
    /// A frame or fragmented message exceeded `--max-frame`.
    FrameTooLarge,
    /// The client could not keep up: its pending bytes exceeded the queue bound.
    QueueOverflow,
    /// A socket read or write failed (reset, broken pipe).
    SocketError(String),
    /// The agent shut down.
    Shutdown,
    /// The client sent control frames (pings, pongs) faster than
    /// [`crate::control_rate`] allows; closed with 1008.
    TooManyControlFrames,
}

/// A connection's end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AgentConnectionClosed {
    /// The connection id from [`AgentConnectionOpened`].
    pub conn: u64,
    /// When the agent noticed.
    pub at: Stamp,
    /// Why.
    pub reason: CloseReason,
}

/// The start of a broadcast, taken once before any shard writes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BroadcastStarted {
    /// Broadcast id, unique within the agent run.
    pub id: u64,
    /// Sequence number when the payload is a skewscope test message.
    pub seq: Option<u64>,
    /// [`crate::identity::payload_hash`] of the payload.
    pub hash: u64,
    /// Payload size in bytes.
    pub len: u32,
    /// Sent as a text frame (else binary).
    pub text: bool,
    /// Start of the broadcast: the reference for latency and fan-out span.
    pub at: Stamp,
}

/// What happened to one client's copy of a broadcast in the send loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum SendOutcome {
    /// The whole frame went into the socket; the slot time is when `write` returned.
    Written,
    /// The send buffer was full (or earlier bytes were still pending): the rest was
    /// queued. A [`SendCompleted`] follows if it is ever finished.
    Queued,
    /// Queueing would exceed the bound: the client was dropped.
    Dropped,
    /// The write failed (the peer vanished): the client was closed.
    Failed,
}

/// One target client in one shard's send loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SendSlot {
    /// Connection id.
    pub conn: u64,
    /// Position in this shard's loop, from 0.
    pub position: u32,
    /// What happened.
    pub outcome: SendOutcome,
    /// `CLOCK_MONOTONIC` when the write call returned (0 when not recorded).
    pub mono_ns: u64,
}

/// One shard's send loop for one broadcast.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ShardSends {
    /// Broadcast id.
    pub broadcast: u64,
    /// Shard index.
    pub shard: u16,
    /// `CLOCK_MONOTONIC` when this shard began the loop (its wake-up delay shows
    /// as the gap from the broadcast start).
    pub loop_start_mono_ns: u64,
    /// One slot per target, in send order.
    pub slots: Vec<SendSlot>,
}

/// A queued frame finished writing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SendCompleted {
    /// Broadcast id.
    pub broadcast: u64,
    /// Connection id.
    pub conn: u64,
    /// `CLOCK_MONOTONIC` when the last byte went into the socket.
    pub mono_ns: u64,
}

/// How a probe identifies a received message across connections.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
pub enum MessageKey {
    /// A skewscope test message, by its sequence number.
    Seq(u64),
    /// Any other payload: a 64-bit hash of its bytes and how many times this
    /// connection had already seen that hash.
    Hash {
        /// [`crate::identity::payload_hash`] of the payload.
        hash: u64,
        /// 0 for the first time this connection saw the hash, then 1, 2, ...
        occurrence: u32,
    },
}

/// Everything a probe writes to its log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum ProbeRecord {
    /// First record: who and what is being probed.
    Started(Box<ProbeStarted>),
    /// A connection's upgrade completed.
    ConnectionOpened(ProbeConnectionOpened),
    /// A connection attempt failed.
    ConnectionFailed(ProbeConnectionFailed),
    /// A connection ended.
    ConnectionClosed(ProbeConnectionClosed),
    /// A message arrived.
    Receipt(Receipt),
    /// Last record of a clean stop.
    Stopped(Stamp),
    /// The device clock's own claim about its error, at start and every few seconds.
    ClockState(Box<ClockState>),
    /// One completed time exchange with the agent.
    TimeSample(TimeSample),
    /// What names this run and its clock exactly; written after `Started`.
    Identity(RunIdentity),
    /// A connection's two socket addresses, written right after its
    /// `ConnectionOpened`: what joins it to the same connection tapped on
    /// the server's side.
    ConnectionAddresses(ConnectionAddresses),
    /// The log reached `--max-log-bytes`: the last record, and the run
    /// stopped. Receipts missing after it were not recorded, not lost.
    LogFull(LogFull),
    /// A connection runs over TLS (`wss://`), written right after its
    /// `ConnectionOpened`: what was negotiated, and whether the server's
    /// certificate was checked (`--insecure` skips that, and reports say so).
    ConnectionTls(ConnectionTls),
    /// A connection negotiated permessage-deflate, written right after its
    /// `ConnectionOpened`: the server compresses what it sends it, as it
    /// does for the browsers among its clients.
    ConnectionDeflate(ConnectionDeflate),
    /// The probe acts on broadcasts (`--act-at`): where it reads each one's
    /// time to act. Written after `Identity`; without it, it never acts.
    ActPlan(ActPlan),
    /// The probe acted on a message at its time to act (or at once, late).
    Action(Action),
    /// A message's payload, the first time this probe run received it (on
    /// any of its connections): what a report's `--match` judges broadcasts
    /// by, at one record per message, not per connection.
    Payload(MessagePayload),
    /// The run is a page in a browser (the agent's `/probe`), written after
    /// `Identity`: its stamps are the page's own clock read in userspace
    /// (no kernel stamps), and its clock bound comes from the WebSocket
    /// time exchange (`/clock`).
    Page(PageProbe),
    /// The probe keeps its `--out-dir` within its limits (`--keep-runs`,
    /// `--keep-bytes`), written after `Identity`: what it deleted at start
    /// (only logs the agent had in full) and what this run may write.
    LogsPruned(LogsPruned),
    /// Whether the run's time exchange checks the agent's tags, and how
    /// many replies it refused: written when the exchange starts and after
    /// each exchange that refused one (at most one record an exchange).
    ClockTags(ClockTags),
    /// The run is an app's own: the clock module inside a site's app
    /// (Python's `connect_clock(.., name=)`, the page module's
    /// `connectClock(.., {name})`), written after `Identity`. Its actions
    /// are what the app itself did, not a probe's beside it: the report
    /// lists it as a device of its own and says whose actions were whose.
    App(AppRun),
    /// The frame an action was drawn in (a page's next
    /// `requestAnimationFrame` after its callback), on the run's clock:
    /// what a screen shows waits for it.
    Frame(ActionFrame),
    /// An app beside the probe (`--act-notify`) answered a notice: the
    /// moment it says it acted, on the device's monotonic clock it shares
    /// with the probe. The app's action, as the probe's `Action` is the
    /// probe's.
    AppAction(AppAction),
    /// What `--act-notify` sent its app and what came back, written when
    /// the run ends: notices never answered are counted, never silent.
    NoticeTotals(NoticeTotals),
}

/// An app that reports its own actions.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AppRun {
    /// The module and its version (`skewscope_clock.py 1`).
    pub module: String,
    /// What it runs in (a Python version, a browser's user agent, node's).
    pub runtime: String,
}

/// The frame one action was drawn in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ActionFrame {
    /// The connection whose action it drew.
    pub conn: u32,
    /// The message acted on, as the action names it.
    pub key: MessageKey,
    /// [`crate::identity::payload_hash`] of the payload.
    pub hash: u64,
    /// The frame's time (the animation frame's timestamp), on the run's
    /// clocks.
    pub at: Stamp,
}

/// One action of an app beside the probe (`--act-notify`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AppAction {
    /// The app's name (`--act-notify-name`).
    pub app: String,
    /// The notice's action with `done` the moment the app says it acted
    /// (its `CLOCK_MONOTONIC` reading; the wall reading is the probe's
    /// wall clock at that moment).
    pub action: Action,
}

/// `--act-notify`'s counts for one app.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct NoticeTotals {
    /// The app's name (`--act-notify-name`).
    pub app: String,
    /// When counted.
    pub at: Stamp,
    /// Notices sent.
    pub sent: u64,
    /// Notices the socket refused (the app was not listening or reading).
    pub undelivered: u64,
    /// Notices the app answered (each an `AppAction`).
    pub answered: u64,
    /// Notices sent that were never answered.
    pub unanswered: u64,
    /// Answers refused: malformed, naming no notice sent, or a second
    /// answer to one notice.
    pub bad_answers: u64,
}

/// A probe run's time exchange and its authentication.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClockTags {
    /// When.
    pub at: Stamp,
    /// The probe holds a key (the agent's token): it takes only replies
    /// tagged under it. Without one, anyone on the path could have moved
    /// its clock.
    pub keyed: bool,
    /// Replies refused so far: untagged, or a tag that did not verify
    /// (altered on the way, or another token). None was used.
    pub refused: u64,
}

/// What a probe deleted from its `--out-dir` at start, and what it kept.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LogsPruned {
    /// When.
    pub at: Stamp,
    /// Earlier runs' logs deleted (each acknowledged in full by the agent).
    pub runs: u32,
    /// Their bytes.
    pub bytes: u64,
    /// Earlier runs' logs kept.
    pub kept_runs: u32,
    /// Their bytes.
    pub kept_bytes: u64,
    /// The most run logs kept, this one included (0: no limit).
    pub max_runs: u32,
    /// The most bytes, this log included (0: no limit).
    pub max_bytes: u64,
}

/// What a browser probe says about the page it runs in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PageProbe {
    /// The browser's user agent string, for people.
    pub user_agent: String,
    /// The smallest step of the page's clock the page saw, in ns: browsers
    /// coarsen `performance.now()` (Chromium: 100 µs, or 5 µs when the page
    /// is cross-origin isolated, as `/probe` is served).
    pub clock_step_ns: u64,
    /// Whether the page was cross-origin isolated (`crossOriginIsolated`).
    pub isolated: bool,
}

/// Payload bytes a probe keeps of each message: the small JSON and text
/// messages that tell devices what to do fit whole.
pub const PAYLOAD_EXCERPT_BYTES: usize = 4096;

/// One message's payload, as a probe first received it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MessagePayload {
    /// [`crate::identity::payload_hash`] of the whole payload: what joins
    /// it to receipts and broadcasts.
    pub hash: u64,
    /// The whole payload's length.
    pub len: u32,
    /// Its first bytes, at most [`PAYLOAD_EXCERPT_BYTES`]: all of it when
    /// `len` fits.
    pub excerpt: Vec<u8>,
}

/// Where a probe reads each broadcast's time to act.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ActPlan {
    /// The JSON pointer (`--act-at`).
    pub pointer: String,
    /// The unit (`--act-unit`: auto, s, ms, us, ns).
    pub unit: String,
    /// When the probe started acting.
    pub at: Stamp,
}

/// One connection's action on one message: what time it was told, the
/// moment on its own clocks it aimed at, and the moment it acted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Action {
    /// Connection index within this probe.
    pub conn: u32,
    /// Which message (as its receipt names it).
    pub key: MessageKey,
    /// [`crate::identity::payload_hash`] of the payload.
    pub hash: u64,
    /// The time to act the message carried: the server's wall clock, ns.
    pub act_at_ns: u64,
    /// The offset it was mapped with into this device's clock (the agent's
    /// clock minus this one's), from the probe's time exchanges; `None`
    /// with none (this clock was taken for the server's).
    pub offset_ns: Option<i64>,
    /// That offset's error bound when it was used.
    pub offset_bound_ns: Option<u64>,
    /// The moment aimed at, on this device's clocks.
    pub target: Stamp,
    /// The moment it acted, on this device's clocks, read right after its
    /// timer fired (or at once when late).
    pub done: Stamp,
    /// How much after the target the message reached the probe (its read;
    /// 0: before, and it acted at the target). A late action happens as
    /// soon as it can.
    pub late_ns: u64,
}

/// What one probe connection's permessage-deflate agreed (RFC 7692).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConnectionDeflate {
    /// Connection index within this probe.
    pub conn: u32,
    /// The server compresses each message on its own (no context takeover).
    pub server_no_context_takeover: bool,
    /// The server's window bits, when it said (15 otherwise).
    pub server_max_window_bits: Option<u8>,
}

impl ProbeRecord {
    /// The probe-clock stamp the record was made at, if it carries one: for
    /// clock-step detection and for how far a log has reached. A time
    /// exchange counts by its receipt (`t4`).
    pub fn stamp(&self) -> Option<Stamp> {
        match self {
            ProbeRecord::Started(s) => Some(s.at),
            ProbeRecord::ConnectionOpened(o) => Some(o.at),
            ProbeRecord::ConnectionFailed(f) => Some(f.at),
            ProbeRecord::ConnectionClosed(c) => Some(c.at),
            ProbeRecord::Receipt(r) => Some(r.at),
            ProbeRecord::Stopped(at) => Some(*at),
            ProbeRecord::ClockState(c) => Some(c.at),
            ProbeRecord::TimeSample(t) => Some(t.t4),
            ProbeRecord::LogFull(l) => Some(l.at),
            ProbeRecord::LogsPruned(l) => Some(l.at),
            ProbeRecord::ClockTags(t) => Some(t.at),
            ProbeRecord::ActPlan(p) => Some(p.at),
            ProbeRecord::Action(a) => Some(a.done),
            ProbeRecord::Frame(f) => Some(f.at),
            ProbeRecord::AppAction(a) => Some(a.action.done),
            ProbeRecord::NoticeTotals(t) => Some(t.at),
            ProbeRecord::Identity(_)
            | ProbeRecord::ConnectionAddresses(_)
            | ProbeRecord::ConnectionTls(_)
            | ProbeRecord::ConnectionDeflate(_)
            | ProbeRecord::Payload(_)
            | ProbeRecord::Page(_)
            | ProbeRecord::App(_) => None,
        }
    }
}

/// How one probe connection's TLS went.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConnectionTls {
    /// Connection index within this probe.
    pub conn: u32,
    /// The protocol version, like `TLSv1_3`.
    pub version: String,
    /// The cipher suite, like `TLS13_AES_128_GCM_SHA256`.
    pub cipher: String,
    /// The server's certificate was verified (false only with `--insecure`).
    pub verified: bool,
}

/// Where a probe stopped recording because its log was full.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LogFull {
    /// When.
    pub at: Stamp,
    /// The `--max-log-bytes` it reached.
    pub max_bytes: u64,
}

/// A probe connection's endpoints, as its socket reports them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ConnectionAddresses {
    /// Connection index within this probe.
    pub conn: u32,
    /// The device's side, `ADDR:PORT` (the server sees this as the client).
    pub local: String,
    /// The server's side, `ADDR:PORT`.
    pub remote: String,
}

/// What names a run and the clock it was stamped with. Appended after the
/// first records were defined, so logs written before it lack it, and a
/// report then falls back to the host name and says so.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunIdentity {
    /// Random per run, 128 bits: tells runs apart when names repeat.
    pub run_id: u128,
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`): names the
    /// clock exactly. Host names do not: every device made from one OS image
    /// carries the same one. `None` where the kernel does not publish it.
    pub boot_id: Option<String>,
}

/// Identity of a probe run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeStarted {
    /// `--name`, or the host name.
    pub name: String,
    /// Host name of the device, so reports can tell which connections share a clock.
    pub host: String,
    /// The WebSocket URL probed.
    pub url: String,
    /// Connections requested.
    pub connections: u32,
    /// skewscope version that wrote the log.
    pub version: String,
    /// When the probe started.
    pub at: Stamp,
}

/// A probe connection is up.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeConnectionOpened {
    /// Connection index within this probe, from 0.
    pub conn: u32,
    /// The agent's connection id from the `X-Skewscope-Conn` header; `None` for a
    /// server that is not a skewscope agent.
    pub agent_conn: Option<u64>,
    /// When the upgrade completed.
    pub at: Stamp,
}

/// A probe connection could not be made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeConnectionFailed {
    /// Connection index within this probe.
    pub conn: u32,
    /// When it failed.
    pub at: Stamp,
    /// The error, for people.
    pub error: String,
}

/// A probe connection ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProbeConnectionClosed {
    /// Connection index within this probe.
    pub conn: u32,
    /// When.
    pub at: Stamp,
    /// Why, for people ("count reached", "server closed", an error).
    pub reason: String,
}

/// One message received on one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Receipt {
    /// Connection index within this probe.
    pub conn: u32,
    /// Which message.
    pub key: MessageKey,
    /// [`crate::identity::payload_hash`] of the payload.
    pub hash: u64,
    /// Payload size in bytes.
    pub len: u32,
    /// Userspace time the frame was complete.
    pub at: Stamp,
    /// How long before `at` the kernel received the frame's last segment
    /// (`SO_TIMESTAMPING` software RX stamp), measured on the kernel's own clock
    /// so it stays right even when the process clock is shifted; `None` when the
    /// kernel gave no stamp.
    pub kernel_delay_ns: Option<u64>,
}

/// What a clock says about its own error: the kernel's NTP state and, when
/// chronyd answers, its tracking figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClockState {
    /// When it was read.
    pub at: Stamp,
    /// `adjtimex` with modes 0; `None` if the call failed.
    pub kernel: Option<KernelClock>,
    /// `chronyc -c tracking`; `None` when chronyd is absent or silent.
    pub chrony: Option<ChronyTracking>,
}

/// The kernel's NTP discipline state (`adjtimex`, read only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KernelClock {
    /// `STA_UNSYNC` is clear: a time daemon disciplines the clock.
    pub synchronized: bool,
    /// The raw status bits.
    pub status: i32,
    /// Maximum error the kernel claims, in nanoseconds.
    pub max_error_ns: u64,
    /// Estimated error the kernel claims, in nanoseconds.
    pub est_error_ns: u64,
    /// Current offset being slewed away, in nanoseconds.
    pub offset_ns: i64,
    /// Frequency correction, in parts per billion.
    pub freq_ppb: i64,
}

/// chronyd's tracking report, the fields that bound the clock's error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ChronyTracking {
    /// Reference (server) name or id.
    pub reference: String,
    /// Stratum of this clock.
    pub stratum: u32,
    /// Offset of the system clock from chrony's estimate of true time, in ns.
    pub system_offset_ns: i64,
    /// Last measured offset, in ns.
    pub last_offset_ns: i64,
    /// RMS of recent offsets, in ns.
    pub rms_offset_ns: u64,
    /// Root delay to the reference, in ns.
    pub root_delay_ns: u64,
    /// Root dispersion, in ns.
    pub root_dispersion_ns: u64,
    /// Leap status text ("Normal", "Not synchronised", ...).
    pub leap: String,
}

impl ClockState {
    /// The error bound the clock itself claims, if it claims one: chrony's
    /// root dispersion plus half the root delay plus its system offset, else the
    /// kernel's maximum error; `None` for an unsynchronised clock.
    pub fn claimed_bound_ns(&self) -> Option<u64> {
        if let Some(c) = &self.chrony
            && c.leap != "Not synchronised"
        {
            return Some(
                c.root_dispersion_ns + c.root_delay_ns / 2 + c.system_offset_ns.unsigned_abs(),
            );
        }
        self.kernel
            .filter(|k| k.synchronized)
            .map(|k| k.max_error_ns)
    }
}

/// One NTP-style exchange with the agent: the probe sent at `t1`, the agent
/// received at `t2` and answered at `t3`, the probe received at `t4`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TimeSample {
    /// Probe clocks when the request left.
    pub t1: Stamp,
    /// Agent wall clock when the request arrived.
    pub t2_wall_ns: u64,
    /// Agent wall clock when the reply left.
    pub t3_wall_ns: u64,
    /// Probe clocks when the reply arrived.
    pub t4: Stamp,
}

/// What the agent's time port did with the packets it got.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
pub struct TimePortTotals {
    /// Requests answered.
    pub answered: u64,
    /// Dropped: shorter than a request, or not a request.
    pub malformed: u64,
    /// Dropped: longer than a request (answering could amplify).
    pub oversized: u64,
    /// Dropped: a request id seen recently.
    pub replayed: u64,
}

/// Which kernel transmit timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub enum TxKind {
    /// The packet entered the queueing discipline (`SOF_TIMESTAMPING_TX_SCHED`).
    Sched,
    /// The packet left for the device driver (`SOF_TIMESTAMPING_TX_SOFTWARE`).
    Software,
}

/// A kernel transmit timestamp for the last byte of one client's copy of a broadcast.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TxStamp {
    /// Broadcast id.
    pub broadcast: u64,
    /// Connection id.
    pub conn: u64,
    /// Which stamp.
    pub kind: TxKind,
    /// The stamp on the agent's monotonic clock.
    pub mono_ns: u64,
}
