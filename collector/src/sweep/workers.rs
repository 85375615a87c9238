//! The sweep's side of its workers (`--workers N`): other machines, each
//! running `skewscope sweep-worker` against the same agent. The sweep
//! gathers them from the agent's board, pins a plan there for each step of
//! a stage (open this many, close), waits on what they say back, and
//! copies their uploaded logs from the agent as the audit does
//! ([`Mirror`]), so each stage joins every machine's receipts.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Deserialize;

use super::board::{self, Connect, Plan, Step, WorkerState, WorkerStatus};
use crate::audit::agent_api::AgentApi;
use crate::audit::mirror::Mirror;

/// Longest wait for the workers asked for to be on the board, unless
/// `--workers-wait` says otherwise.
pub const GATHER_WAIT: Duration = Duration::from_secs(60);
/// A worker not heard from for this long has gone (it reports every
/// 200 ms, also while it opens or closes: fifty missed reports).
pub const SILENT_FOR: Duration = Duration::from_secs(10);
/// A worker heard from this recently counts as present when gathering.
const PRESENT: Duration = Duration::from_secs(5);
/// Pause between looks at the board.
const POLL: Duration = Duration::from_millis(200);

/// `GET /sweep`.
#[derive(Deserialize)]
struct View {
    workers: Vec<Seen>,
}

/// A worker as the board shows it.
#[derive(Deserialize)]
struct Seen {
    seen_ms_ago: u64,
    status: serde_json::Value,
}

/// The workers of this sweep, and the copies of their logs.
pub struct Workers {
    api: AgentApi,
    mirror: Mirror,
    sweep: String,
    seq: Cell<u64>,
    chosen: Vec<WorkerStatus>,
    connect: Connect,
}

