//! The tap, without I/O: an unmodified server's outgoing TCP segments in,
//! the WebSocket messages it sent to each client out, each with the capture
//! times of its first and last byte. The OS layer captures the packets
//! (`AF_PACKET`) and hands them here with their kernel stamps.
//!
//! - [`segment`]: an IP packet read as a TCP segment;
//! - `reassembly`: one direction put back in order (resends, reordering);
//! - [`crate::server_frames`]: the server's WebSocket frames, as whole messages;
//! - [`broadcasts`]: copies of one payload to many clients, as broadcasts.
//!
//! A connection is followed from the server's SYN-ACK: its HTTP response
//! must be `101 Switching Protocols`, then its bytes are frames. One already
//! open when the tap started cannot be framed with certainty (where a frame
//! starts is unknown), so it is counted and skipped. TLS is recognised and
//! skipped, never decoded into nonsense.

pub mod broadcasts;
pub(crate) mod reassembly;
pub mod segment;

use std::collections::HashMap;
use std::net::SocketAddr;

use crate::identity::Identifier;
use crate::permessage_deflate::inflate::{self, Inflater};
use crate::record::{MessageKey, TapCounters};
use crate::server_frames::{ServerEvent, ServerFrames};
use reassembly::Reassembler;
use segment::TcpSegment;

/// Longest HTTP response head followed before the connection is given up.
pub const MAX_RESPONSE_HEAD: usize = 16 * 1024;

/// What the tap saw happen on one connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TapEvent {
    /// The server's `101` response was sent: from here on it is a WebSocket.
    Opened {
        /// The client's address and port.
        client: SocketAddr,
        /// Capture time of the response's last byte.
        at_ns: u64,
        /// The connection negotiated permessage-deflate.
        deflate: bool,
    },
    /// The server sent one data message to `client`.
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
    /// The connection ended (FIN, RST or a close frame).
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
    },
    Ignored,
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
    /// It reached the WebSocket phase (so its end is reported).
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
    connections: HashMap<(SocketAddr, SocketAddr), FollowedConnection>,
    counters: TapCounters,
    /// Connections in the WebSocket phase now.
    websockets: usize,
    /// Inflaters with a window of their own alive now (each
    /// [`inflate::INFLATER_BYTES`]; those of servers without context
    /// takeover share one per thread and count nothing).
    inflaters: usize,
}

impl Tap {
    /// A tap of the server's local port `port`, following messages up to
    /// `max_message` bytes.
    pub fn new(port: u16, max_message: usize) -> Tap {
        Tap {
            port,
            max_message,
            connections: HashMap::new(),
            counters: TapCounters::default(),
            websockets: 0,
            inflaters: 0,
        }
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

    /// Of those, connections that are WebSockets now: what a broadcast
    /// reaching all of them is complete at.
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
        let max_message = self.max_message;
        let FollowedConnection { bytes, phase, .. } = c;
        let pushed = bytes.push(s.seq, s.payload, at_ns, &mut |b, t| {
            take(phase, b, t, client, max_message, counters, &mut gauges, out)
        });
        c.upgraded |= matches!(c.phase, Phase::WebSocket { .. });
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
            if matches!(c.phase, Phase::WebSocket { .. }) {
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
        if let Phase::WebSocket { inflater, .. } = phase {
            *self.websockets -= 1;
            *self.inflaters -= usize::from(inflater.as_ref().is_some_and(Inflater::owns_window));
        }
    }
}

/// Bytes of a connection, in order: the response head, then frames.
#[allow(clippy::too_many_arguments)] // one connection's state and the tap's, split for the borrow
fn take(
    phase: &mut Phase,
    mut bytes: &[u8],
    at_ns: u64,
    client: SocketAddr,
    max_message: usize,
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
        if !head.starts_with(b"HTTP/1.1 101") {
            counters.not_websocket += 1;
            *phase = Phase::Ignored;
            return;
        }
        let head_text = String::from_utf8_lossy(&head[..end]);
        let extensions: Vec<&str> = head_text
            .lines()
            .filter_map(|l| l.split_once(':'))
            .filter(|(name, _)| name.trim().eq_ignore_ascii_case("sec-websocket-extensions"))
            .map(|(_, value)| value)
            .collect();
        // The client's offer is not seen here; an answer its client would
        // have failed leaves the connection's messages unidentified.
        let accepted = crate::permessage_deflate::read_answer(&extensions, true)
            .ok()
            .flatten();
        let deflate = accepted.is_some();
        out.push(TapEvent::Opened {
            client,
            at_ns,
            deflate,
        });
        bytes = &bytes[end - before..];
        // Windows of their own are bounded in total: past it, this
        // connection's compressed messages are counted, not identified.
        // Messages that stand alone share the thread's window.
        let stand_alone = accepted.is_some_and(|a| a.server_no_context_takeover);
        let room = (*gauges.inflaters + 1) * inflate::INFLATER_BYTES <= MAX_INFLATER_BYTES;
        let inflater = (deflate && (stand_alone || room)).then(|| Inflater::new(stand_alone));
        let owns = inflater.as_ref().is_some_and(Inflater::owns_window);
        *gauges.websockets += 1;
        *gauges.inflaters += usize::from(owns);
        *phase = Phase::WebSocket {
            frames: ServerFrames::new(max_message),
            identifier: Identifier::default(),
            inflater,
        };
    }
    let open_websockets = *gauges.websockets;
    let Phase::WebSocket {
        frames,
        identifier,
        inflater,
    } = phase
    else {
        return;
    };
    let mut events = Vec::new();
    let mut broken = frames.push(bytes, at_ns, &mut events).is_err();
    for event in events {
        match event {
            ServerEvent::Message(mut m) => {
                counters.messages += 1;
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
                        Some(Err(_)) => {
                            broken = true;
                            break;
                        }
                        None => counters.compressed += 1,
                    }
                }
                let (key, hash) = identifier.identify(&m.payload);
                out.push(TapEvent::Message {
                    client,
                    key,
                    hash,
                    len: u32::try_from(m.payload.len()).unwrap_or(u32::MAX),
                    first_byte_ns: m.first_byte_ns,
                    last_byte_ns: m.last_byte_ns,
                    compressed: m.compressed,
                    open_websockets,
                });
            }
            ServerEvent::Close(_) => out.push(TapEvent::Closed {
                client,
                at_ns,
                reason: "close frame",
            }),
            ServerEvent::Ping(_) | ServerEvent::Pong => {}
        }
    }
    if broken {
        counters.broken += 1;
        gauges.leave(phase);
        *phase = Phase::Ignored;
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests;
