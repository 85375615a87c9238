//! One probe connection, from connect to close: dial (through the handshake
//! gate), open the protocol riding on it (`--protocol`), stamp and record
//! every payload, and close cleanly.

mod event_source;
mod link;

use std::sync::Arc;
use std::time::Duration;

use skewscope_core::Stamp;
use skewscope_core::control_rate::{CONTROL_BURST, CONTROL_PER_SECOND, ControlRate};
use skewscope_core::identity::Identifier;
use skewscope_core::record::{
    ConnectionAddresses, ConnectionDeflate, ConnectionTls, MessagePayload, PAYLOAD_EXCERPT_BYTES,
    ProbeConnectionClosed, ProbeConnectionFailed, ProbeConnectionOpened, ProbeRecord, Receipt,
};
use tokio::sync::{Semaphore, watch};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::backoff::Backoff;
use crate::recorder::Recorder;
use crate::request;
use crate::shutdown::Shutdown;
use skewscope_os::rx_stamp::LastRx;

/// Most WebSocket handshakes in flight at once: 10,000 simultaneous connects
/// would overflow a server's accept backlog and turn into retries and timeouts.
pub const MAX_HANDSHAKES_IN_FLIGHT: usize = 256;

/// How long a closing connection keeps reading for the server's close reply.
/// Messages the server sent before it saw our close arrive in this window and
/// are recorded; a server that never replies costs at most this long.
pub const CLOSE_GRACE: Duration = link::CLOSE_GRACE;

use crate::act::Acting;
use crate::config::Protocol;
use crate::error::ConnectError;
use crate::handshake::Framing;
use crate::payloads_seen::PayloadsSeen;
use crate::wire::code;
use link::{Arrival, Got, Link};

/// How far connecting has got, for [`crate::RunningProbe::connected`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attempts {
    /// Connections whose upgrade completed.
    pub opened: u32,
    /// Connections that could not be made (refused, timed out, stopped first).
    pub failed: u32,
}

/// Connection progress shared by all connections of a run.
#[derive(Clone, Debug, Default)]
pub(crate) struct Progress {
    pub(crate) attempts: Attempts,
    /// The first failure's text, for the "none opened" error.
    pub(crate) first_error: Option<String>,
}

/// What every connection of a run dials and how.
#[derive(Debug)]
pub(crate) struct Settings {
    /// The upgrade: the URL with `?probe=NAME` appended, headers, subprotocols.
    pub(crate) upgrade: crate::handshake::Upgrade,
    pub(crate) ws_config: WebSocketConfig,
    pub(crate) framing: Framing,
    pub(crate) connect_timeout: Duration,
    pub(crate) count: Option<u64>,
    /// Open a lost connection again (`--reconnect`).
    pub(crate) reconnect: bool,
    /// Bounds handshakes in flight to [`MAX_HANDSHAKES_IN_FLIGHT`].
    pub(crate) gate: Semaphore,
    /// Connections waiting at the gate for their handshake's turn (shared
    /// with the [`crate::RunningProbe`], which reports it).
    pub(crate) waiting_at_gate: Arc<std::sync::atomic::AtomicUsize>,
    /// Acting on messages' times to act (`--act-at`).
    pub(crate) acting: Option<Acting>,
    /// Payloads recorded so far in this run: each message's once.
    pub(crate) payloads: Arc<PayloadsSeen>,
}

/// One connection's task state.
pub(crate) struct Connection {
    /// Index within this probe, from 0: the `conn` of its records.
    pub(crate) index: u32,
    pub(crate) settings: Arc<Settings>,
    pub(crate) recorder: Recorder,
    pub(crate) shutdown: Shutdown,
    pub(crate) progress: watch::Sender<Progress>,
}

