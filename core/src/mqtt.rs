//! MQTT 3.1.1 and 5 over a WebSocket (subprotocol `mqtt`), the
//! subscriber's side: CONNECT, SUBSCRIBE to the topics at QoS 0 or 1 (a
//! PUBACK for each QoS 1 message), PINGREQ to keep the session alive, and
//! each PUBLISH's payload handed on.
//!
//! The few packets needed are encoded and decoded here, by the OASIS
//! specifications (MQTT 3.1.1 §2–3, MQTT 5.0 §2–3):
//! - a fixed header (type in the high nibble, flags in the low), the
//!   remaining length as a variable byte integer (at most 4 bytes), then
//!   the packet; strings are a 2-byte length and UTF-8;
//! - MQTT 5 adds properties (a variable byte integer length, then
//!   identifier and value) to CONNECT, CONNACK, SUBSCRIBE, SUBACK, PUBLISH
//!   and DISCONNECT; a CONNACK's Server Keep Alive (0x13) replaces the
//!   client's keep-alive;
//! - a client that sent nothing for its keep-alive sends PINGREQ; the server
//!   closes a client silent for 1.5 times it; a PINGRESP that does not come
//!   within the keep-alive means the server has gone.
//!
//! A WebSocket message may hold several packets or part of one (MQTT over
//! WebSocket, §6): packets are read from the joined stream. A retained
//! message sent because the subscription was just made (RETAIN set) is not
//! a broadcast happening now: it is acknowledged and not recorded. No topic
//! alias is offered, so every PUBLISH names its topic.
//!
//! [`Mqtt::observer`] reads a broker's side of someone else's session (the
//! tap), which never sees the client's CONNECT: the version is told by the
//! CONNACK (two bytes in 3.1.1; a property length follows in 5), every
//! PUBLISH at any QoS is read, and acknowledgements of what the client sent
//! (SUBACK, PUBACK, PUBREC, PINGRESP, …) are passed over.

use crate::protocol_layer::{Frame, Layer, LayerError, excerpt};

/// The MQTT version spoken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum MqttVersion {
    /// MQTT 3.1.1 (protocol level 4).
    #[serde(rename = "3.1.1")]
    V311,
    /// MQTT 5.0 (protocol level 5).
    #[serde(rename = "5")]
    V5,
}

impl std::str::FromStr for MqttVersion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "3.1.1" | "3" | "4" | "311" => Ok(MqttVersion::V311),
            "5" | "5.0" => Ok(MqttVersion::V5),
            other => Err(format!("{other:?}: give 3.1.1 or 5")),
        }
    }
}

/// What an MQTT subscriber asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MqttOptions {
    /// The version spoken.
    pub version: MqttVersion,
    /// The client identifier (unique per connection: a broker drops the
    /// older of two connections with one id).
    pub client_id: String,
    /// The user name, if any.
    pub username: Option<String>,
    /// The password, if any.
    pub password: Option<String>,
    /// Topic filters to subscribe to.
    pub topics: Vec<String>,
    /// The maximum QoS asked for: 0 or 1.
    pub qos: u8,
    /// Keep-alive, in seconds (0: none).
    pub keep_alive_s: u16,
    /// Largest packet accepted.
    pub max_packet: usize,
}

impl MqttOptions {
    /// Checks what cannot be encoded or asked for.
    pub fn check(&self) -> Result<(), String> {
        if self.topics.is_empty() {
            return Err("a topic to subscribe to is required".into());
        }
        if self.qos > 1 {
            return Err(format!("QoS {} is not offered: give 0 or 1", self.qos));
        }
        let strings = self
            .topics
            .iter()
            .chain(std::iter::once(&self.client_id))
            .chain(&self.username)
            .chain(&self.password);
        for s in strings {
            if s.len() > usize::from(u16::MAX) || s.contains('\0') {
                return Err(format!("{s:?}: too long, or holds a NUL"));
            }
        }
        if self.topics.iter().any(String::is_empty) {
            return Err("an empty topic filter".into());
        }
        Ok(())
    }
}

/// The packet id of the probe's one SUBSCRIBE.
const SUBSCRIBE_ID: u16 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    AwaitConnack,
    AwaitSuback,
    Subscribed,
}

