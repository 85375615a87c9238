//! Server-Sent Events over HTTP/1.1, the subscriber's side: the GET request
//! an `EventSource` makes, the response head, the body (chunked, of a
//! length, or to the connection's end), and the events in it, each one's
//! data handed on as the payload.
//!
//! What the HTML standard (§9.2, server-sent events) defines, as used here:
//! - the stream is UTF-8 text (a leading BOM dropped); lines end with CRLF,
//!   LF or CR; a line `field: value` (one space after the colon dropped),
//!   a line starting with `:` is a comment (servers send them to keep the
//!   connection alive), a blank line dispatches the event;
//! - `data` lines are joined with LF; `event` names the type (`message` when
//!   none); `id` sets the last event id (kept across events, and sent as
//!   `Last-Event-ID` when reconnecting; an id with NUL is ignored); `retry`
//!   (digits) sets the reconnection time in ms;
//! - an event with no data is not dispatched.
//!
//! RFC 9112 gives the rest: the status line and headers, and chunked
//! transfer coding (chunk sizes in hex, extensions and trailers ignored).

use crate::protocol_layer::excerpt;

/// Longest response head read.
pub const MAX_HEAD: usize = 16 * 1024;

/// Why the stream cannot be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SseError {
    /// The response head is not HTTP/1.x.
    #[error("the answer is not an HTTP/1.1 response: {0}")]
    Head(String),
    /// The chunked body is malformed.
    #[error("a malformed chunked body: {0}")]
    Chunked(String),
    /// A line or an event over the limit.
    #[error("an event or line over {0} bytes")]
    TooLarge(usize),
}

/// The GET request an `EventSource` sends for `target` (path and query) on
/// `host` (with its port when not the default), with the operator's
/// `headers` and, when reconnecting, the last event id.
pub fn request(
    target: &str,
    host: &str,
    headers: &[(String, String)],
    last_event_id: Option<&str>,
) -> Vec<u8> {
    let mut text = format!(
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\n"
    );
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(id) = last_event_id.filter(|id| !id.is_empty()) {
        text.push_str(&format!("Last-Event-ID: {id}\r\n"));
    }
    text.push_str("\r\n");
    text.into_bytes()
}

/// A response's status line and headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResponseHead {
    /// The status code.
    pub status: u16,
    /// The reason phrase.
    pub reason: String,
    /// The headers, names as sent.
    pub headers: Vec<(String, String)>,
}

impl ResponseHead {
    /// A header's value (the first, names compared without case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether the body is an event stream (`text/event-stream`, any
    /// parameters).
    pub fn is_event_stream(&self) -> bool {
        self.header("content-type").is_some_and(|t| {
            t.split(';')
                .next()
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("text/event-stream"))
        })
    }
}

/// The response head at the start of `bytes`, and its length; `None`
/// while incomplete.
pub fn parse_response_head(bytes: &[u8]) -> Result<Option<(ResponseHead, usize)>, SseError> {
    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        if bytes.len() > MAX_HEAD {
            return Err(SseError::Head(format!("a head over {MAX_HEAD} bytes")));
        }
        // An answer that is not HTTP is said at once.
        let prefix = &bytes[..bytes.len().min(5)];
        if !b"HTTP/".starts_with(prefix) {
            return Err(SseError::Head(excerpt(bytes, 80)));
        }
        return Ok(None);
    };
    let text = std::str::from_utf8(&bytes[..end])
        .map_err(|_| SseError::Head("a head that is not text".into()))?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    let status = parts.next().and_then(|s| s.parse::<u16>().ok());
    let (true, Some(status)) = (version.starts_with("HTTP/1."), status) else {
        return Err(SseError::Head(excerpt(status_line.as_bytes(), 80)));
    };
    let reason = parts.next().unwrap_or("").to_owned();
    let mut headers = Vec::new();
    for line in lines {
        let (name, value) = line.split_once(':').ok_or_else(|| {
            SseError::Head(format!(
                "a header line without a colon: {}",
                excerpt(line.as_bytes(), 80)
            ))
        })?;
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    Ok(Some((
        ResponseHead {
            status,
            reason,
            headers,
        },
        end + 4,
    )))
}

/// How the body's end is known.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Framing {
    Chunked(Chunked),
    Length(u64),
    Close,
}

/// Where a chunked decoder is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Chunked {
    /// Reading a size line (bytes so far).
    Size(Vec<u8>),
    /// Inside a chunk: bytes left.
    Data(u64),
    /// After a chunk's data: its CRLF (bytes of it seen).
    DataEnd(u8),
    /// After the last chunk: trailer lines (bytes of the current one).
    Trailer(Vec<u8>),
    Done,
}

