//! Accepting connections and answering HTTP: one tokio task per connection until
//! it is either answered and closed, or upgraded and handed to a shard.
//! [`http`] parses and writes HTTP/1.1 heads; [`upgrade`] is the WebSocket
//! handshake.

pub mod audit;
pub mod http;
pub mod upgrade;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::engine::hub::{Broadcasted, Hub};
use crate::engine::shard::NewClient;
use crate::metrics;
use crate::server::http::{HeadError, Request, read_head, respond, respond_bytes};
use crate::server::upgrade::{UpgradeError, accept};

/// What every request handler needs.
pub struct Context {
    /// The fan-out engine.
    pub hub: Arc<Hub>,
    /// Bearer token required by `/publish`, `/start_test`, `/ingest` and
    /// `/audit/…`, if any.
    pub token: Option<String>,
    /// Largest `/publish` body.
    pub max_publish: usize,
    /// Body bytes all `/publish` requests in flight may hold together.
    pub publish_budget: Arc<tokio::sync::Semaphore>,
    /// The budget's size, so `/healthz` can say how much of it is held.
    pub publish_budget_bytes: usize,
    /// Most WebSocket clients at once (`--max-clients`).
    pub max_clients: Option<usize>,
    /// Subprotocols the hub answers (`--subprotocol`).
    pub subprotocols: Vec<String>,
    /// Records the recorder could not write (a full disk), so far.
    pub records_lost: Arc<std::sync::atomic::AtomicU64>,
    /// What `/metrics` renders.
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Bearer token `/metrics` requires (`--metrics-token-file`), if any.
    pub metrics_token: Option<String>,
    /// Upgrades refused for `--max-clients`.
    pub refused_clients: std::sync::atomic::AtomicU64,
    /// Time allowed for a request head or body to arrive.
    pub request_timeout: Duration,
    /// The time port's counters, when it runs.
    pub time: Option<Arc<crate::time_port::TimeCounters>>,
    /// Uploaded probe runs (`/ingest`).
    pub ingest: Arc<crate::ingest::IngestStore>,
    /// The thread that checks and stores uploads.
    pub ingest_worker: crate::ingest::Worker,
    /// This run and its data directory, for `/audit/…`.
    pub audit: audit::AuditSource,
    /// Connections whose request head has not arrived yet, at most
    /// `--max-pending` (one permit each).
    pub pending: Arc<tokio::sync::Semaphore>,
    /// Connections turned away because too many were pending.
    pub refused_pending: std::sync::atomic::AtomicU64,
}

/// Accepts until `stop` turns true.
pub async fn serve(listener: TcpListener, context: Arc<Context>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((mut stream, peer)) => {
                    let context = context.clone();
                    let Ok(permit) = context.pending.clone().try_acquire_owned() else {
                        // Connections that never send a request must not
                        // use up the open files everyone else needs.
                        let refused = context
                            .refused_pending
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if refused.is_power_of_two() {
                            eprintln!(
                                "skewscope-agent: too many connections without a request yet (--max-pending); refused {} so far",
                                refused + 1
                            );
                        }
                        tokio::spawn(async move {
                            respond(&mut stream, 503, "Retry-After: 1\r\n", "too many pending connections\n").await
                        });
                        continue;
                    };
                    tokio::spawn(async move { handle(stream, peer, permit, &context).await });
                }
                // Out of file descriptors or a connection reset before accept:
                // back off briefly and keep serving everyone else.
                Err(e) => {
                    eprintln!("skewscope-agent: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = stop.changed() => return,
        }
    }
}

