//! Socket.IO (protocol 5) over Engine.IO 4 on a WebSocket, the client's
//! side: the open packet, connecting to a namespace, answering the server's
//! pings, and each event's data handed on as the payload.
//!
//! What the Socket.IO and Engine.IO protocol documents define, as used here:
//! - each WebSocket message is one Engine.IO packet: a digit (`0` open,
//!   `1` close, `2` ping, `3` pong, `4` message, `5` upgrade, `6` noop)
//!   and its data; binary messages carry binary attachments;
//! - the server opens with `0{"sid":…,"pingInterval":…,"pingTimeout":…}`;
//!   in Engine.IO 4 the *server* pings (`2`) and the client answers `3`;
//!   a client that hears no ping for `pingInterval + pingTimeout` takes
//!   the connection as lost (and so does the server without a pong);
//! - a message (`4`) holds a Socket.IO packet: a type digit (`0` CONNECT,
//!   `1` DISCONNECT, `2` EVENT, `3` ACK, `4` CONNECT_ERROR, `5`
//!   BINARY_EVENT, `6` BINARY_ACK), for binary ones the attachment count
//!   and `-`, the namespace and `,` unless it is `/`, an ack id (digits),
//!   then JSON: `42["show",{"at":…}]`.
//!
//! The payload recorded for an event is its arguments' JSON as the server
//! wrote it: with one argument (the usual `emit("show", data)`) that
//! argument's text, so `--act-at /at` finds `data.at`; with none or several
//! the array of them. A binary event's payload is its JSON with the
//! attachments' placeholders, received when its last attachment is.
//!
//! [`SocketIo::observer`] reads the same packets from outside, as the tap
//! sees a server's side of a connection it does not take part in: every
//! namespace's events, and a namespace's end or refusal left to the client
//! it concerns (the connection goes on).

use crate::protocol_layer::{Frame, Layer, LayerError, MS, excerpt};

/// What a Socket.IO client asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SocketIoOptions {
    /// The namespace to connect to (`/` by default).
    pub namespace: String,
    /// The event names to record; empty: every event.
    pub events: Vec<String>,
}

impl Default for SocketIoOptions {
    fn default() -> Self {
        SocketIoOptions {
            namespace: "/".to_owned(),
            events: Vec::new(),
        }
    }
}

/// The query a Socket.IO client adds to its URL: Engine.IO 4 over a
/// WebSocket from the start (no long-polling first).
pub const ENGINE_IO_QUERY: &str = "EIO=4&transport=websocket";

/// The path a Socket.IO server answers on unless it was told otherwise.
pub const DEFAULT_PATH: &str = "/socket.io/";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Upgraded; the server's open packet not yet read.
    AwaitOpen,
    /// `40` sent; the namespace's CONNECT not yet answered.
    AwaitConnect,
    /// Connected to the namespace.
    Connected,
}

/// A binary event or ack whose attachments are still coming.
#[derive(Debug)]
struct Attachments {
    remaining: usize,
    /// The payload to hand on once they are all in (`None`: not recorded).
    payload: Option<Vec<u8>>,
}

/// One Socket.IO client session.
#[derive(Debug)]
pub struct SocketIo {
    options: SocketIoOptions,
    state: State,
    /// `pingInterval + pingTimeout` from the open packet.
    silence_ns: u64,
    /// When the last ping (or the open packet) came.
    last_ping_ns: u64,
    attachments: Option<Attachments>,
    /// Read from outside (the tap): any namespace, never refused.
    observer: bool,
}

impl SocketIo {
    /// A session for `options`.
    pub fn new(options: SocketIoOptions) -> SocketIo {
        SocketIo {
            options,
            state: State::AwaitOpen,
            silence_ns: 0,
            last_ping_ns: 0,
            attachments: None,
            observer: false,
        }
    }

    /// The server's side of someone else's session, as the tap reads it:
    /// the events named in `events` (empty: every event) of every
    /// namespace the client joined, so its payloads are what a probe on
    /// that connection records. What it would send is never sent.
    pub fn observer(events: Vec<String>) -> SocketIo {
        SocketIo {
            observer: true,
            ..SocketIo::new(SocketIoOptions {
                namespace: "/".to_owned(),
                events,
            })
        }
    }

    /// The namespace's prefix in packets: empty for `/`, else `/name,`.
    fn prefix(&self) -> String {
        namespace_prefix(&self.options.namespace)
    }

    fn wanted(&self, name: &str) -> bool {
        self.options.events.is_empty() || self.options.events.iter().any(|e| e == name)
    }