/// Longest chunk-size line (with extensions) read.
const MAX_SIZE_LINE: usize = 1024;

/// The event stream of one response: its body decoded and its events
/// parsed, each wanted one's data handed on.
#[derive(Debug)]
pub struct EventStream {
    framing: Framing,
    /// The event types to hand on; empty: every type.
    events: Vec<String>,
    max_bytes: usize,
    /// The line being read.
    line: Vec<u8>,
    /// The last byte was a CR: an LF right after it ends nothing more.
    after_cr: bool,
    /// Whether the start (and its BOM) is behind.
    started: bool,
    data: Vec<u8>,
    event_type: String,
    /// Set by `id`, kept across events.
    id_buffer: String,
    /// The id buffer as of the last dispatch: what a reconnection sends.
    last_event_id: String,
    /// Set by `retry`, in ms.
    retry_ms: Option<u64>,
}

impl EventStream {
    /// The stream of the body after `head`; `events` are the types to hand
    /// on (empty: all), `max_bytes` bounds a line and an event's data.
    pub fn new(head: &ResponseHead, events: Vec<String>, max_bytes: usize) -> EventStream {
        let chunked = head
            .header("transfer-encoding")
            .is_some_and(|t| t.to_ascii_lowercase().contains("chunked"));
        let framing = if chunked {
            Framing::Chunked(Chunked::Size(Vec::new()))
        } else if let Some(n) = head
            .header("content-length")
            .and_then(|n| n.trim().parse().ok())
        {
            Framing::Length(n)
        } else {
            Framing::Close
        };
        EventStream {
            framing,
            events,
            max_bytes,
            line: Vec::new(),
            after_cr: false,
            started: false,
            data: Vec::new(),
            event_type: String::new(),
            id_buffer: String::new(),
            last_event_id: String::new(),
            retry_ms: None,
        }
    }

    /// The last event id seen (empty when none).
    pub fn last_event_id(&self) -> &str {
        &self.last_event_id
    }

    /// Starts from an id kept from an earlier connection.
    pub fn set_last_event_id(&mut self, id: &str) {
        id.clone_into(&mut self.last_event_id);
        id.clone_into(&mut self.id_buffer);
    }

    /// The reconnection time the server asked for, in ms.
    pub fn retry_ms(&self) -> Option<u64> {
        self.retry_ms
    }

    /// Whether part of an event is held: a line not yet ended, or fields
    /// read and no blank line yet. The tap dates an event from the segment
    /// its first byte came in, not the one that completed it.
    pub fn holds_partial(&self) -> bool {
        !self.line.is_empty() || !self.data.is_empty() || !self.event_type.is_empty()
    }

    /// Whether the body has ended (its length read, or its last chunk).
    pub fn ended(&self) -> bool {
        matches!(
            self.framing,
            Framing::Length(0) | Framing::Chunked(Chunked::Done)
        )
    }

    /// Bytes read from the connection: each complete wanted event's data
    /// goes to `deliver`, in order.
    pub fn push(&mut self, bytes: &[u8], deliver: &mut dyn FnMut(&[u8])) -> Result<(), SseError> {
        match &mut self.framing {
            Framing::Close => self.text(bytes, deliver),
            Framing::Length(left) => {
                let take = usize::try_from(*left)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                *left -= take as u64;
                self.text(&bytes[..take], deliver)
            }
            Framing::Chunked(_) => self.chunked(bytes, deliver),
        }
    }

