//! The `--protocol` flags (help heading "Protocol"): which protocol rides on
//! each connection and what it subscribes to, turned into the
//! [`Protocol`] the connections run. Flattened into the probe's command
//! line and settings file (keys named like the flags, with underscores).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use skewscope_core::mqtt::MqttVersion;
use skewscope_core::units::parse_duration;
use skewscope_os::settings::duration_text;

use crate::config::{DEFAULT_MQTT_KEEP_ALIVE, DEFAULT_STOMP_HEART_BEAT, Protocol};
use crate::error::ProbeError;

/// A duration, or 0 for none.
fn parse_duration_or_zero(text: &str) -> Result<Duration, String> {
    if text.trim() == "0" {
        Ok(Duration::ZERO)
    } else {
        parse_duration(text)
    }
}

/// The protocol flags of `skewscope-probe`.
#[derive(Clone, Debug, PartialEq, clap::Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProtocolArgs {
    /// What the server speaks over the connection: ws (plain WebSocket
    /// messages, each one a payload), socketio (Socket.IO 4/5: each
    /// event's data), stomp (STOMP 1.2 over WebSocket: each MESSAGE's
    /// body), mqtt (MQTT over WebSocket: each PUBLISH's payload) or sse
    /// (Server-Sent Events over HTTP, --url http://…: each event's data).
    /// Receipts are stamped alike whichever it is; docs/protocols.md says
    /// what each one's keep-alive costs.
    #[arg(long, value_name = "PROTOCOL", default_value = "ws", help_heading = "Protocol",
          value_parser = ["ws", "socketio", "stomp", "mqtt", "sse"])]
    pub protocol: String,

    /// socketio, sse: an event name to record (repeatable); every event
    /// by default. The others are read and not recorded.
    #[arg(long = "event", value_name = "NAME", help_heading = "Protocol")]
    pub event: Vec<String>,

    /// socketio: the namespace to connect to, as the server's clients
    /// name it (io('/lobby')); / by default.
    #[arg(long, value_name = "NAMESPACE", help_heading = "Protocol")]
    pub namespace: Option<String>,

    /// stomp: the destination to SUBSCRIBE to (/topic/show, /exchange/x/y).
    #[arg(long, value_name = "DESTINATION", help_heading = "Protocol")]
    pub destination: Option<String>,

    /// stomp: CONNECT's login, for a broker that wants a user (RabbitMQ's
    /// default one is guest, from loopback only).
    #[arg(long, value_name = "LOGIN", help_heading = "Protocol")]
    pub stomp_login: Option<String>,

    /// stomp: CONNECT's passcode; @FILE reads it from FILE (kept out of
    /// process lists and settings).
    #[arg(long, value_name = "PASSCODE", help_heading = "Protocol")]
    pub stomp_passcode: Option<String>,

    /// stomp: an extra CONNECT header, 'name:value' (repeatable), like
    /// 'host:/' (RabbitMQ's virtual host) or a token a broker wants.
    #[arg(long, value_name = "'NAME:VALUE'", help_heading = "Protocol")]
    pub stomp_header: Vec<String>,

    /// stomp: the heart-beat offered both ways (the broker may ask for a
    /// slower one); 0 for none.
    #[arg(long, value_name = "D", default_value = "10s", help_heading = "Protocol",
          value_parser = parse_duration_or_zero)]
    #[serde(with = "duration_text")]
    pub heart_beat: Duration,

    /// mqtt: a topic filter to SUBSCRIBE to (repeatable; + and # as MQTT
    /// defines them).
    #[arg(long = "topic", value_name = "FILTER", help_heading = "Protocol")]
    pub topic: Vec<String>,

    /// mqtt: the QoS asked for: 0, or 1 (each message then acknowledged).
    #[arg(long, value_name = "QOS", default_value_t = 0, help_heading = "Protocol",
          value_parser = clap::value_parser!(u8).range(0..=1))]
    pub qos: u8,

    /// mqtt: the version spoken, 3.1.1 or 5 (MQTT 5 adds reason strings
    /// and lets the broker set the keep-alive).
    #[arg(
        long,
        value_name = "VERSION",
        default_value = "3.1.1",
        help_heading = "Protocol"
    )]
    pub mqtt_version: String,

    /// mqtt: the keep-alive (whole seconds): a PINGREQ after this long
    /// without sending; 0 for none. A broker's own (MQTT 5) wins.
    #[arg(long, value_name = "D", default_value = "60s", help_heading = "Protocol",
          value_parser = parse_duration_or_zero)]
    #[serde(with = "duration_text")]
    pub keep_alive: Duration,

    /// mqtt: the user name, for a broker that allows no anonymous
    /// clients.
    #[arg(long, value_name = "NAME", help_heading = "Protocol")]
    pub mqtt_username: Option<String>,

    /// mqtt: the password; @FILE reads it from FILE.
    #[arg(long, value_name = "PASSWORD", help_heading = "Protocol")]
    pub mqtt_password: Option<String>,
}

