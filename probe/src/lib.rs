//! skewscope's probe: holds one or many WebSocket connections to any broadcast
//! server and records, per connection, when each message arrived.
//!
//! The binary is a thin shell around [`RunningProbe`]; the collector's `demo`
//! and the tests run probes in-process through the same API:
//!
//! ```no_run
//! # async fn demo() -> Result<(), probe::ProbeError> {
//! let mut config = probe::ProbeConfig::new("ws://127.0.0.1:8080/ws", "probe.sklog");
//! config.connections = 100;
//! config.count = Some(10);
//! let probe = probe::RunningProbe::start(config).await?;
//! let attempts = probe.connected().await;
//! println!("{} connections up", attempts.opened);
//! let summary = probe.finish().await?;
//! println!("{summary}");
//! # Ok(())
//! # }
//! ```
//!
//! Modules: [`config`] and [`cli`] say what a run does, `request` builds the
//! upgrade request, `connection` is one connection's receive loop over
//! `skewscope_os::rx_stamp` (the socket layer that reads kernel receive
//! timestamps), `time_exchange` measures the offset to the agent's clock,
//! `clock_watch` records what the device clock claims, `recorder` writes the log off the
//! receive path and `shutdown` is the stop signal.

#![forbid(unsafe_code)]

mod act;
pub mod act_notify;
mod after_upgrade;
mod backoff;
pub mod cli;
mod clock_estimate;
mod clock_watch;
pub mod config;
mod connection;
mod connection_threads;
mod error;
mod handshake;
mod owner_key;
mod payloads_seen;
mod previous_runs;
pub mod protocol_args;
mod recorder;
mod request;
mod retention;
mod shutdown;
mod spool;
mod start_steps;
mod time_exchange;
mod tls;
mod uploader;
mod wire;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use skewscope_core::record::ProbeRecord;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

pub use config::ProbeConfig;
pub use connection::{Attempts, CLOSE_GRACE, MAX_HANDSHAKES_IN_FLIGHT};
pub use error::ProbeError;
pub use recorder::{FLUSH_INTERVAL, ReopenHandle};
pub use request::{AGENT_CONN_HEADER, PROBE_PARAM};
pub use shutdown::StopHandle;
pub use uploader::{FINAL_DRAIN, UploadState};

use connection::{Connection, Progress, Settings};
use recorder::Recorder;

/// Read buffer per connection. Broadcast messages are far smaller; larger
/// frames still arrive whole, over several reads. (tungstenite, which reads
/// only the upgrade now, zero-filled its 128 KiB default before every read:
/// 30 % of a probe's CPU at 5,000 connections.)
const READ_BUFFER_BYTES: usize = 4 * 1024;

/// A probe run in progress: its connections are tasks on the current tokio
/// runtime and its log is written by a dedicated thread.
///
/// Call [`RunningProbe::finish`] to wait for the end and get the log synced.
/// Dropping it instead aborts the connections without a `Stopped` record (the
/// records written so far are still flushed and synced).
pub struct RunningProbe {
    /// Connections waiting at the handshake gate (not the whole settings:
    /// they hold the actor's sender, which must go when the connections do).
    waiting_at_gate: Arc<std::sync::atomic::AtomicUsize>,
    url: String,
    out: PathBuf,
    connections: u32,
    tasks: JoinSet<()>,
    stop: StopHandle,
    progress: watch::Receiver<Progress>,
    recorder: Recorder,
    finished: recorder::Finished,
    /// The time exchange and clock watch: they end when the connections do.
    helpers: JoinSet<()>,
    reopen: ReopenHandle,
    /// Turns true once the log is complete and synced: the uploader's cue
    /// to send the rest and stop.
    log_ended: watch::Sender<bool>,
    /// The `--upload` task, if any.
    upload_task: Option<tokio::task::JoinHandle<()>>,
    upload_state: watch::Receiver<uploader::UploadState>,
    /// The actor (`--act-at`): done before the log is closed.
    actor: Option<act::Actor>,
    /// The running idea of the agent's clock, from the time exchange.
    clock: clock_estimate::ClockEstimate,
    /// What the run says when the agent refuses its upload's token.
    refused_text: String,
    /// Uploads of earlier runs' logs left by restarts.
    previous_uploads: Vec<(
        tokio::task::JoinHandle<()>,
        watch::Receiver<uploader::UploadState>,
    )>,
}

/// What a finished run did, counted from what was written to its log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunSummary {
    /// Connections whose upgrade completed.
    pub opened: u32,
    /// Connections that could not be made.
    pub failed: u32,
    /// Messages recorded across all connections.
    pub receipts: u64,
    /// The record log.
    pub out: PathBuf,
    /// With `--upload`: what the agent acknowledged.
    pub uploaded: Option<UploadState>,
    /// With `--upload`: how the upload of each earlier run's log went.
    pub previous_runs: Vec<UploadState>,
}

