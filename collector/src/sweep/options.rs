//! What a sweep was asked to do: the [`Settings`] its result records (so a
//! rerun compares like with like), and what only the run needs besides
//! them (the probe's configuration, the trigger's header values, where to
//! keep the logs).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Warm-up broadcasts a stage may send before it measures: each must reach
/// every connection (the server has taken them all in) within `--settle`;
/// after this many the stage measures what it has and says so.
pub const WARMUP_TRIES: u32 = 3;

/// Everything a sweep ran with, as its result records it. Secrets (header
/// values, passcodes) are never in it: their names are.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// What the result is called beside others (`sweep-compare`'s legend):
    /// `--label`, else the server's URL.
    pub label: String,
    /// The server's URL, as the probe connects to it.
    pub url: String,
    /// The probe's protocol flags as given (`--protocol` and its own),
    /// passcodes and passwords hidden.
    pub protocol: serde_json::Value,
    /// How each connection is opened.
    pub probe: ProbeSettings,
    /// What makes the server broadcast once.
    pub trigger: TriggerSettings,
    /// Connections per stage, as asked (before any cut to the file limit).
    pub stages: Vec<u32>,
    /// Broadcasts measured per stage (after the warm-up).
    pub broadcasts: u32,
    /// Pause after each broadcast has reached every connection.
    pub interval_ms: u64,
    /// Longest wait for a broadcast's receipts; those absent then count missing.
    pub settle_ms: u64,
    /// The threshold the knee is found against: skew p99 per stage.
    pub max_skew_p99_ns: u64,
    /// The server process whose CPU each stage charges it (`--server-pid`).
    pub server_pid: Option<u32>,
    /// Warm-up broadcasts a stage may send before measuring.
    pub warmup_tries: u32,
    /// The agent that tapped the server (`--agent`), whose log gave each
    /// stage the server's fan-out span (absent from sweeps saved before
    /// the sweep joined a tap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Workers on other machines that opened part of each stage
    /// (`--workers`; 0, and absent from results saved before it, for this
    /// machine alone).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub workers: u32,
}

/// How the probe opens each connection, as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProbeSettings {
    /// Names of the extra upgrade headers (`--header`); values are not kept.
    pub headers: Vec<String>,
    /// Subprotocols offered.
    pub subprotocols: Vec<String>,
    /// permessage-deflate offered, as browsers do.
    pub deflate: bool,
    /// Longest connect and upgrade of one connection.
    pub connect_timeout_ms: u64,
    /// `wss://` without checking the server's certificate.
    pub insecure: bool,
    /// The CA file trusted for `wss://` and an `https://` trigger.
    pub ca_file: Option<String>,
    /// Receipt stamps: the kernel's where the socket gives them, else the
    /// probe's own (what every skew figure is measured at).
    pub stamps: String,
}

/// The trigger, as recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TriggerSettings {
    /// The URL asked.
    pub url: String,
    /// `GET`, `POST` or `PUT`.
    pub method: String,
    /// The body sent, if any.
    pub body: Option<String>,
    /// Names of the headers sent (`--trigger-header`); values are not kept.
    pub headers: Vec<String>,
}

/// One HTTP request that makes the server broadcast once.
#[derive(Clone, Debug)]
pub struct TriggerRequest {
    /// The URL.
    pub url: String,
    /// `GET`, `POST` or `PUT`.
    pub method: String,
    /// The body, if any.
    pub body: Option<String>,
    /// Headers, with their values.
    pub headers: Vec<(String, String)>,
}

/// A sweep to run: the settings recorded and what only the run needs.
#[derive(Clone, Debug)]
pub struct SweepOptions {
    /// What the result will record.
    pub settings: Settings,
    /// Each stage's probe starts from this: its connections, name and log
    /// are set per stage.
    pub probe: probe::ProbeConfig,
    /// The trigger, header values included.
    pub trigger: TriggerRequest,
    /// For an `https://` trigger: the CA file to trust.
    pub ca_file: Option<PathBuf>,
    /// Where to keep each stage's probe log (a temporary directory, removed,
    /// otherwise).
    pub keep: Option<PathBuf>,
    /// How to rerun this sweep (the command line, secrets hidden).
    pub command: String,
    /// The agent tapping the server, when given (`--agent`).
    pub agent: Option<AgentAccess>,
    /// The other machines asked for (`--workers`), if any.
    pub workers: Option<WorkersWanted>,
}

/// Other machines' connections for each stage (`--workers N`).
#[derive(Clone, Debug)]
pub struct WorkersWanted {
    /// How many workers the sweep waits for.
    pub count: u32,
    /// How long it waits for them (`--workers-wait`).
    pub wait: std::time::Duration,
    /// How their connections are made: the sweep's own flags.
    pub connect: super::board::Connect,
}

/// How to reach the agent that taps the server.
#[derive(Clone, Debug)]
pub struct AgentAccess {
    /// Its address, `http://HOST:PORT`.
    pub url: String,
    /// Its bearer token (`--token-file`).
    pub token: Option<String>,
    /// The file the token was read from, named when the agent refuses it.
    pub token_file: Option<PathBuf>,
}

impl SweepOptions {
    /// Pause after each broadcast.
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.settings.interval_ms)
    }

    /// Longest wait for a broadcast's receipts.
    pub fn settle(&self) -> Duration {
        Duration::from_millis(self.settings.settle_ms)
    }
}