impl Connection {
    /// Connects, receives until a stop condition, and records how it went;
    /// with `--reconnect`, a connection the server closed or lost is opened
    /// again after a back-off, each gap recorded by its close and the next
    /// open, until the run stops.
    pub(crate) async fn run(self) {
        let Connection {
            index,
            settings,
            recorder,
            mut shutdown,
            progress,
        } = self;
        let mut backoff = Backoff::default();
        // Counted in progress: nothing yet, failed, or opened.
        let mut counted = Counted::Nothing;
        let mut received = 0u64;
        // An event stream's last event id and the reconnection time its
        // server asked for, kept across reconnections.
        let mut resume: Option<(String, Option<u64>)> = None;
        loop {
            let last_event_id = resume.as_ref().map(|(id, _)| id.as_str());
            let dialed = tokio::select! {
                biased;
                reason = shutdown.wait() => Err(ConnectError::Stopped(reason)),
                dialed = dial(&settings, last_event_id) => dialed,
            };
            match dialed {
                Ok(Dialed {
                    mut link,
                    last_rx,
                    agent_conn,
                    at,
                    tls,
                    deflate,
                }) => {
                    recorder.record(ProbeRecord::ConnectionOpened(ProbeConnectionOpened {
                        conn: index,
                        agent_conn,
                        at,
                    }));
                    if let Some(tls) = tls {
                        recorder.record(ProbeRecord::ConnectionTls(ConnectionTls {
                            conn: index,
                            version: tls.version,
                            cipher: tls.cipher,
                            verified: tls.verified,
                        }));
                    }
                    if let Some(d) = deflate {
                        recorder.record(ProbeRecord::ConnectionDeflate(ConnectionDeflate {
                            conn: index,
                            server_no_context_takeover: d.server_no_context_takeover,
                            server_max_window_bits: d.server_max_window_bits,
                        }));
                    }
                    if let Some(addresses) = addresses_of(&link, index) {
                        recorder.record(ProbeRecord::ConnectionAddresses(addresses));
                    }
                    counted = counted.opened(&progress);
                    backoff.reset();
                    let mut receipts = Receipts {
                        conn: index,
                        // Occurrences of a payload count per connection.
                        identifier: Identifier::default(),
                        received,
                        recorder: recorder.clone(),
                        last_rx,
                        acting: settings.acting.clone(),
                        payloads: settings.payloads.clone(),
                    };
                    let ended =
                        receive(&mut link, &mut receipts, &mut shutdown, settings.count).await;
                    received = receipts.received;
                    resume = link.resume().or(resume);
                    recorder.record(ProbeRecord::ConnectionClosed(ProbeConnectionClosed {
                        conn: index,
                        at: skewscope_os::clock::now_raw(),
                        reason: ended.reason().to_owned(),
                    }));
                    if !matches!(ended, Ended::Lost(_)) {
                        return;
                    }
                }
                Err(error) => {
                    // The log keeps the reason as people read it.
                    let error = error.to_string();
                    recorder.record(ProbeRecord::ConnectionFailed(ProbeConnectionFailed {
                        conn: index,
                        at: skewscope_os::clock::now_raw(),
                        error: error.clone(),
                    }));
                    counted = counted.failed(&progress, error);
                }
            }
            if !settings.reconnect {
                return;
            }
            // An event stream's server may say how long to wait (`retry:`);
            // attempts that keep failing still back off.
            let pause = match resume.as_ref().and_then(|(_, retry)| *retry) {
                Some(ms) => backoff.pause().max(Duration::from_millis(ms)),
                None => backoff.pause(),
            };
            tokio::select! {
                biased;
                _ = shutdown.wait() => return,
                () = tokio::time::sleep(pause) => {}
            }
        }
    }
}

/// What one connection has contributed to the run's [`Progress`]: its first
/// attempt's outcome, moved from failed to opened if a later attempt opens.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Counted {
    Nothing,
    Failed,
    Opened,
}

impl Counted {
    fn opened(self, progress: &watch::Sender<Progress>) -> Counted {
        match self {
            Counted::Nothing => progress.send_modify(|p| p.attempts.opened += 1),
            Counted::Failed => progress.send_modify(|p| {
                p.attempts.failed -= 1;
                p.attempts.opened += 1;
            }),
            Counted::Opened => {}
        }
        Counted::Opened
    }

    fn failed(self, progress: &watch::Sender<Progress>, error: String) -> Counted {
        if self != Counted::Nothing {
            return self;
        }
        progress.send_modify(|p| {
            p.attempts.failed += 1;
            p.first_error.get_or_insert(error);
        });
        Counted::Failed
    }
}

/// How a connection's receiving ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The run stopped (signal, duration): the reason.
    Stopped(String),
    /// `--count` messages arrived.
    CountReached,
    /// The server closed it or it broke: a reconnect may follow.
    Lost(String),
}

impl Ended {
    /// The close reason for the log.
    fn reason(&self) -> &str {
        match self {
            Ended::Stopped(r) | Ended::Lost(r) => r,
            Ended::CountReached => "count reached",
        }
    }
}

/// An opened connection, as [`dial`] hands it over.
struct Dialed {
    link: Link,
    last_rx: LastRx,
    /// The agent's id for it, when the server is a skewscope agent.
    agent_conn: Option<u64>,
    /// When the upgrade completed.
    at: Stamp,
    /// What TLS negotiated, for `wss://`.
    tls: Option<crate::handshake::TlsInfo>,
    /// What the server accepted of permessage-deflate.
    deflate: Option<skewscope_core::permessage_deflate::Accepted>,
}

