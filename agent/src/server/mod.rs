//! Accepting connections and answering HTTP: one tokio task per connection until
//! it is either answered and closed, or upgraded and handed to a shard.
//! Under `--tls-cert` each connection's TLS handshake comes first, within
//! the request timeout, and every handler then serves a [`conn::Conn`].
//! [`http`] parses and writes HTTP/1.1 heads; [`upgrade`] is the WebSocket
//! handshake; [`context`] what every handler is handed; [`auth`] the bearer
//! tokens; [`publish`], [`audit`] and [`sweep`] their endpoints.

pub mod audit;
pub mod auth;
pub mod body;
pub mod clock;
pub mod close_frame;
pub mod conn;
pub mod context;
pub mod http;
pub mod publish;
pub mod sweep;
pub mod upgrade;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::engine::shard::NewClient;
use crate::exposition::Exposition;
use crate::server::auth::authorized_by;
use crate::server::conn::Conn;
use crate::server::context::Context;
use crate::server::http::{HeadError, Request, read_head, respond, respond_bytes};
use crate::server::publish::{outcome_json, publish};
use crate::server::upgrade::{UpgradeError, accept};

/// Accepts until `stop` turns true.
pub async fn serve(listener: TcpListener, context: Arc<Context>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let context = context.clone();
                    let Ok(permit) = context.pending.clone().try_acquire_owned() else {
                        // Connections that never send a request must not
                        // use up the open files everyone else needs.
                        let refused = context.counters.clients.refused_pending.inc();
                        if refused.is_power_of_two() {
                            tracing::warn!(
                                target: "agent::server",
                                "too many connections without a request yet (--max-pending); refused {} so far",
                                refused + 1
                            );
                        }
                        // Said in clear even under TLS: a handshake is the
                        // work this refusal saves.
                        tokio::spawn(async move {
                            respond(&mut Conn::Plain(stream), 503, "Retry-After: 1\r\n", "too many pending connections\n").await
                        });
                        continue;
                    };
                    tokio::spawn(async move { handle(stream, peer, permit, &context).await });
                }
                // Out of file descriptors or a connection reset before accept:
                // back off briefly and keep serving everyone else.
                Err(e) => {
                    tracing::warn!(target: "agent::server", "accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            _ = stop.changed() => return,
        }
    }
}

/// The clock module for pages (`clients/js/skewscope-clock.js`), served at
/// `GET /skewscope-clock.js`: the same bytes as in the repository.
pub const CLOCK_MODULE: &str = include_str!("../../../clients/js/skewscope-clock.js");

/// The browser probe (`clients/js/probe/`), served at `GET /probe`,
/// `/probe.js` and `/probe.css`: nothing a page loads comes from elsewhere.
pub const PROBE_PAGE: &str = include_str!("../../../clients/js/probe/probe.html");
/// The browser probe's script.
pub const PROBE_SCRIPT: &str = include_str!("../../../clients/js/probe/probe.js");
/// The browser probe's style sheet.
pub const PROBE_STYLE: &str = include_str!("../../../clients/js/probe/probe.css");

/// What the probe page may do: scripts and styles from the agent only,
/// WebSockets anywhere (the broadcast server is another host), nothing else.
/// Cross-origin isolation (COOP + COEP) gives its clock 5 µs steps in
/// Chromium rather than 100 µs.
const PROBE_HEADERS: &str = "Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self' ws: wss:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'\r\nCross-Origin-Opener-Policy: same-origin\r\nCross-Origin-Embedder-Policy: require-corp\r\nCross-Origin-Resource-Policy: same-origin\r\nCache-Control: no-cache\r\n";

