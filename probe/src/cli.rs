//! The `skewscope-probe` command line, turned into a [`ProbeConfig`].
//!
//! Lives in the library (not the binary) so its parsers are unit-tested and the
//! collector can reuse the same flags.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use serde::{Deserialize, Serialize};
use skewscope_core::units::{parse_duration, parse_size};

use skewscope_core::act_at::ActAt;
use skewscope_core::retention::Retention;

/// A size, or 0 for no limit.
fn parse_size_or_zero(text: &str) -> Result<usize, String> {
    if text.trim() == "0" {
        Ok(0)
    } else {
        parse_size(text)
    }
}

use skewscope_os::settings::duration_text;

use crate::config::ProbeConfig;
use crate::error::ProbeError;

/// The help's sections, by what a person came to do.
mod heading {
    pub const SERVER: &str = "The server to receive from";
    pub const UNTIL: &str = "How long to run";
    pub const LOG: &str = "The record log";
    pub const CLOCK: &str = "This device's clock against the server's";
    pub const UPLOAD: &str = "Uploading to the agent (for skewscope audit)";
    pub const ACT: &str = "Acting at each message's time to act";
    pub const SETTINGS: &str = "Settings and logging";
}

/// skewscope-probe: receives a server's WebSocket broadcasts on one or many
/// connections and records when each message arrived, measures this
/// device's clock against the server's, and, with --act-at, acts at the
/// time each message names.
///
/// A run, as on a device of a site audited with `skewscope audit`:
///   skewscope-probe --url ws://server:8080/ws --name kiosk-3 --out-dir ./probe \
///       --upload http://server:8080 --token-file agent.token --act-at /at --reconnect
///
/// Every setting can also come from a TOML file (`--config`, keys named like the
/// flags with underscores; durations as strings like "10s", sizes in bytes);
/// flags override it.
#[derive(Debug, Parser, Serialize, Deserialize)]
#[command(name = "skewscope-probe", version, verbatim_doc_comment)]
#[serde(deny_unknown_fields, default)]
pub struct Args {
    /// WebSocket URL of the broadcast server, like ws://server:8080/ws. Any server
    /// works; a skewscope agent also labels the connection so both logs can be
    /// joined. Required, on the command line or in the config file.
    #[arg(long, help_heading = heading::SERVER)]
    pub url: Option<String>,

    /// Connections to open, all receiving the same broadcasts. Connections on one
    /// device share its clock, so their spread is measured without clock error.
    #[arg(long, short = 'n', value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..), help_heading = heading::SERVER)]
    pub connections: u32,

    /// This probe's name in reports, sent to the server as ?probe=NAME. Defaults
    /// to the host name, so devices are told apart without configuration.
    #[arg(long, help_heading = heading::SERVER)]
    pub name: Option<String>,

    /// When the server closes a connection or it breaks (a server restart, a
    /// network drop), open it again after a jittered back-off (250 ms
    /// doubling to 10 s), until the run stops. Each gap is in the log; the
    /// report counts reconnects and does not count a connection missing for
    /// broadcasts sent while it was down. What a probe run as a service wants.
    #[arg(long, help_heading = heading::SERVER)]
    pub reconnect: bool,

    /// Give up on a connection whose TCP connect and WebSocket upgrade take longer
    /// than this, so an unreachable server fails the run instead of hanging it.
    #[arg(long, value_name = "D", default_value = "10s", value_parser = parse_duration, help_heading = heading::SERVER)]
    #[serde(with = "duration_text")]
    pub connect_timeout: Duration,

    /// Largest message or frame accepted (bytes, or with a KiB/MiB/GiB suffix); a
    /// larger one closes that connection, so a misbehaving server cannot exhaust
    /// the device's memory.
    #[arg(long, value_name = "SIZE", default_value = "16MiB", value_parser = parse_size, help_heading = heading::SERVER)]
    pub max_message: usize,

    /// Extra header for the WebSocket upgrade, 'Name: value' (repeatable), as
    /// the server's real clients send it: a token, a cookie. A value of
    /// '@FILE' is read from FILE, so a secret stays out of process lists and
    /// settings ('@@' for a value that starts with @). The handshake's own
    /// headers (Host, Upgrade, Connection, Sec-WebSocket-*) cannot be set.
    /// User-info in the URL (ws://user:password@host/) is sent as Basic auth.
    #[arg(long = "header", value_name = "'NAME: VALUE'", help_heading = heading::SERVER)]
    pub header: Vec<String>,

