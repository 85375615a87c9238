//! What the agent's tap records of another server it follows from its
//! packets (`--tap-port`).

use serde::{Deserialize, Serialize};

use crate::Stamp;

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
    /// Opened: what its messages were read as (`WebSocket`, `Socket.IO`,
    /// `STOMP`, `MQTT`, `SSE`), and `permessage-deflate` when it negotiated
    /// it (logs before the protocols say only the latter). Closed: why.
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
    /// Connections whose response was neither `101` nor an event stream
    /// (plain HTTP on the port).
    pub not_websocket: u64,
    /// Connections that spoke TLS: cannot be decoded.
    pub tls: u64,
    /// Connections whose stream broke the WebSocket protocol, the protocol
    /// on it, the event stream's format or a bound.
    pub broken: u64,
    /// Connections given up because the capture missed a segment.
    pub lost: u64,
    /// Segments that were resends of bytes already seen.
    pub retransmitted: u64,
    /// Segments captured ahead of a gap.
    pub reordered: u64,
    /// Messages decoded: WebSocket data messages, or the payloads a
    /// protocol on them carried (Socket.IO events, STOMP MESSAGEs, MQTT
    /// PUBLISHes; never its pings or acknowledgements), and event streams'
    /// events.
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
