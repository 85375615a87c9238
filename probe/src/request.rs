//! The upgrade request a probe sends and what it reads back from the response.
//!
//! The probe labels itself with `?probe=NAME` so a skewscope agent can name the
//! connection in its log; a skewscope agent answers with `X-Skewscope-Conn`, its
//! own id for the connection, so the collector can join both sides. Any other
//! server ignores the query and sends no such header.

use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Response;

use crate::error::ProbeError;

/// The response header in which a skewscope agent names the connection.
pub const AGENT_CONN_HEADER: &str = "X-Skewscope-Conn";

/// The query parameter that carries the probe's name.
pub const PROBE_PARAM: &str = "probe";

/// A URL's user-info (`ws://user:password@host/`), percent-decoded.
#[derive(Clone, PartialEq, Eq)]
pub struct UserInfo {
    /// The user name.
    pub user: String,
    /// The password (empty when none was given).
    pub password: String,
}

impl std::fmt::Debug for UserInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UserInfo({:?}, <password>)", self.user)
    }
}

impl UserInfo {
    /// The `Authorization` header value browsers send for it.
    pub fn basic_authorization(&self) -> String {
        let pair = format!("{}:{}", self.user, self.password);
        format!("Basic {}", data_encoding::BASE64.encode(pair.as_bytes()))
    }
}

