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

use skewscope_core::record::{AgentRecord, AgentStarted};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use config::AgentConfig;
pub use error::{ShutdownError, StartError};

use crate::counters::AgentCounters;
use crate::engine::hub::{self, Hub, HubConfig};
use crate::engine::shard::ShardConfig;
use crate::live::{LiveFigures, LiveThread};
use crate::recorder::RecorderThread;
use crate::server::context::Context;

/// Pending connections the kernel holds for us: 10,000 clients reconnecting at
/// once must not be refused.
const LISTEN_BACKLOG: i32 = 4096;

pub use engine::shard::SHARD_STUCK_AFTER;

/// The stuck-shard test hook, in builds with the `test-hooks` feature only:
/// `SKEWSCOPE_AGENT_TEST_STALL_SHARD=N` makes shard N block for good at its
/// first broadcast (said in the log), so the boot test can see systemd's
/// watchdog restart the agent.
#[cfg(any(test, feature = "test-hooks"))]
fn stall_shard_test_hook() -> Option<u16> {
    let shard = std::env::var("SKEWSCOPE_AGENT_TEST_STALL_SHARD")
        .ok()?
        .parse()
        .ok()?;
    tracing::warn!(
        target: "agent::engine",
        "TEST HOOK: shard {shard} will stall at its first broadcast (SKEWSCOPE_AGENT_TEST_STALL_SHARD)"
    );
    Some(shard)
}

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
        let token = match &config.token_file {
            Some(path) => Some(read_token(path)?),
            None => None,
        };
        let metrics_token = match &config.metrics_token_file {
            Some(path) => Some(read_token(path)?),
            None => None,
        };
        let tls = match (&config.tls_cert, &config.tls_key) {
            (Some(cert), Some(key)) => Some(Arc::new(tls::ServerTls::load(cert, key)?)),
            (None, None) => None,
            _ => {
                return Err(StartError::Tls(tls::TlsError::Pair(
                    "give both, or neither".into(),
                )));
            }
        };
        // Every client is a socket: make the whole hard limit available.
        skewscope_os::files::raise_open_file_limit()
            .map_err(StartError::os("raise the open-file limit"))?;
        let (listener, time_socket) = bind_both(&config)?;
        let addr = listener
            .local_addr()
            .map_err(StartError::os("read the listener's address"))?;
        if token.is_none() && !addr.ip().is_loopback() {
            tracing::warn!(
                target: "agent",
                "no --token-file: /publish, /start_test, /ingest and /audit/* on {addr} are open to anyone who can reach it (they can make every screen show what they like, read the logs and upload invented probe runs); give --token-file FILE, as the package does"
            );
        }
        if config.max_data_bytes < 2 * config.segment_bytes {
            return Err(StartError::DataLimits {
                max_data_bytes: config.max_data_bytes,
                segment_bytes: config.segment_bytes,
            });
        }
        let limits = segments::Limits {
            segment_bytes: config.segment_bytes,
            max_data_bytes: config.max_data_bytes,
        };
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
        let recorder = RecorderThread::start(
            &config.data_dir,
            limits,
            counters.records_lost.clone(),
            Box::new(feed.clone()),
        )
        .map_err(|source| StartError::RecordLog {
            dir: config.data_dir.clone(),
            source,
        })?;
        let order = config.order.into();
        recorder.handle().record(AgentRecord::Started(AgentStarted {
            host: skewscope_os::host::host_name(),
            version: env!("CARGO_PKG_VERSION").into(),
            at: skewscope_os::clock::now(),
            shards: shards as u16,
            order,
            per_client_times: !config.no_send_times,
        }));
        let identity = skewscope_os::host::new_run_identity()
            .map_err(StartError::os("draw a run id from /dev/urandom"))?;
        let audit = server::audit::AuditSource {
            data_dir: config.data_dir.clone(),
            segment_stem: segments::stem_of(&recorder.path),
            run_id: identity.run_id,
        };
        recorder.handle().record(AgentRecord::Identity(identity));
        let hub = Arc::new(
            Hub::start(
                HubConfig {
                    shards,
                    pin_shards: config.pin_shards,
                    deflate: !config.no_deflate,
                    shard: ShardConfig {
                        order,
                        record_send_times: !config.no_send_times,
                        max_frame: config.max_frame,
                        max_queue_bytes: config.max_queue_bytes,
                        tx_timestamps: config.tx_timestamps,
                        close_wait: std::time::Duration::from_millis(config.close_wait_ms),
                        #[cfg(any(test, feature = "test-hooks"))]
                        stall_shard: stall_shard_test_hook(),
                    },
                },
                recorder.handle(),
                counters.clients.clone(),
                counters.broadcasts.clone(),
            )
            .map_err(StartError::os("start the hub's shards"))?,
        );
        // The time exchange's tag key, derived from the token once for the
        // UDP port and `/clock` alike.
        let time_key = token
            .as_deref()
            .map(skewscope_core::time_exchange::TimeKey::from_token);
        let time_port = match (time_socket, &counters.time_port) {
            (Some(socket), Some(port_counters)) => Some(
                time_port::TimePort::serve_on(socket, port_counters.clone(), time_key.clone())
                    .map_err(StartError::os("serve the time exchange"))?,
            ),
            _ => None,
        };
        let tap = match config.tap_port {
            Some(port) => Some(
                tap::TapThread::start(
                    port,
                    config.tap_interface.clone(),
                    config.tap_ring_bytes,
                    skewscope_core::tap::protocol::TapReading {
                        protocol: config.tap_protocol,
                        events: config.tap_event.clone(),
                    },
                    recorder.handle(),
                )
                .map_err(|source| StartError::Tap { port, source })?,
            ),
            None => None,
        };
        let ingest = Arc::new(
            ingest::IngestStore::new(
                &config.data_dir,
                config.max_data_bytes,
                counters.ingest.clone(),
            )
            .map_err(|source| StartError::ProbeRuns {
                dir: config.data_dir.clone(),
                source,
            })?,
        );
        let ingest_worker = ingest::Worker::start(ingest.clone(), feed)
            .map_err(StartError::os("start the ingest thread"))?;
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
            stamping: Arc::new(tokio::sync::Semaphore::new(1)),
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