/// One MQTT subscriber session.
#[derive(Debug)]
pub struct Mqtt {
    options: MqttOptions,
    state: State,
    /// Bytes of a packet not yet complete.
    buf: Vec<u8>,
    keep_alive_ns: u64,
    last_sent_ns: u64,
    /// When a PINGRESP is overdue, after a PINGREQ.
    pingresp_due_ns: Option<u64>,
    /// Read from outside (the tap): the version from the CONNACK, any
    /// QoS, the client's acknowledgements passed over.
    observer: bool,
}

impl Mqtt {
    /// A session for `options`.
    pub fn new(options: MqttOptions) -> Mqtt {
        let keep_alive_ns = u64::from(options.keep_alive_s) * 1_000_000_000;
        Mqtt {
            options,
            state: State::AwaitConnack,
            buf: Vec::new(),
            keep_alive_ns,
            last_sent_ns: 0,
            pingresp_due_ns: None,
            observer: false,
        }
    }

    /// The broker's side of someone else's session, as the tap reads it:
    /// each PUBLISH's payload (packets up to `max_packet` bytes), so its
    /// payloads are what a probe on that connection records; the version is
    /// read from the CONNACK. What it would send is never sent.
    pub fn observer(max_packet: usize) -> Mqtt {
        Mqtt {
            observer: true,
            ..Mqtt::new(MqttOptions {
                version: MqttVersion::V311,
                client_id: String::new(),
                username: None,
                password: None,
                topics: Vec::new(),
                qos: 0,
                keep_alive_s: 0,
                max_packet,
            })
        }
    }

    fn v5(&self) -> bool {
        self.options.version == MqttVersion::V5
    }

    fn send(&mut self, packet: Vec<u8>, now_ns: u64, out: &mut Vec<Frame>) {
        self.last_sent_ns = now_ns;
        out.push(Frame::Binary(packet));
    }

    fn connect_packet(&self) -> Vec<u8> {
        let o = &self.options;
        let mut body = Vec::new();
        put_str(&mut body, "MQTT");
        body.push(if self.v5() { 5 } else { 4 });
        let mut flags = 0x02; // clean session / clean start
        if o.username.is_some() {
            flags |= 0x80;
        }
        if o.password.is_some() {
            flags |= 0x40;
        }
        body.push(flags);
        body.extend_from_slice(&o.keep_alive_s.to_be_bytes());
        if self.v5() {
            body.push(0); // no properties
        }
        put_str(&mut body, &o.client_id);
        if let Some(user) = &o.username {
            put_str(&mut body, user);
        }
        if let Some(password) = &o.password {
            put_str(&mut body, password);
        }
        packet(0x10, &body)
    }

    fn subscribe_packet(&self) -> Vec<u8> {
        let mut body = SUBSCRIBE_ID.to_be_bytes().to_vec();
        if self.v5() {
            body.push(0);
        }
        for topic in &self.options.topics {
            put_str(&mut body, topic);
            body.push(self.options.qos);
        }
        packet(0x82, &body)
    }

