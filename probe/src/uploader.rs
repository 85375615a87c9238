//! `--upload`: streams this run's record log to the agent's `/ingest` while
//! the probe runs. The log is the spool: the uploader reads what the recorder
//! has flushed, sends it from the agent's `next_seq`, and moves on only when
//! the agent acknowledges it durable. A lost connection is retried with a
//! bounded, jittered back-off; a probe that cannot reach the agent keeps
//! recording and catches up later.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use skewscope_core::ingest::{
    INGEST_VERSION, MAX_BATCH_BYTES, ToAgent, ToProbe, decode_to_probe, encode,
};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::error::ProbeError;
use crate::spool::Spool;

/// Pause before looking for newly flushed records.
const POLL: Duration = Duration::from_millis(200);
/// Batches this size or smaller: well under the agent's limit.
const BATCH_BYTES: usize = MAX_BATCH_BYTES / 4;
/// The smallest batch limit a link that keeps failing shrinks it to (a
/// batch always holds at least one record).
const MIN_BATCH_BYTES: usize = 1024;
/// How long the last records may take to reach the agent once the run ended.
pub const FINAL_DRAIN: Duration = Duration::from_secs(10);

/// Where to upload and what.
#[derive(Clone, Debug)]
pub struct Upload {
    /// `ws://HOST:PORT/ingest` (from `--upload http://HOST:PORT`), or
    /// `wss://…` (from `https://`).
    pub url: String,
    /// `--upload` as given: what a log line names, so it is the address
    /// the user wrote (`http://…`), not the endpoint derived from it.
    pub agent: String,
    /// For `wss://`: whom to trust (`--ca-file`, else the system roots).
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Bearer token, if the agent has one.
    pub token: Option<String>,
    /// The run's log file.
    pub log: PathBuf,
    /// The run's id.
    pub run_id: u128,
    /// The run is still being written (the live run; a previous run's log
    /// left by a restart is not).
    pub follow: bool,
    /// The log directory's device key ([`crate::owner_key`]): each run's
    /// hello gives its owner secret, so only this device can upload it.
    /// `None` when it could not be read or made (the hello then proves
    /// nothing, and an agent refuses it for a run bound to a secret).
    pub device_key: Option<[u8; skewscope_core::run_owner::DEVICE_KEY_LEN]>,
}

/// What the uploader last achieved, for the run's summary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UploadState {
    /// Records the agent acknowledged (only acks the probe could believe:
    /// never past what it sent).
    pub acked: u64,
    /// Whether everything flushed when the run ended was acknowledged.
    pub complete: bool,
    /// Answers refused: an ack past what the probe sent (a broken or
    /// hostile agent). Never a reason to believe the agent has anything.
    pub refused_acks: u64,
    /// The agent refused the token (401): the upload stopped for good,
    /// since asking again with the same token can only be refused again.
    pub token_refused: bool,
}

/// The upload of `config`'s run to the agent at `base`: its ingest URL,
/// and for `wss://` the TLS the run's own connections trust.
pub fn upload_to(
    base: &str,
    config: &crate::config::ProbeConfig,
    run_id: u128,
    follow: bool,
) -> Result<Upload, ProbeError> {
    let url = ingest_url(base)?;
    let tls = if url.starts_with("wss://") {
        let trust = crate::tls::Trust::of(config.ca_file.as_deref(), config.insecure);
        let (tls, _) = crate::tls::client_config(&trust)
            .map_err(|e| ProbeError::Config(format!("--upload {base}: {e}")))?;
        Some(tls)
    } else {
        None
    };
    let dir = config
        .out
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let device_key = match crate::owner_key::device_key(dir) {
        Ok(key) => Some(key),
        Err(e) => {
            tracing::warn!(
                target: "probe::upload",
                "no device key in {} ({e}): this run's upload cannot prove it is this device's, and an agent that bound it to a key refuses it",
                dir.display()
            );
            None
        }
    };
    Ok(Upload {
        url,
        agent: base.to_owned(),
        tls,
        token: config.upload_token.clone(),
        log: config.out.clone(),
        run_id,
        follow,
        device_key,
    })
}