async fn handle(
    mut stream: TcpStream,
    peer: SocketAddr,
    pending: tokio::sync::OwnedSemaphorePermit,
    context: &Context,
) {
    let head = read_head(&mut stream, context.request_timeout).await;
    // Its request is here (or never will be): no longer pending.
    drop(pending);
    let request = match head {
        Ok(r) => r,
        Err(HeadError::Closed) => return,
        Err(e @ HeadError::Malformed(_)) => {
            return respond(&mut stream, 400, "", &format!("{e}\n")).await;
        }
        Err(e @ HeadError::TooLarge) => {
            return respond(&mut stream, 431, "", &format!("{e}\n")).await;
        }
        Err(e @ HeadError::Timeout) => {
            return respond(&mut stream, 408, "", &format!("{e}\n")).await;
        }
    };
    match (request.method.as_str(), request.path.as_str()) {
        (_, "/ws") => upgrade(stream, peer, request, context).await,
        (_, "/ingest") => {
            if authorized(&mut stream, &request, context).await {
                ingest(stream, request, context).await
            } else {
                context.ingest.counters.reject("token");
            }
        }
        ("GET", "/healthz") => respond(&mut stream, 200, "", &health(context)).await,
        ("GET", "/metrics") => {
            if authorized_by(&mut stream, &request, context.metrics_token.as_deref()).await {
                let text = context.metrics.render();
                respond_bytes(&mut stream, 200, metrics::CONTENT_TYPE, "", text.as_bytes()).await;
            }
        }
        ("POST", "/publish") => {
            if authorized(&mut stream, &request, context).await {
                publish(stream, request, context).await
            }
        }
        ("GET" | "POST", "/start_test") => {
            if authorized(&mut stream, &request, context).await {
                let sent = context.hub.start_test().await;
                respond(&mut stream, 200, "", &outcome_json(sent)).await
            }
        }
        ("GET", "/audit/status") => {
            if authorized(&mut stream, &request, context).await {
                audit::status(&mut stream, context).await
            }
        }
        ("GET", "/audit/log") => {
            if authorized(&mut stream, &request, context).await {
                audit::log(&mut stream, &request, context).await
            }
        }
        (
            _,
            "/healthz" | "/metrics" | "/publish" | "/start_test" | "/audit/status" | "/audit/log",
        ) => respond(&mut stream, 405, "", "method not allowed\n").await,
        _ => {
            respond(
                &mut stream,
                404,
                "",
                "not found; try /ws, /publish, /start_test, /healthz, /ingest or /audit/status\n",
            )
            .await
        }
    }
}

async fn upgrade(mut stream: TcpStream, peer: SocketAddr, request: Request, context: &Context) {
    if context
        .max_clients
        .is_some_and(|most| context.hub.clients() >= most)
    {
        context
            .refused_clients
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return respond(
            &mut stream,
            503,
            "Retry-After: 5\r\n",
            "the hub is at --max-clients; try again later\n",
        )
        .await;
    }
    let conn = context.hub.next_connection_id();
    let accepted = match accept(&request, conn, &context.subprotocols, context.hub.deflate()) {
        Ok(r) => r,
        Err(UpgradeError::Version) => {
            return respond(
                &mut stream,
                426,
                "Sec-WebSocket-Version: 13\r\n",
                "WebSocket version 13 required\n",
            )
            .await;
        }
        Err(e) => return respond(&mut stream, 400, "", &format!("{e}\n")).await,
    };
    if tokio::io::AsyncWriteExt::write_all(&mut stream, accepted.response.as_bytes())
        .await
        .is_err()
    {
        return; // vanished during the handshake
    }
    // Latency is the point: never let Nagle hold a broadcast frame back.
    let _ = stream.set_nodelay(true);
    let Ok(std_stream) = stream.into_std() else {
        return;
    };
    if let Err(e) = detect_vanished_peers(&std_stream) {
        eprintln!("skewscope-agent: cannot set keepalive on {peer}: {e}");
    }
    let label = request.query_param("probe").map(sanitize_label);
    context.hub.attach(
        NewClient {
            id: conn,
            stream: std_stream,
            leftover: request.rest,
            deflate: accepted.deflate,
            probe: label.is_some(),
        },
        label,
        peer.to_string(),
        accepted.subprotocol,
    );
}