/// Whether a count is zero: a field left out of the JSON then.
fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// `--stages`: connection counts separated by commas, each a number or
/// one with a `k` (thousands): `5,100,1k,5k,10k`. Sorted, each once.
pub fn parse_stages(text: &str) -> Result<Vec<u32>, String> {
    let mut stages = Vec::new();
    for part in text.split(',') {
        let part = part.trim();
        let (digits, scale) = match part.strip_suffix(['k', 'K']) {
            Some(d) => (d, 1000u64),
            None => (part, 1),
        };
        let n: u64 = digits
            .replace('_', "")
            .parse()
            .map_err(|_| format!("--stages {text}: {part:?} is not a number of connections; give them like 5,100,1000 or 1k,5k,10k"))?;
        let n = n
            .checked_mul(scale)
            .filter(|n| (1..=u64::from(u32::MAX)).contains(n))
            .ok_or_else(|| format!("--stages {text}: {part:?} is out of range (1 and more)"))?;
        stages.push(n as u32);
    }
    stages.sort_unstable();
    stages.dedup();
    Ok(stages)
}

/// The command line as a rerun takes it, each word quoted where a shell
/// needs it and the values of secrets hidden: `--header`'s and
/// `--trigger-header`'s values (their names kept), `--stomp-passcode` and
/// `--mqtt-password` (unless read from a file, `@FILE`).
pub fn rerun_line(args: &[String]) -> String {
    const HEADERS: [&str; 3] = ["--header", "--trigger-header", "--stomp-header"];
    const SECRETS: [&str; 2] = ["--stomp-passcode", "--mqtt-password"];
    let hide = |flag: &str, value: &str| -> String {
        if value.starts_with('@') {
            value.to_owned()
        } else if HEADERS.contains(&flag) {
            match value.split_once(':') {
                Some((name, v)) if v.trim().starts_with('@') => format!("{name}:{v}"),
                Some((name, _)) => format!("{name}: (hidden)"),
                None => "(hidden)".to_owned(),
            }
        } else if SECRETS.contains(&flag) {
            "(hidden)".to_owned()
        } else {
            value.to_owned()
        }
    };
    let mut words = Vec::with_capacity(args.len());
    let mut after: Option<&str> = None;
    for arg in args {
        let word = match after.take() {
            Some(flag) => hide(flag, arg),
            None => match arg.split_once('=') {
                Some((flag, value)) if flag.starts_with("--") => {
                    format!("{flag}={}", hide(flag, value))
                }
                _ => {
                    if HEADERS.contains(&arg.as_str()) || SECRETS.contains(&arg.as_str()) {
                        after = Some(arg.as_str());
                    }
                    arg.clone()
                }
            },
        };
        words.push(shell_word(&word));
    }
    words.join(" ")
}

/// `word` as a POSIX shell reads it back: as is when it is plain, else in
/// single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,@%+".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The protocol flags as recorded: passcodes and passwords given inline
/// are hidden (one read from a file is named by its `@FILE`).
pub fn recorded_protocol(args: &probe::protocol_args::ProtocolArgs) -> serde_json::Value {
    let mut value = serde_json::to_value(args).unwrap_or(serde_json::Value::Null);
    if let Some(map) = value.as_object_mut() {
        for key in ["stomp_passcode", "mqtt_password"] {
            if let Some(v) = map.get_mut(key)
                && v.as_str().is_some_and(|s| !s.starts_with('@'))
            {
                *v = serde_json::Value::String("(hidden)".to_owned());
            }
        }
        if let Some(serde_json::Value::Array(headers)) = map.get_mut("stomp_header") {
            for h in headers {
                if let Some((name, _)) = h.as_str().and_then(|s| s.split_once(':')) {
                    *h = serde_json::Value::String(format!("{name}: (hidden)"));
                }
            }
        }
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_are_read_as_load_testers_write_them() {
        assert_eq!(
            parse_stages("5,100,1000,5000,10000").unwrap(),
            vec![5, 100, 1000, 5000, 10_000]
        );
        assert_eq!(
            parse_stages("10k, 1k,5K,1_000").unwrap(),
            vec![1000, 5000, 10_000]
        );
        for bad in ["", "5,,10", "0", "ten", "5000000k"] {
            let e = parse_stages(bad).unwrap_err();
            assert!(e.contains("--stages"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_rerun_line_keeps_every_flag_and_hides_secrets() {
        let args: Vec<String> = [
            "skewscope",
            "sweep",
            "--url",
            "ws://h:1/ws",
            "--header",
            "Authorization: Bearer abc",
            "--header=Cookie: @/etc/cookie",
            "--trigger-header",
            "X-Key: s3cret",
            "--stomp-passcode",
            "guest",
            "--trigger-body",
            "{\"go\": 1}",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let line = rerun_line(&args);
        assert!(!line.contains("abc") && !line.contains("s3cret") && !line.contains("guest"));
        assert!(line.contains("'Authorization: (hidden)'"), "{line}");
        assert!(line.contains("'--header=Cookie: @/etc/cookie'"), "{line}");
        assert!(line.contains("--stomp-passcode '(hidden)'"), "{line}");
        assert!(line.contains(r#"--trigger-body '{"go": 1}'"#), "{line}");
        assert!(
            line.starts_with("skewscope sweep --url ws://h:1/ws"),
            "{line}"
        );
    }
}
