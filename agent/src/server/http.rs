//! The little HTTP the agent speaks: read one request head, write one response.
//!
//! Every non-upgrade response closes the connection, which keeps the server
//! simple and is all a broadcast trigger needs.

use std::time::Duration;

use crate::server::conn::Conn;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Largest request head accepted (request line and headers).
pub const MAX_HEAD: usize = 16 * 1024;
const MAX_HEADERS: usize = 64;

/// A parsed request head.
#[derive(Debug)]
pub struct Request {
    /// `GET`, `POST`, ...
    pub method: String,
    /// The path without the query.
    pub path: String,
    /// The query string, without `?`.
    pub query: Option<String>,
    /// Headers with lower-cased names.
    pub headers: Vec<(String, String)>,
    /// Bytes read past the head (a body's start, or a client's first frames).
    pub rest: Vec<u8>,
}

impl Request {
    /// The first header of that (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of the header `name` (lower case), in order: for headers a
    /// client may repeat, like `Sec-WebSocket-Extensions`.
    pub fn headers_named(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The value of `key` in the query string, percent-decoded (what
    /// Python's `urlencode` or a browser's `URLSearchParams` sends: `/at`
    /// as `%2Fat`). A value that does not decode reads as given; the
    /// endpoints refuse it first ([`Request::check_query`]).
    pub fn query_param(&self, key: &str) -> Option<String> {
        self.query
            .as_deref()?
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| percent_decode(k).as_deref() == Ok(key))
            .map(|(_, v)| percent_decode(v).unwrap_or_else(|_| v.to_owned()))
    }

    /// Checks the query against the parameters `self.path` takes (`known`):
    /// each one known, given once, with a value. A typo (`leed=30ms`) is
    /// refused with the list of what the endpoint takes, rather than
    /// ignored: ignored, the broadcast would go out without what was
    /// asked of it. The error is the body of a 400.
    pub fn check_query(&self, known: &[&str]) -> Result<(), String> {
        let Some(query) = self.query.as_deref() else {
            return Ok(());
        };
        let takes = if known.is_empty() {
            format!("{} takes no parameters", self.path)
        } else {
            format!("{} takes {}", self.path, one_of(known, "and"))
        };
        let mut seen: Vec<String> = Vec::new();
        for piece in query.split('&').filter(|p| !p.is_empty()) {
            let (raw_name, value) = match piece.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None => (piece, None),
            };
            let name = percent_decode(raw_name).map_err(|e| format!("{e}; {takes}\n"))?;
            if !known.contains(&name.as_str()) {
                let hint = known
                    .iter()
                    .find(|k| close_to(&name, k))
                    .map(|k| format!(" (did you mean {k}?)"))
                    .unwrap_or_default();
                return Err(format!(
                    "unknown parameter `{name}`{hint}: {takes}; nothing was done\n"
                ));
            }
            let Some(value) = value else {
                return Err(format!(
                    "`{name}` has no value: give it as {name}=VALUE; nothing was done\n"
                ));
            };
            percent_decode(value).map_err(|e| format!("{name}={value}: {e}\n"))?;
            if seen.contains(&name) {
                return Err(format!(
                    "{name}= is given twice: give each parameter once; nothing was done\n"
                ));
            }
            seen.push(name);
        }
        Ok(())
    }
}

/// `a`, `a and b`, `a, b and c` (or `or`).
pub fn one_of(items: &[&str], last: &str) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [init @ .., tail] => format!("{} {last} {tail}", init.join(", ")),
    }
}

/// Whether `typed` is one slip away from `known`: one letter wrong,
/// missing, added, or two swapped; or the same but for case.
fn close_to(typed: &str, known: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (typed.chars().collect(), known.chars().collect());
    if typed.eq_ignore_ascii_case(known) {
        return true;
    }
    match a.len() as isize - b.len() as isize {
        0 => {
            let differ: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
            match differ.as_slice() {
                [_] => true,
                [i, j] => *j == i + 1 && a[*i] == b[*j] && a[*j] == b[*i],
                _ => false,
            }
        }
        1 => (0..a.len()).any(|i| a[..i] == b[..i] && a[i + 1..] == b[i..]),
        -1 => (0..b.len()).any(|i| b[..i] == a[..i] && b[i + 1..] == a[i..]),
        _ => false,
    }
}

/// `%XX` sequences decoded (a `+` stays a `+`: a JSON pointer may hold
/// one, and RFC 3986 queries do not mean a space by it).
pub fn percent_decode(text: &str) -> Result<String, String> {
    if !text.contains('%') {
        return Ok(text.to_owned());
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    format!("`{text}` is not percent-encoded right (a % takes two hex digits)")
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| format!("`{text}` does not decode to UTF-8 text"))
}

/// Why no request could be read; each maps to a status or a silent close.
#[derive(Debug, thiserror::Error)]
pub enum HeadError {
    /// The peer closed or reset before sending a full head: nothing to answer.
    #[error("connection closed before a request arrived")]
    Closed,
    /// Not HTTP.
    #[error("malformed request: {0}")]
    Malformed(httparse::Error),
    /// Head larger than [`MAX_HEAD`].
    #[error("request head too large")]
    TooLarge,
    /// The head did not arrive in time.
    #[error("request head timed out")]
    Timeout,
}

/// Reads and parses one request head within `timeout`.
pub async fn read_head(stream: &mut Conn, timeout: Duration) -> Result<Request, HeadError> {
    tokio::time::timeout(timeout, read_head_inner(stream))
        .await
        .unwrap_or(Err(HeadError::Timeout))
}