impl Workers {
    /// Waits (up to `wait`) until `wanted` idle workers are on the board
    /// of the agent `api` asks, and takes them (by name, in order). Their
    /// logs are copied under `dir`.
    pub fn gather(
        api: AgentApi,
        dir: &Path,
        wanted: u32,
        wait: Duration,
        connect: Connect,
        say: &dyn Fn(&str),
    ) -> anyhow::Result<Workers> {
        let deadline = Instant::now() + wait;
        let mut said = false;
        let chosen = loop {
            let idle: Vec<WorkerStatus> = present(&api)?
                .into_iter()
                .filter(|(status, ago)| {
                    *ago <= PRESENT && matches!(status.state, WorkerState::Idle)
                })
                .map(|(status, _)| status)
                .collect();
            if idle.len() >= wanted as usize {
                break idle.into_iter().take(wanted as usize).collect::<Vec<_>>();
            }
            if Instant::now() >= deadline {
                let names: Vec<&str> = idle.iter().map(|s| s.name.as_str()).collect();
                bail!(
                    "--workers {wanted}: {} idle worker(s) on the agent's board after {}{}: start `skewscope sweep-worker --agent URL --token-file FILE` on each other machine (the URL and token this sweep was given), and give each its own --name",
                    idle.len(),
                    humantime::format_duration(wait),
                    if names.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", names.join(", "))
                    }
                );
            }
            if !said {
                say(&format!(
                    "sweep: waiting for {wanted} worker(s) on the agent's board ({} there)",
                    idle.len()
                ));
                said = true;
            }
            std::thread::sleep(POLL);
        };
        let random = skewscope_os::host::random_bytes::<4>().context("cannot draw a sweep id")?;
        let sweep: String = random.iter().map(|b| format!("{b:02x}")).collect();
        say(&format!(
            "sweep: {} worker(s): {} (sweep id {sweep})",
            chosen.len(),
            chosen
                .iter()
                .map(|w| format!("{} on {}, room for {}", w.name, w.host, w.room))
                .collect::<Vec<_>>()
                .join("; ")
        ));
        Ok(Workers {
            api,
            mirror: Mirror::new(&dir.join("workers"))?,
            sweep,
            seq: Cell::new(0),
            chosen,
            connect,
        })
    }

    /// The workers' names, in the order [`Workers::rooms`] gives their
    /// rooms.
    pub fn names(&self) -> Vec<String> {
        self.chosen.iter().map(|w| w.name.clone()).collect()
    }

    /// Connections each worker can hold.
    pub fn rooms(&self) -> Vec<u32> {
        self.chosen.iter().map(|w| w.room).collect()
    }

    /// Asks each worker to open its share of a stage of `stage`
    /// connections.
    pub fn open(&self, stage: u32, shares: &BTreeMap<String, u32>) -> anyhow::Result<()> {
        self.pin(Step::Open, stage, shares.clone())
    }

    /// Asks each worker to close what it opened for the stage.
    pub fn close(&self, stage: u32) -> anyhow::Result<()> {
        self.pin(Step::Close, stage, BTreeMap::new())
    }

    fn pin(&self, step: Step, stage: u32, shares: BTreeMap<String, u32>) -> anyhow::Result<()> {
        self.seq.set(self.seq.get() + 1);
        let plan = Plan {
            sweep: self.sweep.clone(),
            seq: self.seq.get(),
            step,
            stage,
            shares,
            connect: self.connect.clone(),
        };
        let _: serde_json::Value = self
            .api
            .call_json("PUT", "/sweep/plan", Some(&plan))
            .context("cannot pin the sweep's plan on the agent's board")?;
        Ok(())
    }

    /// Waits until every worker has done the last step asked (up to
    /// `deadline`), and says what each is at. A worker silent for
    /// [`SILENT_FOR`], or past the deadline, is an error naming it.
    pub fn wait_done(&self, deadline: Instant) -> anyhow::Result<BTreeMap<String, WorkerState>> {
        let now_acting = (self.sweep.clone(), self.seq.get());
        loop {
            let seen = self.alive()?;
            let mut done = BTreeMap::new();
            let mut waiting = Vec::new();
            for w in &self.chosen {
                match seen.iter().find(|(s, _)| s.name == w.name) {
                    Some((s, _)) if s.acted_on.as_ref() == Some(&now_acting) => {
                        done.insert(w.name.clone(), s.state.clone());
                    }
                    _ => waiting.push(w.name.as_str()),
                }
            }
            if waiting.is_empty() {
                return Ok(done);
            }
            if Instant::now() >= deadline {
                bail!(
                    "worker(s) {} had not done what the sweep asked in time",
                    waiting.join(", ")
                );
            }
            std::thread::sleep(POLL);
        }
    }

    /// The workers on the board, or an error naming one of this sweep's
    /// that is gone or silent for [`SILENT_FOR`] (its machine or process
    /// died: its connections, and the receipts they would have had, are
    /// gone with it).
    pub fn alive(&self) -> anyhow::Result<Vec<(WorkerStatus, Duration)>> {
        let seen = present(&self.api)?;
        for w in &self.chosen {
            match seen.iter().find(|(s, _)| s.name == w.name) {
                None => bail!("worker {} is no longer on the agent's board", w.name),
                Some((_, ago)) if *ago > SILENT_FOR => bail!(
                    "worker {} has not been heard from for {} (its machine or process is gone, and its connections with it)",
                    w.name,
                    humantime::format_duration(Duration::from_secs(ago.as_secs()))
                ),
                Some(_) => {}
            }
        }
        Ok(seen)
    }

    /// Copies what is new of each worker's log of the stage of `stage`
    /// connections from the agent: the local copies, by worker (a worker
    /// whose upload has not begun has none yet).
    pub fn copies(&self, stage: u32) -> anyhow::Result<BTreeMap<String, PathBuf>> {
        let status = self
            .api
            .status()
            .context("the agent the workers upload to")?;
        let mut copies = BTreeMap::new();
        for w in &self.chosen {
            let name = board::run_name(&self.sweep, stage, &w.name);
            let Some(run) = status.probes.iter().find(|p| p.name == name) else {
                continue;
            };
            let Some(file) = status.logs.iter().find(|l| l.name == run.file) else {
                continue;
            };
            self.mirror
                .sync(&self.api, &file.name, file.bytes)
                .with_context(|| format!("cannot copy worker {}'s log from the agent", w.name))?;
            let path = self.mirror.path_of(&file.name);
            if path.exists() {
                copies.insert(w.name.clone(), path);
            }
        }
        Ok(copies)
    }

    /// Copies what is new of the agent's own segments (its time exchanges,
    /// its tap's records if it taps the server).
    pub fn agent_segments(&self) -> anyhow::Result<Vec<PathBuf>> {
        let status = self
            .api
            .status()
            .context("the agent the workers upload to")?;
        Ok(self.mirror.sync_segments(&self.api, &status)?)
    }

    /// The agent's wall clock now: the triggers' times, on the clock every
    /// machine's receipts are placed on.
    pub fn agent_now_ns(&self) -> anyhow::Result<u64> {
        Ok(self
            .api
            .status()
            .context("the agent's clock, for the trigger's time")?
            .now_wall_ns)
    }
}

impl Drop for Workers {
    /// However the sweep ends, its workers close what they hold.
    fn drop(&mut self) {
        let _: Result<serde_json::Value, _> =
            self.api
                .call_json("DELETE", "/sweep/plan", None::<&serde_json::Value>);
    }
}

/// The workers on the board, with how long ago each was heard from.
pub fn present(api: &AgentApi) -> anyhow::Result<Vec<(WorkerStatus, Duration)>> {
    let view: View = api
        .call_json("GET", "/sweep", None::<&serde_json::Value>)
        .context("the agent's sweep board (GET /sweep; an agent older than the board has none)")?;
    Ok(view
        .workers
        .into_iter()
        .filter_map(|w| {
            let status: WorkerStatus = serde_json::from_value(w.status).ok()?;
            Some((status, Duration::from_millis(w.seen_ms_ago)))
        })
        .collect())
}
