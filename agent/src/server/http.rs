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

    /// The value of `key` in the query string.
    pub fn query_param(&self, key: &str) -> Option<&str> {
        self.query
            .as_deref()?
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }
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

/// [`respond`] with any body and its content type.
pub async fn respond_bytes(
    stream: &mut Conn,
    status: u16,
    content_type: &str,
    extra_headers: &str,
    body: &[u8],
) {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Content Too Large",
        426 => "Upgrade Required",
        416 => "Range Not Satisfiable",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n{extra_headers}\r\n",
        body.len()
    );
    // The peer may already be gone; there is no one to tell.
    let _ = stream.write_all(head.as_bytes()).await;
    let _ = stream.write_all(body).await;
    let _ = stream.shutdown().await;
}