/// Opens one connection once the handshake gate lets it: TCP connect, the
/// WebSocket upgrade (or an event stream's GET) and the protocol's opening,
/// all within the connect timeout. Returns the link, its kernel-stamp
/// handle, the agent's id for it, and when it opened.
async fn dial(settings: &Settings, last_event_id: Option<&str>) -> Result<Dialed, ConnectError> {
    use std::sync::atomic::Ordering;
    settings.waiting_at_gate.fetch_add(1, Ordering::Relaxed);
    let permit = settings.gate.acquire().await;
    settings.waiting_at_gate.fetch_sub(1, Ordering::Relaxed);
    let _permit = permit.map_err(|_| ConnectError::ShuttingDown)?;
    let deadline = tokio::time::Instant::now() + settings.connect_timeout;
    let protocol = &settings.upgrade.protocol;
    if let Protocol::Sse { events } = protocol {
        let connect = event_source::connect(
            &settings.upgrade,
            events,
            settings.framing.max_message,
            settings.framing.read_buffer,
            last_event_id,
        );
        return match tokio::time::timeout_at(deadline, connect).await {
            Ok(Ok(opened)) => Ok(Dialed {
                link: Link::sse(opened.source),
                last_rx: opened.last_rx,
                agent_conn: None,
                at: skewscope_os::clock::now_raw(),
                tls: opened.tls,
                deflate: None,
            }),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ConnectError::Refused(format!(
                "no event stream within the connect timeout ({:?})",
                settings.connect_timeout
            ))),
        };
    }
    let connect = settings
        .upgrade
        .connect(settings.ws_config, settings.framing);
    let up = match tokio::time::timeout_at(deadline, connect).await {
        Ok(Ok(up)) => up,
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err(ConnectError::TimedOut(settings.connect_timeout)),
    };
    let mut link = Link::ws(
        up.wire,
        link::layer_for(protocol, settings.framing.max_message),
    );
    match tokio::time::timeout_at(deadline, link.open()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => {
            return Err(ConnectError::Refused(format!(
                "upgraded, but the server did not complete the {} opening (connect, subscribe) within the connect timeout ({:?})",
                protocol.name(),
                settings.connect_timeout
            )));
        }
    }
    Ok(Dialed {
        agent_conn: request::agent_conn(&up.response),
        at: skewscope_os::clock::now_raw(),
        link,
        last_rx: up.last_rx,
        tls: up.tls,
        deflate: up.deflate,
    })
}

/// The connection's two socket addresses, for joining it to the server's
/// side of the same connection.
fn addresses_of(link: &Link, conn: u32) -> Option<ConnectionAddresses> {
    let stamped = match link.get_ref() {
        tokio_tungstenite::MaybeTlsStream::Plain(s) => s,
        tokio_tungstenite::MaybeTlsStream::Rustls(tls) => tls.get_ref().0,
        _ => return None,
    };
    let tcp = stamped.get_ref();
    Some(ConnectionAddresses {
        conn,
        local: tcp.local_addr().ok()?.to_string(),
        remote: tcp.peer_addr().ok()?.to_string(),
    })
}

/// One connection's receipts: message identity state and progress toward `--count`.
struct Receipts {
    conn: u32,
    identifier: Identifier,
    received: u64,
    recorder: Recorder,
    last_rx: LastRx,
    acting: Option<Acting>,
    payloads: Arc<PayloadsSeen>,
}

impl Receipts {
    /// Identifies a payload that arrived at `at` (see [`arrival`]) and queues
    /// its receipt.
    fn record(&mut self, payload: &[u8], (at, kernel_now): Arrival) {
        let kernel_delay_ns = self.last_rx.delay_ns(kernel_now);
        let (key, hash) = self.identifier.identify(payload);
        self.recorder.record(ProbeRecord::Receipt(Receipt {
            conn: self.conn,
            key,
            hash,
            len: u32::try_from(payload.len()).unwrap_or(u32::MAX),
            at,
            kernel_delay_ns,
        }));
        self.received += 1;
        if self.payloads.first_time(hash) {
            let keep = payload.len().min(PAYLOAD_EXCERPT_BYTES);
            self.recorder.record(ProbeRecord::Payload(MessagePayload {
                hash,
                len: u32::try_from(payload.len()).unwrap_or(u32::MAX),
                excerpt: payload[..keep].to_vec(),
            }));
        }
        if let Some(acting) = &self.acting {
            // Late means the message reached the probe (its read, not the
            // kernel's stamp) after its time: before that it cannot act.
            if let Err(why) = acting.plan(self.conn, key, hash, payload, at) {
                tracing::debug!(target: "probe::act", "connection {}: no time to act: {why}", self.conn);
            }
        }
    }
}