/// The exit status of a run that ended as asked but whose records did not
/// all reach the agent (this run's or an earlier one's): they are safe in
/// the logs, and a script or systemd must still see that the agent lacks
/// them. 1 is a run that failed, 2 a refused configuration.
pub const UPLOAD_INCOMPLETE_EXIT: u8 = 3;

impl RunSummary {
    /// Whether `--upload` was given and the agent did not acknowledge
    /// every record of this run and of each earlier run it uploaded.
    pub fn upload_incomplete(&self) -> bool {
        self.uploaded
            .iter()
            .chain(&self.previous_runs)
            .any(|u| !u.complete)
    }
}

impl fmt::Display for RunSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} connection(s) opened, {} failed, {} receipt(s) written to {}",
            self.opened,
            self.failed,
            self.receipts,
            self.out.display()
        )?;
        match self.uploaded {
            Some(u) if u.complete => write!(f, "; all {} record(s) uploaded", u.acked),
            Some(u) => write!(
                f,
                "; upload INCOMPLETE: the agent acknowledged {} record(s), the rest are only in the log",
                u.acked
            ),
            None => Ok(()),
        }?;
        let refused: u64 = self
            .uploaded
            .iter()
            .chain(&self.previous_runs)
            .map(|u| u.refused_acks)
            .sum();
        if refused > 0 {
            write!(
                f,
                "; {refused} answer(s) of the agent acknowledged records this probe never sent: NOT believed (a broken or hostile agent; nothing was taken as stored or deleted)"
            )?;
        }
        let previous = self.previous_runs.len();
        let incomplete = self.previous_runs.iter().filter(|u| !u.complete).count();
        match (previous, incomplete) {
            (0, _) => Ok(()),
            (n, 0) => write!(f, "; {n} earlier run(s) uploaded in full"),
            (n, k) => write!(
                f,
                "; {k} of {n} earlier run(s) NOT uploaded in full (still in their logs)"
            ),
        }
    }
}

impl RunningProbe {
    /// Checks the configuration, creates the log (writing `Started`), raises
    /// the open-file limit and starts connecting, on the current tokio runtime.
    ///
    /// Returns once the connection tasks are spawned, not once they are
    /// connected: see [`RunningProbe::connected`].
    pub async fn start(config: ProbeConfig) -> Result<RunningProbe, ProbeError> {
        config.validate()?;
        let url = handshake::labelled_url(&config)?;
        if config.insecure {
            tracing::warn!(
                target: "probe",
                "--insecure: server certificates are NOT checked; \
                 anyone on the path could be the server. Every such connection is recorded \
                 and reports warn about it."
            );
        }
        skewscope_os::files::ensure_open_files(config.connections)?;
        let room = start_steps::make_room(&config).await?;
        let (recorder, finished, stop, shutdown) =
            start_steps::open_log(&config, room.max_log_bytes)?;
        let run_id = start_steps::record_start(&recorder, &config, room.pruned)?;
        let uploads = start_steps::start_uploads(&config, run_id, room.to_upload, &stop)?;
        let refused_text = refused_text(&config);
        // The running idea of the agent's clock, for acting at its times.
        let clock = clock_estimate::ClockEstimate::new();
        let (actor, acting) = start_steps::start_actor(&config, &recorder, &clock)?;
        let waiting_at_gate = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let settings = Arc::new(Settings {
            upgrade: handshake::Upgrade::new(url, &config)?,
            // tungstenite reads only the upgrade's response.
            ws_config: WebSocketConfig::default().read_buffer_size(READ_BUFFER_BYTES),
            framing: handshake::Framing {
                max_message: config.max_message,
                read_buffer: READ_BUFFER_BYTES,
            },
            connect_timeout: config.connect_timeout,
            count: config.count,
            reconnect: config.reconnect,
            gate: Semaphore::new(MAX_HANDSHAKES_IN_FLIGHT),
            waiting_at_gate: waiting_at_gate.clone(),
            acting,
            payloads: Default::default(),
        });
        let reopen = recorder.reopen_handle();
        let helpers =
            start_steps::start_clock_helpers(&config, &recorder, &clock, &shutdown).await?;
        let (progress_tx, progress) = watch::channel(Progress::default());
        let connections = (0..config.connections)
            .map(|index| {
                Connection {
                    index,
                    settings: Arc::clone(&settings),
                    recorder: recorder.clone(),
                    shutdown: shutdown.clone(),
                    progress: progress_tx.clone(),
                }
                .run()
            })
            .collect();
        let mut tasks = JoinSet::new();
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        connection_threads::spawn(connections, cores, &mut tasks).map_err(ProbeError::Threads)?;

        Ok(RunningProbe {
            waiting_at_gate,
            url: config.url,
            out: config.out,
            connections: config.connections,
            tasks,
            stop,
            progress,
            recorder,
            finished,
            helpers,
            reopen,
            log_ended: uploads.log_ended,
            upload_task: uploads.task,
            upload_state: uploads.state,
            actor,
            previous_uploads: uploads.previous,
            refused_text,
            clock,
        })
    }

