//! STOMP 1.2 over a WebSocket, the subscriber's side: CONNECT (login and
//! passcode, or headers of the operator's), SUBSCRIBE to one destination
//! with a receipt, heart-beats both ways, and each MESSAGE frame's body
//! handed on as the payload.
//!
//! What the STOMP 1.2 specification defines, as used here:
//! - a frame is a command line, header lines `name:value`, a blank line, a
//!   body and a NUL octet; lines end with LF or CRLF; the body runs to
//!   `content-length` octets when the header is given, else to the first
//!   NUL; header values escape `\r`, `\n`, `:` and `\` (`\r`, `\n`, `\c`,
//!   `\\`), except in CONNECT and CONNECTED frames;
//! - a lone end-of-line between frames is a heart-beat. CONNECT offers
//!   `heart-beat:cx,cy` (the client can send every cx ms, wants one every
//!   cy ms), CONNECTED answers `sx,sy`: the client then sends every
//!   max(cx, sy) ms and hears from the server every max(sx, cy) ms (0 on
//!   either side: none);
//! - a SUBSCRIBE with a `receipt` header is answered by a RECEIPT frame
//!   once the server has processed it; an ERROR frame ends the connection.
//!
//! Over a WebSocket a message may hold several frames or part of one: the
//! frames are read from the joined stream. A broker that sends no RECEIPT
//! for a SUBSCRIBE (a few do not) is taken as subscribed after
//! [`RECEIPT_WAIT_MS`]. A server silent for twice its heart-beat interval
//! has gone, as STOMP clients commonly judge it.
//!
//! [`Stomp::observer`] reads a broker's side of someone else's session (the
//! tap): every MESSAGE's body, whatever subscription it is for, since a
//! connection gets only what its own client subscribed to.

use crate::protocol_layer::{Frame, Layer, LayerError, MS, excerpt};

/// How long a SUBSCRIBE's RECEIPT is waited for before the subscription
/// is taken as made anyway.
pub const RECEIPT_WAIT_MS: u64 = 2_000;

/// The subscription id and receipt id the probe uses.
const SUBSCRIPTION_ID: &str = "skewscope-0";
const RECEIPT_ID: &str = "skewscope-subscribed";

/// What a STOMP subscriber asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StompOptions {
    /// The destination to SUBSCRIBE to (`/topic/show`, `/exchange/x`).
    pub destination: String,
    /// CONNECT's `login`, if any.
    pub login: Option<String>,
    /// CONNECT's `passcode`, if any.
    pub passcode: Option<String>,
    /// Extra CONNECT headers (`host` for a virtual host, a token).
    pub headers: Vec<(String, String)>,
    /// Heart-beat interval offered both ways, in ms (0: none).
    pub heart_beat_ms: u32,
    /// Largest frame accepted.
    pub max_frame: usize,
}