    /// Subprotocol to offer (repeatable, in order of preference), for a server
    /// that requires one (Sec-WebSocket-Protocol). As in browsers, a server
    /// that then chooses none, or one not offered, fails the connection.
    #[arg(long = "subprotocol", value_name = "NAME", help_heading = heading::SERVER)]
    pub subprotocol: Vec<String>,

    /// Do not offer permessage-deflate. By default the probe offers it as
    /// browsers do ('permessage-deflate; client_max_window_bits'), because a
    /// server that compresses for its browsers then compresses for the probe
    /// too, and the probe measures the fan-out they get. Each connection that
    /// negotiated it is recorded, and reports count them.
    #[arg(long, help_heading = heading::SERVER)]
    pub no_deflate: bool,

    /// For wss:// URLs: trust only the CA certificates in this PEM file (a
    /// private CA), instead of the device's system roots (/etc/ssl/certs).
    #[arg(long, value_name = "PEM", help_heading = heading::SERVER)]
    pub ca_file: Option<PathBuf>,

    /// For wss:// URLs: do NOT check the server's certificate. Anyone on the
    /// path could then be the server; the log records every such connection
    /// and reports warn about it. For a test bench, never a deployment.
    #[arg(long, conflicts_with = "ca_file", help_heading = heading::SERVER)]
    pub insecure: bool,