    fn on_packet(
        &mut self,
        first: u8,
        body: &[u8],
        now_ns: u64,
        out: &mut Vec<Frame>,
        deliver: &mut dyn FnMut(&[u8]),
    ) -> Result<(), LayerError> {
        let mut r = Reader::new(body);
        match (first >> 4, self.state) {
            (2, State::AwaitConnack) => {
                if self.observer {
                    // 3.1.1's CONNACK is two bytes; 5 adds its properties.
                    self.options.version = if body.len() > 2 {
                        MqttVersion::V5
                    } else {
                        MqttVersion::V311
                    };
                }
                let _flags = r.u8()?;
                let code = r.u8()?;
                let mut reason = None;
                if self.v5() {
                    let props = r.properties()?;
                    if let Some(keep_alive) = props.server_keep_alive {
                        self.keep_alive_ns = u64::from(keep_alive) * 1_000_000_000;
                    }
                    reason = props.reason;
                }
                let refused = if self.v5() { code >= 0x80 } else { code != 0 };
                if refused {
                    return Err(LayerError::Refused(format!(
                        "MQTT: the broker refused the connection: {}",
                        connack_text(self.options.version, code, reason.as_deref())
                    )));
                }
                if self.observer {
                    self.state = State::Subscribed;
                } else {
                    let subscribe = self.subscribe_packet();
                    self.send(subscribe, now_ns, out);
                    self.state = State::AwaitSuback;
                }
            }
            (9, State::AwaitSuback) if !self.observer => {
                if r.u16()? != SUBSCRIBE_ID {
                    return Err(LayerError::Protocol(
                        "MQTT: a SUBACK for a SUBSCRIBE never sent".into(),
                    ));
                }
                let reason = if self.v5() {
                    r.properties()?.reason
                } else {
                    None
                };
                let codes = r.rest();
                if codes.len() != self.options.topics.len() {
                    return Err(LayerError::Protocol(format!(
                        "MQTT: a SUBACK with {} codes for {} topics",
                        codes.len(),
                        self.options.topics.len()
                    )));
                }
                for (topic, &code) in self.options.topics.iter().zip(codes) {
                    if code >= 0x80 {
                        return Err(LayerError::Refused(format!(
                            "MQTT: the broker refused the subscription to {topic} (code 0x{code:02x}{})",
                            reason
                                .as_deref()
                                .map(|r| format!(": {r}"))
                                .unwrap_or_default()
                        )));
                    }
                }
                self.state = State::Subscribed;
            }
            (3, _) => {
                let qos = (first >> 1) & 3;
                let retain = first & 1 == 1;
                let _topic = r.string()?;
                let id = if qos > 0 { Some(r.u16()?) } else { None };
                if self.v5() {
                    r.properties()?;
                }
                match (qos, id) {
                    (0, _) => {}
                    // What the client owes is its own affair.
                    (1 | 2, Some(_)) if self.observer => {}
                    (1, Some(id)) => {
                        let puback = packet(0x40, &id.to_be_bytes());
                        self.send(puback, now_ns, out);
                    }
                    _ => {
                        return Err(LayerError::Protocol(format!(
                            "MQTT: a PUBLISH at QoS {qos}; at most QoS {} was asked for",
                            self.options.qos
                        )));
                    }
                }
                if !retain {
                    deliver(r.rest());
                }
            }
            (13, _) => self.pingresp_due_ns = None,
            // Answers to what the client sent: a SUBACK, UNSUBACK, the
            // QoS 1 and 2 flows of its publishes, AUTH.
            (4..=7 | 9 | 11 | 15, _) if self.observer => {}
            (14, _) => {
                let reason = if self.v5() && !body.is_empty() {
                    let code = r.u8()?;
                    let props = if r.rest().is_empty() {
                        Properties::default()
                    } else {
                        r.properties()?
                    };
                    format!(
                        " (reason 0x{code:02x}{})",
                        props.reason.map(|r| format!(": {r}")).unwrap_or_default()
                    )
                } else {
                    String::new()
                };
                return Err(LayerError::Gone(format!(
                    "MQTT: the broker sent DISCONNECT{reason}"
                )));
            }
            (kind, _) => {
                return Err(LayerError::Protocol(format!(
                    "MQTT: an unexpected {} packet from the broker",
                    packet_name(kind)
                )));
            }
        }
        Ok(())
    }
}

impl Layer for Mqtt {
    fn name(&self) -> &'static str {
        "MQTT"
    }

    fn start(&mut self, now_ns: u64, out: &mut Vec<Frame>) {
        let connect = self.connect_packet();
        self.send(connect, now_ns, out);
    }

    fn on_message(
        &mut self,
        message: &[u8],
        text: bool,
        now_ns: u64,
        out: &mut Vec<Frame>,
        deliver: &mut dyn FnMut(&[u8]),
    ) -> Result<(), LayerError> {
        if text {
            return Err(LayerError::Protocol(
                "MQTT: a text WebSocket message (MQTT over WebSocket is binary)".into(),
            ));
        }
        self.buf.extend_from_slice(message);
        let mut at = 0;
        while let Some((first, start, end)) =
            split_packet(&self.buf[at..], self.options.max_packet)?
        {
            let buf = std::mem::take(&mut self.buf);
            let result = self.on_packet(first, &buf[at + start..at + end], now_ns, out, deliver);
            self.buf = buf;
            result?;
            at += end;
        }
        self.buf.drain(..at);
        Ok(())
    }

    fn deadline(&self) -> Option<u64> {
        if self.keep_alive_ns == 0 {
            return None;
        }
        let ping = self.last_sent_ns + self.keep_alive_ns;
        Some(self.pingresp_due_ns.map_or(ping, |due| due.min(ping)))
    }

    fn on_deadline(&mut self, now_ns: u64, out: &mut Vec<Frame>) -> Result<(), LayerError> {
        if self.keep_alive_ns == 0 {
            return Ok(());
        }
        if self.pingresp_due_ns.is_some_and(|due| now_ns >= due) {
            return Err(LayerError::Gone(format!(
                "MQTT: no PINGRESP within the keep-alive ({} s)",
                self.keep_alive_ns / 1_000_000_000
            )));
        }
        if now_ns >= self.last_sent_ns + self.keep_alive_ns {
            self.send(vec![0xC0, 0], now_ns, out);
            self.pingresp_due_ns
                .get_or_insert(now_ns + self.keep_alive_ns);
        }
        Ok(())
    }

    fn ready(&self) -> bool {
        self.state == State::Subscribed
    }

    fn holds_partial(&self) -> bool {
        !self.buf.is_empty()
    }

    fn goodbye(&mut self, out: &mut Vec<Frame>) {
        if self.state != State::AwaitConnack {
            out.push(Frame::Binary(vec![0xE0, 0]));
        }
    }
}

