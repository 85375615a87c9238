//! What the operator asked an audit for: the agent, the broadcasts or the
//! passive window, the waits, the thresholds, and `--match`.

use std::path::PathBuf;
use std::time::Duration;

use skewscope_core::analysis::verdict::Thresholds;

use super::error::CannotAudit;
use crate::inputs;
use crate::matching::Matcher;

/// What the operator asked for.
#[derive(Clone, Debug)]
pub struct AuditOptions {
    /// The agent's base URL, `http://server:8080`.
    pub agent: String,
    /// The agent's bearer token.
    pub token: Option<String>,
    /// The file it was read from (`--token-file`), named when the agent
    /// refuses it.
    pub token_file: Option<PathBuf>,
    /// For `https://`: trust only the CAs in this PEM file (`--ca-file`).
    pub ca_file: Option<PathBuf>,
    /// Broadcasts to trigger.
    pub broadcasts: u64,
    /// Pause between triggers.
    pub interval: Duration,
    /// Longest wait for receipts after the last trigger (and for probes
    /// before the first).
    pub settle: Duration,
    /// Probes that must be uploading before the audit starts.
    pub require_probes: usize,
    /// A foreign server's trigger URL; `None` triggers the agent's hub.
    pub trigger: Option<String>,
    /// `GET` or `POST` for `trigger`.
    pub trigger_method: String,
    /// The time to act the hub's test broadcasts carry, after their start
    /// (`/start_test?lead=`), or `lead=auto`'s; a foreign server's trigger
    /// carries its own.
    pub lead: Option<skewscope_core::lead::LeadChoice>,
    /// What the verdict holds the report to.
    pub thresholds: Thresholds,
    /// Where to keep the copy of the agent's logs (a temporary directory
    /// otherwise).
    pub keep: Option<PathBuf>,
    /// Also compute the series the HTML page plots.
    pub figures: bool,
    /// Judge only broadcasts whose payload matches (`--match`), given as
    /// the expression and its parse.
    pub matching: Option<(String, Matcher)>,
    /// Trigger nothing: judge the broadcasts the site sends itself.
    pub passive: Option<Passive>,
}

/// `--passive`: what a live site sends on its own is judged, nothing is
/// triggered.
#[derive(Clone, Copy, Debug)]
pub struct Passive {
    /// How long to watch.
    pub window: Duration,
    /// Stop watching once this many broadcasts were seen (`--broadcasts`).
    pub broadcasts: Option<u64>,
}

impl AuditOptions {
    /// Reads the local copy of the logs, judging payloads with `--match`.
    pub(super) fn read_copy(&self, files: &[PathBuf]) -> Result<inputs::Inputs, CannotAudit> {
        let matcher = self.matching.as_ref().map(|(e, m)| (e.as_str(), m));
        inputs::read_inputs_matching(files, matcher).map_err(CannotAudit::Logs)
    }
}

/// `--agent` as the audit asks it: `http://HOST:PORT` (or `https://`);
/// a bare `HOST:PORT` is taken as `http://`. A WebSocket URL, or one with
/// a path, is refused with the URL to give instead: the audit speaks HTTP
/// to the agent's port, whatever path the probes use on it.
pub fn agent_url(text: &str) -> Result<String, String> {
    let text = text.trim();
    let (scheme, rest) = match text.split_once("://") {
        Some((scheme, rest)) => (scheme.to_ascii_lowercase(), rest),
        None => ("http".to_owned(), text),
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let suggest = |scheme: &str| {
        if host.is_empty() {
            "http://HOST:PORT (the agent's --listen address)".to_owned()
        } else {
            format!("{scheme}://{host}")
        }
    };
    let scheme = match scheme.as_str() {
        "http" | "https" => scheme,
        "ws" | "wss" => {
            let http = if scheme == "wss" { "https" } else { "http" };
            return Err(format!(
                "--agent {text}: give the agent's HTTP address, {}: skewscope asks it over HTTP on the port the probes' {scheme}:// URL uses",
                suggest(http)
            ));
        }
        other => {
            return Err(format!(
                "--agent {text}: {other}:// is not the agent's; give {}",
                suggest("http")
            ));
        }
    };
    if host.is_empty() {
        return Err(format!(
            "--agent {text}: no host; give http://HOST:PORT (the agent's --listen address)"
        ));
    }
    if rest.len() > host.len() && rest[host.len()..] != *"/" {
        return Err(format!(
            "--agent {text}: give only the agent's address, {} (skewscope knows its paths)",
            suggest(&scheme)
        ));
    }
    Ok(format!("{scheme}://{host}"))
}

/// The agent's bearer token from `--token-file`, trimmed: an unreadable
/// or empty file is an error that says what to put there.
pub fn read_token_file(path: &std::path::Path) -> anyhow::Result<String> {
    use anyhow::Context;
    let token = std::fs::read_to_string(path)
        .map(|t| t.trim().to_owned())
        .with_context(|| format!("cannot read --token-file {}", path.display()))?;
    if token.is_empty() {
        anyhow::bail!(
            "--token-file {} is empty; put the agent's token in it (the file the agent was given with its --token-file)",
            path.display()
        );
    }
    Ok(token)
}

#[cfg(test)]
mod tests {
    use super::agent_url;

    #[test]
    fn the_agent_is_given_as_its_http_address() {
        assert_eq!(agent_url("http://srv:8080").unwrap(), "http://srv:8080");
        assert_eq!(agent_url("http://srv:8080/").unwrap(), "http://srv:8080");
        assert_eq!(agent_url("https://srv:8443").unwrap(), "https://srv:8443");
        // What people type: the address alone.
        assert_eq!(
            agent_url("127.0.0.1:18080").unwrap(),
            "http://127.0.0.1:18080"
        );
        let ws = agent_url("ws://127.0.0.1:18080/ws").unwrap_err();
        assert!(
            ws.contains("give the agent's HTTP address, http://127.0.0.1:18080"),
            "{ws}"
        );
        let wss = agent_url("wss://srv:8443").unwrap_err();
        assert!(wss.contains("https://srv:8443"), "{wss}");
        let path = agent_url("http://srv:8080/audit/status").unwrap_err();
        assert!(
            path.contains("give only the agent's address, http://srv:8080"),
            "{path}"
        );
        let ftp = agent_url("ftp://srv").unwrap_err();
        assert!(ftp.contains("give http://srv"), "{ftp}");
        assert!(agent_url("http://").unwrap_err().contains("no host"));
    }
}
