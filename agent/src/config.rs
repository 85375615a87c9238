//! The agent's command line: every knob, with why it exists.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use serde::{Deserialize, Serialize};
use skewscope_core::record::SendOrder;

/// Send order within each shard's loop, as given on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OrderArg {
    /// Connection order every time: the first client connected is always first.
    Fixed,
    /// Start one place further along each broadcast, sharing the cost of being last.
    Rotate,
    /// A fresh random order per broadcast.
    Shuffle,
}

impl From<OrderArg> for SendOrder {
    fn from(o: OrderArg) -> SendOrder {
        match o {
            OrderArg::Fixed => SendOrder::Fixed,
            OrderArg::Rotate => SendOrder::Rotate,
            OrderArg::Shuffle => SendOrder::Shuffle,
        }
    }
}

/// skewscope-agent: a WebSocket broadcast hub that records when every client's
/// copy of every broadcast was written.
///
/// One port serves `GET /ws` (WebSocket; `?probe=NAME` labels a probe),
/// `POST /publish` (broadcasts the body), `GET /start_test` (broadcasts the
/// built-in test message) and `GET /healthz`. Every setting can also come from
/// a TOML file (`--config`, keys named like the flags with underscores); flags
/// override it.
#[derive(Clone, Debug, Parser, Serialize, Deserialize)]
#[command(name = "skewscope-agent", version)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// TOML file with settings (like /etc/skewscope/agent.toml); flags override it.
    #[arg(long, value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// Print the settings in effect (file and flags merged) as TOML, and exit.
    #[arg(long)]
    #[serde(skip)]
    pub print_config: bool,

    /// What to log, as `RUST_LOG` says it (`warn`, `info,agent::ingest=debug`);
    /// overrides `RUST_LOG`. Default `info`. Targets: `agent::server`,
    /// `agent::engine`, `agent::recorder`, `agent::ingest`, `agent::live`,
    /// `agent::tap`, `agent::time`.
    #[arg(long, value_name = "FILTER")]
    pub log: Option<String>,

    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// Directory for the record log (created if missing); one file per run.
    #[arg(long, default_value = "skewscope-data")]
    pub data_dir: PathBuf,

    /// File holding a bearer token that /publish and /start_test then require.
    #[arg(long)]
    pub token_file: Option<PathBuf>,

    /// File holding a bearer token that GET /metrics then requires
    /// (Prometheus: `authorization: {credentials_file: ...}`). Without it
    /// /metrics is open, like /healthz.
    #[arg(long, value_name = "FILE")]
    pub metrics_token_file: Option<PathBuf>,

    /// Serve every endpoint over TLS (`wss://`, `https://`) with this PEM
    /// certificate chain (the server's certificate first, then any
    /// intermediates); needs --tls-key. Read again on SIGHUP (a renewed
    /// certificate needs no restart). Plain `ws://` and `http://` are then
    /// refused on the port (a failed handshake, counted).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,

    /// Order in which each shard writes to its clients; recorded so lateness can
    /// be attributed to position.
    #[arg(long, value_enum, default_value_t = OrderArg::Rotate)]
    pub order: OrderArg,

    /// Fan-out shards (threads); default one per core.
    #[arg(long)]
    pub shards: Option<usize>,

    /// Largest frame or fragmented message a client may send; larger closes it (1009).
    #[arg(long, default_value_t = 64 * 1024)]
    pub max_frame: usize,

    /// Bytes a slow client may have pending before it is dropped (and the drop recorded).
    #[arg(long, default_value_t = 1024 * 1024)]
    pub max_queue_bytes: usize,

    /// Largest /publish body accepted.
    #[arg(long, default_value_t = 1024 * 1024)]
    pub max_publish: usize,

    /// The longest lead `lead=auto` gives. A site whose reads need more
    /// gets this, a warning in the response, a count on /metrics and a
    /// line in the report; a device whose reads are later than it while
    /// others' are within it is left out of the lead and named.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = skewscope_core::units::parse_duration)]
    #[serde(with = "skewscope_os::settings::duration_text")]
    pub max_lead: Duration,

    /// Most WebSocket clients at once; an upgrade past it is answered 503
    /// and counted (`/healthz` `refused_clients`), so the operator can keep
    /// the box safe. No limit by default.
    #[arg(long, value_name = "N")]
    pub max_clients: Option<usize>,

    /// A WebSocket subprotocol the hub speaks (repeatable). A client that
    /// offers some gets the first it offers that is in this list, answered
    /// in `Sec-WebSocket-Protocol` and recorded; a client that offers none
    /// of them still connects, without one (browsers then fail the
    /// connection themselves). The hub only broadcasts, so any name the
    /// real server's clients ask for may be listed.
    #[arg(long = "subprotocol", value_name = "NAME")]
    pub subprotocols: Vec<String>,

    /// Most connections whose request head has not arrived yet; past it a
    /// new connection is answered 503 and closed at once (counted in
    /// `/healthz` as `refused_pending`), so idle sockets cannot use up the
    /// open files. Each waits at most --request-timeout-secs. The default
    /// leaves room for 8,192 clients reconnecting at once.
    #[arg(long, value_name = "N", default_value_t = 8192)]
    pub max_pending: usize,

    /// Most `/publish` body bytes held at once over all requests in flight;
    /// a request that would go past it is answered 503 before its body is
    /// read, so announcing large bodies cannot exhaust memory.
    #[arg(long, default_value_t = 64 * 1024 * 1024)]
    pub max_publish_in_flight: usize,

    /// Most `/clock` sessions (the time exchange over WebSocket, for pages
    /// and apps) open at once; past it a new one is answered 503.
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub max_clock_sessions: usize,

    /// Seconds a client has to send a request head or body.
    #[arg(long, default_value_t = 10)]
    pub request_timeout_secs: u64,

    /// Milliseconds the agent waits at shutdown for its clients to answer
    /// its close frames (a browser then sees a clean close, not a reset);
    /// it stops waiting as soon as every one has answered.
    #[arg(long, default_value_t = 500)]
    pub close_wait_ms: u64,

    /// UDP port of the time exchange probes use to measure their clock's offset
    /// to this server's; default: the same number as the --listen port.
    #[arg(long)]
    pub time_port: Option<u16>,

    /// Do not serve the time exchange (probes then cannot bound their clocks).
    #[arg(long)]
    pub no_time_exchange: bool,

    /// Record the kernel's transmit timestamps of every broadcast write to a
    /// probe (`?probe=`) connection (when the packet left for the driver), so
    /// reports can split network time from fan-out time. Only probes' copies
    /// are joined with receipts, so other clients' sockets are not stamped:
    /// the cost follows the number of probe connections. Read off the send
    /// loop.
    #[arg(long)]
    pub tx_timestamps: bool,

    /// Pin shard i to the i-th core the agent may run on, when there are as
    /// many cores as shards (else it says so and does not pin). Off by
    /// default: on the 2-core development VM it did not help (see
    /// docs/benchmarks.md, "Pinned shards").
    #[arg(long)]
    pub pin_shards: bool,

    /// Decline permessage-deflate. By default the hub answers it (RFC 7692)
    /// to clients that offer it, as browsers, Python websockets and gorilla
    /// do: each broadcast is compressed once, on its own, and that one frame
    /// goes to every client that agreed (the rest get the plain frame); a
    /// payload that does not shrink goes plain to everyone. On a gigabit LAN
    /// a 4 KB JSON broadcast to 1,000 clients then arrives within 3.2 ms
    /// instead of 27 ms; a 450-byte one is unchanged (docs/benchmarks.md,
    /// "permessage-deflate on the hub").
    #[arg(long)]
    pub no_deflate: bool,

    /// Do not read the clock or record per-client send times (only to measure
    /// what recording costs).
    #[arg(long)]
    pub no_send_times: bool,

    /// Most bytes the record log may use in the data directory; the oldest
    /// segments are removed (with a log line) to stay under it.
    #[arg(long, default_value_t = 1 << 30)]
    pub max_data_bytes: u64,

    /// Size at which the record log moves on to a new segment file.
    #[arg(long, default_value_t = 64 << 20)]
    pub segment_bytes: u64,

    /// Also follow another server on this host: record the fan-out of its
    /// local TCP port PORT from its outgoing packets (AF_PACKET; needs
    /// CAP_NET_RAW). The hub and the time port keep serving.
    #[arg(long, value_name = "PORT")]
    pub tap_port: Option<u16>,

    /// Capture on this interface only (default: all).
    #[arg(long, value_name = "IF", requires = "tap_port")]
    pub tap_interface: Option<String>,

    /// Bytes of the capture ring, in 1 MiB blocks: packets wait there for the
    /// tap thread. Each block holds up to 40 ms of packets, so the default 32
    /// blocks cover the tap being kept off the CPU for 1.28 s, or about
    /// 50,000 packets of a broadcast.
    #[arg(long, default_value_t = 32 << 20)]
    pub tap_ring_bytes: usize,
}

impl skewscope_os::settings::FileSettings for AgentConfig {
    fn config_file(&self) -> Option<&std::path::Path> {
        self.config.as_deref()
    }

    fn keep_command_line_only(&mut self, cli: &Self) {
        self.config.clone_from(&cli.config);
        self.print_config = cli.print_config;
    }
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig::parse_from(["skewscope-agent"])
    }
}

impl AgentConfig {
    /// The defaults, listening on loopback port 0 and writing to `data_dir`:
    /// what `skewscope demo`, tests and benchmarks start from.
    pub fn local(data_dir: PathBuf) -> AgentConfig {
        let mut c = AgentConfig::parse_from(["skewscope-agent", "--listen", "127.0.0.1:0"]);
        c.data_dir = data_dir;
        c
    }

    /// Shards to start: `--shards`, else one per available core.
    pub fn shard_count(&self) -> usize {
        self.shards
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1)
    }

    /// `--request-timeout-secs` as a duration.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs)
    }
}