impl StompOptions {
    /// Checks what cannot be sent: CONNECT headers are not escaped, so no
    /// line break or (in a name) colon may be in them.
    pub fn check(&self) -> Result<(), String> {
        if self.destination.is_empty() {
            return Err("a destination to subscribe to is required".into());
        }
        let connect_values = self
            .login
            .iter()
            .chain(&self.passcode)
            .chain(self.headers.iter().map(|(_, v)| v));
        for value in connect_values {
            if value.contains(['\r', '\n', '\0']) {
                return Err("a CONNECT header value has a line break or NUL".into());
            }
        }
        for (name, _) in &self.headers {
            if name.is_empty() || name.contains([':', '\r', '\n', '\0']) {
                return Err(format!("{name:?} is not a STOMP header name"));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    AwaitConnected,
    AwaitReceipt { since_ns: u64 },
    Subscribed,
}

/// One STOMP subscriber session.
#[derive(Debug)]
pub struct Stomp {
    options: StompOptions,
    state: State,
    /// Bytes of a frame not yet complete.
    buf: Vec<u8>,
    /// Heart-beats the client owes every this many ns (0: none).
    send_every_ns: u64,
    /// The server is silent too long past this many ns (0: never).
    silence_ns: u64,
    last_sent_ns: u64,
    last_heard_ns: u64,
    /// Read from outside (the tap): every subscription's messages.
    observer: bool,
}

impl Stomp {
    /// A session for `options`.
    pub fn new(options: StompOptions) -> Stomp {
        Stomp {
            options,
            state: State::AwaitConnected,
            buf: Vec::new(),
            send_every_ns: 0,
            silence_ns: 0,
            last_sent_ns: 0,
            last_heard_ns: 0,
            observer: false,
        }
    }

    /// The broker's side of someone else's session, as the tap reads it:
    /// each MESSAGE body of any subscription (frames up to `max_frame`
    /// bytes), so its payloads are what a probe on that connection records.
    /// What it would send is never sent.
    pub fn observer(max_frame: usize) -> Stomp {
        Stomp {
            observer: true,
            ..Stomp::new(StompOptions {
                destination: String::new(),
                login: None,
                passcode: None,
                headers: Vec::new(),
                heart_beat_ms: 0,
                max_frame,
            })
        }
    }

    fn connect_frame(&self) -> Vec<u8> {
        let beat = self.options.heart_beat_ms;
        let mut frame = format!("CONNECT\naccept-version:1.2\nheart-beat:{beat},{beat}\n");
        if let Some(login) = &self.options.login {
            frame.push_str(&format!("login:{login}\n"));
        }
        if let Some(passcode) = &self.options.passcode {
            frame.push_str(&format!("passcode:{passcode}\n"));
        }
        for (name, value) in &self.options.headers {
            frame.push_str(&format!("{name}:{value}\n"));
        }
        frame.push_str("\n\0");
        frame.into_bytes()
    }

    fn subscribe_frame(&self) -> Vec<u8> {
        format!(
            "SUBSCRIBE\nid:{SUBSCRIPTION_ID}\ndestination:{}\nack:auto\nreceipt:{RECEIPT_ID}\n\n\0",
            escape(&self.options.destination)
        )
        .into_bytes()
    }

    fn send(&mut self, frame: Vec<u8>, now_ns: u64, out: &mut Vec<Frame>) {
        self.last_sent_ns = now_ns;
        out.push(Frame::Text(frame));
    }

    fn on_frame(
        &mut self,
        frame: &ParsedFrame<'_>,
        now_ns: u64,
        out: &mut Vec<Frame>,
        deliver: &mut dyn FnMut(&[u8]),
    ) -> Result<(), LayerError> {
        match frame.command {
            "CONNECTED" if self.state == State::AwaitConnected => {
                let (sx, sy) = frame
                    .header("heart-beat")
                    .and_then(parse_heart_beat)
                    .unwrap_or((0, 0));
                let beat = u64::from(self.options.heart_beat_ms);
                // The broker's figures are any u64 it likes: saturate, never
                // wrap (found by the stomp fuzz target).
                if beat > 0 && sy > 0 {
                    self.send_every_ns = beat.max(sy).saturating_mul(MS);
                }
                if beat > 0 && sx > 0 {
                    self.silence_ns = beat.max(sx).saturating_mul(2 * MS);
                }
                let subscribe = self.subscribe_frame();
                self.send(subscribe, now_ns, out);
                self.state = State::AwaitReceipt { since_ns: now_ns };
            }
            "RECEIPT" if frame.header("receipt-id").as_deref() == Some(RECEIPT_ID) => {
                self.state = State::Subscribed;
            }
            "MESSAGE" => {
                if self.observer || frame.header("subscription").as_deref() == Some(SUBSCRIPTION_ID)
                {
                    if matches!(self.state, State::AwaitReceipt { .. }) {
                        self.state = State::Subscribed;
                    }
                    deliver(frame.body);
                }
            }
            "ERROR" => {
                let message = frame.header("message").unwrap_or_default();
                let body = excerpt(frame.body, 200);
                let said = match (message.is_empty(), body.is_empty()) {
                    (false, false) => format!("{message}: {body}"),
                    (false, true) => message,
                    (true, _) => body,
                };
                return Err(LayerError::Refused(format!(
                    "STOMP: the broker sent ERROR: {said}"
                )));
            }
            "CONNECTED" | "RECEIPT" => {}
            other => {
                return Err(LayerError::Protocol(format!(
                    "STOMP: a {} frame from the server",
                    excerpt(other.as_bytes(), 40)
                )));
            }
        }
        Ok(())
    }
}

impl Layer for Stomp {
    fn name(&self) -> &'static str {
        "STOMP"
    }

    fn start(&mut self, now_ns: u64, out: &mut Vec<Frame>) {
        self.last_heard_ns = now_ns;
        let connect = self.connect_frame();
        self.send(connect, now_ns, out);
    }

    fn on_message(
        &mut self,
        message: &[u8],
        _text: bool,
        now_ns: u64,
        out: &mut Vec<Frame>,
        deliver: &mut dyn FnMut(&[u8]),
    ) -> Result<(), LayerError> {
        self.last_heard_ns = now_ns;
        self.buf.extend_from_slice(message);
        let mut at = 0;
        loop {
            // Heart-beats (end-of-lines) between frames.
            while matches!(self.buf.get(at), Some(b'\n' | b'\r')) {
                at += 1;
            }
            if at == self.buf.len() {
                break;
            }
            match parse_frame(&self.buf[at..])? {
                Some((_, used)) if used > self.options.max_frame => break,
                Some((spans, used)) => {
                    let buf = std::mem::take(&mut self.buf);
                    let result = self.on_frame(&spans.on(&buf[at..]), now_ns, out, deliver);
                    self.buf = buf;
                    result?;
                    at += used;
                }
                None => break,
            }
        }
        self.buf.drain(..at);
        // A frame over the limit, whole or still coming, ends it either way.
        if self.buf.len() > self.options.max_frame {
            return Err(LayerError::Protocol(format!(
                "STOMP: a frame over {} bytes",
                self.options.max_frame
            )));
        }
        Ok(())
    }

    fn deadline(&self) -> Option<u64> {
        let beat =
            (self.send_every_ns > 0).then(|| self.last_sent_ns.saturating_add(self.send_every_ns));
        let silent =
            (self.silence_ns > 0).then(|| self.last_heard_ns.saturating_add(self.silence_ns));
        let receipt = match self.state {
            State::AwaitReceipt { since_ns } => Some(since_ns + RECEIPT_WAIT_MS * MS),
            _ => None,
        };
        [beat, silent, receipt].into_iter().flatten().min()
    }

    fn on_deadline(&mut self, now_ns: u64, out: &mut Vec<Frame>) -> Result<(), LayerError> {
        if self.silence_ns > 0 && now_ns >= self.last_heard_ns.saturating_add(self.silence_ns) {
            return Err(LayerError::Gone(format!(
                "STOMP: nothing from the broker for {} ms (twice its heart-beat interval)",
                self.silence_ns / MS
            )));
        }
        if let State::AwaitReceipt { since_ns } = self.state
            && now_ns >= since_ns + RECEIPT_WAIT_MS * MS
        {
            self.state = State::Subscribed;
        }
        if self.send_every_ns > 0 && now_ns >= self.last_sent_ns.saturating_add(self.send_every_ns)
        {
            self.send(b"\n".to_vec(), now_ns, out);
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
        if self.state != State::AwaitConnected {
            out.push(Frame::Text(b"DISCONNECT\n\n\0".to_vec()));
        }
    }
}

/// A frame's parts, as offsets into the bytes it was read from (so the
/// session can be borrowed mutably while it is handled).
#[derive(Debug)]
struct FrameSpans {
    command: (usize, usize),
    headers: Vec<((usize, usize), (usize, usize))>,
    body: (usize, usize),
}

impl FrameSpans {
    fn on<'a>(&self, bytes: &'a [u8]) -> ParsedFrame<'a> {
        let text = |(a, b): (usize, usize)| std::str::from_utf8(&bytes[a..b]).unwrap_or("");
        ParsedFrame {
            command: text(self.command),
            headers: self
                .headers
                .iter()
                .map(|&(n, v)| (text(n), text(v)))
                .collect(),
            body: &bytes[self.body.0..self.body.1],
        }
    }
}

/// A frame read from the stream.
#[derive(Debug)]
struct ParsedFrame<'a> {
    command: &'a str,
    headers: Vec<(&'a str, &'a str)>,
    body: &'a [u8],
}

