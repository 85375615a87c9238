//! A sweep's result, in the shape `--json` writes and `sweep-compare`
//! reads back: what was asked, where it ran, each stage's figures, and the
//! knee.

use serde::{Deserialize, Serialize};

use super::environment::Environment;
use super::figures::StageFigures;
use super::follow::Compressed;
use super::knee::Knee;
use super::options::Settings;
use super::probe_cpu::ProbeCpu;
use super::server_cpu::ServerCpu;

/// The version of this shape: a reader of another version says so rather
/// than misreading it.
pub const FORMAT: u32 = 1;

/// Everything a sweep found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepResult {
    /// Always `"skewscope sweep"`: what this file is.
    pub kind: String,
    /// [`FORMAT`].
    pub format: u32,
    /// What was asked.
    pub settings: Settings,
    /// Where it ran.
    pub environment: Environment,
    /// Each stage run, smallest first.
    pub stages: Vec<StageResult>,
    /// Stages asked that did not run, and why.
    pub not_run: Vec<NotRun>,
    /// Where skew p99 crosses the threshold.
    pub knee: Knee,
    /// How long the whole sweep took.
    pub took_ms: u64,
}

/// One stage: its connections, what became of them, and its figures.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StageResult {
    /// Connections asked.
    pub asked: u32,
    /// Connections attempted: `asked`, or fewer when cut.
    pub connections: u32,
    /// Why fewer were attempted than asked.
    pub cut: Option<String>,
    /// Connections opened (the upgrade, and the subscription where the
    /// protocol has one, done).
    pub opened: u32,
    /// Connections that could not be opened (refused, timed out, reset).
    pub refused: u32,
    /// The first refusal's error.
    pub first_refusal: Option<String>,
    /// Connections closed or lost while the stage measured.
    pub dropped: u32,
    /// The first drop's reason.
    pub first_drop: Option<String>,
    /// From starting the connections to every attempt's end.
    pub connect_ms: u64,
    /// Warm-up broadcasts sent before measuring.
    pub warmups: u32,
    /// Open connections that received no warm-up broadcast.
    pub never_warmed: u32,
    /// Open connections that received fewer warm-up broadcasts than others:
    /// the server took them in late. A server that sends every broadcast
    /// the same bytes has its copies told apart by their order on each
    /// connection, which such a connection shifts: its later receipts may
    /// be joined to the wrong broadcast.
    pub late_to_warm: u32,
    /// The figures, when a broadcast was measured.
    pub figures: Option<StageFigures>,
    /// The server's CPU over the broadcasts measured (`--server-pid`).
    pub server_cpu: Option<ServerCpu>,
    /// This process's CPU per receipt over the same span: what the sweep's
    /// own connections cost (absent from sweeps saved before it was).
    #[serde(default)]
    pub probe_cpu: Option<ProbeCpu>,
    /// Connections whose server compressed what it sent (permessage-deflate,
    /// offered unless `--no-deflate`): their inflating is part of
    /// `probe_cpu` (absent from sweeps saved before it was counted).
    #[serde(default)]
    pub compressed: Compressed,
    /// With `--agent`: why the stage has no fan-out span from the tap, or
    /// has it for fewer broadcasts than were heard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tap_short: Option<String>,
    /// With `--workers`: each other machine's share of the stage and how
    /// it ended (this machine opened the rest). Empty for one machine.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub machines: Vec<MachineShare>,
    /// Why the stage ended before its last broadcast, if it did; the sweep
    /// then stops there.
    pub stopped: Option<String>,
    /// The stage's probe log, when kept (`--keep`).
    pub log: Option<String>,
}

/// One worker's part of a stage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MachineShare {
    /// The worker's name.
    pub name: String,
    /// Connections it was asked to open.
    pub connections: u32,
    /// What it said last: how many it opened, then whether its records
    /// all reached the agent.
    pub state: String,
}

/// A stage asked that did not run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NotRun {
    /// Connections asked.
    pub asked: u32,
    /// Why it did not run.
    pub why: String,
}

impl StageResult {
    /// Its skew p99, when measured.
    pub fn skew_p99_ns(&self) -> Option<u64> {
        let p99 = self.figures.as_ref()?.skew_ns?.p99;
        Some(p99.max(0) as u64)
    }
}

impl SweepResult {
    /// Reads a result `--json` wrote; another file, or another version of
    /// the shape, is an error that says so.
    pub fn from_json(text: &str) -> Result<SweepResult, String> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        if value.get("kind").and_then(|k| k.as_str()) != Some("skewscope sweep") {
            return Err("not a skewscope sweep result (written by skewscope sweep --json)".into());
        }
        let format = value.get("format").and_then(|f| f.as_u64());
        if format != Some(u64::from(FORMAT)) {
            return Err(format!(
                "a sweep result of format {}, and this skewscope reads format {FORMAT}",
                format.map_or("unknown".to_owned(), |f| f.to_string())
            ));
        }
        serde_json::from_value(value).map_err(|e| format!("a sweep result, but {e}"))
    }
}
