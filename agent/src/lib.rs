//! skewscope-agent: a WebSocket broadcast hub whose fan-out engine is built for
//! a 2-core server, recording every broadcast's per-client send times.
//!
//! Two rooms: `server` accepts connections, answers HTTP and performs the
//! WebSocket upgrade (on tokio); `engine` is the fan-out: the hub starts a
//! broadcast across the shards, each shard a thread writing one pre-encoded
//! frame to all its clients. Around them: `recorder` writes the log off the
//! hot path into `segments`, `time_port` answers the probes' time exchange,
//! `clock_watch` records what the server clock claims about itself, `ingest`
//! stores what probes upload, `live` joins the two for `/metrics`, and `tap`
//! follows a server the agent does not replace.
//!
//! Handles down, events up: [`RunningAgent::start`] creates every counter
//! (`counters`) and live figure (`live`) once and hands each part the ones
//! it updates; the recorder and the ingest worker send what they wrote up
//! to the live join through a feed they are given. No part holds a
//! reference back up to what built it, and `/metrics` and `/healthz` only
//! render handles (docs/layout.md draws the graph).
//!
//! Public: [`RunningAgent`] and its [`AgentConfig`], and [`http_client`], the
//! small HTTP client demos and tests trigger broadcasts with. The `bench`
//! feature also exposes what `skewscope-bench` builds its floor server from.

#![forbid(unsafe_code)]

mod clock_watch;
pub mod config;
mod counters;
mod engine;
pub mod error;
mod exposition;
pub mod http_client;
mod ingest;
mod live;
mod metrics;
mod quiet;
mod recorder;
mod segments;
mod server;
mod start_steps;
mod sweep_board;
mod tap;
mod time_port;
pub mod tls;

/// The pieces `skewscope-bench` builds its floor server from, so the floor
/// and the agent share their HTTP, upgrade and frame-encoding code.
#[cfg(feature = "bench")]
pub mod bench {
    pub use crate::engine::shard::encode;
    pub use crate::engine::wire::Wire;
    pub use crate::server::{conn, http, upgrade};
}

/// The agent's own readers of bytes from peers, for the fuzz targets
/// (`fuzz/`): the HTTP request head, parsed as the server parses it.
#[cfg(feature = "decoders")]
pub mod decoders {
    pub use crate::server::http::{HeadError, MAX_HEAD, Request, parse_head};
}

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use skewscope_core::record::AgentRecord;
use tokio::sync::watch;

pub use config::AgentConfig;
pub use error::{ShutdownError, StartError};

use crate::counters::AgentCounters;
use crate::engine::hub::{self, Hub};
use crate::live::{LiveFigures, LiveThread};
use crate::recorder::RecorderThread;
use crate::server::context::Context;
use crate::start_steps::{self as steps, Secrets};

pub use engine::shard::SHARD_STUCK_AFTER;

/// A running agent: its address, its log, and the way to stop it.
pub struct RunningAgent {
    /// The address it listens on (the real port when 0 was asked for).
    pub addr: SocketAddr,
    /// The record log being written.
    pub log_path: PathBuf,
    /// The UDP time port, unless disabled.
    pub time_addr: Option<SocketAddr>,
    hub: Arc<Hub>,
    time_port: Option<time_port::TimePort>,
    tap: Option<tap::TapThread>,
    recorder: RecorderThread,
    live: LiveThread,
    clock_watch: clock_watch::ClockWatch,
    shards_stuck: prometheus_client::metrics::gauge::Gauge,
    tls: Option<Arc<tls::ServerTls>>,
    stop: watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
}