async fn read_head_inner(stream: &mut Conn) -> Result<Request, HeadError> {
    let mut buf = Vec::with_capacity(1024);
    loop {
        let mut chunk = [0u8; 4096];
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|_| HeadError::Closed)?;
        if n == 0 {
            return Err(HeadError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(request) = parse_head(&buf)? {
            return Ok(request);
        }
    }
}

/// Parses the bytes received so far on a connection: the request once its
/// head is complete, `None` while more may complete it. Sans-IO, so the
/// fuzz target reads exactly what the server reads.
pub fn parse_head(buf: &[u8]) -> Result<Option<Request>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            let target = req.path.unwrap_or("/");
            let (path, query) = match target.split_once('?') {
                Some((p, q)) => (p, Some(q.to_owned())),
                None => (target, None),
            };
            Ok(Some(Request {
                method: req.method.unwrap_or("").to_owned(),
                path: path.to_owned(),
                query,
                headers: req
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_ascii_lowercase(),
                            String::from_utf8_lossy(h.value).into_owned(),
                        )
                    })
                    .collect(),
                rest: buf[len..].to_vec(),
            }))
        }
        Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => Ok(None),
        Ok(httparse::Status::Partial) => Err(HeadError::TooLarge),
        Err(e) => Err(HeadError::Malformed(e)),
    }
}

/// Writes a complete response and closes the write side.
pub async fn respond(stream: &mut Conn, status: u16, extra_headers: &str, body: &str) {
    let content_type = if body.starts_with('{') {
        "application/json"
    } else {
        "text/plain; charset=utf-8"
    };
    respond_bytes(stream, status, content_type, extra_headers, body.as_bytes()).await
}

/// The status line's reason phrase: the registered one (http's table),
/// so a client's log says what happened (`422 Unprocessable Entity`), and
/// "Error" for a code nobody registered.
fn reason_phrase(status: u16) -> &'static str {
    tungstenite::http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error")
}

/// [`respond`] with any body and its content type.
pub async fn respond_bytes(
    stream: &mut Conn,
    status: u16,
    content_type: &str,
    extra_headers: &str,
    body: &[u8],
) {
    let reason = reason_phrase(status);
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n{extra_headers}\r\n",
        body.len()
    );
    // The peer may already be gone; there is no one to tell.
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body).await;
    let _ = stream.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_line_has_its_registered_reason() {
        assert_eq!(reason_phrase(200), "OK");
        assert_eq!(reason_phrase(401), "Unauthorized");
        assert_eq!(reason_phrase(413), "Payload Too Large");
        assert_eq!(reason_phrase(422), "Unprocessable Entity");
        assert_eq!(reason_phrase(503), "Service Unavailable");
        assert_eq!(reason_phrase(599), "Error");
    }

    fn head(target: &str) -> Request {
        parse_head(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .unwrap()
            .unwrap()
    }

    #[test]
    fn queries_are_checked_against_what_the_endpoint_takes() {
        let known = ["lead", "pointer", "unit"];
        assert_eq!(head("/publish").check_query(&known), Ok(()));
        assert_eq!(head("/publish?").check_query(&known), Ok(()));
        assert_eq!(
            head("/publish?lead=1s&unit=ms&").check_query(&known),
            Ok(())
        );
        let typo = head("/publish?leed=30ms").check_query(&known).unwrap_err();
        assert!(typo.contains("(did you mean lead?)"), "{typo}");
        assert!(
            typo.contains("/publish takes lead, pointer and unit"),
            "{typo}"
        );
        let none = head("/healthz?x=1").check_query(&[]).unwrap_err();
        assert!(none.contains("/healthz takes no parameters"), "{none}");
        let twice = head("/publish?unit=s&unit=ms")
            .check_query(&known)
            .unwrap_err();
        assert!(twice.starts_with("unit= is given twice"), "{twice}");
        let bare = head("/publish?lead").check_query(&known).unwrap_err();
        assert!(bare.contains("give it as lead=VALUE"), "{bare}");
        let bad = head("/publish?pointer=%zz")
            .check_query(&known)
            .unwrap_err();
        assert!(bad.contains("percent-encoded"), "{bad}");
    }

    #[test]
    fn values_are_percent_decoded() {
        let r = head("/publish?pointer=%2Fshow%2Fgo&lea%64=30ms");
        assert_eq!(r.query_param("pointer").as_deref(), Some("/show/go"));
        assert_eq!(r.query_param("lead").as_deref(), Some("30ms"));
        assert_eq!(percent_decode("a+b").unwrap(), "a+b");
        assert!(percent_decode("%e9").is_err(), "not UTF-8");
    }

    #[test]
    fn one_slip_away_is_close() {
        for (typed, known) in [
            ("leed", "lead"),
            ("led", "lead"),
            ("laed", "lead"),
            ("LEAD", "lead"),
            ("units", "unit"),
        ] {
            assert!(close_to(typed, known), "{typed} ~ {known}");
        }
        for (typed, known) in [("name", "lead"), ("l", "lead"), ("pointers!", "pointer")] {
            assert!(!close_to(typed, known), "{typed} !~ {known}");
        }
        assert_eq!(one_of(&["a", "b", "c"], "or"), "a, b or c");
        assert_eq!(one_of(&["a"], "and"), "a");
    }
}