async fn handle(
    tcp: TcpStream,
    peer: SocketAddr,
    pending: tokio::sync::OwnedSemaphorePermit,
    context: &Context,
) {
    let Some(mut stream) = secure(tcp, context).await else {
        return;
    };
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
    if let Some(known) = parameters_of(&request.path)
        && let Err(msg) = request.check_query(known)
    {
        refused_query(&request.path, peer, &msg);
        return respond(&mut stream, 400, "", &msg).await;
    }
    match (request.method.as_str(), request.path.as_str()) {
        (_, "/ws") => upgrade(stream, peer, request, context).await,
        (_, "/clock") => clock(stream, request, context).await,
        (_, "/ingest") => {
            if authorized(&mut stream, &request, context).await {
                ingest(stream, request, context).await
            } else {
                context.counters.ingest.reject("token");
            }
        }
        ("GET", "/skewscope-clock.js") => {
            // A page loads it from the server it already talks to: a module
            // from another origin needs CORS.
            respond_bytes(
                &mut stream,
                200,
                "text/javascript; charset=utf-8",
                "Access-Control-Allow-Origin: *\r\nCache-Control: no-cache\r\n",
                CLOCK_MODULE.as_bytes(),
            )
            .await
        }
        ("GET", path @ ("/probe" | "/probe.js" | "/probe.css")) => {
            let (content_type, body) = match path {
                "/probe" => ("text/html; charset=utf-8", PROBE_PAGE),
                "/probe.js" => ("text/javascript; charset=utf-8", PROBE_SCRIPT),
                _ => ("text/css; charset=utf-8", PROBE_STYLE),
            };
            respond_bytes(&mut stream, 200, content_type, PROBE_HEADERS, body.as_bytes()).await
        }
        ("GET", "/healthz") => {
            let health = serde_json::to_string(&context.counters.snapshot())
                .expect("the snapshot serialises")
                + "\n";
            respond(&mut stream, 200, "", &health).await
        }
        ("GET", "/metrics") => {
            let ok = authorized_by(&mut stream, &request, context.metrics_token.as_deref()).await;
            if !ok {
                context.counters.unauthorized(&request.path);
            }
            if ok {
                // A stuck shard shows in the scrape even without systemd's
                // watchdog, which otherwise runs this check.
                let stuck = context
                    .hub
                    .shards_stuck(skewscope_os::clock::mono_ns(), crate::engine::shard::SHARD_STUCK_AFTER);
                context.counters.shards_stuck.set(stuck as i64);
                let format = Exposition::negotiate(request.header("accept"));
                let text = format.render(context.metrics.render());
                respond_bytes(&mut stream, 200, format.content_type(), "", text.as_bytes()).await;
            }
        }
        ("POST", "/publish") => {
            if authorized(&mut stream, &request, context).await {
                publish(stream, request, context).await
            }
        }
        ("GET" | "POST", "/start_test") => {
            if authorized(&mut stream, &request, context).await {
                let lead = match publish::lead_param(&request, context.auto_lead.now()) {
                    Ok(lead) => lead,
                    Err(msg) => return respond(&mut stream, 400, "", &msg).await,
                };
                let sent = context
                    .hub
                    .start_test(lead.as_ref().map(|l| l.duration))
                    .await;
                let Some(lead) = lead else {
                    return respond(&mut stream, 200, "", &outcome_json(sent)).await;
                };
                for record in lead.records(sent.id) {
                    context.hub.record(record);
                }
                context.auto_lead.given(lead.auto.as_ref());
                let mut out: serde_json::Value =
                    serde_json::from_str(&outcome_json(sent)).expect("our own JSON");
                lead.describe(&mut out);
                respond(&mut stream, 200, "", &(out.to_string() + "\n")).await
            }
        }
        ("GET", "/audit/status") => {
            if authorized(&mut stream, &request, context).await {
                let hub = &context.hub;
                let status = audit::Now {
                    clients: hub.clients(),
                    broadcasts: hub.broadcasts(),
                    probes: context.ingest.runs(),
                };
                audit::status(&mut stream, &context.audit, status).await
            }
        }
        ("GET", "/audit/log") => {
            if authorized(&mut stream, &request, context).await {
                audit::log(&mut stream, &request, &context.audit).await
            }
        }
        (method @ ("GET" | "PUT" | "POST" | "DELETE"), path @ ("/sweep" | "/sweep/plan" | "/sweep/worker"))
            if matches!(
                (method, path),
                ("GET", "/sweep") | ("PUT" | "DELETE", "/sweep/plan") | ("POST", "/sweep/worker")
            ) =>
        {
            if authorized(&mut stream, &request, context).await {
                match (method, path) {
                    ("GET", _) => sweep::view(&mut stream, context).await,
                    ("PUT", _) => sweep::pin_plan(stream, request, context).await,
                    ("DELETE", _) => sweep::take_down_plan(&mut stream, context).await,
                    _ => sweep::report(stream, request, context).await,
                }
            }
        }
        (
            _,
            path @ ("/healthz" | "/metrics" | "/skewscope-clock.js" | "/probe" | "/probe.js"
            | "/probe.css" | "/publish" | "/start_test" | "/audit/status" | "/audit/log"
            | "/sweep" | "/sweep/plan" | "/sweep/worker"),
        ) => {
            let allowed = match path {
                "/publish" | "/sweep/worker" => "POST",
                "/sweep/plan" => "PUT or DELETE",
                "/start_test" => "GET or POST",
                _ => "GET",
            };
            let body = if path == "/publish" {
                ", with the message to broadcast as its body"
            } else {
                ""
            };
            let msg = format!("method not allowed: {path} takes {allowed}{body}\n");
            let header = format!("Allow: {}\r\n", allowed.replace(" or ", ", "));
            respond(&mut stream, 405, &header, &msg).await
        }
        _ => {
            respond(
                &mut stream,
                404,
                "",
                "not found; try /ws, /clock, /skewscope-clock.js, /probe, /publish, /start_test, /healthz, /metrics, /ingest, /audit/status or /sweep\n",
            )
            .await
        }
    }
}