impl RunningAgent {
    /// Binds, starts the shards and the recorder, and serves on the current
    /// tokio runtime.
    pub async fn start(config: AgentConfig) -> Result<RunningAgent, StartError> {
        let Secrets {
            token,
            metrics_token,
            tls,
        } = steps::secrets(&config)?;
        // Every client is a socket: make the whole hard limit available.
        skewscope_os::files::raise_open_file_limit()
            .map_err(StartError::os("raise the open-file limit"))?;
        let (listener, time_socket) = steps::bind_both(&config)?;
        let addr = listener
            .local_addr()
            .map_err(StartError::os("read the listener's address"))?;
        steps::warn_if_open(token.as_deref(), addr);
        let limits = steps::data_limits(&config)?;
        let shards = config.shard_count();
        // Every counter and figure, created once and handed down.
        let counters = AgentCounters::new(time_socket.is_some());
        let figures = LiveFigures::new();
        let auto_lead = figures.auto_lead();
        let metrics = metrics::Metrics::new(&counters, &figures);
        let (live, feed) = LiveThread::start(
            figures,
            skewscope_os::clock::now().wall_ns,
            shards,
            config.max_lead,
        )
        .map_err(StartError::os("start the live join's thread"))?;
        let (recorder, audit) = steps::start_recording(&config, limits, shards, &counters, &feed)?;
        let hub = steps::start_hub(&config, shards, &recorder, &counters)?;
        // The time exchange's tag key, derived from the token once for the
        // UDP port and `/clock` alike.
        let time_key = token
            .as_deref()
            .map(skewscope_core::time_exchange::TimeKey::from_token);
        let time_port = steps::start_time_port(time_socket, &counters, time_key.clone())?;
        let tap = steps::start_tap(&config, &recorder)?;
        let (ingest, ingest_worker) = steps::start_ingest(&config, &counters, feed)?;
        let publish_budget_bytes = config
            .max_publish_in_flight
            .min(tokio::sync::Semaphore::MAX_PERMITS);
        let context = Arc::new(Context {
            hub: hub.clone(),
            token,
            time_key,
            auto_lead,
            max_publish: config.max_publish,
            max_clients: config.max_clients,
            subprotocols: config.subprotocols.clone(),
            counters: counters.clone(),
            metrics,
            metrics_token: metrics_token.clone(),
            pending: Arc::new(tokio::sync::Semaphore::new(
                config
                    .max_pending
                    .clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
            )),
            publish_budget: Arc::new(tokio::sync::Semaphore::new(publish_budget_bytes)),
            body_work: Arc::new(tokio::sync::Semaphore::new(1)),
            clock_sessions: Arc::new(tokio::sync::Semaphore::new(
                config
                    .max_clock_sessions
                    .clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
            )),
            request_timeout: config.request_timeout(),
            ingest,
            ingest_worker,
            quiet: hub.quiet(),
            audit,
            sweep_board: sweep_board::SweepBoard::default(),
            tls: tls.clone(),
        });
        let (stop, stopped) = watch::channel(false);
        let clock_watch =
            clock_watch::ClockWatch::start(recorder.handle(), counters.time_port.clone())
                .map_err(StartError::os("start the clock watch"))?;
        let server = tokio::spawn(server::serve(listener, context, stopped));
        Ok(RunningAgent {
            addr,
            log_path: recorder.path.clone(),
            time_addr: time_port.as_ref().map(|t| t.addr),
            time_port,
            tap,
            hub,
            recorder,
            live,
            clock_watch,
            shards_stuck: counters.shards_stuck.clone(),
            tls,
            stop,
            server,
        })
    }

    /// Broadcasts the built-in test message without going through HTTP: for
    /// in-process benchmarks that time the fan-out alone.
    pub async fn start_test(&self) -> hub::Broadcasted {
        self.hub.start_test(None).await
    }

    /// Connected WebSocket clients.
    pub fn clients(&self) -> usize {
        self.hub.clients()
    }

    /// Waits until exactly `n` WebSocket clients are connected, for at most
    /// `limit`: whoever starts clients (a test, a benchmark) must know the
    /// hub counts them all before it broadcasts, and a count that never
    /// comes must end the wait. `Err` holds the count seen last.
    pub async fn wait_for_clients(
        &self,
        n: usize,
        limit: std::time::Duration,
    ) -> Result<(), usize> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let seen = self.clients();
            if seen == n {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(seen);
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    /// Starts a new record-log segment (what SIGHUP does).
    pub fn reopen_log(&self) {
        self.recorder.reopen();
    }

    /// Reads `--tls-cert` and `--tls-key` again (what SIGHUP also does):
    /// new connections get the new pair. Without TLS, nothing to do.
    pub async fn reload_tls(&self) -> Result<(), tls::TlsError> {
        let Some(tls) = self.tls.clone() else {
            return Ok(());
        };
        // Off the runtime's thread: file reads never hold the requests up.
        tokio::task::spawn_blocking(move || tls.reload())
            .await
            .unwrap_or_else(|e| Err(tls::TlsError::Pair(format!("the reload failed: {e}"))))
    }

    /// Whether the agent serves its port over TLS.
    pub fn tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Whether every engine thread still runs, and every shard still handles
    /// its commands (none stuck for [`SHARD_STUCK_AFTER`]): what the systemd
    /// watchdog is pinged on.
    /// Also sets `skewscope_shards_stuck`, so an alert sees what the
    /// watchdog sees (a scrape of `/metrics` runs the same check).
    pub fn healthy(&self) -> bool {
        let stuck = self
            .hub
            .shards_stuck(skewscope_os::clock::mono_ns(), SHARD_STUCK_AFTER);
        self.shards_stuck.set(stuck as i64);
        self.recorder.alive() && self.hub.has_shards() && stuck == 0 && !self.server.is_finished()
    }

    /// Stops accepting, closes every client, and flushes and syncs the log.
    pub async fn shutdown(self) -> Result<(), ShutdownError> {
        let _ = self.stop.send(true);
        let _ = self.server.await;
        let hub = self.hub;
        let recorder = self.recorder;
        let mut time_port = self.time_port;
        let tap = self.tap;
        let live = self.live;
        let clock_watch = self.clock_watch;
        tokio::task::spawn_blocking(move || {
            clock_watch.stop();
            if let Some(tap) = tap {
                tap.stop();
            }
            if let Some(port) = time_port.as_mut() {
                port.stop();
                recorder
                    .handle()
                    .record(AgentRecord::TimePort(port.counters.snapshot()));
            }
            hub.shutdown();
            let lost = recorder.finish();
            live.stop();
            lost
        })
        .await
        .map_err(ShutdownError::Panicked)
        .and_then(|lost| match lost {
            0 => Ok(()),
            n => Err(ShutdownError::RecordsLost(n)),
        })
    }
}