    /// Close each connection after it received K messages, so a run against a
    /// known number of broadcasts ends by itself. With --duration, whichever
    /// comes first.
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u64).range(1..), help_heading = heading::UNTIL)]
    pub count: Option<u64>,

    /// Stop after this long (like 30s, 500ms, 2m, 1h), counted from start, for
    /// unattended runs against a server that broadcasts forever. Without --count
    /// or --duration the probe runs until SIGINT/SIGTERM or the server goes away.
    #[arg(long, value_name = "D", value_parser = parse_duration, help_heading = heading::UNTIL)]
    #[serde(with = "duration_text::option")]
    pub duration: Option<Duration>,

    /// Record log to write (created, or truncated if it exists). The collector
    /// reads it together with the agent's log. Required, here or in the file.
    #[arg(long, short = 'o', value_name = "FILE", conflicts_with = "out_dir", help_heading = heading::LOG)]
    pub out: Option<PathBuf>,

    /// Directory for the record log instead of --out: each run writes a new
    /// probe-NAME-START-PID.sklog there, so a restarted service never
    /// overwrites an earlier run's log.
    #[arg(long, value_name = "DIR", help_heading = heading::LOG)]
    pub out_dir: Option<PathBuf>,

    /// With --out-dir: keep at most this many run logs there, this one
    /// included. To make room the oldest logs the agent has acknowledged in
    /// full (--upload) are deleted; one it lacks never is: with no room left
    /// the probe does not record, and says why. 0: no limit.
    #[arg(long, value_name = "N", default_value_t = skewscope_core::retention::DEFAULT_MAX_RUNS, help_heading = heading::LOG)]
    pub keep_runs: u32,

    /// With --out-dir: keep at most this many bytes of run logs there, this
    /// one included (what is left is this run's limit), by the same rule as
    /// --keep-runs. 0: no limit.
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_size_or_zero, help_heading = heading::LOG)]
    pub keep_bytes: usize,

    /// Stop recording and end the run once the log holds this many bytes
    /// (with a KiB/MiB/GiB suffix): the log's last record then says so, and
    /// the probe exits non-zero. A chatty or hostile server cannot fill the
    /// device's disk. Unbounded by default.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, help_heading = heading::LOG)]
    pub max_log_bytes: Option<usize>,

    /// HOST:PORT of the agent's UDP time exchange, used to measure this device's
    /// clock offset to the server's. Defaults to the URL's host and port, where a
    /// skewscope agent answers; a server that does not answer is left alone.
    #[arg(long, value_name = "HOST:PORT", help_heading = heading::CLOCK)]
    pub time_server: Option<String>,

    /// Pause between time exchanges after the first burst.
    #[arg(long, value_name = "D", default_value = "1s", value_parser = parse_duration, help_heading = heading::CLOCK)]
    #[serde(with = "duration_text")]
    pub time_interval: Duration,

    /// Do not run the time exchange (reports then cannot bound this device's clock).
    #[arg(long, help_heading = heading::CLOCK)]
    pub no_time_exchange: bool,

    /// Stream every record to this agent (http://HOST:PORT, or https:// when
    /// it has --tls-cert: --ca-file then names its CA) while running, for
    /// `skewscope audit`. The log stays the source of truth: what the agent has
    /// not acknowledged is sent again after a reconnect.
    #[arg(long, value_name = "URL", help_heading = heading::UPLOAD)]
    pub upload: Option<String>,

    /// File holding the agent's bearer token (kept out of process lists and
    /// settings): the file the agent was given with its --token-file. For
    /// --upload, and to check the tag on the agent's time replies (without
    /// it the report names this clock unauthenticated). An agent that
    /// refuses it (401) stops the run at once, with an error naming this
    /// file and a non-zero exit. Without it, a systemd credential named
    /// `token` is used when the unit has one ($CREDENTIALS_DIRECTORY/token).
    #[arg(long, value_name = "FILE", help_heading = heading::UPLOAD)]
    pub token_file: Option<PathBuf>,

    /// Act on each message at the time it names: a JSON pointer (RFC 6901)
    /// to a time in the server's wall clock, like /at (FastAPI's
    /// time.time() + 0.03) or /at_ns (the agent's test message with
    /// /start_test?lead=). The probe maps it into this device's clock with
    /// its time exchange, waits with a precise timer and records the action
    /// (late, and by how much, when the message came after its time).
    #[arg(long, value_name = "POINTER", help_heading = heading::ACT)]
    pub act_at: Option<String>,

    /// The unit of --act-at's time: s, ms, us or ns since the epoch, or auto
    /// (read from its magnitude: below 1e11 seconds, below 1e14 ms, below
    /// 1e17 µs, else ns). Integers and floats are both read; a string
    /// holding a number too.
    #[arg(long, value_name = "UNIT", default_value = "auto", requires = "act_at", help_heading = heading::ACT)]
    pub act_unit: String,

    /// Run the timer that acts as a real-time thread (SCHED_FIFO 1), so it
    /// fires on time however busy the device is. Needs CAP_SYS_NICE or
    /// LimitRTPRIO=1 (and no RestrictRealtime=yes) in the unit; without
    /// them the probe says so and acts at normal priority.
    #[arg(long, requires = "act_at", help_heading = heading::ACT)]
    pub act_realtime: bool,

    /// At each action's moment, send one datagram (JSON: the message, its
    /// time to act, the moment aimed at and the moment acted on this
    /// device's clocks, late and by how much) to the app beside the probe:
    /// unix:PATH (a Unix datagram socket it has bound) or udp:HOST:PORT. An
    /// app that is not listening costs the probe nothing; it is counted.
    #[arg(long, value_name = "unix:PATH|udp:HOST:PORT", requires = "act_at", help_heading = heading::ACT)]
    pub act_notify: Option<String>,

    /// What the report calls the app beside the probe: it answers each
    /// notice with when it acted ({"notice": N, "acted_mono_ns": T}), and
    /// the audit judges those actions as the app's own.
    #[arg(long, value_name = "NAME", default_value = crate::config::DEFAULT_ACT_NOTIFY_NAME, requires = "act_notify", help_heading = heading::ACT)]
    pub act_notify_name: String,

    /// What rides on each connection (--protocol and its flags).
    #[command(flatten)]
    #[serde(flatten)]
    pub protocol: crate::protocol_args::ProtocolArgs,

    /// TOML file with settings (like /etc/skewscope/probe-NAME.toml); flags override it.
    #[arg(long, value_name = "FILE", help_heading = heading::SETTINGS)]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// Print the settings in effect (file and flags merged) as TOML, and exit.
    #[arg(long, help_heading = heading::SETTINGS)]
    #[serde(skip)]
    pub print_config: bool,

    /// What to log, as `RUST_LOG` says it (`warn`, `info,probe::upload=debug`);
    /// overrides `RUST_LOG`. Default `info`. Targets: `probe`,
    /// `probe::time`, `probe::upload`.
    #[arg(long, value_name = "FILTER", help_heading = heading::SETTINGS)]
    pub log: Option<String>,
}

impl skewscope_os::settings::FileSettings for Args {
    fn config_file(&self) -> Option<&std::path::Path> {
        self.config.as_deref()
    }

    fn keep_command_line_only(&mut self, cli: &Self) {
        self.config.clone_from(&cli.config);
        self.print_config = cli.print_config;
    }
}