impl ParsedFrame<'_> {
    /// A header's value, unescaped; the first one when repeated (STOMP 1.2
    /// §"Repeated Header Entries").
    fn header(&self, name: &str) -> Option<String> {
        let (_, value) = self.headers.iter().find(|(n, _)| *n == name)?;
        Some(if self.command == "CONNECTED" {
            (*value).to_owned()
        } else {
            unescape(value)
        })
    }
}

/// The first frame in `bytes` (starting at a command), and the bytes it
/// took with its NUL; `None` while incomplete.
fn parse_frame(bytes: &[u8]) -> Result<Option<(FrameSpans, usize)>, LayerError> {
    let bad = |why: &str| {
        LayerError::Protocol(format!(
            "STOMP: a malformed frame ({why}): {}",
            excerpt(bytes, 80)
        ))
    };
    // Commands are upper-case letters: anything else is no STOMP frame,
    // said at once rather than waited on.
    if !bytes[0].is_ascii_uppercase() {
        return Err(bad("no command"));
    }
    let mut at = 0;
    let line = |at: &mut usize| -> Option<(usize, usize)> {
        let start = *at;
        let nl = bytes[start..].iter().position(|&b| b == b'\n')? + start;
        *at = nl + 1;
        let end = if nl > start && bytes[nl - 1] == b'\r' {
            nl - 1
        } else {
            nl
        };
        Some((start, end))
    };
    let Some(command) = line(&mut at) else {
        return Ok(None);
    };
    let utf8 = |(a, b): (usize, usize)| std::str::from_utf8(&bytes[a..b]).is_ok();
    if !bytes[command.0..command.1]
        .iter()
        .all(u8::is_ascii_uppercase)
    {
        return Err(bad("no command"));
    }
    let mut headers = Vec::new();
    loop {
        let Some(header) = line(&mut at) else {
            return Ok(None);
        };
        if header.0 == header.1 {
            break;
        }
        if !utf8(header) {
            return Err(bad("a header that is not UTF-8"));
        }
        let colon = bytes[header.0..header.1]
            .iter()
            .position(|&b| b == b':')
            .ok_or_else(|| bad("a header without a colon"))?
            + header.0;
        headers.push(((header.0, colon), (colon + 1, header.1)));
    }
    let length = headers
        .iter()
        .find(|((a, b), _)| &bytes[*a..*b] == b"content-length")
        .map(|(_, (a, b))| {
            std::str::from_utf8(&bytes[*a..*b])
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or_else(|| bad("a content-length that is not a number"))
        })
        .transpose()?;
    let body_start = at;
    let body_end = match length {
        Some(n) => {
            let end = body_start.checked_add(n).ok_or_else(|| bad("too long"))?;
            if bytes.len() <= end {
                return Ok(None);
            }
            if bytes[end] != 0 {
                return Err(bad("no NUL after content-length octets"));
            }
            end
        }
        None => match bytes[body_start..].iter().position(|&b| b == 0) {
            Some(i) => body_start + i,
            None => return Ok(None),
        },
    };
    Ok(Some((
        FrameSpans {
            command,
            headers,
            body: (body_start, body_end),
        },
        body_end + 1,
    )))
}

