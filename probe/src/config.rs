//! What one probe run does: the settings shared by the command line and by
//! callers that run a probe in-process (the collector's demo, the tests).

use std::path::PathBuf;
use std::time::Duration;

use crate::error::ProbeError;

/// Default `--connect-timeout`: long enough for a busy server's accept queue,
/// short enough that a dead address fails the run promptly.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Default `--max-message`: far above any broadcast worth measuring, low enough
/// that a misbehaving server cannot make the probe allocate without bound.
pub const DEFAULT_MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// Default pause between time exchanges: often enough that the nearest one is
/// never far from a receipt, rare enough to cost nothing.
pub const DEFAULT_TIME_INTERVAL: Duration = Duration::from_secs(1);

/// What the app beside the probe is called when `--act-notify-name` is
/// not given.
pub const DEFAULT_ACT_NOTIFY_NAME: &str = "app";

/// Default STOMP heart-beat, offered both ways: what stomp.js offers.
pub const DEFAULT_STOMP_HEART_BEAT: Duration = Duration::from_secs(10);

/// Default MQTT keep-alive: what the Paho and MQTT.js clients ask for.
pub const DEFAULT_MQTT_KEEP_ALIVE: Duration = Duration::from_secs(60);

/// What rides on each connection (`--protocol`): plain WebSocket messages,
/// or a protocol whose messages carry the payloads. Whichever it is, each
/// payload's receipt is stamped and recorded alike.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Protocol {
    /// Every WebSocket message is a payload (what the probe always did).
    #[default]
    Ws,
    /// Socket.IO (Engine.IO 4) over a WebSocket: each event's data.
    SocketIo {
        /// The namespace to connect to (`/`).
        namespace: String,
        /// Event names to record; empty: all.
        events: Vec<String>,
    },
    /// STOMP 1.2 over a WebSocket: each MESSAGE frame's body.
    Stomp {
        /// The destination to subscribe to.
        destination: String,
        /// CONNECT's `login`.
        login: Option<String>,
        /// CONNECT's `passcode`.
        passcode: Option<String>,
        /// Extra CONNECT headers (`host` for a virtual host).
        headers: Vec<(String, String)>,
        /// Heart-beat interval offered both ways (zero: none).
        heart_beat: Duration,
    },
    /// MQTT over a WebSocket (subprotocol `mqtt`): each PUBLISH's payload.
    Mqtt {
        /// 3.1.1 or 5.
        version: skewscope_core::mqtt::MqttVersion,
        /// Topic filters to subscribe to.
        topics: Vec<String>,
        /// The QoS asked for, 0 or 1.
        qos: u8,
        /// The keep-alive (zero: none); whole seconds on the wire.
        keep_alive: Duration,
        /// The user name, if the broker wants one.
        username: Option<String>,
        /// The password, if the broker wants one.
        password: Option<String>,
    },
    /// Server-Sent Events over HTTP/1.1 (`text/event-stream`): each event's data.
    Sse {
        /// Event types to record; empty: all.
        events: Vec<String>,
    },
}

