//! The agent's command line: every knob, with why it exists.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};
use serde::{Deserialize, Serialize};
use skewscope_core::record::SendOrder;
use skewscope_core::tap::protocol::TapProtocol;
use skewscope_core::units::parse_size;

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

/// A size flag's text (`64KiB`, `1GiB`, or bytes) as a `u64`.
fn parse_size_u64(text: &str) -> Result<u64, String> {
    parse_size(text).map(|bytes| bytes as u64)
}

/// Sizes in a settings file: a number of bytes (`65536`) or text as the
/// flags take it (`"64KiB"`, `"1GiB"`); printed as bytes, which every
/// version reads.
mod size_text {
    use serde::{Deserialize, Deserializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }

    fn read<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        match Size::deserialize(d)? {
            Size::Bytes(b) => Ok(b),
            Size::Text(t) => skewscope_core::units::parse_size(&t)
                .map(|b| b as u64)
                .map_err(serde::de::Error::custom),
        }
    }

    /// A `usize` size.
    pub mod usize {
        use serde::{Deserializer, Serializer};

        /// Writes it as bytes.
        pub fn serialize<S: Serializer>(v: &usize, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_u64(*v as u64)
        }

        /// Reads bytes or text.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
            let bytes = crate::config::size_text::read(d)?;
            usize::try_from(bytes).map_err(|_| serde::de::Error::custom("too large"))
        }
    }

    /// A `u64` size.
    pub mod u64 {
        use serde::{Deserializer, Serializer};

        /// Writes it as bytes.
        pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_u64(*v)
        }

        /// Reads bytes or text.
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
            crate::config::size_text::read(d)
        }
    }
}

/// The help's sections, by what a person came to do.
mod heading {
    pub const REACH: &str = "Where clients reach it, and who may use it";
    pub const RECORD: &str = "What it records";
    pub const FANOUT: &str = "How it sends (the fan-out)";
    pub const CLOCK: &str = "The clock it serves (time exchange)";
    pub const ACT: &str = "Acting together";
    pub const TAP: &str = "Recording a server it does not run (the tap)";
    pub const LIMITS: &str = "Limits against misbehaving clients";
    pub const SETTINGS: &str = "Settings and logging";
}

