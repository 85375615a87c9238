//! `skewscope sweep`'s command line, turned into [`SweepOptions`]. The
//! connection flags are the probe's own (its `--protocol` group is
//! flattened in, and each stage's probe is configured through the probe's
//! own command-line type), so a sweep connects exactly as
//! `skewscope-probe` would with the same flags.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use skewscope_core::units::parse_duration;

use super::board::Connect;
use super::options::{
    AgentAccess, ProbeSettings, Settings, SweepOptions, TriggerRequest, TriggerSettings,
    WARMUP_TRIES, WorkersWanted, parse_stages, recorded_protocol, rerun_line,
};

/// The help's sections, by what a person came to do.
mod heading {
    pub const SERVER: &str = "The server to load";
    pub const TRIGGER: &str = "What makes it broadcast";
    pub const STAGES: &str = "Stages";
    pub const KNEE: &str = "The knee";
    pub const TAP: &str = "The server's own side (an agent tapping it)";
    pub const MACHINES: &str = "Several machines";
    pub const OUTPUT: &str = "Output";
}

/// The flags of `skewscope sweep`.
#[derive(Debug, clap::Args)]
pub struct SweepArgs {
    /// The server's URL, as its clients are given it: ws://host:port/path
    /// (wss:// too); for --protocol socketio or sse, http://host:port.
    #[arg(long, help_heading = heading::SERVER)]
    pub url: String,

    /// What rides on each connection: the probe's --protocol and its flags.
    #[command(flatten)]
    pub protocol: probe::protocol_args::ProtocolArgs,

    /// Extra header for each connection's upgrade, 'Name: value'
    /// (repeatable; '@FILE' reads the value from FILE), as the server's real
    /// clients send it. Only its name is recorded.
    #[arg(long = "header", value_name = "'NAME: VALUE'", help_heading = heading::SERVER)]
    pub header: Vec<String>,

    /// Subprotocol to offer (repeatable, in order of preference).
    #[arg(long = "subprotocol", value_name = "NAME", help_heading = heading::SERVER)]
    pub subprotocol: Vec<String>,

    /// Do not offer permessage-deflate (offered by default, as browsers do).
    #[arg(long, help_heading = heading::SERVER)]
    pub no_deflate: bool,

    /// Trust only the CA certificates in this PEM file, for wss:// and an
    /// https:// trigger.
    #[arg(long, value_name = "PEM", help_heading = heading::SERVER)]
    pub ca_file: Option<PathBuf>,

    /// For wss://: do NOT check the server's certificate (a test bench only).
    #[arg(long, conflicts_with = "ca_file", help_heading = heading::SERVER)]
    pub insecure: bool,

    /// Give up on a connection whose connect and upgrade take longer.
    #[arg(long, value_name = "D", default_value = "10s", value_parser = parse_duration, help_heading = heading::SERVER)]
    pub connect_timeout: Duration,

    /// The server's process on this host: each stage then says the CPU its
    /// broadcasts cost it (its threads' run time, from /proc/PID/task; not
    /// its child processes: give a worker's pid).
    #[arg(long, value_name = "PID", help_heading = heading::SERVER)]
    pub server_pid: Option<u32>,

    /// An HTTP URL that makes the server broadcast once, like
    /// http://server:8000/start_test: asked once per broadcast, each time
    /// after the one before reached every connection. Any 2xx answer counts.
    #[arg(long, value_name = "URL", help_heading = heading::TRIGGER)]
    pub trigger: String,

    /// The trigger's method.
    #[arg(long, value_name = "METHOD", default_value = "GET", value_parser = ["GET", "POST", "PUT"], help_heading = heading::TRIGGER)]
    pub trigger_method: String,

    /// A body to send with the trigger (with --trigger-method POST or PUT).
    #[arg(long, value_name = "TEXT", help_heading = heading::TRIGGER)]
    pub trigger_body: Option<String>,

    /// A header to send with the trigger, 'Name: value' (repeatable;
    /// '@FILE' reads the value from FILE), like 'Authorization: Basic …'.
    /// Only its name is recorded.
    #[arg(long = "trigger-header", value_name = "'NAME: VALUE'", help_heading = heading::TRIGGER)]
    pub trigger_header: Vec<String>,

    /// Connections per stage, smallest first: numbers, or with k for
    /// thousands. Each stage opens its connections afresh; a stage larger
    /// than this process's open-file limit allows is cut to it, and said.
    #[arg(long, value_name = "N,N,…", default_value = "5,100,1000,5000,10000", value_parser = parse_stages, help_heading = heading::STAGES)]
    pub stages: std::vec::Vec<u32>,

