//! `/ingest`: probes stream their records to the agent over a WebSocket
//! (binary messages of [`skewscope_core::ingest`], or from the browser probe
//! page, text messages of [`skewscope_core::page_ingest`]), and the agent
//! stores each run as a probe record log in its data directory,
//! acknowledging what is durable. Runs on the server's tokio tasks, never on
//! the fan-out shards.

pub mod store;
pub mod worker;

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use skewscope_core::ingest::{
    INGEST_VERSION, IngestError, MAX_BATCH_BYTES, ToAgent, ToProbe, decode_to_agent, encode,
};
use skewscope_core::page_ingest;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::error::CapacityError;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

pub use store::IngestStore;
pub use worker::Worker;

use worker::Stored;

use crate::quiet::FanoutQuiet;
use crate::server::conn::Conn;

/// Longest an upload waits for a broadcast in flight to finish before it is
/// stored anyway.
const MAX_DEFER: Duration = Duration::from_millis(50);

/// Serves one upgraded `/ingest` connection until the probe leaves or breaks
/// the protocol. `leftover` is what followed the request head. Each batch
/// waits (at most [`MAX_DEFER`]) for the fan-out to be quiet before it is
/// checked and stored, so uploads never compete with a broadcast for a core.
pub async fn serve(
    stream: Conn,
    leftover: Vec<u8>,
    store: Arc<IngestStore>,
    worker: Worker,
    quiet: FanoutQuiet,
) {
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_BATCH_BYTES + 64))
        .max_frame_size(Some(MAX_BATCH_BYTES + 64));
    let mut ws =
        WebSocketStream::from_partially_read(stream, leftover, Role::Server, Some(config)).await;
    let mut claimed = None;
    let outcome = session(&mut ws, &worker, &mut claimed, quiet).await;
    if let Some((run, claim)) = claimed.take() {
        store.release(run, claim);
    }
    if let Err(e) = outcome {
        if let Some(counter) = e.counter() {
            store.counters.reject(counter);
        }
        let frame = crate::server::close_frame::close_frame(CloseCode::Policy, &e.to_string());
        let _ = ws.close(Some(frame)).await;
    }
}

/// Why a session ended badly.
enum SessionError {
    Protocol(IngestError),
    TakenOver,
    MixedDialects,
    /// The hello may not take the run (not its owner, or in use).
    Claim(store::OpenError),
}

impl SessionError {
    /// The rejection to count, if any: a takeover was counted when the
    /// newer connection opened the run.
    fn counter(&self) -> Option<&'static str> {
        match self {
            SessionError::Protocol(e) => Some(e.counter()),
            SessionError::TakenOver => None,
            SessionError::MixedDialects => Some("malformed"),
            SessionError::Claim(e) => e.counter(),
        }
    }
}

impl std::fmt::Display for SessionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SessionError::Protocol(e) => write!(f, "{e}"),
            SessionError::TakenOver => {
                f.write_str("a newer connection of this run has taken its upload over")
            }
            SessionError::MixedDialects => {
                f.write_str("ingest messages are all binary, or all text (a page's JSON)")
            }
            SessionError::Claim(e) => write!(f, "{e}"),
        }
    }
}

/// The checking and the file work (opening a run counts its records; every
/// append syncs) run on the low-priority [`Worker`] thread.
async fn session(
    ws: &mut WebSocketStream<Conn>,
    worker: &Worker,
    claimed: &mut Option<(u128, u64)>,
    mut quiet: FanoutQuiet,
) -> Result<(), SessionError> {
    let mut open = None;
    // Binary (the native probe) or text (the page), as its first message.
    let mut text_dialect = None;
    loop {
        // Not even read while a broadcast is fanned out: the kernel holds
        // the bytes meanwhile. (`next` is cancel-safe: a frame read in part
        // stays buffered.)
        quiet.wait(MAX_DEFER).await;
        let message = tokio::select! {
            biased;
            () = quiet.busy() => continue,
            message = ws.next() => message,
        };
        let Some(message) = message else {
            return Ok(());
        };
        let (decoded, text) = match message {
            Ok(Message::Binary(b)) => (decode_to_agent(&b), false),
            Ok(Message::Text(t)) => (page_ingest::decode(&t), true),
            Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => continue,
            // Over the message limit: refused and counted, like a batch
            // over MAX_BATCH_BYTES.
            Err(tokio_tungstenite::tungstenite::Error::Capacity(e)) => {
                let size = match e {
                    CapacityError::MessageTooLong { size, .. } => size,
                    CapacityError::TooManyHeaders => 0,
                };
                return Err(SessionError::Protocol(IngestError::Oversized(size)));
            }
            Ok(Message::Close(_)) | Err(_) => return Ok(()),
        };
        if *text_dialect.get_or_insert(text) != text {
            return Err(SessionError::MixedDialects);
        }
        let decoded = decoded.map_err(SessionError::Protocol)?;
        let secret = match &decoded {
            ToAgent::HelloOwned { secret, .. } => Some(*secret),
            _ => None,
        };
        let reply = match (decoded, open.take()) {
            (ToAgent::Hello { version, run_id }, None)
            | (
                ToAgent::HelloOwned {
                    version, run_id, ..
                },
                None,
            ) => {
                if version != INGEST_VERSION {
                    return Err(SessionError::Protocol(IngestError::Version(version)));
                }
                let run = match worker.open(run_id, secret).await {
                    Ok(run) => run,
                    Err(store::OpenError::Io(e)) => {
                        tracing::error!(target: "agent::ingest", "cannot open run {run_id:032x}: {e}");
                        return Ok(());
                    }
                    Err(refused) => {
                        tracing::warn!(target: "agent::ingest", "refused an upload: {refused}");
                        return Err(SessionError::Claim(refused));
                    }
                };
                *claimed = Some((run_id, run.claim()));
                let next_seq = run.next_seq;
                open = Some(run);
                ToProbe::Ack { next_seq }
            }
            (ToAgent::Records { first_seq, frames }, Some(run)) => {
                let Some((run, stored)) = worker.store(run, first_seq, frames).await else {
                    return Ok(()); // shutting down
                };
                let next_seq = run.next_seq;
                open = Some(run);
                match stored.map_err(SessionError::Protocol)? {
                    Stored::Ack => ToProbe::Ack { next_seq },
                    Stored::Busy(reason) => ToProbe::Busy { next_seq, reason },
                    Stored::TakenOver => return Err(SessionError::TakenOver),
                }
            }
            // Records before Hello, or a second Hello.
            _ => return Err(SessionError::Protocol(IngestError::Malformed)),
        };
        let reply = if text {
            Message::Text(page_ingest::encode_reply(&reply).into())
        } else {
            Message::Binary(encode(&reply).into())
        };
        if ws.send(reply).await.is_err() {
            return Ok(());
        }
    }
}