impl Default for ProtocolArgs {
    fn default() -> Self {
        ProtocolArgs {
            protocol: "ws".to_owned(),
            event: Vec::new(),
            namespace: None,
            destination: None,
            stomp_login: None,
            stomp_passcode: None,
            stomp_header: Vec::new(),
            heart_beat: DEFAULT_STOMP_HEART_BEAT,
            topic: Vec::new(),
            qos: 0,
            mqtt_version: "3.1.1".to_owned(),
            keep_alive: DEFAULT_MQTT_KEEP_ALIVE,
            mqtt_username: None,
            mqtt_password: None,
        }
    }
}

impl ProtocolArgs {
    /// The protocol these flags ask for; a flag of another protocol than
    /// the one given is an error, so a typo never goes unnoticed.
    pub fn into_protocol(self) -> Result<Protocol, ProbeError> {
        let defaults = ProtocolArgs::default();
        let given: [(&str, bool, &[&str]); 13] = [
            ("--event", !self.event.is_empty(), &["socketio", "sse"]),
            ("--namespace", self.namespace.is_some(), &["socketio"]),
            ("--destination", self.destination.is_some(), &["stomp"]),
            ("--stomp-login", self.stomp_login.is_some(), &["stomp"]),
            (
                "--stomp-passcode",
                self.stomp_passcode.is_some(),
                &["stomp"],
            ),
            ("--stomp-header", !self.stomp_header.is_empty(), &["stomp"]),
            ("--topic", !self.topic.is_empty(), &["mqtt"]),
            ("--qos", self.qos != defaults.qos, &["mqtt"]),
            (
                "--mqtt-version",
                self.mqtt_version != defaults.mqtt_version,
                &["mqtt"],
            ),
            ("--mqtt-username", self.mqtt_username.is_some(), &["mqtt"]),
            ("--mqtt-password", self.mqtt_password.is_some(), &["mqtt"]),
            (
                "--heart-beat",
                self.heart_beat != defaults.heart_beat,
                &["stomp"],
            ),
            (
                "--keep-alive",
                self.keep_alive != defaults.keep_alive,
                &["mqtt"],
            ),
        ];
        for (flag, is_given, for_protocols) in given {
            if is_given && !for_protocols.contains(&self.protocol.as_str()) {
                return Err(ProbeError::Config(format!(
                    "{flag} is for --protocol {}, not {}",
                    for_protocols.join(" or "),
                    self.protocol
                )));
            }
        }
        let missing = |what: &str| {
            ProbeError::Config(format!(
                "--protocol {} needs {what} (a flag, or a key in --config)",
                self.protocol
            ))
        };
        Ok(match self.protocol.as_str() {
            "ws" => Protocol::Ws,
            "socketio" => Protocol::SocketIo {
                namespace: self.namespace.unwrap_or_else(|| "/".to_owned()),
                events: self.event,
            },
            "sse" => Protocol::Sse { events: self.event },
            "stomp" => Protocol::Stomp {
                destination: self
                    .destination
                    .clone()
                    .ok_or_else(|| missing("--destination"))?,
                login: self.stomp_login,
                passcode: self
                    .stomp_passcode
                    .map(|p| secret("--stomp-passcode", &p))
                    .transpose()?,
                headers: self
                    .stomp_header
                    .iter()
                    .map(|h| {
                        h.split_once(':')
                            .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
                            .ok_or_else(|| {
                                ProbeError::Config(format!(
                                    "--stomp-header {h:?}: give it as 'name:value'"
                                ))
                            })
                    })
                    .collect::<Result<_, _>>()?,
                heart_beat: self.heart_beat,
            },
            "mqtt" => {
                if self.topic.is_empty() {
                    return Err(missing("--topic"));
                }
                Protocol::Mqtt {
                    version: self
                        .mqtt_version
                        .parse::<MqttVersion>()
                        .map_err(|e| ProbeError::Config(format!("--mqtt-version {e}")))?,
                    topics: self.topic,
                    qos: self.qos,
                    keep_alive: self.keep_alive,
                    username: self.mqtt_username,
                    password: self
                        .mqtt_password
                        .map(|p| secret("--mqtt-password", &p))
                        .transpose()?,
                }
            }
            other => {
                return Err(ProbeError::Config(format!(
                    "--protocol {other}: give ws, socketio, stomp, mqtt or sse"
                )));
            }
        })
    }
}

