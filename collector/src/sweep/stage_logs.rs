//! Every machine's log of one stage, read as one: this machine's probe
//! log, followed as it is written, and each worker's, followed through its
//! copy from the agent (refreshed at most every [`REMOTE_EVERY`]).
//! Connections are numbered across them, this machine's first, so the
//! stage's waits ("has every open connection received it?") ask one
//! question of all of them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::follow::{Compressed, StageLog};
use super::workers::Workers;

/// Shortest pause between two copies of the workers' logs: each is a
/// request to the agent, and a worker uploads at most every 100 ms.
pub const REMOTE_EVERY: Duration = Duration::from_millis(100);

/// One machine's part of the stage.
struct Part {
    /// Its connections (its share).
    connections: u32,
    /// Its log, once there is one to follow.
    log: Option<StageLog>,
}

/// The stage's logs.
pub struct StageLogs<'a> {
    parts: Vec<Part>,
    remote: Option<Remote<'a>>,
}

/// The workers' side: whose log is whose.
struct Remote<'a> {
    workers: &'a Workers,
    stage: u32,
    /// Worker names, in the order of `parts[1..]`.
    names: Vec<String>,
    copies: BTreeMap<String, PathBuf>,
    last: Option<Instant>,
}

impl<'a> StageLogs<'a> {
    /// This machine's log at `path` (of `connections` connections), and,
    /// with workers, theirs of the stage of `stage` connections, each of
    /// its share in `shares`.
    pub fn open(
        path: &Path,
        connections: u32,
        workers: Option<(&'a Workers, u32, &BTreeMap<String, u32>)>,
    ) -> anyhow::Result<StageLogs<'a>> {
        let mut parts = vec![Part {
            connections,
            log: Some(StageLog::open(path, connections)?),
        }];
        let remote = workers.map(|(workers, stage, shares)| {
            let names: Vec<String> = shares
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(name, _)| name.clone())
                .collect();
            parts.extend(names.iter().map(|name| Part {
                connections: shares[name],
                log: None,
            }));
            Remote {
                workers,
                stage,
                names,
                copies: BTreeMap::new(),
                last: None,
            }
        });
        Ok(StageLogs { parts, remote })
    }

    /// Reads what every log has gained: this machine's at once, the
    /// workers' when their copies were last refreshed [`REMOTE_EVERY`] ago.
    /// A worker gone silent is an error naming it: its connections are
    /// gone, and waiting on them would wait out every --settle.
    pub fn catch_up(&mut self) -> anyhow::Result<()> {
        self.read(true)
    }

    /// The last read of a stage, after its workers said they closed (or
    /// were given up on): whatever reached the agent is read, a worker
    /// gone or not.
    pub fn read_last(&mut self) -> anyhow::Result<()> {
        if let Some(remote) = &mut self.remote {
            remote.last = None;
        }
        self.read(false)
    }

    fn read(&mut self, check_alive: bool) -> anyhow::Result<()> {
        if let Some(remote) = &mut self.remote
            && remote.last.is_none_or(|t| t.elapsed() >= REMOTE_EVERY)
        {
            if check_alive {
                remote.workers.alive()?;
            }
            remote.copies = remote.workers.copies(remote.stage)?;
            remote.last = Some(Instant::now());
            for (i, name) in remote.names.iter().enumerate() {
                let part = &mut self.parts[i + 1];
                if part.log.is_none()
                    && let Some(path) = remote.copies.get(name)
                {
                    part.log = Some(StageLog::open(path, part.connections)?);
                }
            }
        }
        for part in &mut self.parts {
            if let Some(log) = &mut part.log {
                log.catch_up()?;
            }
        }
        Ok(())
    }

    /// The workers' logs copied so far (to join with this machine's).
    pub fn worker_copies(&self) -> Vec<PathBuf> {
        self.remote
            .as_ref()
            .map(|r| r.copies.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Receipts so far, by connection (this machine's first).
    pub fn receipts(&self) -> Vec<u64> {
        let mut all = Vec::new();
        for part in &self.parts {
            match &part.log {
                Some(log) => all.extend_from_slice(log.receipts()),
                None => all.extend(std::iter::repeat_n(0, part.connections as usize)),
            }
        }
        all
    }

    /// Receipts so far on every connection.
    pub fn total_receipts(&self) -> u64 {
        self.logs().map(StageLog::total_receipts).sum()
    }

    /// The connections open now, numbered as [`StageLogs::receipts`].
    pub fn open_connections(&self) -> Vec<usize> {
        let mut open = Vec::new();
        let mut base = 0;
        for part in &self.parts {
            if let Some(log) = &part.log {
                open.extend(log.open_connections().map(|c| base + c));
            }
            base += part.connections as usize;
        }
        open
    }

    /// Connections whose opening the logs hold.
    pub fn opened(&self) -> u32 {
        self.logs().map(StageLog::opened).sum()
    }

    /// Connections a skewscope agent's hub named.
    pub fn named_by_hub(&self) -> u32 {
        self.logs().map(StageLog::named_by_hub).sum()
    }

    /// Whether every open connection, and at least one, has received
    /// something since `before` ([`StageLogs::receipts`] when a broadcast
    /// was asked for).
    pub fn each_received_since(&self, before: &[u64]) -> bool {
        let now = self.receipts();
        let open = self.open_connections();
        !open.is_empty()
            && open
                .iter()
                .all(|&c| now[c] > before.get(c).copied().unwrap_or(0))
    }

    /// Connection attempts that failed, and the first one's error.
    pub fn failed(&self) -> (u32, Option<&str>) {
        let n = self.logs().map(|l| l.failed().0).sum();
        (n, self.logs().find_map(|l| l.failed().1))
    }

    /// Connections whose server compresses what it sends them.
    pub fn compressed(&self) -> Compressed {
        self.logs().fold(Compressed::default(), |sum, l| {
            let c = l.compressed();
            Compressed {
                connections: sum.connections + c.connections,
                keeping_context: sum.keeping_context + c.keeping_context,
            }
        })
    }

    /// Connections that closed, and the first one's reason.
    pub fn closed(&self) -> (u32, Option<&str>) {
        let n = self.logs().map(|l| l.closed().0).sum();
        (n, self.logs().find_map(|l| l.closed().1))
    }

    fn logs(&self) -> impl Iterator<Item = &StageLog> {
        self.parts.iter().filter_map(|p| p.log.as_ref())
    }
}
