//! The WebSocket upgrade, made the way the server's real clients make it:
//! their headers (a token, a cookie), their subprotocols, Basic auth from
//! the URL's user-info, and redirects followed like a browser follows them
//! (bounded; `http` becomes `ws`; credentials not carried to another host).
//! When the server says no, the error says what it answered: the status
//! line, `Location`, `WWW-Authenticate`, the start of the body, or that a
//! `ws://` URL reached a TLS port.
//!
//! permessage-deflate is offered as browsers offer it (unless `--no-deflate`),
//! so a server that compresses for its real clients compresses for the
//! probe too; frames are then read by [`crate::wire`], not tungstenite.
//!
//! Strict where RFC 6455 §4.1 and RFC 7692 §5 are: a response that accepts
//! an extension the probe never offered, or permessage-deflate with a
//! parameter it does not define, fails the connection with a Close (1002).
//!
//! `wss://` runs TLS ([`crate::tls`]) over the same kernel-stamped socket:
//! a message's stamp is still its last TCP segment's arrival.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Response;
use tokio_tungstenite::tungstenite::http::{HeaderName, HeaderValue, header};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::{Connector, MaybeTlsStream};

use crate::after_upgrade::Recording;
use crate::config::{ProbeConfig, Protocol};
use crate::error::ConnectError;
use crate::request;
use crate::tls::{Trust, TrustError, client_config};
use crate::wire::{Wire, code};
use skewscope_core::permessage_deflate::{Accepted, BROWSER_OFFER, read_answer};
use skewscope_os::rx_stamp::{LastRx, RxStamped};

/// Redirects followed at most, as browsers bound them.
pub const MAX_REDIRECTS: usize = 5;

/// How long to wait for a first answer when diagnosing a failed upgrade.
const SNIFF_TIMEOUT: Duration = Duration::from_secs(1);

/// What a TLS connection negotiated.
#[derive(Clone, Debug)]
pub(crate) struct TlsInfo {
    pub(crate) version: String,
    pub(crate) cipher: String,
    pub(crate) verified: bool,
}

/// Subprotocols a STOMP client offers unless told otherwise, as stomp.js
/// does (Spring and RabbitMQ's Web-STOMP answer one of them).
pub(crate) const STOMP_SUBPROTOCOLS: [&str; 3] = ["v12.stomp", "v11.stomp", "v10.stomp"];

/// The subprotocol MQTT over WebSocket requires (MQTT 3.1.1 §6, 5.0 §6).
pub(crate) const MQTT_SUBPROTOCOL: &str = "mqtt";

/// What every upgrade of a run sends.
#[derive(Debug, Clone)]
pub(crate) struct Upgrade {
    /// The labelled `ws://` URL, without user-info.
    pub(crate) url: String,
    /// The probe's name, to label a redirect's target too.
    pub(crate) name: String,
    /// Extra headers, user-info's Basic auth among them.
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    /// Subprotocols offered, in order.
    pub(crate) subprotocols: Vec<String>,
    /// Offer permessage-deflate as browsers do.
    pub(crate) deflate: bool,
    /// Whom `wss://` connections trust.
    pub(crate) trust: Trust,
    /// The TLS client configuration, made at the first `wss://` upgrade.
    tls: OnceLock<Result<(Arc<rustls::ClientConfig>, bool), TrustError>>,
    /// What rides on the connection.
    pub(crate) protocol: Protocol,
}

/// An upgraded connection.
pub(crate) struct Upgraded {
    pub(crate) wire: Wire,
    pub(crate) last_rx: LastRx,
    pub(crate) response: Response,
    /// Set for `wss://`.
    pub(crate) tls: Option<TlsInfo>,
    /// What the server accepted of permessage-deflate.
    pub(crate) deflate: Option<Accepted>,
}

/// How frames are read once a connection is upgraded.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Framing {
    /// Largest message taken (`--max-message`), compressed or inflated.
    pub(crate) max_message: usize,
    /// Bytes per read.
    pub(crate) read_buffer: usize,
}

