//! What rides on a tapped server's WebSockets (Socket.IO, STOMP, MQTT),
//! read with the probe's own protocol layers built as observers, so the
//! tap's messages are the payloads the probes record (an event's
//! arguments, a MESSAGE's body, a PUBLISH's payload), not the framing
//! around them, and the report can join the two by payload.
//!
//! The tap sees only the server's side of each connection, and that side
//! says what the connection is:
//! - the `101` names the subprotocol the server selected: `v12.stomp`,
//!   `v11.stomp` or `v10.stomp` is STOMP, `mqtt` is MQTT (MQTT §6 and the
//!   STOMP-over-WebSocket convention require the server to select it);
//! - a Socket.IO server's first message is always Engine.IO's open packet
//!   (`0{"sid":…,"pingInterval":…}`), or `3probe` on a WebSocket upgraded
//!   from long-polling (browsers' default), so the first data message
//!   decides;
//! - anything else is plain WebSocket messages, read as before.
//!
//! So one port can carry several (a Spring application with a raw and a
//! STOMP endpoint), each read as what it is. `--tap-protocol` names one for
//! every connection instead, for a server that selects no subprotocol.
//! Control traffic (Engine.IO pings, STOMP heart-beats, CONNECTED, RECEIPT,
//! CONNACK, SUBACK, PINGRESP, a namespace's CONNECT) carries no payload, so
//! it is never a broadcast.

use crate::mqtt::Mqtt;
use crate::protocol_layer::{Frame, Layer, LayerError};
use crate::socketio::{self, SocketIo};
use crate::stomp::Stomp;

/// What a tapped connection's messages are read as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// Plain WebSocket messages: each message is a payload.
    WebSocket,
    /// Socket.IO over Engine.IO 4: each event's arguments.
    SocketIo,
    /// STOMP 1.x: each MESSAGE frame's body.
    Stomp,
    /// MQTT 3.1.1 or 5: each PUBLISH's payload (not retained ones).
    Mqtt,
    /// An HTTP event stream (SSE): each event's data.
    EventStream,
}

impl Protocol {
    /// Its name, for records and people.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::WebSocket => "WebSocket",
            Protocol::SocketIo => "Socket.IO",
            Protocol::Stomp => "STOMP",
            Protocol::Mqtt => "MQTT",
            Protocol::EventStream => "SSE",
        }
    }
}

/// What `--tap-protocol` asks the tap to read inside the server's
/// WebSockets.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum TapProtocol {
    /// Each connection as it says it is (its subprotocol, or Socket.IO's
    /// open packet), else plain messages.
    #[default]
    Auto,
    /// Every WebSocket's messages as they are, framing and all.
    Ws,
    /// Every WebSocket as Socket.IO.
    SocketIo,
    /// Every WebSocket as STOMP.
    Stomp,
    /// Every WebSocket as MQTT.
    Mqtt,
}

impl std::str::FromStr for TapProtocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "auto" => Ok(TapProtocol::Auto),
            "ws" => Ok(TapProtocol::Ws),
            "socketio" => Ok(TapProtocol::SocketIo),
            "stomp" => Ok(TapProtocol::Stomp),
            "mqtt" => Ok(TapProtocol::Mqtt),
            "sse" => Err("an event stream is always known by its Content-Type \
                 (text/event-stream), whatever --tap-protocol says: leave it at auto"
                .into()),
            other => Err(format!("{other:?}: give auto, ws, socketio, stomp or mqtt")),
        }
    }
}

impl std::fmt::Display for TapProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            TapProtocol::Auto => "auto",
            TapProtocol::Ws => "ws",
            TapProtocol::SocketIo => "socketio",
            TapProtocol::Stomp => "stomp",
            TapProtocol::Mqtt => "mqtt",
        })
    }
}

impl TapProtocol {
    /// The one protocol it names, if it names one.
    fn fixed(self) -> Option<Protocol> {
        match self {
            TapProtocol::Auto => None,
            TapProtocol::Ws => Some(Protocol::WebSocket),
            TapProtocol::SocketIo => Some(Protocol::SocketIo),
            TapProtocol::Stomp => Some(Protocol::Stomp),
            TapProtocol::Mqtt => Some(Protocol::Mqtt),
        }
    }
}

/// How the tap reads what its connections carry (`--tap-protocol`,
/// `--tap-event`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TapReading {
    /// What rides on the WebSockets.
    pub protocol: TapProtocol,
    /// Socket.IO event names and SSE event types to take (empty: every
    /// one): the probes' `--event`, so a copy the probes chose not to
    /// record is not taken as one they missed.
    pub events: Vec<String>,
}

/// The protocol a `101` names by its selected subprotocol, if any.
pub(crate) fn by_subprotocol(subprotocol: &str) -> Option<Protocol> {
    let name = subprotocol.trim();
    if ["v12.stomp", "v11.stomp", "v10.stomp"]
        .iter()
        .any(|s| name.eq_ignore_ascii_case(s))
    {
        Some(Protocol::Stomp)
    } else if name.eq_ignore_ascii_case("mqtt") {
        Some(Protocol::Mqtt)
    } else {
        None
    }
}