    fn chunked(
        &mut self,
        mut bytes: &[u8],
        deliver: &mut dyn FnMut(&[u8]),
    ) -> Result<(), SseError> {
        while !bytes.is_empty() {
            let Framing::Chunked(state) = &mut self.framing else {
                return Ok(());
            };
            match state {
                Chunked::Size(line) => {
                    let nl = bytes.iter().position(|&b| b == b'\n');
                    let take = nl.map_or(bytes.len(), |i| i + 1);
                    line.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if line.len() > MAX_SIZE_LINE {
                        return Err(SseError::Chunked("a chunk-size line too long".into()));
                    }
                    if nl.is_none() {
                        continue;
                    }
                    let text = String::from_utf8_lossy(line);
                    let hex = text.split(';').next().unwrap_or("").trim();
                    let size = u64::from_str_radix(hex, 16).map_err(|_| {
                        SseError::Chunked(format!("a chunk size {:?}", excerpt(hex.as_bytes(), 20)))
                    })?;
                    *state = if size == 0 {
                        Chunked::Trailer(Vec::new())
                    } else {
                        Chunked::Data(size)
                    };
                }
                Chunked::Data(left) => {
                    let take = usize::try_from(*left)
                        .unwrap_or(usize::MAX)
                        .min(bytes.len());
                    *left -= take as u64;
                    if *left == 0 {
                        *state = Chunked::DataEnd(0);
                    }
                    let (data, rest) = bytes.split_at(take);
                    bytes = rest;
                    self.text(data, deliver)?;
                }
                Chunked::DataEnd(seen) => {
                    let want = if *seen == 0 { b'\r' } else { b'\n' };
                    if bytes[0] == b'\n' && *seen == 0 {
                        // A bare LF, as some servers write.
                        *state = Chunked::Size(Vec::new());
                    } else if bytes[0] != want {
                        return Err(SseError::Chunked("no CRLF after a chunk's data".into()));
                    } else if *seen == 1 {
                        *state = Chunked::Size(Vec::new());
                    } else {
                        *seen = 1;
                    }
                    bytes = &bytes[1..];
                }
                Chunked::Trailer(line) => {
                    let nl = bytes.iter().position(|&b| b == b'\n');
                    let take = nl.map_or(bytes.len(), |i| i + 1);
                    line.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if line.len() > MAX_SIZE_LINE {
                        return Err(SseError::Chunked("a trailer line too long".into()));
                    }
                    if nl.is_some() {
                        if line.as_slice() == b"\r\n" || line.as_slice() == b"\n" {
                            *state = Chunked::Done;
                        } else {
                            line.clear();
                        }
                    }
                }
                Chunked::Done => return Ok(()),
            }
        }
        Ok(())
    }