    /// How well this probe knows the agent's clock now: the bound of its
    /// clock model, `None` before an exchange was answered. A caller that
    /// broadcasts times to act waits for it, so the first actions rest on
    /// a measured offset.
    pub fn clock_bound_now(&self) -> Option<std::time::Duration> {
        self.clock
            .estimate_at(skewscope_os::clock::raw_ns())
            .map(|e| std::time::Duration::from_nanos(e.bound_ns))
    }

    /// Connections waiting for their handshake's turn at the gate (at most
    /// [`MAX_HANDSHAKES_IN_FLIGHT`] upgrade at once).
    pub fn handshakes_waiting(&self) -> usize {
        self.waiting_at_gate
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Resolves once every connection attempt has finished, opened or failed:
    /// the moment a caller can start broadcasting and expect every connection
    /// to hear it.
    pub async fn connected(&self) -> Attempts {
        let mut progress = self.progress.clone();
        let total = self.connections;
        let done = progress
            .wait_for(|p| p.attempts.opened + p.attempts.failed >= total)
            .await
            .map(|p| p.attempts);
        // An error means every connection task has ended: nothing changes any more.
        done.unwrap_or_else(|_| progress.borrow().attempts)
    }

    /// Asks every connection to close cleanly, as SIGINT/SIGTERM do. The run
    /// then ends; [`RunningProbe::finish`] still has to be awaited.
    pub fn stop(&self) {
        self.stop.stop();
    }

    /// A handle that reopens the record log (what SIGHUP does) while
    /// [`RunningProbe::finish`] owns the probe.
    pub fn reopen_handle(&self) -> ReopenHandle {
        self.reopen.clone()
    }

    /// A handle that can stop this run from elsewhere (a signal handler task)
    /// while [`RunningProbe::finish`] owns the probe.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }

    /// Waits for the run to end (count reached on every connection, duration
    /// over, stopped, or every connection gone), writes `Stopped` and syncs the
    /// log to disk: everything received is in the file when this returns.
    ///
    /// Errors if the log could not be written, or if no connection opened at all
    /// (the log then records each failure).
    pub async fn finish(self) -> Result<RunSummary, ProbeError> {
        let RunningProbe {
            url,
            out,
            connections,
            mut tasks,
            progress,
            recorder,
            finished,
            mut helpers,
            reopen,
            log_ended,
            upload_task,
            upload_state,
            previous_uploads,
            actor,
            refused_text,
            ..
        } = self;
        let mut panicked = None;
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Err(e) if e.is_panic() => {
                    panicked.get_or_insert(e.into_panic());
                }
                _ => {}
            }
        }

        // The actions still due (the connections, which plan them, are done).
        if let Some(actor) = actor {
            let _ = tokio::task::spawn_blocking(move || actor.finish()).await;
        }
        // Their work is only useful while connections receive.
        helpers.abort_all();
        while helpers.join_next().await.is_some() {}
        recorder.record(ProbeRecord::Stopped(skewscope_os::clock::now_raw()));
        reopen.close();
        // The last sender: the writer drains the queue, syncs and reports.
        drop(recorder);
        let written = match finished.await {
            Ok(result) => result,
            Err(_) => Err(std::io::Error::other(
                "the record log writer thread ended unexpectedly",
            )),
        };
        // The log is synced: the uploader sends what is left, then stops.
        let _ = log_ended.send(true);
        let uploaded = match upload_task {
            Some(task) => {
                let _ = task.await;
                Some(*upload_state.borrow())
            }
            None => None,
        };
        let mut previous_runs = Vec::new();
        for (task, state) in previous_uploads {
            let _ = task.await;
            previous_runs.push(*state.borrow());
        }
        let refused = uploaded
            .iter()
            .chain(&previous_runs)
            .any(|u| u.token_refused);
        if let Some(payload) = panicked {
            // A bug in a connection task: surface it, now that the log is safe.
            std::panic::resume_unwind(payload);
        }
        let full = written
            .as_ref()
            .err()
            .and_then(|e| e.get_ref())
            .and_then(|e| e.downcast_ref::<recorder::LogFullError>())
            .map(|f| f.0);
        if let Some(max_bytes) = full {
            return Err(ProbeError::LogFull {
                path: out,
                max_bytes,
            });
        }
        let totals = written.map_err(|source| ProbeError::WriteLog {
            path: out.clone(),
            source,
        })?;
        if refused {
            return Err(ProbeError::UploadRefused(format!(
                "{refused_text}; the run was stopped, and what it recorded is in {}",
                out.display()
            )));
        }

