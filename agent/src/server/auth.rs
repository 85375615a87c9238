//! Bearer tokens: `/publish`, `/start_test`, `/ingest`, `/audit/…` and `/sweep…` ask
//! for `--token-file`'s, `/metrics` for `--metrics-token-file`'s.

use crate::server::conn::Conn;

use crate::server::http::{Request, respond};

/// Whether the request carries `token` (any request does when it is
/// `None`); answers 401 when it does not.
pub async fn authorized_by(stream: &mut Conn, request: &Request, token: Option<&str>) -> bool {
    let Some(token) = token else {
        return true;
    };
    let given = request
        .header("authorization")
        .and_then(bearer_token)
        .or_else(|| subprotocol_token(request))
        .unwrap_or("");
    if constant_time_eq(given.as_bytes(), token.as_bytes()) {
        return true;
    }
    respond(
        stream,
        401,
        "WWW-Authenticate: Bearer\r\n",
        "missing or wrong bearer token: send `Authorization: Bearer TOKEN`, TOKEN being what the agent's --token-file holds (--metrics-token-file for /metrics)\n",
    )
    .await;
    false
}

/// The token of an `Authorization: Bearer TOKEN` value; the scheme name
/// is case-insensitive (RFC 7235 §2.1).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// What a page offers instead of a header it cannot set: a browser's
/// `new WebSocket(url, protocols)` sends no `Authorization`, so the token
/// may come as the subprotocol `skewscope-bearer.TOKEN` (the agent answers
/// with another of the offered protocols, never this one).
pub const BEARER_SUBPROTOCOL: &str = "skewscope-bearer.";

fn subprotocol_token(request: &Request) -> Option<&str> {
    request
        .header("sec-websocket-protocol")?
        .split(',')
        .find_map(|p| p.trim().strip_prefix(BEARER_SUBPROTOCOL))
}

/// Compares `given` with `token` without an early exit, in a time that
/// depends only on what was given: neither where they differ nor the
/// token's length shows in the response's timing.
fn constant_time_eq(given: &[u8], token: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != token.len());
    for (i, g) in given.iter().enumerate() {
        // Past the token's end, compare with its bytes again (the length
        // already differs); never an early exit.
        let t = token.get(i % token.len().max(1)).copied().unwrap_or(0);
        diff |= g ^ t;
    }
    diff == 0 && !token.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"abcd", b"abc"));
        assert!(!constant_time_eq(b"abcabc", b"abc"));
        assert!(!constant_time_eq(b"", b""));
    }

    #[test]
    fn the_bearer_scheme_name_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer s3cret"), Some("s3cret"));
        assert_eq!(bearer_token("bearer s3cret "), Some("s3cret"));
        assert_eq!(bearer_token("BEARER  s3cret"), Some("s3cret"));
        assert_eq!(bearer_token("Basic dXNlcjpwdw=="), None);
        assert_eq!(bearer_token("Bearer"), None);
    }
}