    /// Broadcasts measured at each stage, after a warm-up broadcast that
    /// must reach every connection.
    #[arg(long, value_name = "K", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..), help_heading = heading::STAGES)]
    pub broadcasts: u32,

    /// Pause after each broadcast has reached every connection.
    #[arg(long, value_name = "D", default_value = "100ms", value_parser = parse_duration, help_heading = heading::STAGES)]
    pub interval: Duration,

    /// Longest wait for a broadcast to reach every connection: receipts
    /// still absent then count missing.
    #[arg(long, value_name = "D", default_value = "5s", value_parser = parse_duration, help_heading = heading::STAGES)]
    pub settle: Duration,

    /// The knee: the first stage whose receive skew p99 exceeds this.
    #[arg(long, value_name = "DURATION", default_value = "10ms", value_parser = parse_duration, help_heading = heading::KNEE)]
    pub max_skew_p99: Duration,

    /// A skewscope agent that taps this server (its --tap-port is the
    /// server's port), http://HOST:PORT: each stage then has the server's
    /// fan-out span, from the copies the tap saw leave it, and the stage's
    /// connections exchange time with it.
    #[arg(long, value_name = "URL", help_heading = heading::TAP)]
    pub agent: Option<String>,

    /// File holding that agent's bearer token (the file it was given with
    /// its --token-file).
    #[arg(long, value_name = "FILE", requires = "agent", help_heading = heading::TAP)]
    pub token_file: Option<PathBuf>,

    /// Open each stage's connections from this machine and N others, each
    /// running `skewscope sweep-worker --agent URL` against the --agent
    /// given here: the sweep waits for N idle workers on the agent's board,
    /// shares each stage between the machines within their open-file
    /// limits, and places every machine's receipts on the agent's clock
    /// (each exchanges time with it), so the skew is across machines, with
    /// bounds.
    #[arg(long, value_name = "N", requires = "agent", value_parser = clap::value_parser!(u32).range(1..=256), help_heading = heading::MACHINES)]
    pub workers: Option<u32>,

    /// How long to wait for the --workers to be on the agent's board.
    #[arg(long, value_name = "D", default_value = "60s", value_parser = parse_duration, requires = "workers", help_heading = heading::MACHINES)]
    pub workers_wait: Duration,

    /// What to call this server beside others (`skewscope sweep-compare`);
    /// its URL by default.
    #[arg(long, value_name = "NAME", help_heading = heading::OUTPUT)]
    pub label: Option<String>,

    /// Also write the result (every stage, the settings, the machine) as
    /// JSON here (`-` for standard output).
    #[arg(long, value_name = "OUT", help_heading = heading::OUTPUT)]
    pub json: Option<PathBuf>,

    /// Also write the result as one self-contained HTML page with the curve
    /// of skew against connections.
    #[arg(long, value_name = "OUT", help_heading = heading::OUTPUT)]
    pub html: Option<PathBuf>,

    /// Keep each stage's probe log in this directory (`skewscope report`
    /// reads them again); a temporary directory otherwise.
    #[arg(long, value_name = "DIR", help_heading = heading::OUTPUT)]
    pub keep: Option<PathBuf>,
}