    fn on_open(
        &mut self,
        data: &[u8],
        now_ns: u64,
        out: &mut Vec<Frame>,
    ) -> Result<(), LayerError> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Open {
            ping_interval: u64,
            ping_timeout: u64,
        }
        let open: Open = serde_json::from_slice(data).map_err(|e| {
            LayerError::Protocol(format!(
                "Socket.IO: the open packet is not what Engine.IO 4 sends ({e}): {}",
                excerpt(data, 120)
            ))
        })?;
        self.silence_ns = open
            .ping_interval
            .saturating_add(open.ping_timeout)
            .saturating_mul(MS);
        self.last_ping_ns = now_ns;
        if self.state == State::AwaitOpen {
            out.push(Frame::Text(format!("40{}", self.prefix()).into_bytes()));
            self.state = State::AwaitConnect;
        }
        Ok(())
    }

    fn on_packet(
        &mut self,
        packet: &[u8],
        deliver: &mut dyn FnMut(&[u8]),
    ) -> Result<(), LayerError> {
        let parsed = Packet::parse(packet)?;
        if !self.observer && parsed.namespace != self.options.namespace {
            return Ok(());
        }
        match parsed.kind {
            b'0' => {
                self.state = State::Connected;
            }
            // A namespace left or refused: the client's business; its
            // connection (and its other namespaces) go on.
            b'1' | b'4' if self.observer => {}
            b'1' => {
                return Err(LayerError::Gone(format!(
                    "Socket.IO: the server disconnected the namespace {}",
                    self.options.namespace
                )));
            }
            b'4' => {
                return Err(LayerError::Refused(format!(
                    "Socket.IO: the server refused the namespace {}: {}",
                    self.options.namespace,
                    connect_error_message(parsed.data)
                )));
            }
            b'2' | b'5' => {
                let event = parse_event(parsed.data)?;
                let payload = self.wanted(&event.name).then_some(event.payload);
                if parsed.attachments > 0 {
                    self.attachments = Some(Attachments {
                        remaining: parsed.attachments,
                        payload,
                    });
                } else if let Some(payload) = payload {
                    deliver(&payload);
                }
            }
            b'6' if parsed.attachments > 0 => {
                self.attachments = Some(Attachments {
                    remaining: parsed.attachments,
                    payload: None,
                });
            }
            // Acks of what the probe never emits.
            _ => {}
        }
        Ok(())
    }
}

/// Whether `message` is how a Socket.IO server's side of a WebSocket
/// begins: Engine.IO 4's open packet (`0{"sid":…,"pingInterval":…,
/// "pingTimeout":…}`) on a WebSocket from the start, or `3probe`, the
/// answer to the client's `2probe` on one upgraded from long-polling (the
/// browser client's default). How the tap knows a connection is Socket.IO
/// without seeing the client's request.
pub fn begins_session(message: &[u8]) -> bool {
    message == b"3probe" || is_open_packet(message)
}

/// Whether `message` is Engine.IO 4's open packet.
fn is_open_packet(message: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)] // read to check the packet's shape, not used
    struct Open {
        sid: String,
        ping_interval: u64,
        ping_timeout: u64,
    }
    message.starts_with(b"0{") && serde_json::from_slice::<Open>(&message[1..]).is_ok()
}

/// `/` is written as nothing; any other namespace as `/name,`.
fn namespace_prefix(namespace: &str) -> String {
    if namespace == "/" {
        String::new()
    } else {
        format!("{namespace},")
    }
}