impl Upgrade {
    /// The upgrade for `config`, its URL already labelled: headers checked,
    /// user-info turned into Basic auth.
    pub(crate) fn new(
        labelled_url: String,
        config: &crate::config::ProbeConfig,
    ) -> Result<Upgrade, crate::error::ProbeError> {
        let mut headers = Vec::new();
        for (name, value) in &config.headers {
            let bad = |what| crate::error::ProbeError::Config(format!("--header {name}: {what}"));
            headers.push((
                HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad("not a header name"))?,
                HeaderValue::from_str(value).map_err(|_| bad("not a header value"))?,
            ));
        }
        if let (_, Some(info)) = request::split_user_info(&config.url) {
            if headers.iter().any(|(n, _)| n == header::AUTHORIZATION) {
                return Err(crate::error::ProbeError::Config(
                    "the URL has user-info and --header sets Authorization: give one".into(),
                ));
            }
            let value = HeaderValue::from_str(&info.basic_authorization()).map_err(|_| {
                crate::error::ProbeError::Config(
                    "the URL's user-info cannot be sent as a header".into(),
                )
            })?;
            headers.push((header::AUTHORIZATION, value));
        }
        let trust = Trust::of(config.ca_file.as_deref(), config.insecure);
        let mut subprotocols = config.subprotocols.clone();
        if subprotocols.is_empty() {
            match config.protocol {
                Protocol::Stomp { .. } => {
                    subprotocols = STOMP_SUBPROTOCOLS.map(str::to_owned).to_vec();
                }
                Protocol::Mqtt { .. } => subprotocols = vec![MQTT_SUBPROTOCOL.to_owned()],
                _ => {}
            }
        }
        let url = match config.protocol {
            Protocol::SocketIo { .. } => socketio_url(&labelled_url),
            _ => labelled_url,
        };
        let upgrade = Upgrade {
            url,
            name: config.name.clone(),
            headers,
            subprotocols,
            deflate: config.deflate,
            trust,
            tls: OnceLock::new(),
            protocol: config.protocol.clone(),
        };
        // A bad --ca-file fails the run at once, not every connection.
        if request::is_tls(&upgrade.url) || config.ca_file.is_some() {
            upgrade
                .tls_config()
                .map_err(|e| crate::error::ProbeError::Config(e.to_string()))?;
        }
        Ok(upgrade)
    }

    /// The TLS client configuration and whether it checks certificates.
    pub(crate) fn tls_config(&self) -> Result<(Arc<rustls::ClientConfig>, bool), TrustError> {
        self.tls.get_or_init(|| client_config(&self.trust)).clone()
    }

    /// Connects and upgrades, following redirects.
    pub(crate) async fn connect(
        &self,
        ws_config: WebSocketConfig,
        settings: Framing,
    ) -> Result<Upgraded, ConnectError> {
        let mut url = self.url.clone();
        let mut headers = self.headers.clone();
        let mut dropped_credentials = false;
        for hop in 0..=MAX_REDIRECTS {
            let mut request = url
                .as_str()
                .into_client_request()
                .map_err(|e| ConnectError::Request(e.to_string()))?;
            for (name, value) in &headers {
                request.headers_mut().append(name.clone(), value.clone());
            }
            if self.deflate {
                request.headers_mut().insert(
                    header::SEC_WEBSOCKET_EXTENSIONS,
                    HeaderValue::from_static(BROWSER_OFFER),
                );
            }
            if !self.subprotocols.is_empty() {
                let offered = HeaderValue::from_str(&self.subprotocols.join(", "))
                    .map_err(|e| ConnectError::Request(format!("--subprotocol: {e}")))?;
                request
                    .headers_mut()
                    .insert(header::SEC_WEBSOCKET_PROTOCOL, offered);
            }
            let (host, port) =
                request::host_port(&url).map_err(|e| ConnectError::Request(e.to_string()))?;
            let stream = TcpStream::connect((host.as_str(), port))
                .await
                .map_err(|source| ConnectError::Unreachable {
                    url: request::redacted(&url),
                    source,
                })?;
            // Receipt time is the point: never let Nagle hold our close or pong back.
            let _ = stream.set_nodelay(true);
            let (stream, last_rx) = RxStamped::new(stream);
            let tls = request::is_tls(&url);
            let (stream, verified) = if tls {
                let (config, verified) = self.tls_config()?;
                match tls_connect(config, &host, stream).await {
                    Ok(stream) => (stream, verified),
                    Err(e) => {
                        return Err(ConnectError::Diagnosed(
                            diagnose(&url, &host, port, WsError::Io(e)).await,
                        ));
                    }
                }
            } else {
                (MaybeTlsStream::Plain(stream), false)
            };
            match tokio_tungstenite::client_async_with_config(
                request,
                Recording::new(stream),
                Some(ws_config),
            )
            .await
            {
                Ok((ws, response)) => {
                    let (stream, after_upgrade) = ws.into_inner().into_parts();
                    return self
                        .upgraded(
                            stream,
                            &after_upgrade,
                            response,
                            last_rx,
                            verified,
                            settings,
                        )
                        .await;
                }
                Err(WsError::Http(response)) if response.status().is_redirection() => {
                    let location = response
                        .headers()
                        .get(header::LOCATION)
                        .map(|l| String::from_utf8_lossy(l.as_bytes()).into_owned())
                        .ok_or_else(|| ConnectError::Refused(refused(&response)))?;
                    if hop == MAX_REDIRECTS {
                        return Err(ConnectError::Redirect(format!(
                            "more than {MAX_REDIRECTS} redirects; the last to {location}"
                        )));
                    }
                    let next = redirect_target(&url, &location).map_err(ConnectError::Redirect)?;
                    if request::is_tls(&url) && !request::is_tls(&next) {
                        return Err(ConnectError::Redirect(format!(
                            "redirected from wss:// to {location}: refused, it would drop TLS"
                        )));
                    }
                    if origin(&next) != origin(&url) {
                        // As browsers do: no credentials to another host.
                        let before = headers.len();
                        headers.retain(|(n, _)| n != header::AUTHORIZATION && n != header::COOKIE);
                        dropped_credentials |= headers.len() < before;
                    }
                    url = if next.contains("probe=") {
                        next
                    } else {
                        request::labelled_url(&next, &self.name)
                            .map_err(|e| ConnectError::Redirect(e.to_string()))?
                    };
                }
                Err(WsError::Http(response)) => {
                    let mut why = refused(&response);
                    if dropped_credentials {
                        why.push_str(
                            " (a redirect to another host dropped Authorization and Cookie, as browsers do)",
                        );
                    }
                    return Err(ConnectError::Refused(why));
                }
                Err(e) => {
                    return Err(ConnectError::Diagnosed(
                        diagnose(&url, &host, port, e).await,
                    ));
                }
            }
        }
        unreachable!("the loop returns by its last hop")
    }
}

