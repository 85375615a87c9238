//! The tap, without I/O: an unmodified server's outgoing TCP segments in,
//! the messages it sent to each client out, each with the capture times of
//! its first and last byte. The OS layer captures the packets
//! (`AF_PACKET`) and hands them here with their kernel stamps.
//!
//! - [`segment`]: an IP packet read as a TCP segment;
//! - `reassembly`: one direction put back in order (resends, reordering);
//! - `response`: the server's first response, which says what follows;
//! - [`crate::server_frames`]: the server's WebSocket frames, as whole messages;
//! - [`protocol`]: what rides on them (Socket.IO, STOMP, MQTT), read with the
//!   probe's layers, so a message is the payload a probe records;
//! - `event_stream`: an event stream's (SSE) events;
//! - [`broadcasts`]: copies of one payload to many clients, as broadcasts.
//!
//! A connection is followed from the server's SYN-ACK: its HTTP response
//! must be `101 Switching Protocols`, then its bytes are frames, or an
//! event stream (`200`, `text/event-stream`), then its body is events. One
//! already open when the tap started cannot be framed with certainty (where
//! a frame starts is unknown), so it is counted and skipped. TLS is
//! recognised and skipped, never decoded into nonsense.

pub mod broadcasts;
mod event_stream;
pub mod protocol;
pub(crate) mod reassembly;
mod response;
pub mod segment;

use std::collections::HashMap;
use std::net::SocketAddr;

use crate::identity::Identifier;
use crate::permessage_deflate::inflate::{self, Inflater};
use crate::protocol_layer::LayerError;
use crate::record::{MessageKey, TapCounters};
use crate::server_frames::{ServerEvent, ServerFrames};
use event_stream::TappedEventStream;
use protocol::{Payloads, Protocol, TapReading};
use reassembly::Reassembler;
use response::Response;
use segment::TcpSegment;

/// Longest HTTP response head followed before the connection is given up.
pub const MAX_RESPONSE_HEAD: usize = 16 * 1024;

/// What the tap saw happen on one connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TapEvent {
    /// The server's `101` response was sent (from here on it is a
    /// WebSocket), or the head of an event stream.
    Opened {
        /// The client's address and port.
        client: SocketAddr,
        /// Capture time of the response's last byte.
        at_ns: u64,
        /// The connection negotiated permessage-deflate.
        deflate: bool,
        /// What its messages are read as; `None` when its first data
        /// message will say ([`TapEvent::Recognised`]).
        protocol: Option<Protocol>,
    },
    /// A WebSocket's first data message said what it carries (Socket.IO's
    /// open packet, else plain messages), before any of its messages.
    Recognised {
        /// The client's address and port.
        client: SocketAddr,
        /// What its messages are read as.
        protocol: Protocol,
    },
    /// The server sent one message to `client`: a WebSocket data message,
    /// or the payload of one its protocol carried, or an event's data.
    Message {
        /// The client's address and port.
        client: SocketAddr,
        /// Which message, as probes name it (test-message sequence, else
        /// hash and occurrence on this connection).
        key: MessageKey,
        /// Hash of the payload as sent.
        hash: u64,
        /// Payload bytes.
        len: u32,
        /// Capture time of the segment that carried its first byte.
        first_byte_ns: u64,
        /// Capture time of the segment that carried its last byte.
        last_byte_ns: u64,
        /// Compressed (permessage-deflate): `hash` is of the compressed
        /// bytes, which differ per connection, so it is not identified yet.
        compressed: bool,
        /// WebSocket connections open when it was sent: a broadcast that
        /// reached that many is complete.
        open_websockets: usize,
    },
    /// The connection ended (FIN, RST or a close frame), or its
    /// protocol's session or event stream did.
    Closed {
        /// The client's address and port.
        client: SocketAddr,
        /// Capture time.
        at_ns: u64,
        /// Why, for people.
        reason: &'static str,
    },
    /// A connection that had been a WebSocket is no longer followed (its
    /// FIN or RST, or the tap's end): what its segments were.
    Ended {
        /// The client's address and port.
        client: SocketAddr,
        /// Capture time, or the tap's end.
        at_ns: u64,
        /// Segments the server sent it while followed.
        segments: u64,
        /// Of those, resends of bytes already captured.
        resent: u64,
        /// Segments captured ahead of a gap.
        reordered: u64,
    },
}