impl Layer for SocketIo {
    fn name(&self) -> &'static str {
        "Socket.IO"
    }

    fn start(&mut self, _now_ns: u64, _out: &mut Vec<Frame>) {}

    fn on_message(
        &mut self,
        message: &[u8],
        text: bool,
        now_ns: u64,
        out: &mut Vec<Frame>,
        deliver: &mut dyn FnMut(&[u8]),
    ) -> Result<(), LayerError> {
        if !text {
            // An attachment of the binary event before it.
            if let Some(pending) = &mut self.attachments {
                pending.remaining -= 1;
                if pending.remaining == 0
                    && let Some(payload) = self.attachments.take().and_then(|a| a.payload)
                {
                    deliver(&payload);
                }
            }
            return Ok(());
        }
        if self.attachments.is_some() {
            return Err(LayerError::Protocol(
                "Socket.IO: a text packet where a binary attachment was due".into(),
            ));
        }
        let Some((&kind, data)) = message.split_first() else {
            return Err(LayerError::Protocol(
                "Socket.IO: an empty Engine.IO packet".into(),
            ));
        };
        match kind {
            b'0' => self.on_open(data, now_ns, out)?,
            b'1' => {
                return Err(LayerError::Gone(
                    "Socket.IO: the server closed the Engine.IO session".into(),
                ));
            }
            // A session upgraded from long-polling opened and joined its
            // namespaces there: seen from outside, it starts at the probe's
            // answer.
            b'3' if self.observer && self.state == State::AwaitOpen => {
                self.state = State::Connected;
            }
            b'2' => {
                self.last_ping_ns = now_ns;
                let mut pong = b"3".to_vec();
                pong.extend_from_slice(data);
                out.push(Frame::Text(pong));
            }
            b'4' => {
                if self.state == State::AwaitOpen {
                    return Err(LayerError::Protocol(
                        "Socket.IO: a message before the open packet".into(),
                    ));
                }
                self.on_packet(data, deliver)?;
            }
            b'3' | b'5' | b'6' => {}
            _ => {
                return Err(LayerError::Protocol(format!(
                    "Socket.IO: not an Engine.IO packet: {}",
                    excerpt(message, 60)
                )));
            }
        }
        Ok(())
    }

    fn deadline(&self) -> Option<u64> {
        (self.silence_ns > 0).then(|| self.last_ping_ns.saturating_add(self.silence_ns))
    }

    fn on_deadline(&mut self, now_ns: u64, _out: &mut Vec<Frame>) -> Result<(), LayerError> {
        if self.silence_ns > 0 && now_ns >= self.last_ping_ns.saturating_add(self.silence_ns) {
            return Err(LayerError::Gone(format!(
                "Socket.IO: no ping from the server for {} ms (its pingInterval + pingTimeout)",
                self.silence_ns / MS
            )));
        }
        Ok(())
    }

    fn ready(&self) -> bool {
        self.state == State::Connected
    }

    fn holds_partial(&self) -> bool {
        self.attachments.is_some()
    }

    fn goodbye(&mut self, out: &mut Vec<Frame>) {
        if self.state == State::Connected {
            out.push(Frame::Text(format!("41{}", self.prefix()).into_bytes()));
        }
    }
}

/// A Socket.IO packet's parts.
#[derive(Debug, PartialEq, Eq)]
struct Packet<'a> {
    kind: u8,
    attachments: usize,
    namespace: &'a str,
    data: &'a [u8],
}

/// Most attachments a binary packet may announce: more is no real server.
const MAX_ATTACHMENTS: usize = 1024;

impl<'a> Packet<'a> {
    fn parse(packet: &'a [u8]) -> Result<Packet<'a>, LayerError> {
        let bad = || {
            LayerError::Protocol(format!(
                "Socket.IO: not a Socket.IO packet: {}",
                excerpt(packet, 60)
            ))
        };
        let (&kind, mut rest) = packet.split_first().ok_or_else(bad)?;
        if !(b'0'..=b'6').contains(&kind) {
            return Err(bad());
        }
        let mut attachments = 0;
        if kind == b'5' || kind == b'6' {
            let dash = rest.iter().position(|&b| b == b'-').ok_or_else(bad)?;
            attachments = std::str::from_utf8(&rest[..dash])
                .ok()
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|&n| n <= MAX_ATTACHMENTS)
                .ok_or_else(bad)?;
            rest = &rest[dash + 1..];
        }
        let mut namespace = "/";
        if rest.first() == Some(&b'/') {
            let comma = rest.iter().position(|&b| b == b',');
            let end = comma.unwrap_or(rest.len());
            namespace = std::str::from_utf8(&rest[..end]).map_err(|_| bad())?;
            rest = &rest[(end + 1).min(rest.len())..];
        }
        // An ack id: digits before the JSON.
        let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
        Ok(Packet {
            kind,
            attachments,
            namespace,
            data: &rest[digits..],
        })
    }
}

/// An event: its name and the payload recorded for it.
#[derive(Debug, PartialEq, Eq)]
struct Event {
    name: String,
    payload: Vec<u8>,
}

/// `["name", args…]`: the name, and the arguments' JSON (one argument's
/// own text, else the array of them).
fn parse_event(data: &[u8]) -> Result<Event, LayerError> {
    let bad = |why: &str| {
        LayerError::Protocol(format!(
            "Socket.IO: an event that is not a JSON array with its name first ({why}): {}",
            excerpt(data, 80)
        ))
    };
    serde_json::from_slice::<serde::de::IgnoredAny>(data).map_err(|e| bad(&e.to_string()))?;
    let elements = array_elements(data).ok_or_else(|| bad("not an array"))?;
    let (first, args) = elements.split_first().ok_or_else(|| bad("empty"))?;
    let name: String =
        serde_json::from_slice(&data[first.0..first.1]).map_err(|_| bad("no name"))?;
    let payload = match args {
        [one] => data[one.0..one.1].to_vec(),
        [] => b"[]".to_vec(),
        [head, .., last] => {
            let mut joined = b"[".to_vec();
            joined.extend_from_slice(&data[head.0..last.1]);
            joined.push(b']');
            joined
        }
    };
    Ok(Event { name, payload })
}

