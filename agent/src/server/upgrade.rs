//! The WebSocket opening handshake (RFC 6455 §4.2), server side.
//!
//! Done by hand over the request head the HTTP side already parsed, because the
//! socket leaves tokio right after it for a shard; the accept key comes from
//! tungstenite.

use tungstenite::handshake::derive_accept_key;

use crate::server::http::Request;
use skewscope_core::permessage_deflate::answer_offers;

/// Header carrying the agent's connection id in the upgrade response, so a
/// probe can name its connection in the agent's log.
pub const CONN_HEADER: &str = "X-Skewscope-Conn";

/// Why an upgrade request was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum UpgradeError {
    /// Missing or wrong upgrade headers.
    #[error("not a valid WebSocket upgrade: {0}")]
    Invalid(&'static str),
    /// A WebSocket version other than 13.
    #[error("unsupported WebSocket version (this server speaks 13)")]
    Version,
}

/// An accepted upgrade.
#[derive(Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The whole 101 response head.
    pub response: String,
    /// The subprotocol chosen, if any.
    pub subprotocol: Option<String>,
    /// permessage-deflate was agreed.
    pub deflate: bool,
}

/// Checks the request and returns the 101 response for connection `conn`,
/// choosing the first subprotocol the client offers that is in `ours`, and
/// answering a permessage-deflate offer when `deflate` (unless `--no-deflate`).
pub fn accept(
    request: &Request,
    conn: u64,
    ours: &[String],
    deflate: bool,
) -> Result<Accepted, UpgradeError> {
    if request.method != "GET" {
        return Err(UpgradeError::Invalid("method must be GET"));
    }
    // HTTP/1.1 requires it (RFC 9112 §3.2); RFC 6455 §4.1 too.
    if request.header("host").is_none_or(|h| h.trim().is_empty()) {
        return Err(UpgradeError::Invalid("missing Host"));
    }
    let has_token = |name: &str, token: &str| {
        request
            .header(name)
            .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    };
    if !has_token("upgrade", "websocket") {
        return Err(UpgradeError::Invalid("missing Upgrade: websocket"));
    }
    if !has_token("connection", "upgrade") {
        return Err(UpgradeError::Invalid("missing Connection: Upgrade"));
    }
    if request.header("sec-websocket-version").map(str::trim) != Some("13") {
        return Err(UpgradeError::Version);
    }
    let key = request
        .header("sec-websocket-key")
        .map(str::trim)
        .filter(|k| is_base64_of_16_bytes(k))
        .ok_or(UpgradeError::Invalid(
            "Sec-WebSocket-Key missing, or not base64 of 16 bytes",
        ))?;
    let subprotocol = request
        .header("sec-websocket-protocol")
        .and_then(|offered| {
            offered
                .split(',')
                .map(str::trim)
                .find(|p| ours.iter().any(|o| o == p))
                .map(str::to_owned)
        });
    let protocol_line = subprotocol
        .as_ref()
        .map(|p| format!("Sec-WebSocket-Protocol: {p}\r\n"))
        .unwrap_or_default();
    let extension = if deflate {
        let offers = request.headers_named("sec-websocket-extensions");
        answer_offers(&offers)
    } else {
        None
    };
    let extension_line = extension
        .as_ref()
        .map(|e| format!("Sec-WebSocket-Extensions: {e}\r\n"))
        .unwrap_or_default();
    Ok(Accepted {
        response: format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n{protocol_line}{extension_line}{CONN_HEADER}: {conn}\r\n\r\n",
            derive_accept_key(key.as_bytes())
        ),
        subprotocol,
        deflate: extension.is_some(),
    })
}

/// RFC 6455 §4.1: the key is 16 random bytes, base64-encoded: 22 base64
/// characters (the last of them carrying only 2 bits, so one of `AQgw`)
/// and `==`.
fn is_base64_of_16_bytes(key: &str) -> bool {
    let b = key.as_bytes();
    b.len() == 24
        && b.ends_with(b"==")
        && b[..22]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/')
        && b"AQgw".contains(&b[21])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(headers: &[(&str, &str)]) -> Request {
        Request {
            method: "GET".into(),
            path: "/ws".into(),
            query: None,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            rest: vec![],
        }
    }

    const GOOD: &[(&str, &str)] = &[
        ("host", "server"),
        ("upgrade", "websocket"),
        ("connection", "keep-alive, Upgrade"),
        ("sec-websocket-version", "13"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];

    #[test]
    fn rfc_example_key_is_accepted() {
        let resp = accept(&request(GOOD), 7, &[], false).unwrap().response;
        assert!(resp.starts_with("HTTP/1.1 101"));
        // The accept value from RFC 6455 §1.3.
        assert!(resp.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"));
        assert!(resp.contains("X-Skewscope-Conn: 7\r\n"));
    }

    #[test]
    fn missing_pieces_are_refused() {
        for dropped in GOOD {
            let partial: Vec<_> = GOOD.iter().filter(|h| *h != dropped).copied().collect();
            assert!(
                accept(&request(&partial), 1, &[], false).is_err(),
                "without {dropped:?}"
            );
        }
    }

    #[test]
    fn a_key_must_be_base64_of_16_bytes() {
        // 24 characters that are not 16 bytes of base64.
        for key in [
            "dGhlIHNhbXBsZSBub25jZQ=x",
            "dGhlIHNhbXBsZSBub25jZR==",
            "dGhlIHNhbXBsZSBub25j*Q==",
            "dGhlIHNhbXBsZSBub25jZQ",
        ] {
            let mut h = GOOD.to_vec();
            h.retain(|(n, _)| *n != "sec-websocket-key");
            h.push(("sec-websocket-key", key));
            assert!(accept(&request(&h), 1, &[], false).is_err(), "{key}");
        }
    }

    #[test]
    fn the_first_offered_subprotocol_we_speak_is_chosen() {
        let ours = ["chat".to_owned(), "v2.sync".to_owned()];
        let mut h = GOOD.to_vec();
        h.push(("sec-websocket-protocol", "graphql-ws, v2.sync, chat"));
        let a = accept(&request(&h), 1, &ours, false).unwrap();
        assert_eq!(a.subprotocol.as_deref(), Some("v2.sync"));
        assert!(a.response.contains("Sec-WebSocket-Protocol: v2.sync\r\n"));
        // None in common: still accepted, without the header.
        let a = accept(&request(&h), 1, &["other".to_owned()], false).unwrap();
        assert_eq!(a.subprotocol, None);
        assert!(!a.response.contains("Sec-WebSocket-Protocol"));
    }

    #[test]
    fn permessage_deflate_is_answered_only_with_deflate_on() {
        let mut h = GOOD.to_vec();
        h.push(("sec-websocket-extensions", "x-unknown"));
        h.push((
            "sec-websocket-extensions",
            "permessage-deflate; client_max_window_bits",
        ));
        let on = accept(&request(&h), 1, &[], true).unwrap();
        assert!(on.deflate);
        assert!(on.response.contains(
            "Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; client_no_context_takeover\r\n"
        ));
        let off = accept(&request(&h), 1, &[], false).unwrap();
        assert!(!off.deflate);
        assert!(!off.response.contains("Sec-WebSocket-Extensions"));
        // An offer the hub cannot honour: declined, the upgrade still made.
        let mut small = GOOD.to_vec();
        small.push((
            "sec-websocket-extensions",
            "permessage-deflate; server_max_window_bits=9",
        ));
        let declined = accept(&request(&small), 1, &[], true).unwrap();
        assert!(!declined.deflate);
        assert!(!declined.response.contains("Sec-WebSocket-Extensions"));
    }
}