enum Phase {
    Handshake {
        head: Vec<u8>,
    },
    WebSocket {
        frames: ServerFrames,
        identifier: Identifier,
        inflater: Option<Inflater>,
        payloads: Payloads,
    },
    EventStream {
        stream: TappedEventStream,
        identifier: Identifier,
    },
    Ignored,
}

impl Phase {
    /// Whether its messages are followed (a WebSocket or an event stream).
    fn streaming(&self) -> bool {
        matches!(self, Phase::WebSocket { .. } | Phase::EventStream { .. })
    }
}

/// Most memory all connections' inflaters may hold together: past it, a
/// new permessage-deflate connection's messages are counted, not inflated.
pub const MAX_INFLATER_BYTES: usize = 256 * 1024 * 1024;

/// One server connection the tap follows: its bytes put back in order, and
/// what they are so far (the handshake, WebSocket frames, or ignored).
struct FollowedConnection {
    bytes: Reassembler,
    phase: Phase,
    /// Segments read from it.
    segments: u64,
    /// It reached the WebSocket or event-stream phase (so its end is
    /// reported).
    upgraded: bool,
}

impl FollowedConnection {
    fn new(bytes: Reassembler, phase: Phase) -> FollowedConnection {
        FollowedConnection {
            bytes,
            phase,
            segments: 0,
            upgraded: false,
        }
    }

    /// Its [`TapEvent::Ended`], if it was ever a WebSocket.
    fn ended(&self, client: SocketAddr, at_ns: u64) -> Option<TapEvent> {
        self.upgraded.then_some(TapEvent::Ended {
            client,
            at_ns,
            segments: self.segments,
            resent: self.bytes.retransmitted,
            reordered: self.bytes.reordered,
        })
    }
}

/// Every connection of one server port, followed.
pub struct Tap {
    port: u16,
    max_message: usize,
    reading: TapReading,
    connections: HashMap<(SocketAddr, SocketAddr), FollowedConnection>,
    counters: TapCounters,
    /// Connections in the WebSocket or event-stream phase now.
    websockets: usize,
    /// Inflaters with a window of their own alive now (each
    /// [`inflate::INFLATER_BYTES`]; those of servers without context
    /// takeover share one per thread and count nothing).
    inflaters: usize,
}

impl Tap {
    /// A tap of the server's local port `port`, following messages up to
    /// `max_message` bytes, each WebSocket read as what it says it carries
    /// ([`protocol::TapProtocol::Auto`]).
    pub fn new(port: u16, max_message: usize) -> Tap {
        Tap {
            port,
            max_message,
            reading: TapReading::default(),
            connections: HashMap::new(),
            counters: TapCounters::default(),
            websockets: 0,
            inflaters: 0,
        }
    }

    /// The tap, reading what the connections carry as `reading` says
    /// (`--tap-protocol`, `--tap-event`).
    pub fn reading(mut self, reading: TapReading) -> Tap {
        self.reading = reading;
        self
    }

    /// Memory the inflaters of permessage-deflate connections hold now.
    pub fn inflater_bytes(&self) -> usize {
        self.inflaters * inflate::INFLATER_BYTES
    }

    /// What it counted so far.
    pub fn counters(&self) -> TapCounters {
        self.counters
    }

    /// Connections being followed now.
    pub fn connections(&self) -> usize {
        self.connections.len()
    }

    /// Of those, connections whose messages are followed now (WebSockets
    /// and event streams): what a broadcast reaching all of them is
    /// complete at.
    pub fn websockets(&self) -> usize {
        self.websockets
    }

    /// Reads one captured IP packet, stamped `at_ns`.
    pub fn packet(&mut self, at_ns: u64, packet: &[u8], out: &mut Vec<TapEvent>) {
        match segment::parse(packet) {
            Ok(s) => self.segment(at_ns, &s, out),
            Err(_) => self.counters.ignored_packets += 1,
        }
    }

