//! The WebSocket opening handshake (RFC 6455 §4.2), server side.
//!
//! Done by hand over the request head the HTTP side already parsed, because the
//! socket leaves tokio right after it for a shard; the accept key comes from
//! tungstenite.

use tungstenite::handshake::derive_accept_key;

use crate::server::http::Request;

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

/// Checks the request and returns the 101 response for connection `conn`.
pub fn accept(request: &Request, conn: u64) -> Result<String, UpgradeError> {
    if request.method != "GET" {
        return Err(UpgradeError::Invalid("method must be GET"));
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
        .filter(|k| k.len() == 24)
        .ok_or(UpgradeError::Invalid(
            "missing or malformed Sec-WebSocket-Key",
        ))?;
    Ok(format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n{CONN_HEADER}: {conn}\r\n\r\n",
        derive_accept_key(key.as_bytes())
    ))
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
        ("upgrade", "websocket"),
        ("connection", "keep-alive, Upgrade"),
        ("sec-websocket-version", "13"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];

    #[test]
    fn rfc_example_key_is_accepted() {
        let resp = accept(&request(GOOD), 7).unwrap();
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
                accept(&request(&partial), 1).is_err(),
                "without {dropped:?}"
            );
        }
    }
}