/// Upgrades an `/ingest` request and hands the connection to the ingest
/// session (on this task: uploads never touch the fan-out shards).
async fn ingest(mut stream: TcpStream, request: Request, context: &Context) {
    let response = match accept(&request, 0, &[], false) {
        Ok(r) => r.response,
        Err(e) => {
            context.ingest.counters.reject("handshake");
            return respond(&mut stream, 400, "", &format!("{e}\n")).await;
        }
    };
    if tokio::io::AsyncWriteExt::write_all(&mut stream, response.as_bytes())
        .await
        .is_err()
    {
        return;
    }
    crate::ingest::serve(
        stream,
        request.rest,
        context.ingest.clone(),
        context.ingest_worker.clone(),
        context.hub.quiet(),
    )
    .await;
}

/// TCP keepalive probes after this long without traffic...
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
/// ...this far apart...
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// ...this many before the connection is given up.
const KEEPALIVE_PROBES: u32 = 3;
/// Sent data unacknowledged this long ends the connection too.
const UNACKED_TIMEOUT: Duration = Duration::from_secs(60);

/// A device that vanished without closing (power cut, Wi-Fi gone) is found
/// out: an idle connection within 30 s + 3 × 10 s of keepalive probes, one
/// with unacknowledged broadcasts within 60 s. The socket then fails, and
/// the shard closes the client and records why.
fn detect_vanished_peers(stream: &std::net::TcpStream) -> std::io::Result<()> {
    let socket = socket2::SockRef::from(stream);
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_PROBES);
    socket.set_tcp_keepalive(&keepalive)?;
    socket.set_tcp_user_timeout(Some(UNACKED_TIMEOUT))
}

/// Keeps labels printable and short: they end up in logs and reports.
fn sanitize_label(raw: &str) -> String {
    raw.chars()
        .filter(|c| c.is_ascii_graphic())
        .take(64)
        .collect()
}

async fn authorized(stream: &mut TcpStream, request: &Request, context: &Context) -> bool {
    authorized_by(stream, request, context.token.as_deref()).await
}

/// Whether the request carries `token` (any request does when it is
/// `None`); answers 401 when it does not.
async fn authorized_by(stream: &mut TcpStream, request: &Request, token: Option<&str>) -> bool {
    let Some(token) = token else {
        return true;
    };
    let given = request
        .header("authorization")
        .and_then(bearer_token)
        .unwrap_or("");
    if constant_time_eq(given.as_bytes(), token.as_bytes()) {
        return true;
    }
    respond(
        stream,
        401,
        "WWW-Authenticate: Bearer\r\n",
        "missing or wrong bearer token\n",
    )
    .await;
    false
}

/// Compares without an early exit, so response timing does not leak the token.
/// The token of an `Authorization: Bearer TOKEN` value; the scheme name
/// is case-insensitive (RFC 7235 §2.1).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// Compares `given` with `token` in a time that depends only on what was
/// given: neither where they differ nor the token's length shows.
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