/// A packet: its fixed header byte and body.
fn packet(first: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![first];
    let mut len = body.len();
    loop {
        let mut byte = u8::try_from(len % 128).expect("below 128");
        len /= 128;
        if len > 0 {
            byte |= 0x80;
        }
        out.push(byte);
        if len == 0 {
            break;
        }
    }
    out.extend_from_slice(body);
    out
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    let len = u16::try_from(s.len()).unwrap_or(u16::MAX);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&s.as_bytes()[..usize::from(len)]);
}

/// The first packet in `bytes`: its header byte and where its body starts
/// and ends; `None` while incomplete.
fn split_packet(bytes: &[u8], max: usize) -> Result<Option<(u8, usize, usize)>, LayerError> {
    let Some(&first) = bytes.first() else {
        return Ok(None);
    };
    let mut len = 0usize;
    for i in 0..4 {
        let Some(&byte) = bytes.get(1 + i) else {
            return Ok(None);
        };
        len |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            if len > max {
                return Err(LayerError::Protocol(format!(
                    "MQTT: a packet of {len} bytes, over the limit of {max}"
                )));
            }
            let start = 2 + i;
            return Ok((bytes.len() >= start + len).then_some((first, start, start + len)));
        }
    }
    Err(LayerError::Protocol(
        "MQTT: a remaining length longer than 4 bytes".into(),
    ))
}

/// What the probe reads of MQTT 5 properties.
#[derive(Debug, Default)]
struct Properties {
    server_keep_alive: Option<u16>,
    reason: Option<String>,
}

/// Reads a packet's body.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes }
    }

    fn short() -> LayerError {
        LayerError::Protocol("MQTT: a packet shorter than its contents".into())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], LayerError> {
        if self.bytes.len() < n {
            return Err(Self::short());
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, LayerError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, LayerError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn varint(&mut self) -> Result<usize, LayerError> {
        let mut value = 0usize;
        for i in 0..4 {
            let byte = self.u8()?;
            value |= usize::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(LayerError::Protocol(
            "MQTT: a variable byte integer longer than 4 bytes".into(),
        ))
    }

    fn binary(&mut self) -> Result<&'a [u8], LayerError> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }

    fn string(&mut self) -> Result<&'a str, LayerError> {
        let bytes = self.binary()?;
        std::str::from_utf8(bytes)
            .map_err(|_| LayerError::Protocol("MQTT: a string that is not UTF-8".into()))
    }

    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.bytes)
    }

    /// MQTT 5 properties: the two the probe uses, the rest skipped by type.
    fn properties(&mut self) -> Result<Properties, LayerError> {
        let len = self.varint()?;
        let mut props = Reader::new(self.take(len)?);
        let mut found = Properties::default();
        while !props.bytes.is_empty() {
            let id = props.varint()?;
            match id {
                0x13 => found.server_keep_alive = Some(props.u16()?),
                0x1F => found.reason = Some(props.string()?.to_owned()),
                0x01 | 0x17 | 0x19 | 0x24 | 0x25 | 0x28 | 0x29 | 0x2A => {
                    props.u8()?;
                }
                0x21..=0x23 => {
                    props.u16()?;
                }
                0x02 | 0x11 | 0x18 | 0x27 => {
                    props.take(4)?;
                }
                0x0B => {
                    props.varint()?;
                }
                0x03 | 0x08 | 0x09 | 0x12 | 0x15 | 0x16 | 0x1A | 0x1C => {
                    props.binary()?;
                }
                0x26 => {
                    props.binary()?;
                    props.binary()?;
                }
                other => {
                    return Err(LayerError::Protocol(format!(
                        "MQTT: an unknown property 0x{other:02x}"
                    )));
                }
            }
        }
        Ok(found)
    }
}