/// One WebSocket connection's messages made into the payloads its
/// protocol carries.
pub(crate) struct Payloads {
    state: State,
    max_message: usize,
}

enum State {
    /// Not known yet: the first data message decides (Socket.IO's open
    /// packet, else plain). The event names, for Socket.IO.
    Undecided(Vec<String>),
    Plain,
    Layered {
        protocol: Protocol,
        layer: Box<dyn Layer>,
        /// What the layer would send: dropped (the tap sends nothing).
        unsent: Vec<Frame>,
        /// First byte of the payload the layer holds part of.
        since_ns: Option<u64>,
    },
}

impl Payloads {
    /// A connection just upgraded, whose `101` selected `subprotocol`.
    pub(crate) fn at_upgrade(
        reading: &TapReading,
        subprotocol: Option<&str>,
        max_message: usize,
    ) -> Payloads {
        let protocol = reading
            .protocol
            .fixed()
            .or_else(|| subprotocol.and_then(by_subprotocol));
        let state = match protocol {
            None => State::Undecided(reading.events.clone()),
            Some(p) => State::layered(p, &reading.events, max_message),
        };
        Payloads { state, max_message }
    }

    /// What it reads the connection as; `None` until its first data
    /// message when nothing said so at the upgrade.
    pub(crate) fn protocol(&self) -> Option<Protocol> {
        match &self.state {
            State::Undecided(_) => None,
            State::Plain => Some(Protocol::WebSocket),
            State::Layered { protocol, .. } => Some(*protocol),
        }
    }

    /// A data message that cannot be read (compressed, with no inflater):
    /// a connection still undecided is taken as plain, since nothing in it
    /// can say otherwise. Returns whether that decided it.
    pub(crate) fn unreadable(&mut self) -> bool {
        let undecided = matches!(self.state, State::Undecided(_));
        if undecided {
            self.state = State::Plain;
        }
        undecided
    }

    /// One whole data message, its first byte captured at `first_ns` and
    /// its last at `last_ns`: each payload it completes goes to `deliver`
    /// with the capture time of its own first byte. Returns how many.
    pub(crate) fn message(
        &mut self,
        message: &[u8],
        text: bool,
        first_ns: u64,
        last_ns: u64,
        deliver: &mut dyn FnMut(&[u8], u64),
    ) -> Result<usize, LayerError> {
        if let State::Undecided(events) = &mut self.state {
            self.state = if text && socketio::begins_session(message) {
                State::layered(
                    Protocol::SocketIo,
                    &std::mem::take(events),
                    self.max_message,
                )
            } else {
                State::Plain
            };
        }
        let State::Layered {
            layer,
            unsent,
            since_ns,
            ..
        } = &mut self.state
        else {
            deliver(message, first_ns);
            return Ok(1);
        };
        // A payload begun in an earlier message dates from there; any
        // other from this one.
        let mut n = 0usize;
        let started = since_ns.unwrap_or(first_ns);
        let result = layer.on_message(message, text, last_ns, unsent, &mut |payload| {
            deliver(payload, if n == 0 { started } else { first_ns });
            n += 1;
        });
        unsent.clear();
        *since_ns = layer
            .holds_partial()
            .then_some(if n == 0 { started } else { first_ns });
        result.map(|()| n)
    }
}