impl Protocol {
    /// Its name as `--protocol` takes it.
    pub fn name(&self) -> &'static str {
        match self {
            Protocol::Ws => "ws",
            Protocol::SocketIo { .. } => "socketio",
            Protocol::Stomp { .. } => "stomp",
            Protocol::Mqtt { .. } => "mqtt",
            Protocol::Sse { .. } => "sse",
        }
    }

    /// What makes no sense to ask, said before anything is opened.
    pub(crate) fn problem(&self) -> Option<String> {
        let problem = match self {
            Protocol::Ws | Protocol::Sse { .. } => return None,
            Protocol::SocketIo { namespace, .. } => {
                if namespace.starts_with('/') && !namespace.contains(',') {
                    return None;
                }
                format!("namespace {namespace:?}: give one like / or /lobby (no comma)")
            }
            Protocol::Stomp {
                destination,
                login,
                passcode,
                headers,
                ..
            } => skewscope_core::stomp::StompOptions {
                destination: destination.clone(),
                login: login.clone(),
                passcode: passcode.clone(),
                headers: headers.clone(),
                heart_beat_ms: 0,
                max_frame: 1,
            }
            .check()
            .err()?,
            Protocol::Mqtt {
                topics,
                qos,
                keep_alive,
                username,
                password,
                version,
            } => {
                if keep_alive.as_secs() > u64::from(u16::MAX) || keep_alive.subsec_nanos() != 0 {
                    "the MQTT keep-alive is whole seconds, at most 65535 s".to_owned()
                } else {
                    skewscope_core::mqtt::MqttOptions {
                        version: *version,
                        client_id: String::new(),
                        username: username.clone(),
                        password: password.clone(),
                        topics: topics.clone(),
                        qos: *qos,
                        keep_alive_s: 0,
                        max_packet: 1,
                    }
                    .check()
                    .err()?
                }
            }
        };
        Some(format!("{}: {problem}", self.name()))
    }
}

/// Settings for one probe run.
#[derive(Clone, Debug)]
pub struct ProbeConfig {
    /// The `ws://` URL of the broadcast server (a skewscope agent or any other).
    pub url: String,
    /// How many WebSocket connections to hold open, all receiving the same broadcasts.
    pub connections: u32,
    /// The probe's label: sent as `?probe=NAME` and written to the log, so a report
    /// can name the device.
    pub name: String,
    /// The record log to create (truncated if it exists).
    pub out: PathBuf,
    /// Stop each connection after this many messages.
    pub count: Option<u64>,
    /// Stop the whole run this long after it started (connecting included).
    pub duration: Option<Duration>,
    /// Give up on a connection whose TCP connect and upgrade take longer than this.
    pub connect_timeout: Duration,
    /// Largest message or frame accepted; a larger one closes that connection.
    pub max_message: usize,
    /// Stop the run, with a `LogFull` record, once the log holds this many
    /// bytes: a chatty server cannot fill the device's disk.
    pub max_log_bytes: Option<u64>,
    /// Measure the offset to the agent's clock over its UDP time exchange.
    pub time_exchange: bool,
    /// `HOST:PORT` of the time exchange; default the URL's host and port.
    pub time_server: Option<String>,
    /// Pause between time exchanges after the first burst.
    pub time_interval: Duration,
    /// Stream the records to this agent (`http://HOST:PORT`) while running.
    pub upload: Option<String>,
    /// Bearer token for the upload, when the agent has one.
    pub upload_token: Option<String>,
    /// Where that token was read (`--token-file`, or the unit's
    /// credential): named when the agent refuses it.
    pub upload_token_file: Option<PathBuf>,
    /// Open a connection again when the server closes or loses it (a probe
    /// run as a service outlives the server's restarts).
    pub reconnect: bool,
    /// Extra upgrade-request headers (name, value), in order: what a server
    /// that wants a token or a cookie from its real clients needs.
    pub headers: Vec<(String, String)>,
    /// Subprotocols to offer, in order of preference (`Sec-WebSocket-Protocol`).
    pub subprotocols: Vec<String>,
    /// Offer permessage-deflate as browsers do, so a server that compresses
    /// for its real clients compresses for the probe too.
    pub deflate: bool,
    /// For `wss://`: trust only the CA certificates in this PEM file (a
    /// private CA), instead of the device's system roots.
    pub ca_file: Option<PathBuf>,
    /// For `wss://`: do not check the server's certificate at all. Every
    /// connection is then recorded as unverified and reports warn.
    pub insecure: bool,
    /// Act on each message at the time it names (`--act-at`): where the
    /// time is, and its unit.
    pub act_at: Option<skewscope_core::act_at::ActAt>,
    /// Run the timer that acts as a real-time thread (`--act-realtime`).
    pub act_realtime: bool,
    /// Tell the app beside the probe at each action's moment
    /// (`--act-notify`): one datagram per action.
    pub act_notify: Option<crate::act_notify::NotifyTarget>,
    /// What the report calls the app beside the probe that answers its
    /// notices (`--act-notify-name`).
    pub act_notify_name: String,
    /// Keep the directory of `out` within these limits, deleting the
    /// oldest earlier runs' logs the agent has in full (`--out-dir`, with
    /// `--keep-runs` and `--keep-bytes`); `None`: keep every log.
    pub retention: Option<skewscope_core::retention::Retention>,
    /// What rides on each connection (`--protocol`); plain WebSocket
    /// messages by default.
    pub protocol: Protocol,
}