impl Upgrade {
    /// A `101` came: checks what it says of extensions (failing the
    /// connection with 1002 where a client must) and hands the socket, and
    /// the bytes read behind the response, to the probe's own frame reader.
    async fn upgraded(
        &self,
        stream: MaybeTlsStream<RxStamped>,
        after_upgrade: &[u8],
        response: Response,
        last_rx: LastRx,
        verified: bool,
        settings: Framing,
    ) -> Result<Upgraded, ConnectError> {
        let answer: Vec<&str> = response
            .headers()
            .get_all(header::SEC_WEBSOCKET_EXTENSIONS)
            .iter()
            .map(|v| v.to_str().unwrap_or("?"))
            .collect();
        let deflate = match read_answer(&answer, self.deflate) {
            Ok(deflate) => deflate,
            Err(e) => {
                let why = format!(
                    "{e} ({}): RFC 6455 §4.1 requires failing the connection",
                    answer.join(", ")
                );
                let mut wire = Wire::new(stream, &[], None, settings.max_message, 16);
                let _ = wire.send_close(code::PROTOCOL, "bad extension").await;
                return Err(ConnectError::BadUpgrade(why));
            }
        };
        let tls = match &stream {
            MaybeTlsStream::Rustls(stream) => {
                let session = stream.get_ref().1;
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
        let wire = Wire::new(
            stream,
            after_upgrade,
            deflate,
            settings.max_message,
            settings.read_buffer,
        );
        Ok(Upgraded {
            wire,
            last_rx,
            response,
            tls,
            deflate,
        })
    }
}

/// TLS over the kernel-stamped socket, for the server named `host`.
pub(crate) async fn tls_connect(
    config: Arc<rustls::ClientConfig>,
    host: &str,
    stream: RxStamped,
) -> std::io::Result<MaybeTlsStream<RxStamped>> {
    // rustls names an IPv6 server without the URL's brackets.
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let name = rustls_pki_types::ServerName::try_from(bare.to_owned())
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    let stream = tokio_rustls::TlsConnector::from(config)
        .connect(name, stream)
        .await?;
    Ok(MaybeTlsStream::Rustls(stream))
}

/// What a server answered instead of upgrading.
fn refused(response: &tokio_tungstenite::tungstenite::http::Response<Option<Vec<u8>>>) -> String {
    let status = response.status();
    let mut text = format!(
        "the server refused the WebSocket upgrade: HTTP {} {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    for name in [header::LOCATION, header::WWW_AUTHENTICATE] {
        if let Some(v) = response.headers().get(&name) {
            text.push_str(&format!(
                "; {name}: {}",
                String::from_utf8_lossy(v.as_bytes())
            ));
        }
    }
    if let Some(body) = response.body().as_deref().filter(|b| !b.is_empty()) {
        text.push_str(&format!(
            "; body: {}",
            printable(&body[..body.len().min(200)])
        ));
    }
    text
}

/// Where a redirect points, as a WebSocket URL: `http` becomes `ws` and
/// `https` becomes `wss` (a browser's WebSocket URL is its HTTP URL), and a
/// relative `Location` is resolved against the URL it came from. The error
/// says why the target is no WebSocket URL.
pub(crate) fn redirect_target(from: &str, location: &str) -> Result<String, String> {
    let location = location.trim();
    let (scheme, authority_and_path) = match location.split_once("://") {
        Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest.to_owned()),
        None => {
            let (from_scheme, rest) = from.split_once("://").unwrap_or(("ws", from));
            let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            let (authority, path) = rest.split_at(authority_end);
            let resolved = if let Some(other) = location.strip_prefix("//") {
                other.to_owned()
            } else if location.starts_with('/') {
                format!("{authority}{location}")
            } else {
                let path = path.split(['?', '#']).next().unwrap_or("");
                let dir = path.rsplit_once('/').map_or("", |(dir, _)| dir);
                format!("{authority}{dir}/{location}")
            };
            (from_scheme.to_ascii_lowercase(), resolved)
        }
    };
    match scheme.as_str() {
        "ws" | "http" => Ok(format!("ws://{authority_and_path}")),
        "wss" | "https" => Ok(format!("wss://{authority_and_path}")),
        _ => Err(format!(
            "redirected to {location}, which is not a WebSocket URL"
        )),
    }
}

/// The run's URL labelled with `?probe=NAME` and checked, as its protocol
/// takes it: `http://` and `https://` for SSE (an event stream is an
/// HTTP resource) and for Socket.IO (whose clients are given `http://`
/// URLs; it then upgrades from `ws://`), `ws://` and `wss://` otherwise.
pub(crate) fn labelled_url(config: &ProbeConfig) -> Result<String, crate::error::ProbeError> {
    let (scheme, rest) = config.url.split_once("://").unwrap_or(("", &config.url));
    let scheme = scheme.to_ascii_lowercase();
    let http = matches!(scheme.as_str(), "http" | "https");
    match (&config.protocol, http) {
        (Protocol::Sse { .. }, false) => Err(crate::error::ProbeError::Url {
            url: request::redacted(&config.url),
            reason: "an event stream (--protocol sse) is an http:// or https:// URL, like http://server:8000/events".into(),
        }),
        (Protocol::Sse { .. }, true) => {
            // Checked and labelled as its WebSocket twin, then given back its scheme.
            let twin = format!("{}://{rest}", if scheme == "https" { "wss" } else { "ws" });
            let labelled = request::labelled_url(&twin, &config.name).map_err(|e| match e {
                crate::error::ProbeError::Url { reason, .. } => crate::error::ProbeError::Url {
                    url: request::redacted(&config.url),
                    reason,
                },
                other => other,
            })?;
            Ok(format!("{scheme}{}", &labelled[labelled.find("://").unwrap_or(0)..]))
        }
        (Protocol::SocketIo { .. }, true) => {
            let twin = format!("{}://{rest}", if scheme == "https" { "wss" } else { "ws" });
            request::labelled_url(&twin, &config.name)
        }
        _ => request::labelled_url(&config.url, &config.name),
    }
}

/// A Socket.IO server's WebSocket URL: its path (`/socket.io/` when the
/// URL gives none) and Engine.IO's query, `EIO=4&transport=websocket`.
pub(crate) fn socketio_url(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("ws", url));
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let tail = tail.split('#').next().unwrap_or("");
    let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
    let path = if path.is_empty() || path == "/" {
        skewscope_core::socketio::DEFAULT_PATH
    } else {
        path
    };
    let mut query = query.to_owned();
    if !query.split('&').any(|p| p.starts_with("EIO=")) {
        if !query.is_empty() && !query.ends_with('&') {
            query.push('&');
        }
        query.push_str(skewscope_core::socketio::ENGINE_IO_QUERY);
    }
    format!("{scheme}://{authority}{path}?{query}")
}