/// A secret as given, or read from a file with `@FILE` (`@@` for a value
/// that starts with @); never echoed in an error.
fn secret(flag: &str, value: &str) -> Result<String, ProbeError> {
    match value.strip_prefix('@') {
        Some(literal) if literal.starts_with('@') => Ok(literal.to_owned()),
        Some(path) => {
            let text = std::fs::read_to_string(path.trim())
                .map_err(|e| ProbeError::Config(format!("{flag}: cannot read {path}: {e}")))?;
            Ok(text.trim_end_matches(['\r', '\n']).to_owned())
        }
        None => Ok(value.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        protocol: ProtocolArgs,
    }

    fn parse(args: &[&str]) -> Result<Protocol, ProbeError> {
        let mut argv = vec!["probe"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv)
            .map_err(|e| ProbeError::Config(e.to_string()))?
            .protocol
            .into_protocol()
    }

    #[test]
    fn the_default_is_todays_websocket() {
        assert_eq!(parse(&[]).unwrap(), Protocol::Ws);
        assert_eq!(
            ProtocolArgs::default().into_protocol().unwrap(),
            Protocol::Ws
        );
    }

    #[test]
    fn each_protocol_takes_its_flags() {
        assert_eq!(
            parse(&[
                "--protocol",
                "socketio",
                "--event",
                "show",
                "--namespace",
                "/lobby"
            ])
            .unwrap(),
            Protocol::SocketIo {
                namespace: "/lobby".into(),
                events: vec!["show".into()]
            }
        );
        assert_eq!(
            parse(&[
                "--protocol",
                "stomp",
                "--destination",
                "/topic/show",
                "--stomp-login",
                "guest",
                "--stomp-passcode",
                "@@x",
                "--stomp-header",
                "host:/",
                "--heart-beat",
                "0"
            ])
            .unwrap(),
            Protocol::Stomp {
                destination: "/topic/show".into(),
                login: Some("guest".into()),
                passcode: Some("@x".into()),
                headers: vec![("host".into(), "/".into())],
                heart_beat: Duration::ZERO,
            }
        );
        assert_eq!(
            parse(&[
                "--protocol",
                "mqtt",
                "--topic",
                "show/#",
                "--qos",
                "1",
                "--mqtt-version",
                "5"
            ])
            .unwrap(),
            Protocol::Mqtt {
                version: MqttVersion::V5,
                topics: vec!["show/#".into()],
                qos: 1,
                keep_alive: DEFAULT_MQTT_KEEP_ALIVE,
                username: None,
                password: None,
            }
        );
        assert_eq!(
            parse(&["--protocol", "sse", "--event", "show"]).unwrap(),
            Protocol::Sse {
                events: vec!["show".into()]
            }
        );
    }

    #[test]
    fn flags_of_another_protocol_or_missing_ones_are_errors() {
        let err = parse(&["--topic", "x"]).unwrap_err().to_string();
        assert!(err.contains("--topic is for --protocol mqtt"), "{err}");
        let err = parse(&["--protocol", "stomp"]).unwrap_err().to_string();
        assert!(err.contains("needs --destination"), "{err}");
        let err = parse(&["--protocol", "mqtt"]).unwrap_err().to_string();
        assert!(err.contains("needs --topic"), "{err}");
        assert!(parse(&["--protocol", "mqtt", "--topic", "t", "--qos", "2"]).is_err());
        assert!(parse(&["--protocol", "amqp"]).is_err());
    }

    #[test]
    fn settings_files_use_the_flags_names() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("probe.toml");
        let read = |text: &str| {
            std::fs::write(&file, text).unwrap();
            skewscope_os::settings::merge(&ProtocolArgs::default(), |_| false, Some(&file), &[])
        };
        let args = read("protocol = \"mqtt\"\ntopic = [\"a/b\"]\nkeep_alive = \"30s\"\n").unwrap();
        assert_eq!(args.keep_alive, Duration::from_secs(30));
        assert!(matches!(
            args.into_protocol().unwrap(),
            Protocol::Mqtt { .. }
        ));
        assert!(read("topics = [\"x\"]").is_err());
    }
}