impl Default for Args {
    fn default() -> Self {
        Args::parse_from(["skewscope-probe"])
    }
}

impl Args {
    /// The run these settings describe; the name defaults to this host's name.
    pub fn into_config(self) -> Result<ProbeConfig, ProbeError> {
        let missing = |what: &str| {
            ProbeError::Config(format!("{what} is required (a flag, or a key in --config)"))
        };
        let name = self.name.unwrap_or_else(skewscope_os::host::host_name);
        let in_out_dir = self.out.is_none() && self.out_dir.is_some();
        let token_file = self.token_file.clone().or_else(credential_token);
        let out = match (self.out, self.out_dir) {
            (Some(out), _) => out,
            (None, Some(dir)) => {
                std::fs::create_dir_all(&dir).map_err(|e| {
                    ProbeError::Config(format!("cannot create --out-dir {}: {e}", dir.display()))
                })?;
                let secs = skewscope_os::clock::now_raw().wall_ns / 1_000_000_000;
                dir.join(format!("probe-{name}-{secs}-{}.sklog", std::process::id()))
            }
            (None, None) => return Err(missing("--out or --out-dir")),
        };
        Ok(ProbeConfig {
            url: self.url.ok_or_else(|| missing("--url"))?,
            connections: self.connections,
            name,
            out,
            count: self.count,
            duration: self.duration,
            connect_timeout: self.connect_timeout,
            max_message: self.max_message,
            max_log_bytes: self.max_log_bytes.map(|b| b as u64),
            time_exchange: !self.no_time_exchange,
            time_server: self.time_server,
            time_interval: self.time_interval,
            upload: self.upload,
            reconnect: self.reconnect,
            upload_token: match &token_file {
                Some(path) => Some(read_token(path)?),
                None => None,
            },
            upload_token_file: token_file,
            headers: self
                .header
                .iter()
                .map(|h| parse_header(h))
                .collect::<Result<_, _>>()?,
            subprotocols: checked_subprotocols(self.subprotocol)?,
            deflate: !self.no_deflate,
            ca_file: self.ca_file,
            insecure: self.insecure,
            act_realtime: self.act_realtime,
            retention: in_out_dir.then_some(Retention {
                max_runs: self.keep_runs,
                max_bytes: self.keep_bytes as u64,
            }),
            protocol: self.protocol.into_protocol()?,
            act_notify_name: self.act_notify_name,
            act_notify: match &self.act_notify {
                Some(target) => Some(
                    target
                        .parse()
                        .map_err(|e| ProbeError::Config(format!("--act-notify {e}")))?,
                ),
                None => None,
            },
            act_at: match &self.act_at {
                Some(pointer) => {
                    let unit = self
                        .act_unit
                        .parse()
                        .map_err(|e| ProbeError::Config(format!("--act-unit {e}")))?;
                    Some(ActAt::new(pointer, unit).map_err(ProbeError::Config)?)
                }
                None => None,
            },
        })
    }
}

/// Headers the WebSocket handshake sets itself: a probe that overrode them
/// would not be the client it claims to be.
const HANDSHAKE_HEADERS: [&str; 7] = [
    "host",
    "upgrade",
    "connection",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-protocol",
];

/// `Name: value` (or `Name: @FILE`) as a checked header.
fn parse_header(text: &str) -> Result<(String, String), ProbeError> {
    let bad = |why: &str| ProbeError::Config(format!("--header {text:?}: {why}"));
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| bad("give it as 'Name: value'"))?;
    let name = name.trim();
    if tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(bad("not a valid header name"));
    }
    if HANDSHAKE_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
        return Err(bad(
            if name.eq_ignore_ascii_case("sec-websocket-protocol") {
                "use --subprotocol"
            } else {
                "the WebSocket handshake sets this header itself"
            },
        ));
    }
    let value = value.trim();
    let value = match value.strip_prefix('@') {
        Some(literal) if literal.starts_with('@') => literal.to_owned(),
        Some(path) => {
            let text = std::fs::read_to_string(path.trim()).map_err(|e| {
                ProbeError::Config(format!("--header {name}: cannot read {path}: {e}"))
            })?;
            let value = text.trim().to_owned();
            if value.is_empty() {
                return Err(ProbeError::Config(format!(
                    "--header {name}: {path} is empty"
                )));
            }
            value
        }
        None => value.to_owned(),
    };
    if tokio_tungstenite::tungstenite::http::HeaderValue::from_str(&value).is_err() {
        // Never echo a value: it may be a secret read from a file.
        return Err(ProbeError::Config(format!(
            "--header {name}: the value has characters a header cannot carry (a line break?)"
        )));
    }
    Ok((name.to_owned(), value))
}