/// `http://host:port[/]` (or `ws://…`) to the ingest WebSocket URL;
/// `https://` (or `wss://`, an agent with `--tls-cert`) to `wss://…`.
pub fn ingest_url(base: &str) -> Result<String, ProbeError> {
    let (scheme, rest) = [
        ("ws", "http://"),
        ("ws", "ws://"),
        ("wss", "https://"),
        ("wss", "wss://"),
    ]
    .into_iter()
    .find_map(|(scheme, prefix)| base.strip_prefix(prefix).map(|rest| (scheme, rest)))
    .ok_or_else(|| {
        ProbeError::Config(format!(
            "--upload {base}: give the agent as http://HOST:PORT (https:// when it has --tls-cert)"
        ))
    })?;
    let host = rest.trim_end_matches('/');
    if host.is_empty() || host.contains('/') {
        return Err(ProbeError::Config(format!(
            "--upload {base}: give only http://HOST:PORT or https://HOST:PORT"
        )));
    }
    Ok(format!("{scheme}://{host}/ingest"))
}

/// Why an upload session ended before the log was acknowledged: said in the
/// log line, and the session is tried again.
#[derive(Debug, thiserror::Error)]
enum UploadError {
    /// The upload request could not be made (a bad token).
    #[error("cannot make the upload request: {0}")]
    Request(String),
    /// No answer to the connection within 10 s.
    #[error("connect timed out")]
    ConnectTimeout,
    /// 401: the agent wants another token (or one at all). Not retried.
    #[error("the agent refused the token (401 Unauthorized)")]
    Unauthorized,
    /// The server answered, but has no `/ingest`: not the agent.
    #[error(
        "it answered {0} to /ingest: is it the skewscope agent? --upload takes the agent's address (http://HOST:PORT, its --listen port)"
    )]
    NotAnAgent(u16),
    /// The WebSocket failed.
    #[error(transparent)]
    WebSocket(#[from] tokio_tungstenite::tungstenite::Error),
    /// The log could not be read.
    #[error("cannot read the log: {0}")]
    Log(#[from] std::io::Error),
    /// The agent did not answer a batch.
    #[error("no answer from the agent in 30 s")]
    NoAnswer,
    /// The agent answered with something else.
    #[error("the agent sent something that is not an ingest answer")]
    NotAnAnswer,
    /// The agent closed the upload, saying why.
    #[error("the agent closed the upload: {0}")]
    Closed(String),
    /// The agent acknowledged records the probe never sent: refused, and
    /// nothing believed (a broken or hostile agent; nothing is deleted).
    #[error(
        "the agent acknowledged records up to {acked} but the probe sent {sent}: not believed (nothing is taken as stored)"
    )]
    AckBeyondSent {
        /// What it acknowledged.
        acked: u64,
        /// What the probe sent (or, for an earlier run's log, what it holds).
        sent: u64,
    },
}

/// Uploads until `ended` turns true and the log is fully acknowledged, or
/// until [`FINAL_DRAIN`] has passed since the end, whichever comes first.
/// For a previous run's log (`follow` false) the log has already ended:
/// it is uploaded to its end, bounded by the same drain after the live run
/// (`ended`) ends.
pub async fn run(upload: Upload, ended: watch::Receiver<bool>, state: watch::Sender<UploadState>) {
    let mut end = ended.clone();
    let drain_over = async move {
        let _ = end.wait_for(|e| *e).await;
        tokio::time::sleep(FINAL_DRAIN).await;
    };
    let (_finished, already_ended) = watch::channel(true);
    let log_ended = if upload.follow { ended } else { already_ended };
    tokio::select! {
        () = upload_until_complete(&upload, log_ended, &state) => {}
        () = drain_over => {}
    }
}