/// Receives until the count is reached, the server goes, or the run stops.
async fn receive(
    link: &mut Link,
    receipts: &mut Receipts,
    shutdown: &mut Shutdown,
    count: Option<u64>,
) -> Ended {
    let stopped = shutdown.wait();
    tokio::pin!(stopped);
    // A server that floods control frames costs the device CPU and pongs.
    let mut control = ControlRate::new(skewscope_os::clock::raw_ns());
    loop {
        tokio::select! {
            next = link.next() => {
                match next {
                    Some(Ok(Got::Message { payload, at })) => {
                        receipts.record(&payload, at);
                        if count.is_some_and(|k| receipts.received >= k) {
                            close(link, code::NORMAL, "count reached", None).await;
                            return Ended::CountReached;
                        }
                    }
                    Some(Ok(Got::Quiet)) => {}
                    Some(Ok(Got::Control)) => {
                        if !control.allow(skewscope_os::clock::raw_ns()) {
                            // No drain: reading on is what the flood costs.
                            let _ = tokio::time::timeout(
                                CLOSE_GRACE,
                                link.send_close(code::POLICY, "too many control frames"),
                            )
                            .await;
                            return Ended::Lost(format!(
                                "the server sent control frames faster than {CONTROL_PER_SECOND} a second (after a burst of {CONTROL_BURST}); closed with 1008"
                            ));
                        }
                    }
                    Some(Ok(Got::Close(frame))) => {
                        // Echo its code (RFC 6455 §5.5.1), then let it end the TCP connection.
                        let echo = frame.as_ref().map_or(code::NORMAL, |(c, _)| *c);
                        let _ = tokio::time::timeout(CLOSE_GRACE, link.send_close(echo, "")).await;
                        drain(link, None).await;
                        return Ended::Lost(server_closed(frame.as_ref()));
                    }
                    Some(Err(e)) => {
                        // A protocol error is answered with a Close frame
                        // saying so (RFC 6455 §7.1.7), not a bare TCP drop.
                        if let Some((code, why)) = e.close_code() {
                            let _ = tokio::time::timeout(CLOSE_GRACE, link.send_close(code, why)).await;
                        }
                        return Ended::Lost(e.to_string());
                    }
                    None if !link.closes_with_handshake() => {
                        return Ended::Lost("the server ended the event stream".to_owned());
                    }
                    None => {
                        return Ended::Lost(
                            "the connection ended without a closing handshake (no Close frame)"
                                .to_owned(),
                        );
                    }
                }
            }
            reason = &mut stopped => {
                close(link, code::AWAY, "probe stopped", Some(receipts)).await;
                return Ended::Stopped(reason.to_string());
            }
        }
    }
}

/// Sends a close frame, then reads until the server's close reply (at most
/// [`CLOSE_GRACE`]). Data that arrives meanwhile was sent before the server saw
/// our close: it is recorded when `keep` is given (a stop must lose nothing
/// received) and dropped otherwise (the count is already reached).
async fn close(link: &mut Link, code: u16, why: &'static str, keep: Option<&mut Receipts>) {
    // A failure here means the socket is already gone; the drain below ends at once.
    let _ = tokio::time::timeout(CLOSE_GRACE, link.send_close(code, why)).await;
    drain(link, keep).await;
}

/// Reads until the server's close or the end of the stream, at most
/// [`CLOSE_GRACE`], recording messages into `keep` when given. An event
/// stream has no close to wait for.
async fn drain(link: &mut Link, mut keep: Option<&mut Receipts>) {
    if !link.closes_with_handshake() {
        return;
    }
    let drain = async {
        while let Some(Ok(got)) = link.next().await {
            match (got, keep.as_deref_mut()) {
                (Got::Close(_), _) => break,
                (Got::Message { payload, at }, Some(receipts)) => receipts.record(&payload, at),
                _ => {}
            }
        }
    };
    let _ = tokio::time::timeout(CLOSE_GRACE, drain).await;
}

/// The close reason for a close frame from the server.
fn server_closed(frame: Option<&(u16, String)>) -> String {
    match frame {
        None => "server closed".to_owned(),
        Some((code, reason)) if reason.is_empty() => format!("server closed (code {code})"),
        Some((code, reason)) => format!("server closed (code {code}: {reason})"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_reasons_name_the_server_code() {
        assert_eq!(server_closed(None), "server closed");
        let bye = (1001, "restart".to_owned());
        assert_eq!(
            server_closed(Some(&bye)),
            "server closed (code 1001: restart)"
        );
        assert_eq!(
            server_closed(Some(&(1000, String::new()))),
            "server closed (code 1000)"
        );
    }
}