/// `sx,sy` of a CONNECTED frame.
fn parse_heart_beat(value: String) -> Option<(u64, u64)> {
    let (x, y) = value.split_once(',')?;
    Some((x.trim().parse().ok()?, y.trim().parse().ok()?))
}

/// A header value as STOMP 1.2 escapes it.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            ':' => out.push_str("\\c"),
            c => out.push(c),
        }
    }
    out
}

/// A header value unescaped; an undefined escape is kept as written.
fn unescape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('c') => out.push(':'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_brokers_huge_heart_beat_saturates_and_never_wraps() {
        // Found by the stomp fuzz target: 2 x a broker's heart-beat in ms
        // overflowed. Any u64 is now a deadline far away, not a panic, and
        // not a wrapped one that comes at once.
        let mut s = Stomp::new(options());
        s.start(0, &mut Vec::new());
        let huge = u64::MAX;
        let connected = format!("CONNECTED\nversion:1.2\nheart-beat:{huge},{huge}\n\n\0");
        feed(&mut s, connected.as_bytes(), 0).unwrap();
        feed(&mut s, b"RECEIPT\nreceipt-id:skewscope-subscribed\n\n\0", 1).unwrap();
        assert!(s.ready());
        assert!(
            s.deadline().is_some_and(|d| d > 1_000_000 * MS),
            "{:?}",
            s.deadline()
        );
        s.on_deadline(1_000 * MS, &mut Vec::new()).unwrap();
    }

    fn options() -> StompOptions {
        StompOptions {
            destination: "/topic/show".into(),
            login: Some("guest".into()),
            passcode: Some("guest".into()),
            headers: vec![("host".into(), "/".into())],
            heart_beat_ms: 1_000,
            max_frame: 1 << 20,
        }
    }

    fn feed(
        s: &mut Stomp,
        message: &[u8],
        now_ns: u64,
    ) -> Result<(Vec<Vec<u8>>, Vec<Frame>), LayerError> {
        let mut got = Vec::new();
        let mut out = Vec::new();
        s.on_message(message, true, now_ns, &mut out, &mut |p| {
            got.push(p.to_vec())
        })?;
        Ok((got, out))
    }

    fn text(frames: &[Frame]) -> Vec<String> {
        frames
            .iter()
            .map(|f| match f {
                Frame::Text(t) | Frame::Binary(t) => String::from_utf8_lossy(t).into_owned(),
            })
            .collect()
    }

    #[test]
    fn connects_subscribes_and_records_message_bodies() {
        let mut s = Stomp::new(options());
        let mut out = Vec::new();
        s.start(0, &mut out);
        assert_eq!(
            text(&out),
            vec![
                "CONNECT\naccept-version:1.2\nheart-beat:1000,1000\nlogin:guest\npasscode:guest\nhost:/\n\n\0"
            ]
        );
        let (_, out) = feed(
            &mut s,
            b"CONNECTED\nversion:1.2\nheart-beat:4000,500\n\n\0",
            0,
        )
        .unwrap();
        assert_eq!(
            text(&out),
            vec![
                "SUBSCRIBE\nid:skewscope-0\ndestination:/topic/show\nack:auto\nreceipt:skewscope-subscribed\n\n\0"
            ]
        );
        assert!(!s.ready());
        // A receipt and two messages in one WebSocket message, one with a
        // NUL inside its body (content-length), and CRLF lines.
        let stream = b"RECEIPT\nreceipt-id:skewscope-subscribed\n\n\0\n\
MESSAGE\r\nsubscription:skewscope-0\r\nmessage-id:1\r\ncontent-length:5\r\n\r\na\0b{}\0\
MESSAGE\nsubscription:skewscope-0\nmessage-id:2\n\n{\"at\":1}\0\n";
        let (got, _) = feed(&mut s, stream, 1).unwrap();
        assert!(s.ready());
        assert_eq!(got, vec![b"a\0b{}".to_vec(), b"{\"at\":1}".to_vec()]);
    }

    #[test]
    fn frames_split_anywhere_give_the_same_bodies() {
        let stream: &[u8] =
            b"CONNECTED\nversion:1.2\n\n\0RECEIPT\nreceipt-id:skewscope-subscribed\n\n\0\
MESSAGE\nsubscription:skewscope-0\ndestination:/topic/a\\cb\n\nhello\0\n\n\
MESSAGE\nsubscription:skewscope-0\ncontent-length:3\n\nx\0y\0";
        for cut in 0..stream.len() {
            let mut s = Stomp::new(options());
            s.start(0, &mut Vec::new());
            let (mut got, _) = feed(&mut s, &stream[..cut], 0).unwrap();
            got.extend(feed(&mut s, &stream[cut..], 0).unwrap().0);
            assert_eq!(got, vec![b"hello".to_vec(), b"x\0y".to_vec()], "cut {cut}");
            assert!(s.ready());
        }
    }

    #[test]
    fn heart_beats_are_sent_and_expected() {
        let mut s = Stomp::new(options());
        s.start(0, &mut Vec::new());
        // The server sends every 4 s and wants one every 500 ms: the client
        // sends every max(1000, 500) ms and hears every max(4000, 1000).
        feed(&mut s, b"CONNECTED\nheart-beat:4000,500\n\n\0", 0).unwrap();
        feed(&mut s, b"RECEIPT\nreceipt-id:skewscope-subscribed\n\n\0", 0).unwrap();
        assert_eq!(s.deadline(), Some(1_000 * MS));
        let mut out = Vec::new();
        s.on_deadline(1_000 * MS, &mut out).unwrap();
        assert_eq!(text(&out), vec!["\n"]);
        feed(&mut s, b"\n", 1_500 * MS).unwrap();
        assert_eq!(s.deadline(), Some(2_000 * MS));
        let mut out = Vec::new();
        let err = s.on_deadline(9_500 * MS, &mut out).unwrap_err();
        assert!(matches!(err, LayerError::Gone(_)), "{err}");
    }

    #[test]
    fn a_missing_receipt_is_waited_for_a_while() {
        let mut s = Stomp::new(StompOptions {
            heart_beat_ms: 0,
            ..options()
        });
        s.start(0, &mut Vec::new());
        feed(&mut s, b"CONNECTED\n\n\0", 0).unwrap();
        assert_eq!(s.deadline(), Some(RECEIPT_WAIT_MS * MS));
        s.on_deadline(RECEIPT_WAIT_MS * MS, &mut Vec::new())
            .unwrap();
        assert!(s.ready());
        assert_eq!(s.deadline(), None);
    }

    #[test]
    fn errors_and_bad_frames_end_the_session() {
        let mut s = Stomp::new(options());
        s.start(0, &mut Vec::new());
        let err = feed(
            &mut s,
            b"ERROR\nmessage:Access refused for user 'x'\ncontent-length:3\n\nbad\0",
            0,
        )
        .unwrap_err();
        assert_eq!(
            err,
            LayerError::Refused(
                "STOMP: the broker sent ERROR: Access refused for user 'x': bad".into()
            )
        );
        for bad in [
            &b"\0"[..],
            b"MESSAGE\nno colon\n\n\0",
            b"MESSAGE\ncontent-length:x\n\n\0",
            b"MESSAGE\ncontent-length:1\n\nab\0",
            b"NONSENSE\n\n\0",
        ] {
            let mut s = Stomp::new(options());
            s.start(0, &mut Vec::new());
            let r = feed(&mut s, bad, 0);
            assert!(matches!(r, Err(LayerError::Protocol(_))), "{bad:?}: {r:?}");
        }
    }

    #[test]
    fn header_values_escape_as_stomp_1_2_says() {
        assert_eq!(escape("a:b\\c\nd"), "a\\cb\\\\c\\nd");
        assert_eq!(unescape("a\\cb\\\\c\\nd\\t"), "a:b\\c\nd\\t");
        let mut bad = options();
        bad.passcode = Some("x\ny".into());
        assert!(bad.check().is_err());
        assert!(options().check().is_ok());
    }
}