/// A packet type's name, for messages.
fn packet_name(kind: u8) -> &'static str {
    match kind {
        1 => "CONNECT",
        2 => "CONNACK",
        3 => "PUBLISH",
        4 => "PUBACK",
        5 => "PUBREC",
        6 => "PUBREL",
        7 => "PUBCOMP",
        8 => "SUBSCRIBE",
        9 => "SUBACK",
        10 => "UNSUBSCRIBE",
        11 => "UNSUBACK",
        12 => "PINGREQ",
        13 => "PINGRESP",
        14 => "DISCONNECT",
        15 => "AUTH",
        _ => "reserved (type 0)",
    }
}

/// What a refused CONNACK's code means.
fn connack_text(version: MqttVersion, code: u8, reason: Option<&str>) -> String {
    let meaning = match (version, code) {
        (MqttVersion::V311, 1) => "unacceptable protocol version (try --mqtt-version 3.1.1 or 5)",
        (MqttVersion::V311, 2) => "identifier rejected",
        (MqttVersion::V311, 3) => "server unavailable",
        (MqttVersion::V311, 4) => "bad user name or password",
        (MqttVersion::V311, 5) => "not authorized",
        (MqttVersion::V5, 0x84) => "unsupported protocol version (try --mqtt-version 3.1.1)",
        (MqttVersion::V5, 0x85) => "client identifier not valid",
        (MqttVersion::V5, 0x86) => "bad user name or password",
        (MqttVersion::V5, 0x87) => "not authorized",
        (MqttVersion::V5, 0x88) => "server unavailable",
        (MqttVersion::V5, 0x89) => "server busy",
        (MqttVersion::V5, 0x8A) => "banned",
        _ => "refused",
    };
    match reason {
        Some(reason) => format!(
            "{meaning} (code 0x{code:02x}: {})",
            excerpt(reason.as_bytes(), 200)
        ),
        None => format!("{meaning} (code 0x{code:02x})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(version: MqttVersion, qos: u8) -> MqttOptions {
        MqttOptions {
            version,
            client_id: "skewscope0".into(),
            username: None,
            password: None,
            topics: vec!["show/#".into()],
            qos,
            keep_alive_s: 2,
            max_packet: 1 << 20,
        }
    }

    fn feed(
        m: &mut Mqtt,
        message: &[u8],
        now_ns: u64,
    ) -> Result<(Vec<Vec<u8>>, Vec<Frame>), LayerError> {
        let mut got = Vec::new();
        let mut out = Vec::new();
        m.on_message(message, false, now_ns, &mut out, &mut |p| {
            got.push(p.to_vec())
        })?;
        Ok((got, out))
    }

    fn publish(qos: u8, retain: bool, id: u16, payload: &[u8], v5: bool) -> Vec<u8> {
        let mut body = Vec::new();
        put_str(&mut body, "show/a");
        if qos > 0 {
            body.extend_from_slice(&id.to_be_bytes());
        }
        if v5 {
            // A property (payload format indicator) to skip.
            body.extend_from_slice(&[2, 0x01, 1]);
        }
        body.extend_from_slice(payload);
        packet(0x30 | (qos << 1) | u8::from(retain), &body)
    }

    #[test]
    fn connects_subscribes_and_records_payloads_in_3_1_1() {
        let mut m = Mqtt::new(options(MqttVersion::V311, 1));
        let mut out = Vec::new();
        m.start(0, &mut out);
        let mut want = vec![0x10, 22, 0, 4, b'M', b'Q', b'T', b'T', 4, 0x02, 0, 2, 0, 10];
        want.extend_from_slice(b"skewscope0");
        assert_eq!(out, vec![Frame::Binary(want)]);
        let (_, out) = feed(&mut m, &[0x20, 2, 0, 0], 0).unwrap();
        let mut sub = vec![0x82, 11, 0, 1, 0, 6];
        sub.extend_from_slice(b"show/#");
        sub.push(1);
        assert_eq!(out, vec![Frame::Binary(sub)]);
        let (_, _) = feed(&mut m, &[0x90, 3, 0, 1, 1], 0).unwrap();
        assert!(m.ready());
        // Two packets in one message, the second cut across the next one;
        // a retained one is acknowledged but not recorded.
        let mut stream = publish(0, false, 0, b"{\"at\":1}", false);
        stream.extend(publish(1, false, 7, b"two", false));
        stream.extend(publish(1, true, 8, b"old", false));
        let (mut got, mut out) = feed(&mut m, &stream[..stream.len() - 12], 1).unwrap();
        let (more, more_out) = feed(&mut m, &stream[stream.len() - 12..], 2).unwrap();
        got.extend(more);
        out.extend(more_out);
        assert_eq!(got, vec![b"{\"at\":1}".to_vec(), b"two".to_vec()]);
        assert_eq!(
            out,
            vec![
                Frame::Binary(vec![0x40, 2, 0, 7]),
                Frame::Binary(vec![0x40, 2, 0, 8])
            ]
        );
        let mut out = Vec::new();
        m.goodbye(&mut out);
        assert_eq!(out, vec![Frame::Binary(vec![0xE0, 0])]);
    }

    #[test]
    fn mqtt_5_reads_properties_and_the_servers_keep_alive() {
        let mut m = Mqtt::new(options(MqttVersion::V5, 0));
        let mut out = Vec::new();
        m.start(0, &mut out);
        let Frame::Binary(connect) = &out[0] else {
            panic!()
        };
        assert_eq!(connect[8], 5, "protocol level 5");
        // CONNACK with Server Keep Alive 5 s and an assigned client id.
        let mut props = vec![0x13, 0, 5, 0x12, 0, 1, b'x'];
        let mut connack = vec![0, 0, props.len() as u8];
        connack.append(&mut props);
        feed(&mut m, &packet(0x20, &connack), 0).unwrap();
        assert_eq!(m.deadline(), Some(5_000_000_000));
        feed(&mut m, &[0x90, 4, 0, 1, 0, 0], 0).unwrap();
        assert!(m.ready());
        let (got, out) = feed(&mut m, &publish(0, false, 0, b"p", true), 0).unwrap();
        assert_eq!(got, vec![b"p".to_vec()]);
        assert!(out.is_empty());
        let err = feed(&mut m, &[0xE0, 1, 0x8B], 0).unwrap_err();
        assert_eq!(
            err,
            LayerError::Gone("MQTT: the broker sent DISCONNECT (reason 0x8b)".into())
        );
    }

    #[test]
    fn keep_alive_pings_and_a_missing_pingresp_ends_it() {
        let mut m = Mqtt::new(options(MqttVersion::V311, 0));
        m.start(0, &mut Vec::new());
        feed(&mut m, &[0x20, 2, 0, 0], 0).unwrap();
        feed(&mut m, &[0x90, 3, 0, 1, 0], 0).unwrap();
        let s = 1_000_000_000;
        assert_eq!(m.deadline(), Some(2 * s));
        let mut out = Vec::new();
        m.on_deadline(2 * s, &mut out).unwrap();
        assert_eq!(out, vec![Frame::Binary(vec![0xC0, 0])]);
        feed(&mut m, &[0xD0, 0], 2 * s + 1).unwrap();
        assert_eq!(m.deadline(), Some(4 * s));
        m.on_deadline(4 * s, &mut Vec::new()).unwrap();
        assert_eq!(m.deadline(), Some(6 * s));
        let err = m.on_deadline(6 * s, &mut Vec::new()).unwrap_err();
        assert!(matches!(err, LayerError::Gone(_)), "{err}");
    }

    #[test]
    fn refusals_say_why() {
        let mut m = Mqtt::new(options(MqttVersion::V311, 0));
        m.start(0, &mut Vec::new());
        let err = feed(&mut m, &[0x20, 2, 0, 5], 0).unwrap_err();
        assert_eq!(
            err,
            LayerError::Refused(
                "MQTT: the broker refused the connection: not authorized (code 0x05)".into()
            )
        );
        let mut m = Mqtt::new(options(MqttVersion::V311, 0));
        m.start(0, &mut Vec::new());
        feed(&mut m, &[0x20, 2, 0, 0], 0).unwrap();
        let err = feed(&mut m, &[0x90, 3, 0, 1, 0x80], 0).unwrap_err();
        assert!(err.to_string().contains("subscription to show/#"), "{err}");
        for bad in [
            &[0x20, 0xff, 0xff, 0xff, 0xff, 0x01][..],
            &[0x20, 1, 0],
            &[0x50, 0],
            &[0x34, 3, 0, 1, b'a'],
        ] {
            let mut m = Mqtt::new(options(MqttVersion::V311, 0));
            m.start(0, &mut Vec::new());
            let r = feed(&mut m, bad, 0);
            assert!(matches!(r, Err(LayerError::Protocol(_))), "{bad:?}: {r:?}");
        }
        assert!(options(MqttVersion::V5, 2).check().is_err());
    }
}