/// skewscope-agent: a WebSocket broadcast hub that records when every
/// client's copy of every broadcast was written, and serves this host's
/// clock to the devices.
///
/// One port (--listen) serves, over HTTP and WebSocket:
///   /ws                 the hub: kiosks and probes connect here (?probe=NAME labels a probe)
///   POST /publish       broadcast the body (?lead=30ms|auto writes a time to act into it)   [token]
///   /start_test         broadcast the built-in test message (?lead=)                       [token]
///   /ingest             probes upload their records here (--upload)                        [token]
///   /audit/status, /audit/log   what `skewscope audit` reads                               [token]
///   /metrics            Prometheus                                      [--metrics-token-file]
///   /clock              this host's clock over WebSocket, for pages and apps (tagged with the token)
///   /healthz, /probe, /skewscope-clock.js   health, the browser probe page, the clock module
/// and on UDP, the same port number: the probes' time exchange (--time-port).
/// [token]: with --token-file, these need `Authorization: Bearer TOKEN`
/// (a 401 without it). Unknown query parameters are refused (400).
///
/// By default it listens on 127.0.0.1:8080, this host only: for devices on
/// the LAN give --listen 0.0.0.0:8080. Every setting can also come from a
/// TOML file (--config, keys named like the flags with underscores; sizes
/// as bytes or like "64MiB"); flags override it.
#[derive(Clone, Debug, Parser, Serialize, Deserialize)]
#[command(name = "skewscope-agent", version, verbatim_doc_comment)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// Address and port to listen on, for WebSocket and HTTP (and the UDP
    /// time exchange on the same port number). The default answers on
    /// this host only: devices on the LAN need --listen 0.0.0.0:8080 (every
    /// address) or this host's LAN address. Port 0 picks a free port; the
    /// address is printed.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:8080", help_heading = heading::REACH)]
    pub listen: SocketAddr,

    /// File holding the bearer token (`Authorization: Bearer TOKEN`) that
    /// /publish, /start_test, /ingest (the probes' uploads) and /audit/*
    /// then require; /clock and the UDP time exchange tag every reply with
    /// it, so probes and pages given the same token refuse forged times.
    /// Give the same file to the probes (--token-file) and to `skewscope
    /// audit --token-file`.
    #[arg(long, value_name = "FILE", help_heading = heading::REACH)]
    pub token_file: Option<PathBuf>,

    /// File holding a bearer token that GET /metrics then requires
    /// (Prometheus: `authorization: {credentials_file: ...}`). Without it
    /// /metrics is open, like /healthz.
    #[arg(long, value_name = "FILE", help_heading = heading::REACH)]
    pub metrics_token_file: Option<PathBuf>,

    /// Serve every endpoint over TLS (`wss://`, `https://`) with this PEM
    /// certificate chain (the server's certificate first, then any
    /// intermediates); needs --tls-key. Read again on SIGHUP (a renewed
    /// certificate needs no restart). Plain `ws://` and `http://` are then
    /// refused on the port (a failed handshake, counted).
    #[arg(long, value_name = "FILE", requires = "tls_key", help_heading = heading::REACH)]
    pub tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE", requires = "tls_cert", help_heading = heading::REACH)]
    pub tls_key: Option<PathBuf>,

    /// A WebSocket subprotocol the hub speaks (repeatable). A client that
    /// offers some gets the first it offers that is in this list, answered
    /// in `Sec-WebSocket-Protocol` and recorded; a client that offers none
    /// of them still connects, without one (browsers then fail the
    /// connection themselves). The hub only broadcasts, so any name the
    /// real server's clients ask for may be listed.
    #[arg(long = "subprotocol", value_name = "NAME", help_heading = heading::REACH)]
    pub subprotocols: Vec<String>,

    /// Directory for the record logs (created if missing): this run's
    /// segments, and the runs probes upload (probes/).
    #[arg(long, value_name = "DIR", default_value = "skewscope-data", help_heading = heading::RECORD)]
    pub data_dir: PathBuf,

    /// Also ask the kernel when each copy to a probe left for the network
    /// card (a transmit timestamp), not only when write() returned. The
    /// report's "network" time of a copy then starts there, so it is not
    /// shortened by the time the kernel spent before write() returned (on
    /// one host a receiver can even have its copy before). Only probes'
    /// (?probe=) sockets are stamped: the cost follows their number, not
    /// the clients'. Off by default (docs/manual-use.md has its cost).
    #[arg(long, help_heading = heading::RECORD)]
    pub tx_timestamps: bool,

    /// Record no send times at all: no clock read per copy, so reports have
    /// no fan-out, latency or network figures. Only for measuring what
    /// recording costs (docs/benchmarks.md); never in a deployment.
    #[arg(long, help_heading = heading::RECORD)]
    pub no_send_times: bool,

    /// Most the record logs may use in the data directory (like 1GiB), its
    /// segments and the probes' uploads together; the oldest segments are
    /// removed (with a log line) to stay under it.
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_size_u64, help_heading = heading::RECORD)]
    #[serde(with = "size_text::u64")]
    pub max_data_bytes: u64,

    /// Size (like 64MiB) at which the record log moves on to a new segment file.
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size_u64, help_heading = heading::RECORD)]
    #[serde(with = "size_text::u64")]
    pub segment_bytes: u64,

    /// Order in which each shard writes to its clients; recorded so lateness can
    /// be attributed to position.
    #[arg(long, value_enum, default_value_t = OrderArg::Rotate, help_heading = heading::FANOUT)]
    pub order: OrderArg,

    /// Fan-out shards (threads); default one per core.
    #[arg(long, value_name = "N", help_heading = heading::FANOUT)]
    pub shards: Option<usize>,

    /// What a slow client may have waiting to be sent (like 1MiB) before
    /// it is dropped, and the drop recorded: one slow client never holds
    /// up the others.
    #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = parse_size, help_heading = heading::FANOUT)]
    #[serde(with = "size_text::usize")]
    pub max_queue_bytes: usize,

    /// Milliseconds the agent waits at shutdown for its clients to answer
    /// its close frames (a browser then sees a clean close, not a reset);
    /// it stops waiting as soon as every one has answered.
    #[arg(long, value_name = "MS", default_value_t = 500, help_heading = heading::FANOUT)]
    pub close_wait_ms: u64,

    /// Pin shard i to the i-th core the agent may run on, when there are as
    /// many cores as shards (else it says so and does not pin). Off by
    /// default: on the 2-core development VM it did not help (see
    /// docs/benchmarks.md, "Pinned shards").
    #[arg(long, help_heading = heading::FANOUT)]
    pub pin_shards: bool,

    /// Decline permessage-deflate. By default the hub answers it (RFC 7692)
    /// to clients that offer it, as browsers, Python websockets and gorilla
    /// do: each broadcast is compressed once, on its own, and that one frame
    /// goes to every client that agreed (the rest get the plain frame); a
    /// payload that does not shrink goes plain to everyone. On a gigabit LAN
    /// a 4 KB JSON broadcast to 1,000 clients then arrives within 3.2 ms
    /// instead of 27 ms; a 450-byte one is unchanged (docs/benchmarks.md,
    /// "permessage-deflate on the hub").
    #[arg(long, help_heading = heading::FANOUT)]
    pub no_deflate: bool,

    /// The longest lead `lead=auto` gives. A site whose reads need more
    /// gets this, a warning in the response, a count on /metrics and a
    /// line in the report; a device whose reads are later than it while
    /// others' are within it is left out of the lead and named.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = skewscope_core::units::parse_duration, help_heading = heading::ACT)]
    #[serde(with = "skewscope_os::settings::duration_text")]
    pub max_lead: Duration,

    /// Most `/clock` sessions (the time exchange over WebSocket, for pages
    /// and apps) open at once; past it a new one is answered 503.
    #[arg(long, value_name = "N", default_value_t = 4096, help_heading = heading::CLOCK)]
    pub max_clock_sessions: usize,

    /// UDP port of the time exchange probes use to measure their clock's offset
    /// to this server's; default: the same number as the --listen port.
    #[arg(long, value_name = "PORT", help_heading = heading::CLOCK)]
    pub time_port: Option<u16>,

    /// Do not serve the time exchange (probes then cannot bound their clocks).
    #[arg(long, help_heading = heading::CLOCK)]
    pub no_time_exchange: bool,

    /// Also follow another server on this host: record the fan-out of its
    /// local TCP port PORT from its outgoing packets (AF_PACKET; needs
    /// CAP_NET_RAW). The hub and the time port keep serving.
    #[arg(long, value_name = "PORT", help_heading = heading::TAP)]
    pub tap_port: Option<u16>,

    /// Capture on this interface only (default: all).
    #[arg(long, value_name = "IF", requires = "tap_port", help_heading = heading::TAP)]
    pub tap_interface: Option<String>,

    /// What the tapped server's WebSockets carry: `auto` reads each
    /// connection as it says (the subprotocol its 101 selected: v12.stomp
    /// is STOMP, mqtt is MQTT; a first message that is Engine.IO's open
    /// packet is Socket.IO; else plain messages). `ws`, `socketio`,
    /// `stomp` or `mqtt` reads every one as that, for a server that selects
    /// no subprotocol. The tap then records each protocol's payloads (an
    /// event's arguments, a MESSAGE's body, a PUBLISH's payload), what the
    /// probes' --protocol records, never its pings or acknowledgements.
    /// Event streams (text/event-stream) are always read as SSE.
    #[arg(long, value_name = "PROTOCOL", default_value = "auto", help_heading = heading::TAP)]
    pub tap_protocol: TapProtocol,

    /// A Socket.IO event name or SSE event type the tap records
    /// (repeatable; default every one): give the probes' --event, so a
    /// copy they chose not to record is not counted as one they missed.
    #[arg(long, value_name = "NAME", requires = "tap_port", help_heading = heading::TAP)]
    pub tap_event: Vec<String>,

    /// The capture ring (like 32MiB, in 1 MiB blocks): packets wait there
    /// for the tap thread. Each block holds up to 40 ms of packets, so the
    /// default 32 blocks cover the tap being kept off the CPU for 1.28 s,
    /// or about 50,000 packets of a broadcast.
    #[arg(long, value_name = "SIZE", default_value = "32MiB", value_parser = parse_size, help_heading = heading::TAP)]
    #[serde(with = "size_text::usize")]
    pub tap_ring_bytes: usize,

    /// Largest frame or fragmented message a client may send (like 64KiB);
    /// a larger one closes that client (1009).
    #[arg(long, value_name = "SIZE", default_value = "64KiB", value_parser = parse_size, help_heading = heading::LIMITS)]
    #[serde(with = "size_text::usize")]
    pub max_frame: usize,

    /// Largest /publish body accepted (like 1MiB); a larger one is answered 413.
    #[arg(long, value_name = "SIZE", default_value = "1MiB", value_parser = parse_size, help_heading = heading::LIMITS)]
    #[serde(with = "size_text::usize")]
    pub max_publish: usize,

    /// Most WebSocket clients at once; an upgrade past it is answered 503
    /// and counted (`/healthz` `refused_clients`), so the operator can keep
    /// the box safe. No limit by default.
    #[arg(long, value_name = "N", help_heading = heading::LIMITS)]
    pub max_clients: Option<usize>,

    /// Most connections whose request head has not arrived yet; past it a
    /// new connection is answered 503 and closed at once (counted in
    /// `/healthz` as `refused_pending`), so idle sockets cannot use up the
    /// open files. Each waits at most --request-timeout-secs. The default
    /// leaves room for 8,192 clients reconnecting at once.
    #[arg(long, value_name = "N", default_value_t = 8192, help_heading = heading::LIMITS)]
    pub max_pending: usize,

    /// Most `/publish` body bytes held at once over all requests in flight
    /// (like 64MiB); a request that would go past it is answered 503
    /// before its body is read, so announcing large bodies cannot exhaust
    /// memory.
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size, help_heading = heading::LIMITS)]
    #[serde(with = "size_text::usize")]
    pub max_publish_in_flight: usize,

    /// Seconds a client has to send a request head or body.
    #[arg(long, value_name = "SECONDS", default_value_t = 10, help_heading = heading::LIMITS)]
    pub request_timeout_secs: u64,

    /// TOML file with settings (like /etc/skewscope/agent.toml); flags override it.
    #[arg(long, value_name = "FILE", help_heading = heading::SETTINGS)]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// Print the settings in effect (file and flags merged) as TOML, and exit.
    #[arg(long, help_heading = heading::SETTINGS)]
    #[serde(skip)]
    pub print_config: bool,

    /// What to log, as `RUST_LOG` says it (`warn`, `info,agent::ingest=debug`);
    /// overrides `RUST_LOG`. Default `info`. Targets: `agent::server`,
    /// `agent::engine`, `agent::recorder`, `agent::ingest`, `agent::live`,
    /// `agent::tap`, `agent::time`.
    #[arg(long, value_name = "FILTER", help_heading = heading::SETTINGS)]
    pub log: Option<String>,
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