/// Sessions, with a bounded, jittered back-off between them, until one
/// returns complete.
async fn upload_until_complete(
    upload: &Upload,
    mut ended: watch::Receiver<bool>,
    state: &watch::Sender<UploadState>,
) {
    let mut backoff = crate::backoff::Backoff::default();
    let mut batch_bytes = BATCH_BYTES;
    // One spool for the whole run, across sessions: it has followed every
    // rotation so far, which a spool opened at the path again would not.
    let mut spool = None;
    // The most records the agent can truly have of this run: what this
    // probe sent it (the live run is this process's alone), or for an
    // earlier run's log, every record it holds.
    let mut sent = 0u64;
    loop {
        let acked_before = state.borrow().acked;
        let mut reached = false;
        let outcome = session(
            upload,
            &mut spool,
            &mut ended,
            state,
            batch_bytes,
            &mut reached,
            &mut sent,
        );
        match outcome.await {
            Ok(()) => return,
            Err(UploadError::Unauthorized) => {
                // Said once, by the run that stops for it.
                state.send_modify(|s| s.token_refused = true);
                return;
            }
            Err(e) => {
                if matches!(e, UploadError::AckBeyondSent { .. }) {
                    state.send_modify(|s| s.refused_acks += 1);
                }
                if reached {
                    // The agent answered: it is there, try again soon.
                    backoff.reset();
                }
                if reached && state.borrow().acked == acked_before {
                    // It answered but no batch got through: a link that
                    // drops long messages may still carry short ones (down
                    // to one record each).
                    batch_bytes = (batch_bytes / 8).max(MIN_BATCH_BYTES);
                }
                tracing::warn!(target: "probe::upload", "upload to the agent at {}: {e}; retrying", upload.agent);
                tokio::select! {
                    _ = tokio::time::sleep(backoff.pause()) => {}
                    _ = ended.changed(), if !*ended.borrow() => {}
                }
            }
        }
    }
}