async fn publish(mut stream: TcpStream, request: Request, context: &Context) {
    if request.header("transfer-encoding").is_some() {
        return respond(&mut stream, 411, "", "send the body with Content-Length\n").await;
    }
    let lengths: Vec<&str> = request
        .headers
        .iter()
        .filter(|(n, _)| n == "content-length")
        .map(|(_, v)| v.trim())
        .collect();
    let len = match lengths.as_slice() {
        [] => return respond(&mut stream, 411, "", "Content-Length required\n").await,
        // Digits only: "+5", "-1" and "0x10" are what request smuggling uses.
        [one] if !one.is_empty() && one.bytes().all(|b| b.is_ascii_digit()) => {
            match one.parse::<usize>() {
                Ok(len) => len,
                Err(_) => return respond(&mut stream, 413, "", "Content-Length too large\n").await,
            }
        }
        [_] => {
            return respond(&mut stream, 400, "", "Content-Length must be digits only\n").await;
        }
        _ => return respond(&mut stream, 400, "", "more than one Content-Length\n").await,
    };
    if len > context.max_publish {
        let msg = format!(
            "body of {len} bytes exceeds --max-publish {}\n",
            context.max_publish
        );
        return respond(&mut stream, 413, "", &msg).await;
    }
    // Held for the body's whole life: what requests in flight announced
    // never adds up past the budget, whatever they announce.
    let Ok(_held) = context
        .publish_budget
        .clone()
        .try_acquire_many_owned(u32::try_from(len).unwrap_or(u32::MAX))
    else {
        return respond(
            &mut stream,
            503,
            "Retry-After: 1\r\n",
            "too many /publish bodies in flight; try again\n",
        )
        .await;
    };
    let mut body = request.rest;
    body.truncate(len);
    if body.len() < len {
        // Grows with what arrives: nothing is reserved for bytes not sent.
        let missing = (len - body.len()) as u64;
        let read = tokio::time::timeout(
            context.request_timeout,
            (&mut stream).take(missing).read_to_end(&mut body),
        )
        .await;
        match read {
            Ok(Ok(_)) if body.len() == len => {}
            Ok(_) => return, // vanished mid-body: nothing is broadcast
            Err(_) => return respond(&mut stream, 408, "", "request body timed out\n").await,
        }
    }
    let sent = context.hub.publish(&body).await;
    respond(&mut stream, 200, "", &outcome_json(sent)).await
}

fn health(context: &Context) -> String {
    let time = match &context.time {
        Some(t) => {
            let c = t.snapshot();
            format!(
                "{{\"answered\":{},\"malformed\":{},\"oversized\":{},\"replayed\":{}}}",
                c.answered, c.malformed, c.oversized, c.replayed
            )
        }
        None => "null".into(),
    };
    format!(
        "{{\"status\":\"ok\",\"clients\":{},\"deflate_clients\":{},\"refused_clients\":{},\"refused_pending\":{},\"publish_bytes_in_flight\":{},\"records_lost\":{},\"time\":{time},\"ingest\":{}}}\n",
        context.hub.clients(),
        context.hub.deflate_clients(),
        context
            .refused_clients
            .load(std::sync::atomic::Ordering::Relaxed),
        context
            .refused_pending
            .load(std::sync::atomic::Ordering::Relaxed),
        context
            .publish_budget_bytes
            .saturating_sub(context.publish_budget.available_permits()),
        context
            .records_lost
            .load(std::sync::atomic::Ordering::Relaxed),
        crate::ingest::health_json(&context.ingest)
    )
}

fn outcome_json(sent: Broadcasted) -> String {
    match sent.seq {
        Some(seq) => format!(
            "{{\"broadcast\":{},\"seq\":{seq},\"clients\":{}}}\n",
            sent.id, sent.clients
        ),
        None => format!(
            "{{\"broadcast\":{},\"clients\":{}}}\n",
            sent.id, sent.clients
        ),
    }
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

    #[test]
    fn clients_sockets_find_out_a_vanished_peer() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        detect_vanished_peers(&server).unwrap();
        let s = socket2::SockRef::from(&server);
        assert!(s.keepalive().unwrap());
        assert_eq!(s.tcp_keepalive_time().unwrap(), KEEPALIVE_IDLE);
        assert_eq!(s.tcp_keepalive_interval().unwrap(), KEEPALIVE_INTERVAL);
        assert_eq!(s.tcp_keepalive_retries().unwrap(), KEEPALIVE_PROBES);
        assert_eq!(s.tcp_user_timeout().unwrap(), Some(UNACKED_TIMEOUT));
    }

    #[test]
    fn labels_are_printable_and_short() {
        assert_eq!(sanitize_label("dev 1\x07"), "dev1");
        assert_eq!(sanitize_label(&"x".repeat(100)).len(), 64);
    }
}
