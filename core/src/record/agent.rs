//! What the agent writes to its log: its run, its clients, each
//! broadcast and its sends, leads, the time port, what it lost.

use serde::{Deserialize, Serialize};

use super::clock::{ClockState, RunIdentity};
use super::tap::{
    TapBroadcast, TapConnectionEvent, TapConnectionTotals, TapCountersRecord, TapStarted,
};
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