/// One connection: hello, then batches until the run ended and all is acked.
/// `reached` turns true once the agent answered the hello; `sent` is the
/// most records the agent can truly have (see [`upload_until_complete`]):
/// an ack past it is refused, never believed.
async fn session(
    upload: &Upload,
    spool: &mut Option<Spool>,
    ended: &mut watch::Receiver<bool>,
    state: &watch::Sender<UploadState>,
    batch_bytes: usize,
    reached: &mut bool,
    sent: &mut u64,
) -> Result<(), UploadError> {
    let mut request = upload.url.as_str().into_client_request()?;
    if let Some(token) = &upload.token {
        let value = format!("Bearer {token}")
            .parse()
            .map_err(|_| UploadError::Request("the token is not a valid header value".into()))?;
        request.headers_mut().insert("authorization", value);
    }
    let connector = upload.tls.clone().map(tokio_tungstenite::Connector::Rustls);
    let (mut ws, _) = tokio::time::timeout(
        Duration::from_secs(10),
        tokio_tungstenite::connect_async_tls_with_config(request, None, false, connector),
    )
    .await
    .map_err(|_| UploadError::ConnectTimeout)?
    .map_err(refusal)?;
    let hello = match &upload.device_key {
        Some(key) => ToAgent::HelloOwned {
            version: INGEST_VERSION,
            run_id: upload.run_id,
            secret: skewscope_core::run_owner::owner_secret(key, upload.run_id),
        },
        None => ToAgent::Hello {
            version: INGEST_VERSION,
            run_id: upload.run_id,
        },
    };
    ws.send(Message::Binary(encode(&hello).into())).await?;
    let spool = match spool {
        Some(spool) => spool,
        None => {
            let mut opened = Spool::open(&upload.log, upload.follow)?;
            if !upload.follow {
                // An earlier run's log: the agent can have all of it, no more.
                *sent = opened.records()?;
            }
            spool.insert(opened)
        }
    };
    let mut next_seq = believed(receive_ack(&mut ws).await?.0, *sent)?;
    *reached = true;
    loop {
        // Read the end flag before the log: what was flushed before it is in the file.
        let was_ended = *ended.borrow();
        let (first_seq, frames) = spool.batch_from(next_seq, batch_bytes)?;
        if frames.is_empty() {
            state.send_modify(|s| {
                s.acked = next_seq;
                s.complete = was_ended;
            });
            if was_ended {
                let _ = ws.close(None).await;
                return Ok(());
            }
            tokio::select! {
                _ = tokio::time::sleep(POLL) => {}
                _ = ended.changed() => {}
            }
            continue;
        }
        let through = first_seq + frame_count(&frames);
        *sent = (*sent).max(through);
        let batch = ToAgent::Records { first_seq, frames };
        ws.send(Message::Binary(encode(&batch).into())).await?;
        let (acked, busy) = receive_ack(&mut ws).await?;
        next_seq = believed(acked, through)?;
        state.send_modify(|s| s.acked = next_seq);
        if let Some(reason) = busy {
            tracing::warn!(
                target: "probe::upload",
                "the agent stored nothing ({reason}); records stay in the log"
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// What an upgrade that failed says: a status the agent answered instead
/// of the upgrade is named for what it means.
fn refusal(e: tokio_tungstenite::tungstenite::Error) -> UploadError {
    use tokio_tungstenite::tungstenite::Error;
    match &e {
        Error::Http(response) if response.status() == 401 => UploadError::Unauthorized,
        Error::Http(response) if matches!(response.status().as_u16(), 404 | 405) => {
            UploadError::NotAnAgent(response.status().as_u16())
        }
        _ => UploadError::WebSocket(e),
    }
}

/// The agent's `acked`, when it is at most `sent`: no agent can have
/// records the probe never sent it.
fn believed(acked: u64, sent: u64) -> Result<u64, UploadError> {
    if acked > sent {
        return Err(UploadError::AckBeyondSent { acked, sent });
    }
    Ok(acked)
}

/// Whole frames in `frames`.
fn frame_count(frames: &[u8]) -> u64 {
    use skewscope_core::log::{FRAME_HEADER_LEN, FrameAt, frame_at};
    let (mut pos, mut n) = (0, 0);
    while let FrameAt::Intact(payload) = frame_at(frames, pos) {
        pos += FRAME_HEADER_LEN + payload.len();
        n += 1;
    }
    n
}

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Waits for the agent's answer: its `next_seq`, and why nothing was stored
/// when it was busy.
async fn receive_ack(ws: &mut Socket) -> Result<(u64, Option<String>), UploadError> {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await
            .map_err(|_| UploadError::NoAnswer)?;
        match message {
            Some(Ok(Message::Binary(b))) => {
                return match decode_to_probe(&b) {
                    Some(ToProbe::Ack { next_seq }) => Ok((next_seq, None)),
                    Some(ToProbe::Busy { next_seq, reason }) => Ok((next_seq, Some(reason))),
                    None => Err(UploadError::NotAnAnswer),
                };
            }
            Some(Ok(Message::Close(frame))) => {
                return Err(UploadError::Closed(
                    frame.map_or_else(String::new, |f| f.reason.to_string()),
                ));
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e.into()),
            None => return Err(UploadError::Closed("the connection ended".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_urls_name_the_ingest_endpoint() {
        assert_eq!(
            ingest_url("http://srv:8080").unwrap(),
            "ws://srv:8080/ingest"
        );
        assert_eq!(
            ingest_url("http://srv:8080/").unwrap(),
            "ws://srv:8080/ingest"
        );
        assert_eq!(
            ingest_url("https://srv:8443").unwrap(),
            "wss://srv:8443/ingest"
        );
        assert!(ingest_url("ftp://srv").is_err());
        assert!(ingest_url("http://srv/x").is_err());
    }

    #[test]
    fn an_ack_past_what_was_sent_is_not_believed() {
        assert_eq!(believed(5, 5).unwrap(), 5);
        assert_eq!(believed(0, 5).unwrap(), 0);
        let e = believed(1 << 63, 119).unwrap_err();
        assert!(e.to_string().contains("not believed"), "{e}");
    }
}
