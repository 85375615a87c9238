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
