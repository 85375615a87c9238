//! `--protocol sse`: an HTTP/1.1 event stream opened as a browser's
//! `EventSource` opens it (GET, `Accept: text/event-stream`, the
//! operator's headers, `Last-Event-ID` when reconnecting, redirects
//! followed as the WebSocket upgrade follows them), over the same
//! kernel-stamped socket (and TLS) as a WebSocket: a payload's stamp is
//! still the arrival of the read that completed its event. The framing
//! and the events are the core's ([`skewscope_core::sse`]).

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::MaybeTlsStream;

use skewscope_core::sse::{EventStream, MAX_HEAD, ResponseHead, parse_response_head};
use skewscope_os::rx_stamp::{LastRx, RxStamped};

use crate::error::ConnectError;
use crate::handshake::{MAX_REDIRECTS, TlsInfo, Upgrade, origin, printable, tls_connect};
use crate::request;
use crate::wire::{Stream, WireError};
use tokio_tungstenite::tungstenite::http::header;

/// An open event stream.
pub(crate) struct EventSource {
    stream: Stream,
    buf: Box<[u8]>,
    events: EventStream,
    /// Body bytes read with the response head, not yet parsed.
    after_head: Vec<u8>,
}

impl std::fmt::Debug for EventSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSource").finish_non_exhaustive()
    }
}

/// An opened event stream, as [`connect`] hands it over.
pub(crate) struct Opened {
    pub(crate) source: EventSource,
    pub(crate) last_rx: LastRx,
    pub(crate) tls: Option<TlsInfo>,
}

impl EventSource {
    /// The socket, for its addresses.
    pub(crate) fn get_ref(&self) -> &Stream {
        &self.stream
    }

    /// The id of the last event dispatched (empty: none yet).
    pub(crate) fn last_event_id(&self) -> &str {
        self.events.last_event_id()
    }

    /// The reconnection time the server asked for (`retry:`), in ms.
    pub(crate) fn retry_ms(&self) -> Option<u64> {
        self.events.retry_ms()
    }

    /// Reads once (the bytes that came with the head first) and adds each
    /// wanted event's data to `got`; `None` once the stream has ended.
    pub(crate) async fn read(&mut self, got: &mut Vec<Vec<u8>>) -> Option<Result<(), WireError>> {
        if self.events.ended() {
            return None;
        }
        let parsed = if self.after_head.is_empty() {
            let n = match self.stream.read(&mut self.buf).await {
                Ok(0) => return None,
                Ok(n) => n,
                Err(e) => return Some(Err(e.into())),
            };
            self.events
                .push(&self.buf[..n], &mut |p| got.push(p.to_vec()))
        } else {
            let bytes = std::mem::take(&mut self.after_head);
            self.events.push(&bytes, &mut |p| got.push(p.to_vec()))
        };
        Some(parsed.map_err(|e| WireError::Protocol(e.to_string())))
    }

    /// Ends the connection: an event stream has no closing handshake.
    pub(crate) async fn close(&mut self) {
        let _ = self.stream.shutdown().await;
    }
}