/// Binds the TCP listener and, unless turned off, the UDP time port on the
/// same port number. With an ephemeral port (`:0`), a UDP port of that
/// number already taken (by some other program's ephemeral socket) is not
/// an error: another TCP port is drawn, a bounded number of times.
fn bind_both(
    config: &AgentConfig,
) -> Result<(TcpListener, Option<std::net::UdpSocket>), StartError> {
    const ATTEMPTS: usize = 32;
    let drawn = config.listen.port() == 0 && config.time_port.is_none();
    for attempt in 1..=ATTEMPTS {
        let listener = bind(config.listen).map_err(|source| StartError::Listen {
            addr: config.listen,
            source,
        })?;
        if config.no_time_exchange {
            return Ok((listener, None));
        }
        let addr = listener
            .local_addr()
            .map_err(StartError::os("read the listener's address"))?;
        let time_addr = SocketAddr::new(addr.ip(), config.time_port.unwrap_or(addr.port()));
        match std::net::UdpSocket::bind(time_addr) {
            Ok(socket) => return Ok((listener, Some(socket))),
            Err(e) if drawn && e.kind() == std::io::ErrorKind::AddrInUse && attempt < ATTEMPTS => {}
            Err(source) => {
                return Err(StartError::TimePort {
                    addr: time_addr,
                    source,
                });
            }
        }
    }
    unreachable!("the last attempt returns")
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::from_std(skewscope_os::sockets::listener(addr, LISTEN_BACKLOG)?)
}

fn read_token(path: &std::path::Path) -> Result<String, StartError> {
    let token = std::fs::read_to_string(path).map_err(|source| StartError::TokenFile {
        path: path.to_owned(),
        source,
    })?;
    let token = token.trim().to_owned();
    if token.is_empty() {
        return Err(StartError::EmptyToken {
            path: path.to_owned(),
        });
    }
    Ok(token)
}