    /// The stream's text: split into lines, each handled.
    fn text(&mut self, mut bytes: &[u8], deliver: &mut dyn FnMut(&[u8])) -> Result<(), SseError> {
        if !self.started && !bytes.is_empty() {
            // A BOM may come split; wait for three bytes to tell.
            self.line.extend_from_slice(bytes);
            if self.line.len() < 3 && b"\xEF\xBB\xBF".starts_with(&self.line) {
                return Ok(());
            }
            self.started = true;
            let held = std::mem::take(&mut self.line);
            let held = held.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&held);
            return self.text(held, deliver);
        }
        while !bytes.is_empty() {
            if self.after_cr && bytes[0] == b'\n' {
                bytes = &bytes[1..];
                self.after_cr = false;
                continue;
            }
            self.after_cr = false;
            match bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(i) => {
                    if self.line.len() + i > self.max_bytes {
                        return Err(SseError::TooLarge(self.max_bytes));
                    }
                    self.after_cr = bytes[i] == b'\r';
                    let line = if self.line.is_empty() {
                        self.handle_line(&bytes[..i], deliver)?;
                        None
                    } else {
                        self.line.extend_from_slice(&bytes[..i]);
                        Some(std::mem::take(&mut self.line))
                    };
                    if let Some(line) = line {
                        self.handle_line(&line, deliver)?;
                    }
                    bytes = &bytes[i + 1..];
                }
                None => {
                    self.line.extend_from_slice(bytes);
                    if self.line.len() > self.max_bytes {
                        return Err(SseError::TooLarge(self.max_bytes));
                    }
                    bytes = &[];
                }
            }
        }
        Ok(())
    }

    fn handle_line(&mut self, line: &[u8], deliver: &mut dyn FnMut(&[u8])) -> Result<(), SseError> {
        if line.is_empty() {
            self.dispatch(deliver);
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => {
                let value = &line[i + 1..];
                (&line[..i], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.data.len() + value.len() + 1 > self.max_bytes {
                    return Err(SseError::TooLarge(self.max_bytes));
                }
                self.data.extend_from_slice(value);
                self.data.push(b'\n');
            }
            b"event" => self.event_type = String::from_utf8_lossy(value).into_owned(),
            b"id" if !value.contains(&0) => {
                self.id_buffer = String::from_utf8_lossy(value).into_owned();
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                self.retry_ms = std::str::from_utf8(value).ok().and_then(|v| v.parse().ok());
            }
            _ => {}
        }
        Ok(())
    }

    fn dispatch(&mut self, deliver: &mut dyn FnMut(&[u8])) {
        self.last_event_id.clone_from(&self.id_buffer);
        let event_type = std::mem::take(&mut self.event_type);
        if self.data.is_empty() {
            return;
        }
        self.data.pop(); // the last LF
        let name = if event_type.is_empty() {
            "message"
        } else {
            event_type.as_str()
        };
        if self.events.is_empty() || self.events.iter().any(|e| e == name) {
            deliver(&self.data);
        }
        self.data.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(extra: &str) -> ResponseHead {
        let text = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n{extra}\r\n"
        );
        parse_response_head(text.as_bytes()).unwrap().unwrap().0
    }

    fn events_of(stream: &mut EventStream, pieces: &[&[u8]]) -> Vec<String> {
        let mut got = Vec::new();
        for p in pieces {
            stream
                .push(p, &mut |d| {
                    got.push(String::from_utf8_lossy(d).into_owned())
                })
                .unwrap();
        }
        got
    }

    const STREAM: &[u8] = b"\xEF\xBB\xBF: hello\n\nretry: 1500\nid: 1\ndata: {\"at\":1}\n\n\
event: show\r\ndata:two\r\ndata:  lines\r\nid: 2\r\n\r\n\
event: other\rdata: skipped?\r\rdata\n\nid\n: empty id above\nevent: noise\n\n";

    #[test]
    fn events_are_read_as_the_html_standard_says() {
        let mut s = EventStream::new(&head(""), Vec::new(), 1 << 20);
        let got = events_of(&mut s, &[STREAM]);
        assert_eq!(got, vec!["{\"at\":1}", "two\n lines", "skipped?", ""]);
        assert_eq!(s.last_event_id(), "");
        assert_eq!(s.retry_ms(), Some(1500));
    }

    #[test]
    fn any_split_reads_the_same_events() {
        for cut in 0..STREAM.len() {
            let mut s = EventStream::new(&head(""), vec!["show".into(), "message".into()], 1 << 20);
            let got = events_of(&mut s, &[&STREAM[..cut], &STREAM[cut..]]);
            assert_eq!(got, vec!["{\"at\":1}", "two\n lines", ""], "cut {cut}");
        }
    }

    #[test]
    fn a_chunked_body_is_decoded_across_reads() {
        let body: &[u8] =
            b"e\r\ndata: x\nid: 7\n\r\n1\r\n\n\r\n6;ext=1\r\n: hi\n\n\r\n0\r\nTrailer: x\r\n\r\n";
        for cut in 0..body.len() {
            let mut s =
                EventStream::new(&head("Transfer-Encoding: chunked\r\n"), Vec::new(), 1 << 20);
            let got = events_of(&mut s, &[&body[..cut], &body[cut..]]);
            assert_eq!(got, vec!["x"], "cut {cut}");
            assert_eq!(s.last_event_id(), "7");
            assert!(s.ended(), "cut {cut}");
        }
        let mut s = EventStream::new(&head("Transfer-Encoding: chunked\r\n"), Vec::new(), 64);
        assert!(matches!(
            s.push(b"zz\r\n", &mut |_| {}),
            Err(SseError::Chunked(_))
        ));
    }

    #[test]
    fn a_body_of_a_length_ends_there() {
        let mut s = EventStream::new(&head("Content-Length: 9\r\n"), Vec::new(), 1 << 20);
        let got = events_of(&mut s, &[b"data: a\n\ndata: b\n\n"]);
        assert_eq!(got, vec!["a"]);
        assert!(s.ended());
    }

    #[test]
    fn heads_are_read_or_refused() {
        let text =
            b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nLocation: /x\r\n\r\nbody";
        let (head, used) = parse_response_head(text).unwrap().unwrap();
        assert_eq!(
            (head.status, head.reason.as_str(), used),
            (404, "Not Found", text.len() - 4)
        );
        assert_eq!(head.header("location"), Some("/x"));
        assert!(!head.is_event_stream());
        assert!(
            parse_response_head(b"HTTP/1.1 200 OK\r\n")
                .unwrap()
                .is_none()
        );
        assert!(parse_response_head(b"HTT").unwrap().is_none());
        assert!(parse_response_head(b"\x16\x03\x01").is_err());
        assert!(parse_response_head(b"HTTP/2 200\r\n\r\n").is_err());
    }

    #[test]
    fn lines_and_events_are_bounded() {
        let mut s = EventStream::new(&head(""), Vec::new(), 16);
        assert_eq!(
            s.push(&[b'x'; 40], &mut |_| {}),
            Err(SseError::TooLarge(16))
        );
        let mut s = EventStream::new(&head(""), Vec::new(), 16);
        assert_eq!(
            s.push(b"data: 0123456789\ndata: 0123456789\n", &mut |_| {}),
            Err(SseError::TooLarge(16))
        );
    }

    #[test]
    fn the_request_is_an_event_sources() {
        let r = request(
            "/events?probe=p",
            "h:8000",
            &[("Authorization".into(), "Bearer t".into())],
            Some("41"),
        );
        assert_eq!(
            String::from_utf8(r).unwrap(),
            "GET /events?probe=p HTTP/1.1\r\nHost: h:8000\r\nAccept: text/event-stream\r\n\
Cache-Control: no-cache\r\nAuthorization: Bearer t\r\nLast-Event-ID: 41\r\n\r\n"
        );
    }
}