impl State {
    fn layered(protocol: Protocol, events: &[String], max_message: usize) -> State {
        let layer: Box<dyn Layer> = match protocol {
            Protocol::SocketIo => Box::new(SocketIo::observer(events.to_vec())),
            Protocol::Stomp => Box::new(Stomp::observer(max_message)),
            Protocol::Mqtt => Box::new(Mqtt::observer(max_message)),
            Protocol::WebSocket | Protocol::EventStream => return State::Plain,
        };
        State::Layered {
            protocol,
            layer,
            unsent: Vec::new(),
            since_ns: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds messages (text, bytes, first, last); what was delivered.
    fn read(p: &mut Payloads, messages: &[(bool, &[u8], u64, u64)]) -> Vec<(String, u64)> {
        let mut got = Vec::new();
        for (text, m, first, last) in messages {
            p.message(m, *text, *first, *last, &mut |payload, at| {
                got.push((String::from_utf8_lossy(payload).into_owned(), at))
            })
            .unwrap();
        }
        got
    }

    const OPEN: &[u8] = br#"0{"sid":"a","upgrades":[],"pingInterval":25000,"pingTimeout":20000}"#;

    #[test]
    fn socketio_is_known_by_its_open_packet_and_yields_event_data() {
        let reading = TapReading {
            protocol: TapProtocol::Auto,
            events: vec!["show".into()],
        };
        let mut p = Payloads::at_upgrade(&reading, None, 1 << 20);
        assert_eq!(p.protocol(), None);
        let got = read(
            &mut p,
            &[
                (true, OPEN, 1, 1),
                (true, br#"40{"sid":"b"}"#, 2, 2),
                (true, b"2", 3, 3),
                (true, br#"42["noise",{"n":0}]"#, 4, 4),
                (true, br#"42["show",{"n":0}]"#, 5, 6),
                (true, br#"42/lobby,["show",{"n":1}]"#, 7, 7),
            ],
        );
        assert_eq!(p.protocol(), Some(Protocol::SocketIo));
        assert_eq!(
            got,
            vec![(r#"{"n":0}"#.into(), 5), (r#"{"n":1}"#.into(), 7)],
            "pings and the namespace's CONNECT are not payloads; every namespace is read"
        );
    }

    #[test]
    fn a_session_upgraded_from_long_polling_begins_with_3probe() {
        let mut p = Payloads::at_upgrade(&TapReading::default(), None, 1 << 20);
        let got = read(
            &mut p,
            &[
                (true, b"3probe", 1, 1),
                (true, b"2", 2, 2),
                (true, br#"42["show",{"n":0}]"#, 3, 3),
            ],
        );
        assert_eq!(p.protocol(), Some(Protocol::SocketIo));
        assert_eq!(got, vec![(r#"{"n":0}"#.into(), 3)]);
    }

    #[test]
    fn a_first_message_that_is_no_open_packet_is_plain() {
        let mut p = Payloads::at_upgrade(&TapReading::default(), None, 1 << 20);
        let got = read(&mut p, &[(true, b"0{\"n\":1}", 1, 2), (true, OPEN, 3, 3)]);
        assert_eq!(p.protocol(), Some(Protocol::WebSocket));
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], ("0{\"n\":1}".into(), 1));
    }

    #[test]
    fn stomp_by_its_subprotocol_yields_bodies_of_any_subscription() {
        let mut p = Payloads::at_upgrade(&TapReading::default(), Some("v12.stomp"), 1 << 20);
        assert_eq!(p.protocol(), Some(Protocol::Stomp));
        let got = read(
            &mut p,
            &[
                (
                    true,
                    b"CONNECTED\nversion:1.2\nheart-beat:1000,1000\n\n\0",
                    1,
                    1,
                ),
                (true, b"RECEIPT\nreceipt-id:77\n\n\0", 2, 2),
                (true, b"\n", 3, 3),
                (
                    true,
                    b"MESSAGE\nsubscription:sub-0\nmessage-id:1\ncontent-length:2\n\n{}\0",
                    4,
                    4,
                ),
                // A frame cut across two messages dates from the first.
                (true, b"MESSAGE\nsubscription:sub-3\n\nab", 5, 5),
                (true, b"c\0MESSAGE\nsubscription:x\n\nd\0MESS", 6, 6),
                (true, b"AGE\nsubscription:x\n\ne\0", 7, 7),
            ],
        );
        assert_eq!(
            got,
            vec![
                ("{}".into(), 4),
                ("abc".into(), 5),
                ("d".into(), 6),
                ("e".into(), 6)
            ]
        );
    }

    #[test]
    fn mqtt_by_its_subprotocol_reads_the_version_from_the_connack() {
        let publish = |retain: bool, v5: bool, payload: &[u8]| {
            let mut body = vec![0, 6];
            body.extend_from_slice(b"show/a");
            body.extend_from_slice(&[0, 9]); // packet id: QoS 1
            if v5 {
                body.push(0);
            }
            body.extend_from_slice(payload);
            let mut p = vec![0x32 | u8::from(retain), body.len() as u8];
            p.extend(body);
            p
        };
        for v5 in [false, true] {
            let mut p = Payloads::at_upgrade(&TapReading::default(), Some("mqtt"), 1 << 20);
            let connack: &[u8] = if v5 {
                &[0x20, 3, 0, 0, 0]
            } else {
                &[0x20, 2, 0, 0]
            };
            let got = read(
                &mut p,
                &[
                    (false, connack, 1, 1),
                    (false, &[0x90, 3, 0, 5, 1], 2, 2),
                    (false, &publish(true, v5, b"old"), 3, 3),
                    (false, &publish(false, v5, b"new"), 4, 4),
                    (false, &[0x40, 2, 0, 1, 0xD0, 0], 5, 5),
                ],
            );
            assert_eq!(got, vec![("new".into(), 4)], "v5 {v5}");
        }
    }

    #[test]
    fn a_named_protocol_overrides_the_subprotocol_and_errors_say_so() {
        let reading = TapReading {
            protocol: TapProtocol::Ws,
            events: Vec::new(),
        };
        let p = Payloads::at_upgrade(&reading, Some("mqtt"), 1 << 20);
        assert_eq!(p.protocol(), Some(Protocol::WebSocket));
        let reading = TapReading {
            protocol: TapProtocol::SocketIo,
            events: Vec::new(),
        };
        let mut p = Payloads::at_upgrade(&reading, None, 1 << 20);
        let err = p.message(b"hello", true, 1, 1, &mut |_, _| {}).unwrap_err();
        assert!(matches!(err, LayerError::Protocol(_)), "{err}");
        assert_eq!("socketio".parse(), Ok(TapProtocol::SocketIo));
        assert!(
            "sse"
                .parse::<TapProtocol>()
                .unwrap_err()
                .contains("Content-Type")
        );
        assert_eq!(TapProtocol::Mqtt.to_string(), "mqtt");
    }
}