    /// Reads one TCP segment, stamped `at_ns`.
    pub fn segment(&mut self, at_ns: u64, s: &TcpSegment<'_>, out: &mut Vec<TapEvent>) {
        if s.src.port() != self.port {
            self.counters.ignored_packets += 1;
            return;
        }
        self.counters.segments += 1;
        let key = (s.src, s.dst);
        let client = s.dst;
        if s.flags.syn {
            self.counters.followed += 1;
            let fresh = FollowedConnection::new(
                Reassembler::after_syn(s.seq),
                Phase::Handshake { head: Vec::new() },
            );
            if let Some(old) = self.connections.insert(key, fresh) {
                self.gauges().leave(&old.phase);
                out.extend(old.ended(client, at_ns));
            }
            return;
        }
        let Some(c) = self.connections.get_mut(&key) else {
            // Its SYN-ACK went before the tap started: where frames begin is
            // unknown. Counted once, then followed as ignored until it ends.
            // (A bare ACK after the connection's end is not one of those.)
            if !(s.flags.fin || s.flags.rst || s.payload.is_empty()) {
                self.counters.open_before_tap += 1;
                self.connections.insert(
                    key,
                    FollowedConnection::new(
                        Reassembler::after_syn(s.seq.wrapping_sub(1)),
                        Phase::Ignored,
                    ),
                );
            }
            return;
        };
        c.segments += 1;
        if matches!(c.phase, Phase::Ignored) {
            // Nothing of it is read: only its end is noticed.
            if s.flags.fin || s.flags.rst {
                out.extend(c.ended(client, at_ns));
                self.connections.remove(&key);
            }
            return;
        }
        let (retransmitted, reordered) = (c.bytes.retransmitted, c.bytes.reordered);
        let mut gauges = Gauges {
            websockets: &mut self.websockets,
            inflaters: &mut self.inflaters,
        };
        let counters = &mut self.counters;
        let limits = Limits {
            max_message: self.max_message,
            reading: &self.reading,
        };
        let FollowedConnection { bytes, phase, .. } = c;
        let pushed = bytes.push(s.seq, s.payload, at_ns, &mut |b, t| {
            take(phase, b, t, client, &limits, counters, &mut gauges, out)
        });
        c.upgraded |= c.phase.streaming();
        counters.retransmitted += c.bytes.retransmitted - retransmitted;
        counters.reordered += c.bytes.reordered - reordered;
        if pushed.is_err() {
            if !matches!(c.phase, Phase::Ignored) {
                counters.lost += 1;
            }
            gauges.leave(&c.phase);
            c.phase = Phase::Ignored;
        }
        if s.flags.fin || s.flags.rst {
            if c.phase.streaming() {
                out.push(TapEvent::Closed {
                    client,
                    at_ns,
                    reason: if s.flags.rst {
                        "reset"
                    } else {
                        "server closed"
                    },
                });
            }
            gauges.leave(&c.phase);
            out.extend(c.ended(client, at_ns));
            self.connections.remove(&key);
        }
    }

    /// The tap's end, at `at_ns`: an [`TapEvent::Ended`] for every
    /// connection still followed that had been a WebSocket.
    pub fn finish(&mut self, at_ns: u64, out: &mut Vec<TapEvent>) {
        let mut ended: Vec<(SocketAddr, TapEvent)> = self
            .connections
            .iter()
            .filter_map(|((_, client), c)| Some((*client, c.ended(*client, at_ns)?)))
            .collect();
        // Map order is arbitrary; the log's is by client.
        ended.sort_by_key(|(client, _)| *client);
        out.extend(ended.into_iter().map(|(_, e)| e));
        self.connections.clear();
        self.websockets = 0;
        self.inflaters = 0;
    }

    fn gauges(&mut self) -> Gauges<'_> {
        Gauges {
            websockets: &mut self.websockets,
            inflaters: &mut self.inflaters,
        }
    }
}

/// The tap's counts of what is open now, kept as phases change.
struct Gauges<'a> {
    websockets: &'a mut usize,
    inflaters: &'a mut usize,
}

impl Gauges<'_> {
    /// A connection leaves `phase` (for Ignored, or for good).
    fn leave(&mut self, phase: &Phase) {
        match phase {
            Phase::WebSocket { inflater, .. } => {
                *self.websockets -= 1;
                *self.inflaters -=
                    usize::from(inflater.as_ref().is_some_and(Inflater::owns_window));
            }
            Phase::EventStream { .. } => *self.websockets -= 1,
            Phase::Handshake { .. } | Phase::Ignored => {}
        }
    }
}

/// What every connection is read with: the tap's settings.
struct Limits<'a> {
    max_message: usize,
    reading: &'a TapReading,
}