/// The spans of a JSON array's elements, for text already checked to be
/// JSON; `None` when it is not an array.
fn array_elements(data: &[u8]) -> Option<Vec<(usize, usize)>> {
    let mut at = skip_space(data, 0);
    if data.get(at) != Some(&b'[') {
        return None;
    }
    at = skip_space(data, at + 1);
    let mut spans = Vec::new();
    if data.get(at) == Some(&b']') {
        return Some(spans);
    }
    loop {
        let end = value_end(data, at)?;
        spans.push((at, end));
        at = skip_space(data, end);
        match data.get(at)? {
            b',' => at = skip_space(data, at + 1),
            b']' => return Some(spans),
            _ => return None,
        }
    }
}

fn skip_space(data: &[u8], mut at: usize) -> usize {
    while data
        .get(at)
        .is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
    {
        at += 1;
    }
    at
}

/// Where the JSON value starting at `start` ends, in valid JSON.
fn value_end(data: &[u8], start: usize) -> Option<usize> {
    match *data.get(start)? {
        b'"' => string_end(data, start),
        b'[' | b'{' => {
            let mut depth = 0usize;
            let mut at = start;
            loop {
                match *data.get(at)? {
                    b'"' => {
                        at = string_end(data, at)?;
                        continue;
                    }
                    b'[' | b'{' => depth += 1,
                    b']' | b'}' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(at + 1);
                        }
                    }
                    _ => {}
                }
                at += 1;
            }
        }
        _ => {
            let mut at = start;
            while is_scalar_char(data.get(at)) {
                at += 1;
            }
            (at > start).then_some(at)
        }
    }
}

/// Where the string starting at `start` (its opening quote) ends.
fn string_end(data: &[u8], start: usize) -> Option<usize> {
    let mut at = start + 1;
    loop {
        match *data.get(at)? {
            b'\\' => at += 2,
            b'"' => return Some(at + 1),
            _ => at += 1,
        }
    }
}

/// Whether a byte continues a number or a literal (`true`, `-1.5e3`).
fn is_scalar_char(b: Option<&u8>) -> bool {
    b.is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.'))
}

