//! The server's first response on a connection the tap follows, which says
//! what the rest of its bytes are: a `101` upgrade (WebSocket frames, with
//! its permessage-deflate answer and the subprotocol it selected), an event
//! stream (`200`, `text/event-stream`, not content-encoded), or plain HTTP
//! that is not followed.

use crate::sse::{ResponseHead, parse_response_head};

/// What a complete response head starts.
#[derive(Debug)]
pub(crate) enum Response {
    /// `101 Switching Protocols`: WebSocket frames follow.
    Upgrade {
        /// Its `Sec-WebSocket-Extensions` values.
        extensions: Vec<String>,
        /// Its `Sec-WebSocket-Protocol`, if it selected one.
        subprotocol: Option<String>,
    },
    /// An event stream's body follows.
    EventStream(ResponseHead),
    /// Anything else: a page, an API answer, an error, a compressed stream.
    Other,
}

/// Reads a whole response head (up to and with its blank line).
pub(crate) fn read(head: &[u8]) -> Response {
    if head.starts_with(b"HTTP/1.1 101") {
        // Read leniently: the client took it, and only two headers matter.
        let text = String::from_utf8_lossy(head);
        let values = |name: &str| -> Vec<String> {
            text.lines()
                .filter_map(|l| l.split_once(':'))
                .filter(|(n, _)| n.trim().eq_ignore_ascii_case(name))
                .map(|(_, v)| v.to_owned())
                .collect()
        };
        return Response::Upgrade {
            extensions: values("sec-websocket-extensions"),
            subprotocol: values("sec-websocket-protocol")
                .first()
                .map(|v| v.trim().to_owned()),
        };
    }
    match parse_response_head(head) {
        Ok(Some((head, _))) if head.status == 200 && head.is_event_stream() => {
            // A compressed stream's events cannot be read without its
            // whole coding; EventSource clients rarely ask for one.
            let coded = head
                .header("content-encoding")
                .is_some_and(|c| !c.trim().eq_ignore_ascii_case("identity"));
            if coded {
                Response::Other
            } else {
                Response::EventStream(head)
            }
        }
        _ => Response::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upgrades_event_streams_and_the_rest_are_told_apart() {
        let Response::Upgrade {
            extensions,
            subprotocol,
        } = read(
            b"HTTP/1.1 101 Switching Protocols\r\nSec-WebSocket-Protocol: v12.stomp\r\nsec-websocket-extensions: permessage-deflate\r\n\r\n",
        )
        else {
            panic!("an upgrade")
        };
        assert_eq!(extensions, vec![" permessage-deflate".to_owned()]);
        assert_eq!(subprotocol.as_deref(), Some("v12.stomp"));
        assert!(matches!(
            read(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Response::EventStream(_)
        ));
        for other in [
            &b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\n\r\n",
            b"HTTP/1.1 404 Not Found\r\nContent-Type: text/event-stream\r\n\r\n",
            b"garbage\r\n\r\n",
        ] {
            assert!(matches!(read(other), Response::Other), "{other:?}");
        }
    }
}