/// Bytes of a connection, in order: the response head, then frames or an
/// event stream's body.
#[allow(clippy::too_many_arguments)] // one connection's state and the tap's, split for the borrow
fn take(
    phase: &mut Phase,
    mut bytes: &[u8],
    at_ns: u64,
    client: SocketAddr,
    limits: &Limits<'_>,
    counters: &mut TapCounters,
    gauges: &mut Gauges<'_>,
    out: &mut Vec<TapEvent>,
) {
    if let Phase::Handshake { head } = phase {
        if head.is_empty() && bytes.starts_with(&[0x16, 0x03]) {
            counters.tls += 1;
            *phase = Phase::Ignored;
            return;
        }
        let before = head.len();
        head.extend_from_slice(bytes);
        let Some(end) = find(head, b"\r\n\r\n").map(|i| i + 4) else {
            if head.len() > MAX_RESPONSE_HEAD {
                counters.not_websocket += 1;
                *phase = Phase::Ignored;
            }
            return;
        };
        let response = response::read(&head[..end]);
        bytes = &bytes[end - before..];
        *phase = match response {
            Response::Upgrade {
                extensions,
                subprotocol,
            } => upgraded(&extensions, subprotocol, at_ns, client, limits, gauges, out),
            Response::EventStream(head) => {
                out.push(TapEvent::Opened {
                    client,
                    at_ns,
                    deflate: false,
                    protocol: Some(Protocol::EventStream),
                });
                *gauges.websockets += 1;
                Phase::EventStream {
                    stream: TappedEventStream::new(
                        &head,
                        limits.reading.events.clone(),
                        limits.max_message,
                    ),
                    identifier: Identifier::default(),
                }
            }
            Response::Other => {
                counters.not_websocket += 1;
                Phase::Ignored
            }
        };
    }
    let open_websockets = *gauges.websockets;
    let end = match phase {
        Phase::WebSocket {
            frames,
            identifier,
            inflater,
            payloads,
        } => frames_in(
            bytes,
            at_ns,
            client,
            limits.max_message,
            open_websockets,
            (frames, identifier, inflater, payloads),
            counters,
            out,
        ),
        Phase::EventStream { stream, identifier } => {
            let mut message = |data: &[u8], first_byte_ns: u64| {
                out.push(message_event(
                    client,
                    identifier,
                    data,
                    first_byte_ns,
                    at_ns,
                    open_websockets,
                ))
            };
            match stream.push(bytes, at_ns, &mut message) {
                Ok(n) => {
                    counters.messages += n as u64;
                    stream.ended().then_some(End::Session("event stream ended"))
                }
                Err(_) => Some(End::Broken),
            }
        }
        Phase::Handshake { .. } | Phase::Ignored => None,
    };
    match end {
        None => {}
        Some(End::Broken) => counters.broken += 1,
        Some(End::Session(reason)) => out.push(TapEvent::Closed {
            client,
            at_ns,
            reason,
        }),
    }
    if end.is_some() {
        gauges.leave(phase);
        *phase = Phase::Ignored;
    }
}

/// Why a followed connection's messages stop being read before its end.
enum End {
    /// It broke its protocol or a bound.
    Broken,
    /// Its session or event stream ended, for this reason.
    Session(&'static str),
}

/// The phase a `101` starts: frames, inflated where negotiated, read as
/// what the connection carries.
fn upgraded(
    extensions: &[String],
    subprotocol: Option<String>,
    at_ns: u64,
    client: SocketAddr,
    limits: &Limits<'_>,
    gauges: &mut Gauges<'_>,
    out: &mut Vec<TapEvent>,
) -> Phase {
    let extensions: Vec<&str> = extensions.iter().map(String::as_str).collect();
    // The client's offer is not seen here; an answer its client would
    // have failed leaves the connection's messages unidentified.
    let accepted = crate::permessage_deflate::read_answer(&extensions, true)
        .ok()
        .flatten();
    let deflate = accepted.is_some();
    let payloads = Payloads::at_upgrade(limits.reading, subprotocol.as_deref(), limits.max_message);
    out.push(TapEvent::Opened {
        client,
        at_ns,
        deflate,
        protocol: payloads.protocol(),
    });
    // Windows of their own are bounded in total: past it, this
    // connection's compressed messages are counted, not identified.
    // Messages that stand alone share the thread's window.
    let stand_alone = accepted.is_some_and(|a| a.server_no_context_takeover);
    let room = (*gauges.inflaters + 1) * inflate::INFLATER_BYTES <= MAX_INFLATER_BYTES;
    let inflater = (deflate && (stand_alone || room)).then(|| Inflater::new(stand_alone));
    let owns = inflater.as_ref().is_some_and(Inflater::owns_window);
    *gauges.websockets += 1;
    *gauges.inflaters += usize::from(owns);
    Phase::WebSocket {
        frames: ServerFrames::new(limits.max_message),
        identifier: Identifier::default(),
        inflater,
        payloads,
    }
}

/// A WebSocket's state while its frames are read.
type WebSocketState<'a> = (
    &'a mut ServerFrames,
    &'a mut Identifier,
    &'a mut Option<Inflater>,
    &'a mut Payloads,
);