/// The query parameters each endpoint takes (`None`: no such endpoint).
/// Anything else in a query is refused with this list
/// ([`Request::check_query`]): a typo must not go unnoticed.
pub fn parameters_of(path: &str) -> Option<&'static [&'static str]> {
    Some(match path {
        "/ws" => &["probe"],
        "/publish" => &["lead", "pointer", "unit"],
        "/start_test" => &["lead"],
        "/audit/log" => &["name", "from"],
        // Read by the page's script, not by the agent.
        "/probe" => &[
            "url",
            "name",
            "act-at",
            "act-unit",
            "connections",
            "token",
            "spin-ms",
            "new-run",
        ],
        "/clock"
        | "/ingest"
        | "/healthz"
        | "/metrics"
        | "/skewscope-clock.js"
        | "/probe.js"
        | "/probe.css"
        | "/audit/status"
        | "/sweep"
        | "/sweep/plan"
        | "/sweep/worker" => &[],
        _ => return None,
    })
}

/// Says in the agent's log that a request was refused for its query, where
/// its client may not show the answer (a browser's WebSocket shows no
/// body): the first time and then at each power of two.
fn refused_query(path: &str, peer: SocketAddr, why: &str) {
    static REFUSED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = REFUSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        tracing::warn!(
            target: "agent::server",
            "refused {path} from {peer} (answered 400; {n} so far): {}",
            why.trim_end()
        );
    }
}

/// The connection as its handlers serve it: under TLS once its handshake
/// is done (`None` when it fails or times out, counted), else as it is.
async fn secure(tcp: TcpStream, context: &Context) -> Option<Conn> {
    let Some(tls) = &context.tls else {
        return Some(Conn::Plain(tcp));
    };
    let (stamped, last_rx) = skewscope_os::rx_stamp::RxStamped::new(tcp);
    let handshake = tls.acceptor().accept(stamped);
    match tokio::time::timeout(context.request_timeout, handshake).await {
        Ok(Ok(stream)) => Some(Conn::Tls(Box::new(stream), last_rx)),
        failed => {
            context.counters.tls_handshakes_failed.inc();
            if let Ok(Err(e)) = failed {
                tracing::debug!(target: "agent::server", "TLS handshake failed: {e}");
            }
            None
        }
    }
}

