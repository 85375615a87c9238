//! The tap: captured IPv4/IPv6 TCP packets of a server it follows, through
//! segment parsing, reassembly, the HTTP upgrade or event stream, the
//! frames, and the protocol on them (Socket.IO, STOMP, MQTT) read for
//! every `--tap-protocol`.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

use skewscope_core::tap::protocol::{Protocol, TapProtocol, TapReading};
use skewscope_core::tap::{Tap, TapEvent};

/// The port the fuzzed tap follows; the seeds' server listens on it.
pub const TAP_PORT: u16 = 8000;
/// Largest message followed: small, so the limit is reached.
const MAX_MESSAGE: usize = 4096;

/// Every reading the tap can be asked for.
const READINGS: [TapProtocol; 5] = [
    TapProtocol::Auto,
    TapProtocol::Ws,
    TapProtocol::SocketIo,
    TapProtocol::Stomp,
    TapProtocol::Mqtt,
];

/// The input is a capture: packets, each preceded by its length (u16, big
/// endian). The tap reads them in order and finishes, once for every
/// `--tap-protocol`. Under each, what it follows stays consistent (never
/// more WebSockets than connections), it holds no connection, WebSocket or
/// inflater after it finished, no message is over its limit, and a
/// connection's events come in order: opened, at most one recognition
/// (only when the opening did not say), then its messages. And `auto`
/// reads each connection as naming its protocol would: a client `auto`
/// read as one protocol throughout gets the same messages when that
/// protocol is named.
pub fn tap(data: &[u8]) {
    let packets = packets(data);
    let mut runs = HashMap::new();
    for protocol in READINGS {
        runs.insert(protocol, run(&packets, protocol));
    }
    let auto = &runs[&TapProtocol::Auto];
    for (client, protocol) in read_as(auto) {
        let named = match protocol {
            Protocol::WebSocket => TapProtocol::Ws,
            Protocol::SocketIo => TapProtocol::SocketIo,
            Protocol::Stomp => TapProtocol::Stomp,
            Protocol::Mqtt => TapProtocol::Mqtt,
            Protocol::EventStream => continue,
        };
        assert_eq!(
            messages_to(auto, client),
            messages_to(&runs[&named], client),
            "{client}: auto read it as {protocol:?}, naming {named} reads it otherwise"
        );
    }
}

/// The events of one pass over the capture, its invariants checked.
fn run(packets: &[&[u8]], protocol: TapProtocol) -> Vec<TapEvent> {
    let mut tap = Tap::new(TAP_PORT, MAX_MESSAGE).reading(TapReading {
        protocol,
        events: vec!["show".to_owned()],
    });
    let mut events = Vec::new();
    let mut at_ns = 1_000_000_000u64;
    for packet in packets {
        tap.packet(at_ns, packet, &mut events);
        at_ns += 1_000;
        assert!(tap.websockets() <= tap.connections());
    }
    tap.finish(at_ns, &mut events);
    assert_eq!(tap.connections(), 0, "connections left after finish");
    assert_eq!(tap.websockets(), 0);
    assert_eq!(tap.inflater_bytes(), 0, "inflaters left after finish");
    in_order(&events, protocol);
    events
}

/// Per client: a message or recognition only after an opening, a
/// recognition only of an opening that did not say, before its messages.
fn in_order(events: &[TapEvent], protocol: TapProtocol) {
    // Client -> whether its current connection still awaits recognition.
    let mut open: HashMap<SocketAddr, bool> = HashMap::new();
    for e in events {
        match e {
            TapEvent::Opened {
                client,
                protocol: p,
                ..
            } => {
                assert!(
                    p.is_some() || protocol == TapProtocol::Auto,
                    "{protocol}: an opening that does not say what it carries"
                );
                open.insert(*client, p.is_none());
            }
            TapEvent::Recognised { client, .. } => {
                let waiting = open.get_mut(client).expect("recognised before opened");
                assert!(
                    *waiting,
                    "{client}: recognised twice, or after its opening said"
                );
                *waiting = false;
            }
            TapEvent::Message { client, len, .. } => {
                assert!(*len as usize <= MAX_MESSAGE, "a message of {len} bytes");
                let waiting = open.get(client).expect("a message before its opening");
                assert!(!waiting, "{client}: a message before its recognition");
            }
            TapEvent::Closed { .. } | TapEvent::Ended { .. } => {}
        }
    }
}

/// Clients every one of whose connections `events` read as one protocol.
fn read_as(events: &[TapEvent]) -> Vec<(SocketAddr, Protocol)> {
    let mut seen: HashMap<SocketAddr, HashSet<Option<Protocol>>> = HashMap::new();
    let mut waiting: HashSet<SocketAddr> = HashSet::new();
    for e in events {
        match e {
            TapEvent::Opened {
                client, protocol, ..
            } => match protocol {
                Some(p) => {
                    seen.entry(*client).or_default().insert(Some(*p));
                }
                None => {
                    waiting.insert(*client);
                }
            },
            TapEvent::Recognised { client, protocol } => {
                waiting.remove(client);
                seen.entry(*client).or_default().insert(Some(*protocol));
            }
            _ => {}
        }
    }
    // One never recognised carried no message: nothing to compare, but it
    // makes its client's connections mixed.
    for client in waiting {
        seen.entry(client).or_default().insert(None);
    }
    let mut one: Vec<(SocketAddr, Protocol)> = seen
        .into_iter()
        .filter_map(
            |(client, protocols)| match protocols.into_iter().collect::<Vec<_>>()[..] {
                [Some(p)] => Some((client, p)),
                _ => None,
            },
        )
        .collect();
    one.sort_by_key(|(client, _)| *client);
    one
}

/// What `client` was sent: its messages, without the count of open
/// connections (which a connection broken under one reading and not
/// under another changes).
fn messages_to(events: &[TapEvent], client: SocketAddr) -> Vec<TapEvent> {
    events
        .iter()
        .filter_map(|e| match e {
            TapEvent::Message {
                client: c,
                key,
                hash,
                len,
                first_byte_ns,
                last_byte_ns,
                compressed,
                ..
            } if *c == client => Some(TapEvent::Message {
                client: *c,
                key: *key,
                hash: *hash,
                len: *len,
                first_byte_ns: *first_byte_ns,
                last_byte_ns: *last_byte_ns,
                compressed: *compressed,
                open_websockets: 0,
            }),
            _ => None,
        })
        .collect()
}

/// Splits a capture into its length-prefixed packets (a short last one is
/// taken as it is).
pub fn packets(mut data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    while data.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([data[0], data[1]]));
        let end = (2 + len).min(data.len());
        out.push(&data[2..end]);
        data = &data[end..];
    }
    out
}

/// Joins packets into the capture format [`tap`] reads (for seeds).
pub fn capture(packets: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in packets {
        let len = u16::try_from(p.len()).expect("seed packets under 64 KiB");
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(p);
    }
    out
}