/// `host:port` of a URL, for telling whether a redirect leaves the server.
pub(crate) fn origin(url: &str) -> String {
    request::host_port(url)
        .map(|(h, p)| format!("{h}:{p}"))
        .unwrap_or_default()
}

/// An upgrade that failed without an HTTP answer: looks at what the port
/// says to a plain request, to tell a TLS port (the URL should be `wss://`)
/// or something that is not HTTP from a server that just closed.
async fn diagnose(url: &str, host: &str, port: u16, error: WsError) -> String {
    let shown = request::redacted(url);
    let first = async {
        let mut stream = TcpStream::connect((host, port)).await.ok()?;
        let request = format!(
            "GET / HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut buf = [0u8; 64];
        let n = stream.read(&mut buf).await.ok()?;
        Some(buf[..n].to_vec())
    };
    let answer = tokio::time::timeout(SNIFF_TIMEOUT, first)
        .await
        .ok()
        .flatten()
        .unwrap_or_default();
    match answer.first() {
        // TLS records: 0x15 alert, 0x16 handshake; then version 3.x.
        Some(0x15 | 0x16) if answer.get(1) == Some(&3) && !request::is_tls(url) => {
            format!("{shown}: the server answered in TLS: use wss:// ({error})")
        }
        _ if request::is_tls(url) => {
            let hint = if error.to_string().contains("UnknownIssuer") {
                "; for a private CA give --ca-file"
            } else if answer.first().is_some_and(|&b| b != 0x15 && b != 0x16) {
                "; the port answers in plain text: is the URL ws://?"
            } else {
                ""
            };
            format!("{shown}: TLS failed: {error}{hint}")
        }
        Some(_) => format!(
            "{shown}: the server's answer is not an HTTP upgrade: {} ({error})",
            printable(&answer)
        ),
        // Some TLS servers say nothing to plain text: try TLS itself.
        None if !request::is_tls(url) && speaks_tls(url, host, port).await => {
            format!("{shown}: the server answered in TLS: use wss:// ({error})")
        }
        None => format!("{shown}: {error}"),
    }
}

/// Whether the port completes a TLS handshake (certificates unchecked: this
/// only asks what the port speaks).
async fn speaks_tls(url: &str, host: &str, port: u16) -> bool {
    let Ok((config, _)) = client_config(&Trust::Nothing) else {
        return false;
    };
    let Ok(tcp) = TcpStream::connect((host, port)).await else {
        return false;
    };
    let wss = format!("wss://{}", url.split_once("://").map_or(url, |(_, r)| r));
    let attempt = tokio_tungstenite::client_async_tls_with_config(
        wss,
        tcp,
        None,
        Some(Connector::Rustls(config)),
    );
    match tokio::time::timeout(SNIFF_TIMEOUT, attempt).await {
        // TLS worked; whatever came next (an upgrade or a refusal) was inside it.
        Ok(Ok(_)) => true,
        Ok(Err(WsError::Tls(_) | WsError::Io(_))) | Err(_) => false,
        Ok(Err(_)) => true,
    }
}

/// Bytes as text a person can read: printable ASCII kept, the rest `\xNN`.
pub(crate) fn printable(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| {
            if b.is_ascii_graphic() || b == b' ' {
                char::from(b).to_string()
            } else {
                format!("\\x{b:02x}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirects_resolve_like_a_browser() {
        let from = "ws://a:1/x/ws?probe=p";
        for (location, want) in [
            ("ws://b:2/ws", Ok("ws://b:2/ws".to_owned())),
            ("http://b:2/ws", Ok("ws://b:2/ws".to_owned())),
            ("/other", Ok("ws://a:1/other".to_owned())),
            ("//c:3/ws", Ok("ws://c:3/ws".to_owned())),
            ("next", Ok("ws://a:1/x/next".to_owned())),
        ] {
            assert_eq!(redirect_target(from, location), want, "{location}");
        }
        assert_eq!(
            redirect_target(from, "https://b/ws"),
            Ok("wss://b/ws".to_owned())
        );
        assert_eq!(
            redirect_target("wss://a/x", "/y"),
            Ok("wss://a/y".to_owned())
        );
        let err = redirect_target(from, "ftp://b/x").unwrap_err();
        assert!(err.contains("ftp://b/x"), "{err}");
    }

    #[test]
    fn socketio_urls_get_engine_ios_path_and_query() {
        for (url, want) in [
            (
                "ws://h:1?probe=p",
                "ws://h:1/socket.io/?probe=p&EIO=4&transport=websocket",
            ),
            (
                "ws://h:1/?probe=p",
                "ws://h:1/socket.io/?probe=p&EIO=4&transport=websocket",
            ),
            (
                "wss://h/app/socket.io/?probe=p",
                "wss://h/app/socket.io/?probe=p&EIO=4&transport=websocket",
            ),
            (
                "ws://h/socket.io/?EIO=4&transport=websocket&probe=p",
                "ws://h/socket.io/?EIO=4&transport=websocket&probe=p",
            ),
        ] {
            assert_eq!(socketio_url(url), want, "{url}");
        }
    }

    #[test]
    fn each_protocol_takes_its_own_urls() {
        let config = |url: &str, protocol: Protocol| ProbeConfig {
            name: "p".into(),
            protocol,
            ..ProbeConfig::new(url, "/tmp/x.sklog")
        };
        let sse = Protocol::Sse { events: Vec::new() };
        assert_eq!(
            labelled_url(&config("http://h:8000/events?x=1", sse.clone())).unwrap(),
            "http://h:8000/events?x=1&probe=p"
        );
        assert_eq!(
            labelled_url(&config("https://h/events", sse.clone())).unwrap(),
            "https://h/events?probe=p"
        );
        let err = labelled_url(&config("ws://h/events", sse)).unwrap_err();
        assert!(err.to_string().contains("http://"), "{err}");
        let socketio = Protocol::SocketIo {
            namespace: "/".into(),
            events: Vec::new(),
        };
        assert_eq!(
            labelled_url(&config("http://h:5000", socketio)).unwrap(),
            "ws://h:5000?probe=p"
        );
        assert!(labelled_url(&config("http://h:5000", Protocol::Ws)).is_err());
    }

    #[test]
    fn odd_bytes_are_shown_escaped() {
        assert_eq!(printable(b"\x15\x03\x03ok "), "\\x15\\x03\\x03ok ");
    }
}