impl ProbeConfig {
    /// One connection to `url`, named after this host, no stop condition, the
    /// default timeout and size limit: what a caller usually starts from.
    pub fn new(url: impl Into<String>, out: impl Into<PathBuf>) -> ProbeConfig {
        ProbeConfig {
            url: url.into(),
            connections: 1,
            name: skewscope_os::host::host_name(),
            out: out.into(),
            count: None,
            duration: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_message: DEFAULT_MAX_MESSAGE,
            max_log_bytes: None,
            time_exchange: true,
            time_server: None,
            time_interval: DEFAULT_TIME_INTERVAL,
            upload: None,
            upload_token: None,
            upload_token_file: None,
            reconnect: false,
            headers: Vec::new(),
            subprotocols: Vec::new(),
            deflate: true,
            ca_file: None,
            insecure: false,
            act_at: None,
            act_realtime: false,
            act_notify: None,
            act_notify_name: DEFAULT_ACT_NOTIFY_NAME.to_owned(),
            retention: None,
            protocol: Protocol::Ws,
        }
    }

    /// Rejects settings that would make a run meaningless, before anything is opened.
    pub(crate) fn validate(&self) -> Result<(), ProbeError> {
        let problem = if self.connections == 0 {
            "connections must be at least 1"
        } else if self.count == Some(0) {
            "count must be at least 1 (leave it out to receive until stopped)"
        } else if self.duration == Some(Duration::ZERO) {
            "duration must be longer than zero"
        } else if self.connect_timeout.is_zero() {
            "connect timeout must be longer than zero"
        } else if self.time_interval.is_zero() {
            "time interval must be longer than zero"
        } else if self.max_message == 0 {
            "max message size must be at least 1 byte"
        } else if self.name.is_empty() {
            "name must not be empty"
        } else if self.act_notify.is_some() && self.act_at.is_none() {
            "act notify needs act at: notices are sent when the probe acts"
        } else if self.act_notify_name.is_empty()
            || self.act_notify_name.len() > 64
            || self
                .act_notify_name
                .chars()
                .any(|c| c.is_control() || c == '/')
        {
            "act notify name must be 1 to 64 printable characters, without '/'"
        } else if let Some(problem) = self.protocol.problem() {
            return Err(ProbeError::Config(problem));
        } else {
            return Ok(());
        };
        Err(ProbeError::Config(problem.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let config = ProbeConfig::new("ws://127.0.0.1:1/", "/tmp/x.sklog");
        assert!(config.validate().is_ok());
        assert_eq!(config.connections, 1);
        assert!(!config.name.is_empty());
    }

    #[test]
    fn zero_values_are_rejected() {
        let base = ProbeConfig::new("ws://127.0.0.1:1/", "/tmp/x.sklog");
        let cases = [
            ProbeConfig {
                connections: 0,
                ..base.clone()
            },
            ProbeConfig {
                count: Some(0),
                ..base.clone()
            },
            ProbeConfig {
                duration: Some(Duration::ZERO),
                ..base.clone()
            },
            ProbeConfig {
                max_message: 0,
                ..base.clone()
            },
        ];
        for config in cases {
            assert!(matches!(config.validate(), Err(ProbeError::Config(_))));
        }
    }
}