/// Subprotocol names as RFC 6455 allows them (HTTP tokens), each once.
fn checked_subprotocols(names: Vec<String>) -> Result<Vec<String>, ProbeError> {
    let token = |n: &str| {
        !n.is_empty()
            && n.bytes()
                .all(|b| b.is_ascii_graphic() && !b"()<>@,;:\\\"/[]?={}".contains(&b))
    };
    for (i, n) in names.iter().enumerate() {
        if !token(n) {
            return Err(ProbeError::Config(format!(
                "--subprotocol {n:?}: not a valid subprotocol name (letters, digits and !#$%&'*+-.^_`|~)"
            )));
        }
        if names[..i].contains(n) {
            return Err(ProbeError::Config(format!(
                "--subprotocol {n:?} given twice"
            )));
        }
    }
    Ok(names)
}

/// The token systemd handed the unit as a credential named `token`
/// (`LoadCredential=token:…` in a drop-in), if it did.
fn credential_token() -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os("CREDENTIALS_DIRECTORY")?).join("token");
    path.is_file().then_some(path)
}

/// The bearer token in `path`, trimmed; an empty or unreadable file is an error.
fn read_token(path: &std::path::Path) -> Result<String, ProbeError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ProbeError::Config(format!("cannot read --token-file {}: {e}", path.display()))
    })?;
    let token = text.trim().to_owned();
    if token.is_empty() {
        return Err(ProbeError::Config(format!(
            "--token-file {} is empty; put the agent's bearer token in it",
            path.display()
        )));
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn flags_build_the_config_with_defaults() {
        let args = Args::try_parse_from([
            "skewscope-probe",
            "--url",
            "ws://127.0.0.1:9/ws",
            "--out",
            "p.sklog",
            "--duration",
            "2m",
        ])
        .unwrap();
        let config = args.into_config().unwrap();
        assert_eq!(config.connections, 1);
        assert_eq!(config.duration, Some(Duration::from_secs(120)));
        assert_eq!(config.connect_timeout, Duration::from_secs(10));
        assert_eq!(config.max_message, 16 * 1024 * 1024);
        assert_eq!(config.name, skewscope_os::host::host_name());
        assert_eq!(config.count, None);
    }

    #[test]
    fn url_and_out_are_required_from_flags_or_file() {
        let args = Args::try_parse_from(["skewscope-probe", "--out", "p"]).unwrap();
        let e = args.into_config().unwrap_err();
        assert!(e.to_string().contains("--url is required"), "{e}");
    }

    #[test]
    fn a_config_file_fills_in_and_flags_win() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("probe.toml");
        std::fs::write(
            &file,
            "url = \"ws://srv:8080/ws\"\nout = \"f.sklog\"\nconnections = 7\ntime_interval = \"250ms\"\n",
        )
        .unwrap();
        let cli = Args::try_parse_from(["skewscope-probe", "--connections", "3"]).unwrap();
        let given = |k: &str| k == "connections";
        let merged =
            skewscope_os::settings::merge(&cli, given, Some(&file), &["config", "print_config"])
                .unwrap();
        let config = merged.into_config().unwrap();
        assert_eq!(config.url, "ws://srv:8080/ws");
        assert_eq!(config.connections, 3);
        assert_eq!(config.time_interval, Duration::from_millis(250));
    }

    #[test]
    fn zero_connections_and_zero_count_are_refused() {
        let base = ["skewscope-probe", "--url", "ws://h:1/", "--out", "p"];
        for extra in [["--connections", "0"], ["--count", "0"]] {
            let argv = base.iter().chain(extra.iter());
            assert!(Args::try_parse_from(argv).is_err(), "{extra:?}");
        }
    }

    #[test]
    fn every_flag_is_documented() {
        Args::command().debug_assert();
        for arg in Args::command().get_arguments() {
            let id = arg.get_id().as_str();
            if id == "help" || id == "version" {
                continue;
            }
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            assert!(help.len() > 40, "--{id} needs a help text saying why");
        }
    }
}