/// Splits the user-info off a URL: the URL without it, and the user-info.
/// The user-info never goes into the request line or `Host`; it becomes
/// Basic auth (as browsers do for `ws://user:pass@host/`).
pub fn split_user_info(url: &str) -> (String, Option<UserInfo>) {
    let Some((scheme, rest)) = url.split_once("://") else {
        return (url.to_owned(), None);
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let Some((info, host)) = authority.rsplit_once('@') else {
        return (url.to_owned(), None);
    };
    let (user, password) = info.split_once(':').unwrap_or((info, ""));
    (
        format!("{scheme}://{host}{tail}"),
        Some(UserInfo {
            user: percent_decode(user),
            password: percent_decode(password),
        }),
    )
}

/// The URL as logs and messages may show it: a password replaced by `***`.
pub fn redacted(url: &str) -> String {
    match split_user_info(url) {
        (bare, Some(info)) => {
            let (scheme, rest) = bare.split_once("://").unwrap_or(("ws", &bare));
            let secret = if info.password.is_empty() { "" } else { ":***" };
            format!("{scheme}://{}{secret}@{rest}", percent_encode(&info.user))
        }
        (bare, None) => bare,
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied(),
            bytes.get(i + 2).copied(),
        ) {
            (b'%', Some(h), Some(l)) if hex(h).is_some() && hex(l).is_some() => {
                out.push((hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0)) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Returns `url` with `probe=NAME` appended to its query string, after checking
/// that it is a `ws://` URL with a host, so a typo fails before any connection.
pub fn labelled_url(url: &str, name: &str) -> Result<String, ProbeError> {
    let shown = redacted(url);
    let invalid = |reason: &str| ProbeError::Url {
        url: shown.clone(),
        reason: reason.to_owned(),
    };
    let (url, _) = split_user_info(url);
    let url = url.as_str();
    let (scheme, _) = url
        .split_once("://")
        .ok_or_else(|| invalid("not a URL; give one like ws://server:8080/ws"))?;
    match scheme.to_ascii_lowercase().as_str() {
        "ws" | "wss" => {}
        _ => {
            return Err(invalid(
                "only ws:// and wss:// URLs are supported, like ws://server:8080/ws",
            ));
        }
    }
    // WebSocket URLs have no fragment (RFC 6455 §3); keep one out of the query.
    let (base, fragment) = match url.split_once('#') {
        Some((base, fragment)) => (base, Some(fragment)),
        None => (url, None),
    };
    let separator = match base.split_once('?') {
        None => "?",
        Some((_, "")) => "",
        Some((_, query)) if query.ends_with('&') => "",
        Some(_) => "&",
    };
    let mut labelled = format!("{base}{separator}{PROBE_PARAM}={}", percent_encode(name));
    if let Some(fragment) = fragment {
        labelled.push('#');
        labelled.push_str(fragment);
    }
    let request = labelled
        .as_str()
        .into_client_request()
        .map_err(|e| invalid(&format!("not a valid WebSocket URL: {e}")))?;
    if request.uri().host().is_none_or(str::is_empty) {
        return Err(invalid(
            "the URL names no host; give one like ws://server:8080/ws",
        ));
    }
    Ok(labelled)
}

/// The host and port a `ws://` or `wss://` URL points at (80 or 443 when not
/// given): where the TCP connection goes, and where the agent's time
/// exchange answers.
pub fn host_port(url: &str) -> Result<(String, u16), ProbeError> {
    let request = url.into_client_request().map_err(|e| ProbeError::Url {
        url: url.to_owned(),
        reason: format!("not a valid WebSocket URL: {e}"),
    })?;
    let uri = request.uri();
    let host = uri.host().unwrap_or_default();
    // An IPv6 literal comes bracketed; sockets want it bare.
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let default = if is_tls(url) { 443 } else { 80 };
    Ok((host, uri.port_u16().unwrap_or(default)))
}

/// Whether a URL is `wss://`.
pub fn is_tls(url: &str) -> bool {
    url.split_once("://")
        .is_some_and(|(scheme, _)| scheme.eq_ignore_ascii_case("wss"))
}

/// The agent's connection id from an upgrade response, if the server is a
/// skewscope agent; `None` for any other server or an unreadable value.
pub fn agent_conn(response: &Response) -> Option<u64> {
    response
        .headers()
        .get(AGENT_CONN_HEADER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Percent-encodes everything but RFC 3986 unreserved characters, so any name
/// survives as one query value.
fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_the_label_to_any_query() {
        let cases = [
            ("ws://h:1/ws", "ws://h:1/ws?probe=dev-1"),
            ("ws://h:1", "ws://h:1?probe=dev-1"),
            ("ws://h:1/ws?room=a", "ws://h:1/ws?room=a&probe=dev-1"),
            ("ws://h:1/ws?", "ws://h:1/ws?probe=dev-1"),
            ("ws://h:1/ws?room=a&", "ws://h:1/ws?room=a&probe=dev-1"),
            ("ws://h:1/ws#frag", "ws://h:1/ws?probe=dev-1#frag"),
        ];
        for (url, want) in cases {
            assert_eq!(labelled_url(url, "dev-1").unwrap(), want, "{url}");
        }
    }

    #[test]
    fn user_info_becomes_basic_auth_and_never_shows() {
        let (bare, info) = split_user_info("ws://ad%40min:p%3Ass@h:1/ws?x=1");
        assert_eq!(bare, "ws://h:1/ws?x=1");
        let info = info.unwrap();
        assert_eq!(
            (info.user.as_str(), info.password.as_str()),
            ("ad@min", "p:ss")
        );
        // RFC 7617's example.
        let aladdin = UserInfo {
            user: "Aladdin".into(),
            password: "open sesame".into(),
        };
        assert_eq!(
            aladdin.basic_authorization(),
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        );
        assert_eq!(redacted("ws://u:secret@h:1/ws"), "ws://u:***@h:1/ws");
        assert!(!format!("{info:?}").contains("p:ss"));
        assert_eq!(
            labelled_url("ws://u:secret@h:1/ws", "p").unwrap(),
            "ws://h:1/ws?probe=p"
        );
        let err = labelled_url("http://u:secret@h/", "p").unwrap_err();
        assert!(!err.to_string().contains("secret"), "{err}");
        // An @ in the path is not user-info.
        assert_eq!(split_user_info("ws://h/a@b").1, None);
    }

    #[test]
    fn names_are_percent_encoded() {
        assert_eq!(
            labelled_url("ws://h:1/", "kitchen pi/2&x=ü").unwrap(),
            "ws://h:1/?probe=kitchen%20pi%2F2%26x%3D%C3%BC"
        );
    }

    #[test]
    fn non_websocket_urls_are_rejected_with_advice() {
        for url in ["http://h/", "h:8080", "ws://"] {
            let err = labelled_url(url, "p").unwrap_err();
            assert!(matches!(err, ProbeError::Url { .. }), "{url}");
            assert!(err.to_string().contains(url), "{err}");
        }
        assert_eq!(labelled_url("wss://h/", "p").unwrap(), "wss://h/?probe=p");
        assert_eq!(host_port("wss://h/").unwrap(), ("h".to_owned(), 443));
        assert_eq!(host_port("ws://h/").unwrap(), ("h".to_owned(), 80));
    }

    #[test]
    fn reads_the_agent_connection_header() {
        let with = |value: &str| {
            let mut response = Response::new(None);
            response
                .headers_mut()
                .insert(AGENT_CONN_HEADER, value.parse().unwrap());
            response
        };
        assert_eq!(agent_conn(&with("42")), Some(42));
        assert_eq!(agent_conn(&with(" 7 ")), Some(7));
        assert_eq!(agent_conn(&with("x")), None);
        assert_eq!(agent_conn(&Response::new(None)), None);
    }
}