impl SweepArgs {
    /// The sweep these flags ask for; `command` is the command line as
    /// given (recorded with its secrets hidden). Every value is checked
    /// here, before any connection is opened.
    pub fn into_options(self, command: &[String]) -> anyhow::Result<SweepOptions> {
        let trigger_url = self.trigger.trim().to_owned();
        let scheme = trigger_url
            .split_once("://")
            .map(|(s, _)| s.to_ascii_lowercase());
        if !matches!(scheme.as_deref(), Some("http" | "https")) {
            bail!(
                "--trigger {trigger_url}: give an http:// (or https://) URL that makes the server broadcast once, like http://server:8000/start_test"
            );
        }
        if self.trigger_body.is_some() && self.trigger_method == "GET" {
            bail!("--trigger-body is sent with --trigger-method POST or PUT, not GET");
        }
        let trigger_headers = self
            .trigger_header
            .iter()
            .map(|h| header(h).with_context(|| format!("--trigger-header {h:?}")))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let header_names = |given: &[String]| -> Vec<String> {
            given
                .iter()
                .filter_map(|h| h.split_once(':').map(|(n, _)| n.trim().to_owned()))
                .collect()
        };
        let agent = match &self.agent {
            None => None,
            Some(given) => Some(AgentAccess {
                url: crate::audit::options::agent_url(given).map_err(anyhow::Error::msg)?,
                token: self
                    .token_file
                    .as_deref()
                    .map(crate::audit::options::read_token_file)
                    .transpose()?,
                token_file: self.token_file.clone(),
            }),
        };
        let protocol = recorded_protocol(&self.protocol);
        // What a worker needs to connect as this machine does (header
        // values read here, from this machine's files).
        let workers = match self.workers {
            None => None,
            Some(count) => Some(WorkersWanted {
                count,
                wait: self.workers_wait,
                connect: Connect {
                    url: self.url.clone(),
                    protocol: self.protocol.clone(),
                    headers: self
                        .header
                        .iter()
                        .map(|h| {
                            header(h)
                                .map(|(n, v)| format!("{n}: {v}"))
                                .with_context(|| format!("--header {h:?}"))
                        })
                        .collect::<anyhow::Result<Vec<_>>>()?,
                    subprotocols: self.subprotocol.clone(),
                    deflate: !self.no_deflate,
                    connect_timeout_ms: self.connect_timeout.as_millis() as u64,
                    insecure: self.insecure,
                },
            }),
        };
        // The probe's own flags make its configuration: the same checks,
        // the same defaults, as `skewscope-probe` with these flags.
        let config = probe::cli::Args {
            url: Some(self.url.clone()),
            name: Some("sweep".to_owned()),
            out: Some(PathBuf::from("sweep.sklog")),
            header: self.header.clone(),
            subprotocol: self.subprotocol.clone(),
            no_deflate: self.no_deflate,
            ca_file: self.ca_file.clone(),
            insecure: self.insecure,
            connect_timeout: self.connect_timeout,
            // One host and no agent: the probe's clock is the truth,
            // nothing to exchange. With the tapping agent, its clock is the
            // reference (it may run on the server's machine).
            no_time_exchange: agent.is_none(),
            time_server: agent
                .as_ref()
                .map(|a| super::tap::TapAgent::time_server(&a.url)),
            token_file: self.token_file.clone(),
            protocol: self.protocol,
            ..probe::cli::Args::default()
        }
        .into_config()?;
        let settings = Settings {
            label: self.label.clone().unwrap_or_else(|| self.url.clone()),
            url: self.url,
            protocol,
            probe: ProbeSettings {
                headers: header_names(&self.header),
                subprotocols: self.subprotocol,
                deflate: !self.no_deflate,
                connect_timeout_ms: self.connect_timeout.as_millis() as u64,
                insecure: self.insecure,
                ca_file: self.ca_file.as_ref().map(|p| p.display().to_string()),
                stamps: "kernel RX where the socket gives one, else the probe's userspace".into(),
            },
            trigger: TriggerSettings {
                url: trigger_url.clone(),
                method: self.trigger_method.clone(),
                body: self.trigger_body.clone(),
                headers: header_names(&self.trigger_header),
            },
            stages: self.stages,
            broadcasts: self.broadcasts,
            interval_ms: self.interval.as_millis() as u64,
            settle_ms: self.settle.as_millis() as u64,
            max_skew_p99_ns: self.max_skew_p99.as_nanos() as u64,
            server_pid: self.server_pid,
            warmup_tries: WARMUP_TRIES,
            agent: agent.as_ref().map(|a| a.url.clone()),
            workers: self.workers.unwrap_or(0),
        };
        Ok(SweepOptions {
            settings,
            probe: config,
            trigger: TriggerRequest {
                url: trigger_url,
                method: self.trigger_method,
                body: self.trigger_body,
                headers: trigger_headers,
            },
            ca_file: self.ca_file,
            keep: self.keep,
            command: rerun_line(command),
            agent,
            workers,
        })
    }
}

/// `Name: value`, the value read from FILE when it is `@FILE`.
fn header(text: &str) -> anyhow::Result<(String, String)> {
    let (name, value) = text.split_once(':').context("give it as 'Name: value'")?;
    let name = name.trim();
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
        bail!("{name:?} is not a header name");
    }
    let value = value.trim();
    let value = match value.strip_prefix('@') {
        Some(path) => std::fs::read_to_string(path.trim())
            .with_context(|| format!("cannot read {path}"))?
            .trim()
            .to_owned(),
        None => value.to_owned(),
    };
    if value.chars().any(char::is_control) {
        bail!("the value of {name} has characters a header cannot carry (a line break?)");
    }
    Ok((name.to_owned(), value))
}
