//! The steps an agent starts in, in the order [`crate::RunningAgent::start`]
//! takes them: its secrets, its sockets, its data directory's limits, the
//! record log and the run's first records, the hub's shards, the time port,
//! the tap, and the store of what probes upload. Each is one thing that can
//! fail with its own [`StartError`], so a start that fails says which step.

use std::net::SocketAddr;
use std::sync::Arc;

use skewscope_core::record::{AgentRecord, AgentStarted};
use skewscope_core::time_exchange::TimeKey;
use tokio::net::TcpListener;

use crate::config::AgentConfig;
use crate::counters::AgentCounters;
use crate::engine::hub::{Hub, HubConfig};
use crate::engine::shard::ShardConfig;
use crate::error::StartError;
use crate::live::LiveFeed;
use crate::recorder::RecorderThread;
use crate::{ingest, segments, server, tap, time_port, tls};

/// Pending connections the kernel holds for us: 10,000 clients reconnecting at
/// once must not be refused.
const LISTEN_BACKLOG: i32 = 4096;

/// What the agent is given to keep secret: the token for its API and time
/// tags, the one for `/metrics`, and its TLS pair.
pub(crate) struct Secrets {
    /// `--token-file`'s token.
    pub token: Option<String>,
    /// `--metrics-token-file`'s token.
    pub metrics_token: Option<String>,
    /// `--tls-cert` and `--tls-key`, loaded.
    pub tls: Option<Arc<tls::ServerTls>>,
}

/// Reads the tokens and loads the TLS pair; a file that cannot be read, an
/// empty token or half a pair is an error.
pub(crate) fn secrets(config: &AgentConfig) -> Result<Secrets, StartError> {
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
    Ok(Secrets {
        token,
        metrics_token,
        tls,
    })
}

/// Says, once at start, that an agent reachable from the LAN without a
/// token lets anyone publish, audit and upload.
pub(crate) fn warn_if_open(token: Option<&str>, addr: SocketAddr) {
    if token.is_none() && !addr.ip().is_loopback() {
        tracing::warn!(
            target: "agent",
            "no --token-file: /publish, /start_test, /ingest and /audit/* on {addr} are open to anyone who can reach it (they can make every screen show what they like, read the logs and upload invented probe runs); give --token-file FILE, as the package does"
        );
    }
}

/// The data directory's limits, refused when the budget cannot hold two
/// segments (the one being written and the one before it).
pub(crate) fn data_limits(config: &AgentConfig) -> Result<segments::Limits, StartError> {
    if config.max_data_bytes < 2 * config.segment_bytes {
        return Err(StartError::DataLimits {
            max_data_bytes: config.max_data_bytes,
            segment_bytes: config.segment_bytes,
        });
    }
    Ok(segments::Limits {
        segment_bytes: config.segment_bytes,
        max_data_bytes: config.max_data_bytes,
    })
}

/// Starts the record log, its writes seen by the live join through `feed`,
/// and records the run's first records (who started it, and its identity);
/// also what `/audit/*` serves of this run.
pub(crate) fn start_recording(
    config: &AgentConfig,
    limits: segments::Limits,
    shards: usize,
    counters: &AgentCounters,
    feed: &LiveFeed,
) -> Result<(RecorderThread, server::audit::AuditSource), StartError> {
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
    recorder.handle().record(AgentRecord::Started(AgentStarted {
        host: skewscope_os::host::host_name(),
        version: env!("CARGO_PKG_VERSION").into(),
        at: skewscope_os::clock::now(),
        shards: shards as u16,
        order: config.order.into(),
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
    Ok((recorder, audit))
}

/// Starts the hub's shards, each recording its sends into `recorder`.
pub(crate) fn start_hub(
    config: &AgentConfig,
    shards: usize,
    recorder: &RecorderThread,
    counters: &AgentCounters,
) -> Result<Arc<Hub>, StartError> {
    let hub = Hub::start(
        HubConfig {
            shards,
            pin_shards: config.pin_shards,
            deflate: !config.no_deflate,
            shard: ShardConfig {
                order: config.order.into(),
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
    .map_err(StartError::os("start the hub's shards"))?;
    Ok(Arc::new(hub))
}

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

/// Serves the time exchange on `socket` (none when it is turned off),
/// its replies tagged with `key` when the agent has a token.
pub(crate) fn start_time_port(
    socket: Option<std::net::UdpSocket>,
    counters: &AgentCounters,
    key: Option<TimeKey>,
) -> Result<Option<time_port::TimePort>, StartError> {
    match (socket, &counters.time_port) {
        (Some(socket), Some(port_counters)) => Ok(Some(
            time_port::TimePort::serve_on(socket, port_counters.clone(), key)
                .map_err(StartError::os("serve the time exchange"))?,
        )),
        _ => Ok(None),
    }
}

/// Starts following `--tap-port`'s server, when given.
pub(crate) fn start_tap(
    config: &AgentConfig,
    recorder: &RecorderThread,
) -> Result<Option<tap::TapThread>, StartError> {
    let Some(port) = config.tap_port else {
        return Ok(None);
    };
    let thread = tap::TapThread::start(
        port,
        config.tap_interface.clone(),
        config.tap_ring_bytes,
        skewscope_core::tap::protocol::TapReading {
            protocol: config.tap_protocol,
            events: config.tap_event.clone(),
        },
        recorder.handle(),
    )
    .map_err(|source| StartError::Tap { port, source })?;
    Ok(Some(thread))
}

/// Opens the store of the runs probes upload, and starts the thread that
/// writes them, its records seen by the live join through `feed`.
pub(crate) fn start_ingest(
    config: &AgentConfig,
    counters: &AgentCounters,
    feed: LiveFeed,
) -> Result<(Arc<ingest::IngestStore>, ingest::Worker), StartError> {
    let store = Arc::new(
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
    let worker = ingest::Worker::start(store.clone(), feed)
        .map_err(StartError::os("start the ingest thread"))?;
    Ok((store, worker))
}

/// Binds the TCP listener and, unless turned off, the UDP time port on the
/// same port number. With an ephemeral port (`:0`), a UDP port of that
/// number already taken (by some other program's ephemeral socket) is not
/// an error: another TCP port is drawn, a bounded number of times.
pub(crate) fn bind_both(
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

/// A TCP listener on `addr` with the agent's backlog.
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::from_std(skewscope_os::sockets::listener(addr, LISTEN_BACKLOG)?)
}

/// A token file's token: its text, trimmed; empty is an error.
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