        if totals.opened == 0 {
            let first_error = progress
                .borrow()
                .first_error
                .clone()
                .unwrap_or_else(|| "unknown".to_owned());
            return Err(ProbeError::NoneOpened {
                url,
                attempted: connections,
                first_error,
                out,
            });
        }
        Ok(RunSummary {
            opened: totals.opened,
            failed: totals.failed,
            receipts: totals.receipts,
            out,
            uploaded,
            previous_runs,
        })
    }
}

/// The line a probe says as it starts: what it connects to, where it
/// records, what else it does, and until when. A probe that said nothing
/// until it exits looks hung.
pub fn start_line(config: &ProbeConfig) -> String {
    let mut parts = vec![format!(
        "{}: {} connection(s) to {}{}, recording to {}",
        config.name,
        config.connections,
        request::redacted(&config.url),
        if config.reconnect {
            " (reopened when they drop)"
        } else {
            ""
        },
        config.out.display()
    )];
    if config.time_exchange {
        let server = config.time_server.clone().unwrap_or_else(|| {
            request::host_port(&config.url)
                .map(|(h, p)| format!("{h}:{p}"))
                .unwrap_or_else(|_| config.url.clone())
        });
        parts.push(format!(
            "measuring this clock against the agent's at {server} (UDP time exchange{})",
            if config.upload_token.is_some() {
                ", tagged replies only"
            } else {
                ""
            }
        ));
    } else {
        parts.push("no time exchange (--no-time-exchange): this clock is not bounded".into());
    }
    if let Some(act) = &config.act_at {
        parts.push(format!(
            "acting at each message's {} ({})",
            act.pointer(),
            match act.unit() {
                skewscope_core::act_at::ActUnit::Auto => "unit read from its size".to_owned(),
                unit => format!("in {}", unit.as_str()),
            }
        ));
    }
    if let Some(agent) = &config.upload {
        parts.push(format!("uploading to {agent}"));
    }
    let mut until = Vec::new();
    if let Some(d) = config.duration {
        until.push(format!("{d:?} have passed"));
    }
    if let Some(k) = config.count {
        until.push(format!("each connection has {k} message(s)"));
    }
    until.push("SIGINT/SIGTERM".to_owned());
    parts.push(format!("until {}", until.join(", or ")));
    parts.join("; ")
}

/// What a probe says when the agent refuses its upload's token: which
/// token it gave (the file it read), and what to give instead.
fn refused_text(config: &ProbeConfig) -> String {
    let agent = config.upload.as_deref().unwrap_or("the agent");
    const GIVE: &str = "copy the agent's token file (what the agent was given with --token-file; /etc/skewscope/agent.token where its package installed it) to this device and give it with --token-file";
    match (&config.upload_token, &config.upload_token_file) {
        (Some(_), Some(file)) => format!(
            "the agent at {agent} refused this probe's token from {} (401 Unauthorized): it is not the agent's token; {GIVE}",
            file.display()
        ),
        (Some(_), None) => format!(
            "the agent at {agent} refused this probe's token (401 Unauthorized): it is not the agent's token; {GIVE}"
        ),
        (None, _) => format!(
            "the agent at {agent} requires a token to upload (401 Unauthorized) and this probe has none: {GIVE}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_line_says_what_the_run_does() {
        let mut config = ProbeConfig::new("ws://srv:8080/ws", "/tmp/p.sklog");
        config.name = "kiosk-3".into();
        config.connections = 5;
        config.duration = Some(std::time::Duration::from_secs(30));
        config.upload = Some("http://srv:8080".into());
        let line = start_line(&config);
        assert_eq!(
            line,
            "kiosk-3: 5 connection(s) to ws://srv:8080/ws, recording to /tmp/p.sklog; \
             measuring this clock against the agent's at srv:8080 (UDP time exchange); \
             uploading to http://srv:8080; until 30s have passed, or SIGINT/SIGTERM"
        );
        config.time_exchange = false;
        assert!(start_line(&config).contains("no time exchange (--no-time-exchange)"));
    }

    #[test]
    fn a_refused_token_names_its_file_or_its_absence() {
        let mut config = ProbeConfig::new("ws://srv:8080/ws", "p.sklog");
        config.upload = Some("http://srv:8080".into());
        let none = refused_text(&config);
        assert!(none.contains("requires a token to upload"), "{none}");
        config.upload_token = Some("guess".into());
        config.upload_token_file = Some("/etc/skewscope/badtoken".into());
        let wrong = refused_text(&config);
        assert!(
            wrong.starts_with(
                "the agent at http://srv:8080 refused this probe's token from /etc/skewscope/badtoken (401 Unauthorized)"
            ),
            "{wrong}"
        );
    }
}