/// Opens the event stream at the upgrade's URL (`http://` or `https://`),
/// following redirects; `last_event_id` is sent when reconnecting.
pub(crate) async fn connect(
    upgrade: &Upgrade,
    events: &[String],
    max_message: usize,
    read_buffer: usize,
    last_event_id: Option<&str>,
) -> Result<Opened, ConnectError> {
    let mut url = upgrade.url.clone();
    let mut headers: Vec<(String, String)> = upgrade
        .headers
        .iter()
        .map(|(n, v)| {
            (
                n.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    for hop in 0..=MAX_REDIRECTS {
        let tls = url.to_ascii_lowercase().starts_with("https://");
        // The host and port as the WebSocket twin of the URL gives them.
        let twin = format!(
            "{}://{}",
            if tls { "wss" } else { "ws" },
            url.split_once("://").map_or(url.as_str(), |(_, r)| r)
        );
        let (host, port) =
            request::host_port(&twin).map_err(|e| ConnectError::Request(e.to_string()))?;
        let (authority, target) = authority_and_target(&url);
        let stream = TcpStream::connect((host.as_str(), port))
            .await
            .map_err(|source| ConnectError::Unreachable {
                url: request::redacted(&url),
                source,
            })?;
        let _ = stream.set_nodelay(true);
        let (stream, last_rx) = RxStamped::new(stream);
        let (mut stream, info) = if tls {
            let (config, verified) = upgrade.tls_config()?;
            let stream = tls_connect(config, &host, stream).await.map_err(|e| {
                ConnectError::Diagnosed(format!("{}: TLS failed: {e}", request::redacted(&url)))
            })?;
            let info = match &stream {
                MaybeTlsStream::Rustls(s) => {
                    let session = s.get_ref().1;
                    Some(TlsInfo {
                        version: session
                            .protocol_version()
                            .map_or_else(String::new, |v| format!("{v:?}")),
                        cipher: session
                            .negotiated_cipher_suite()
                            .map_or_else(String::new, |c| format!("{:?}", c.suite())),
                        verified,
                    })
                }
                _ => None,
            };
            (stream, info)
        } else {
            (MaybeTlsStream::Plain(stream), None)
        };
        let request = skewscope_core::sse::request(&target, &authority, &headers, last_event_id);
        let unreachable = |source| ConnectError::Unreachable {
            url: request::redacted(&url),
            source,
        };
        stream.write_all(&request).await.map_err(unreachable)?;
        stream.flush().await.map_err(unreachable)?;
        let (head, after_head) = read_head(&mut stream, &url).await?;
        if head.status == 200 {
            if !head.is_event_stream() {
                return Err(ConnectError::Refused(format!(
                    "{}: the answer is not an event stream (Content-Type: {}; an SSE endpoint answers text/event-stream){}",
                    request::redacted(&url),
                    head.header("content-type").unwrap_or("none"),
                    body_start(&after_head)
                )));
            }
            let mut events = EventStream::new(&head, events.to_vec(), max_message);
            if let Some(id) = last_event_id {
                events.set_last_event_id(id);
            }
            return Ok(Opened {
                source: EventSource {
                    stream,
                    buf: vec![0; read_buffer].into_boxed_slice(),
                    events,
                    after_head,
                },
                last_rx,
                tls: info,
            });
        }
        let location = head.header("location");
        match (head.status, location) {
            (301 | 302 | 303 | 307 | 308, Some(location)) => {
                if hop == MAX_REDIRECTS {
                    return Err(ConnectError::Redirect(format!(
                        "more than {MAX_REDIRECTS} redirects; the last to {location}"
                    )));
                }
                let next = http_redirect_target(&url, location)?;
                if tls && !next.to_ascii_lowercase().starts_with("https://") {
                    return Err(ConnectError::Redirect(format!(
                        "redirected from https:// to {location}: refused, it would drop TLS"
                    )));
                }
                if origin(&twin_of(&next)) != origin(&twin) {
                    headers.retain(|(n, _)| {
                        !n.eq_ignore_ascii_case(header::AUTHORIZATION.as_str())
                            && !n.eq_ignore_ascii_case(header::COOKIE.as_str())
                    });
                }
                url = next;
            }
            (204, _) => {
                return Err(ConnectError::Refused(format!(
                    "{}: 204 No Content: the server asks event sources not to connect",
                    request::redacted(&url)
                )));
            }
            (status, _) => {
                let mut why = format!(
                    "{}: the server refused the event stream: HTTP {status} {}",
                    request::redacted(&url),
                    head.reason
                );
                if let Some(auth) = head.header("www-authenticate") {
                    why.push_str(&format!("; WWW-Authenticate: {auth}"));
                }
                why.push_str(&body_start(&after_head));
                return Err(ConnectError::Refused(why));
            }
        }
    }
    unreachable!("the loop returns by its last hop")
}

/// Reads the response head; returns it and the body bytes read with it.
async fn read_head(
    stream: &mut Stream,
    url: &str,
) -> Result<(ResponseHead, Vec<u8>), ConnectError> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream
            .read(&mut buf)
            .await
            .map_err(|source| ConnectError::Unreachable {
                url: request::redacted(url),
                source,
            })?;
        if n == 0 {
            return Err(ConnectError::Diagnosed(format!(
                "{}: the server closed the connection without an answer{}",
                request::redacted(url),
                if seen.is_empty() {
                    String::new()
                } else {
                    format!(" (it sent {})", printable(&seen[..seen.len().min(120)]))
                }
            )));
        }
        seen.extend_from_slice(&buf[..n]);
        match parse_response_head(&seen) {
            Ok(Some((head, used))) => return Ok((head, seen.split_off(used))),
            Ok(None) if seen.len() <= MAX_HEAD => {}
            Ok(None) | Err(_) => {
                let tls_hint = if matches!(seen.first(), Some(0x15 | 0x16)) {
                    " (the port speaks TLS: use https://)"
                } else {
                    ""
                };
                return Err(ConnectError::Diagnosed(format!(
                    "{}: the answer is not HTTP/1.1: {}{tls_hint}",
                    request::redacted(url),
                    printable(&seen[..seen.len().min(120)])
                )));
            }
        }
    }
}

/// `; body: …` when a refusal came with a body.
fn body_start(body: &[u8]) -> String {
    if body.is_empty() {
        String::new()
    } else {
        format!("; body: {}", printable(&body[..body.len().min(200)]))
    }
}

/// The `Host` value and the request target of an `http(s)://` URL, its
/// user-info and fragment left out.
fn authority_and_target(url: &str) -> (String, String) {
    let (bare, _) = request::split_user_info(url);
    let rest = bare.split_once("://").map_or(bare.as_str(), |(_, r)| r);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let tail = tail.split('#').next().unwrap_or("");
    let target = if tail.starts_with('/') {
        tail.to_owned()
    } else {
        format!("/{tail}")
    };
    (authority.to_owned(), target)
}

/// The `ws(s)://` twin of an `http(s)://` URL, for host, port and origin.
fn twin_of(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") => format!("wss://{rest}"),
        Some((_, rest)) => format!("ws://{rest}"),
        None => url.to_owned(),
    }
}

/// Where a redirect points, as an `http(s)://` URL (relative ones resolved
/// against `from`).
fn http_redirect_target(from: &str, location: &str) -> Result<String, ConnectError> {
    let ws = crate::handshake::redirect_target(&twin_of(from), location)
        .map_err(ConnectError::Redirect)?;
    Ok(match ws.split_once("://") {
        Some(("wss", rest)) => format!("https://{rest}"),
        Some((_, rest)) => format!("http://{rest}"),
        None => ws,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_name_the_host_and_target_without_credentials() {
        assert_eq!(
            authority_and_target("http://u:p@h:8000/events?probe=x#f"),
            ("h:8000".to_owned(), "/events?probe=x".to_owned())
        );
        assert_eq!(
            authority_and_target("https://h?probe=x"),
            ("h".to_owned(), "/?probe=x".to_owned())
        );
    }

    #[test]
    fn redirects_stay_http() {
        assert_eq!(
            http_redirect_target("http://a:1/x/events", "/y").unwrap(),
            "http://a:1/y"
        );
        assert_eq!(
            http_redirect_target("https://a/x", "next").unwrap(),
            "https://a/next"
        );
        assert_eq!(
            http_redirect_target("http://a/x", "https://b/z").unwrap(),
            "https://b/z"
        );
    }
}