/// The `message` of a CONNECT_ERROR's data, else the data as it is.
fn connect_error_message(data: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct ConnectError {
        message: String,
    }
    match serde_json::from_slice::<ConnectError>(data) {
        Ok(e) => e.message,
        Err(_) => excerpt(data, 120),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open() -> &'static [u8] {
        br#"0{"sid":"abc","upgrades":[],"pingInterval":25000,"pingTimeout":20000,"maxPayload":1000000}"#
    }

    /// Feeds text messages; returns what was delivered and sent.
    fn feed(
        session: &mut SocketIo,
        messages: &[&[u8]],
        now_ns: u64,
    ) -> Result<(Vec<Vec<u8>>, Vec<Frame>), LayerError> {
        let mut got = Vec::new();
        let mut out = Vec::new();
        for m in messages {
            session.on_message(m, true, now_ns, &mut out, &mut |p| got.push(p.to_vec()))?;
        }
        Ok((got, out))
    }

    #[test]
    fn opens_connects_and_records_each_events_data() {
        let mut s = SocketIo::new(SocketIoOptions::default());
        let (_, out) = feed(&mut s, &[open()], 0).unwrap();
        assert_eq!(out, vec![Frame::Text(b"40".to_vec())]);
        assert!(!s.ready());
        let (got, _) = feed(
            &mut s,
            &[
                br#"40{"sid":"x"}"#,
                br#"42["show",{"at":1764000000.5,"n":1}]"#,
                br#"42["two",1,"b"]"#,
                br#"42["none"]"#,
                br#"4212["acked",{"n":2}]"#,
            ],
            1,
        )
        .unwrap();
        assert!(s.ready());
        assert_eq!(
            got,
            vec![
                br#"{"at":1764000000.5,"n":1}"#.to_vec(),
                br#"[1,"b"]"#.to_vec(),
                b"[]".to_vec(),
                br#"{"n":2}"#.to_vec(),
            ]
        );
    }

    #[test]
    fn pings_are_answered_and_silence_ends_the_session() {
        let mut s = SocketIo::new(SocketIoOptions::default());
        feed(&mut s, &[open(), b"40"], 0).unwrap();
        assert_eq!(s.deadline(), Some(45_000 * MS));
        let (_, out) = feed(&mut s, &[b"2"], 10 * MS).unwrap();
        assert_eq!(out, vec![Frame::Text(b"3".to_vec())]);
        assert_eq!(s.deadline(), Some(45_010 * MS));
        let mut out = Vec::new();
        assert!(s.on_deadline(45_009 * MS, &mut out).is_ok());
        let err = s.on_deadline(45_010 * MS, &mut out).unwrap_err();
        assert!(err.to_string().contains("no ping"), "{err}");
    }

    #[test]
    fn a_namespace_and_event_names_select_what_is_recorded() {
        let mut s = SocketIo::new(SocketIoOptions {
            namespace: "/lobby".into(),
            events: vec!["show".into()],
        });
        let (_, out) = feed(&mut s, &[open()], 0).unwrap();
        assert_eq!(out, vec![Frame::Text(b"40/lobby,".to_vec())]);
        let (got, _) = feed(
            &mut s,
            &[
                br#"40/lobby,{"sid":"y"}"#,
                br#"42["show",{"n":1}]"#,
                br#"42/lobby,["chat",{"n":2}]"#,
                br#"42/lobby,["show",{"n":3}]"#,
                br#"42/lobby,7["show",{"n":4}]"#,
            ],
            0,
        )
        .unwrap();
        assert!(s.ready());
        assert_eq!(got, vec![br#"{"n":3}"#.to_vec(), br#"{"n":4}"#.to_vec()]);
        let mut out = Vec::new();
        s.goodbye(&mut out);
        assert_eq!(out, vec![Frame::Text(b"41/lobby,".to_vec())]);
    }

    #[test]
    fn a_binary_event_is_recorded_when_its_last_attachment_arrives() {
        let mut s = SocketIo::new(SocketIoOptions::default());
        feed(&mut s, &[open(), b"40"], 0).unwrap();
        let event = br#"452-["blob",{"_placeholder":true,"num":0},{"_placeholder":true,"num":1}]"#;
        let (got, _) = feed(&mut s, &[event], 0).unwrap();
        assert!(got.is_empty());
        let mut got = Vec::new();
        let mut out = Vec::new();
        s.on_message(b"\x01", false, 0, &mut out, &mut |p| got.push(p.to_vec()))
            .unwrap();
        assert!(got.is_empty());
        s.on_message(b"\x02", false, 0, &mut out, &mut |p| got.push(p.to_vec()))
            .unwrap();
        assert_eq!(
            got,
            vec![br#"[{"_placeholder":true,"num":0},{"_placeholder":true,"num":1}]"#.to_vec()]
        );
    }

    #[test]
    fn refusals_and_closes_say_what_happened() {
        let mut s = SocketIo::new(SocketIoOptions::default());
        feed(&mut s, &[open()], 0).unwrap();
        let err = feed(&mut s, &[br#"44{"message":"Not authorized"}"#], 0).unwrap_err();
        assert_eq!(
            err,
            LayerError::Refused(
                "Socket.IO: the server refused the namespace /: Not authorized".into()
            )
        );
        let mut s = SocketIo::new(SocketIoOptions::default());
        feed(&mut s, &[open(), b"40"], 0).unwrap();
        assert!(matches!(feed(&mut s, &[b"1"], 0), Err(LayerError::Gone(_))));
        for bad in [
            &b""[..],
            b"9",
            b"4x",
            br#"42{"not":"array"}"#,
            b"42[1]",
            b"0{}",
        ] {
            let mut s = SocketIo::new(SocketIoOptions::default());
            let r = feed(&mut s, &[open(), b"40", bad], 0);
            assert!(matches!(r, Err(LayerError::Protocol(_))), "{bad:?}: {r:?}");
        }
    }

    #[test]
    fn array_elements_are_found_in_any_json() {
        let data = br#" [ "a" , {"x":[1,2,"]"]} ,-1.5e3,true,null,"q\"",[] ] "#;
        let spans = array_elements(data).unwrap();
        let texts: Vec<&str> = spans
            .iter()
            .map(|(a, b)| std::str::from_utf8(&data[*a..*b]).unwrap())
            .collect();
        assert_eq!(
            texts,
            vec![
                r#""a""#,
                r#"{"x":[1,2,"]"]}"#,
                "-1.5e3",
                "true",
                "null",
                r#""q\"""#,
                "[]"
            ]
        );
    }
}