/// Writes all of `bytes` and flushes them (under TLS a write may leave
/// records in the session); false when the peer is gone.
async fn send_all(stream: &mut Conn, bytes: &[u8]) -> bool {
    use tokio::io::AsyncWriteExt;
    stream.write_all(bytes).await.is_ok() && stream.flush().await.is_ok()
}

async fn upgrade(mut stream: Conn, peer: SocketAddr, request: Request, context: &Context) {
    if context
        .max_clients
        .is_some_and(|most| context.hub.clients() >= most)
    {
        context.counters.clients.refused_max_clients.inc();
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
    if !send_all(&mut stream, accepted.response.as_bytes()).await {
        return; // vanished during the handshake
    }
    let (tcp, tls) = stream.into_parts();
    // Latency is the point: never let Nagle hold a broadcast frame back.
    let _ = tcp.set_nodelay(true);
    let Ok(std_stream) = tcp.into_std() else {
        return;
    };
    if let Err(e) = skewscope_os::sockets::detect_vanished_peers(&std_stream) {
        tracing::warn!(target: "agent::server", "cannot set keepalive on {peer}: {e}");
    }
    let label = request.query_param("probe").as_deref().map(sanitize_label);
    context.hub.attach(
        NewClient {
            id: conn,
            stream: std_stream,
            leftover: request.rest,
            deflate: accepted.deflate,
            probe: label.is_some(),
            tls,
        },
        label,
        peer.to_string(),
        accepted.subprotocol,
    );
}

/// Upgrades a `/clock` request and serves the time exchange on this task
/// (never on the fan-out shards), at most `--max-clock-sessions` at once.
async fn clock(mut stream: Conn, request: Request, context: &Context) {
    let Ok(_session) = context.clock_sessions.clone().try_acquire_owned() else {
        context.counters.clock.refused_full.inc();
        return respond(
            &mut stream,
            503,
            "Retry-After: 5\r\n",
            "too many /clock sessions; try again later\n",
        )
        .await;
    };
    // A page offers `skewscope-ingest` (and may carry its token as another
    // subprotocol): a browser fails a handshake that offered protocols and
    // got none back.
    let response = match accept(&request, 0, &["skewscope-ingest".to_owned()], false) {
        Ok(r) => r.response,
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
    if !send_all(&mut stream, response.as_bytes()).await {
        return;
    }
    let _ = stream.tcp().set_nodelay(true);
    clock::serve(
        stream,
        request.rest,
        context.counters.clock.clone(),
        context.time_key.clone(),
    )
    .await;
}

/// Upgrades an `/ingest` request and hands the connection to the ingest
/// session (on this task: uploads never touch the fan-out shards).
async fn ingest(mut stream: Conn, request: Request, context: &Context) {
    // A page offers `skewscope-ingest` (and may carry its token as another
    // subprotocol): a browser fails a handshake that offered protocols and
    // got none back.
    let response = match accept(&request, 0, &["skewscope-ingest".to_owned()], false) {
        Ok(r) => r.response,
        Err(e) => {
            context.counters.ingest.reject("handshake");
            return respond(&mut stream, 400, "", &format!("{e}\n")).await;
        }
    };
    if !send_all(&mut stream, response.as_bytes()).await {
        return;
    }
    crate::ingest::serve(
        stream,
        request.rest,
        context.ingest.clone(),
        context.ingest_worker.clone(),
        context.quiet.clone(),
    )
    .await;
}

async fn authorized(stream: &mut Conn, request: &Request, context: &Context) -> bool {
    let ok = authorized_by(stream, request, context.token.as_deref()).await;
    if !ok {
        context.counters.unauthorized(&request.path);
    }
    ok
}

/// Keeps labels printable and short: they end up in logs and reports.
fn sanitize_label(raw: &str) -> String {
    raw.chars()
        .filter(|c| c.is_ascii_graphic())
        .take(64)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_printable_and_short() {
        assert_eq!(sanitize_label("dev 1\x07"), "dev1");
        assert_eq!(sanitize_label(&"x".repeat(100)).len(), 64);
    }
}