/// A WebSocket's bytes: its messages, inflated, through its protocol, each
/// payload identified. Returns why it is no longer read, if it is not.
#[allow(clippy::too_many_arguments)] // one connection's state and the tap's, split for the borrow
fn frames_in(
    bytes: &[u8],
    at_ns: u64,
    client: SocketAddr,
    max_message: usize,
    open_websockets: usize,
    (frames, identifier, inflater, payloads): WebSocketState<'_>,
    counters: &mut TapCounters,
    out: &mut Vec<TapEvent>,
) -> Option<End> {
    let mut events = Vec::new();
    // What came before a broken frame is still read.
    let broken = frames.push(bytes, at_ns, &mut events).is_err();
    for event in events {
        let mut m = match event {
            ServerEvent::Message(m) => m,
            ServerEvent::Close(_) => {
                out.push(TapEvent::Closed {
                    client,
                    at_ns,
                    reason: "close frame",
                });
                continue;
            }
            ServerEvent::Ping(_) | ServerEvent::Pong => continue,
        };
        if m.compressed {
            match inflater
                .as_mut()
                .map(|i| i.message(&m.payload, max_message))
            {
                Some(Ok(plain)) => {
                    counters.inflated += 1;
                    m.payload = plain;
                    m.compressed = false;
                }
                Some(Err(_)) => return Some(End::Broken),
                None => {
                    // Not readable: counted, and its bytes hashed as they are.
                    if payloads.unreadable() {
                        out.push(TapEvent::Recognised {
                            client,
                            protocol: Protocol::WebSocket,
                        });
                    }
                    counters.messages += 1;
                    counters.compressed += 1;
                    let mut e = message_event(
                        client,
                        identifier,
                        &m.payload,
                        m.first_byte_ns,
                        m.last_byte_ns,
                        open_websockets,
                    );
                    if let TapEvent::Message { compressed, .. } = &mut e {
                        *compressed = true;
                    }
                    out.push(e);
                    continue;
                }
            }
        }
        let known = payloads.protocol();
        let mark = out.len();
        let read = payloads.message(
            &m.payload,
            m.text,
            m.first_byte_ns,
            m.last_byte_ns,
            &mut |payload, first_byte_ns| {
                out.push(message_event(
                    client,
                    identifier,
                    payload,
                    first_byte_ns,
                    m.last_byte_ns,
                    open_websockets,
                ))
            },
        );
        counters.messages += (out.len() - mark) as u64;
        if known.is_none()
            && let Some(protocol) = payloads.protocol()
        {
            // Said before the messages it decided how to read.
            out.insert(mark, TapEvent::Recognised { client, protocol });
        }
        match read {
            Ok(_) => {}
            Err(LayerError::Protocol(_)) => return Some(End::Broken),
            Err(LayerError::Refused(_) | LayerError::Gone(_)) => {
                return Some(End::Session("the protocol's session ended"));
            }
        }
    }
    broken.then_some(End::Broken)
}

/// A payload sent to `client`, identified as a probe on that connection
/// identifies it.
fn message_event(
    client: SocketAddr,
    identifier: &mut Identifier,
    payload: &[u8],
    first_byte_ns: u64,
    last_byte_ns: u64,
    open_websockets: usize,
) -> TapEvent {
    let (key, hash) = identifier.identify(payload);
    TapEvent::Message {
        client,
        key,
        hash,
        len: u32::try_from(payload.len()).unwrap_or(u32::MAX),
        first_byte_ns,
        last_byte_ns,
        compressed: false,
        open_websockets,
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests;
