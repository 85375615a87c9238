//! The audit's copy of the logs it reads from the agent's data directory:
//! each followed from where the last fetch ended, in whole frames, so the
//! copy always reads exactly as the agent's file did at some moment and a
//! poll costs only what is new.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::audit::agent_api::{AgentApi, ApiError, Status};

/// Most fetches of one log in one sync: a log growing faster than the audit
/// reads it is caught up on the next sync instead of holding this one.
const MAX_PIECES_PER_SYNC: usize = 64;

/// A directory holding copies of the agent's logs under their own names.
pub struct Mirror {
    dir: PathBuf,
    /// When the audit began: a probe run that uploaded since is this
    /// audit's.
    begun: Instant,
    /// The probe runs (ids) of this audit: uploading, or stored to, while
    /// it ran. The agent keeps every run uploaded since it started; the
    /// others are earlier runs, left out and named as such.
    current: RefCell<BTreeSet<String>>,
    /// Every probe run the agent listed, by id: its label.
    seen: RefCell<BTreeMap<String, String>>,
    /// The logs the last sync read, by the agent's names, and whether the
    /// agent's data directory held others (earlier runs).
    read: RefCell<(Vec<String>, bool)>,
}

/// Slack on "uploaded since the audit began": a probe's last batch a
/// moment before the audit's first question is still this audit's.
const RECENT: Duration = Duration::from_secs(2);

impl Mirror {
    /// Copies what is new of this agent run's segments and of every probe
    /// run of this audit (uploading, or stored to, since it began); returns the local
    /// copies to read and the bytes fetched.
    pub fn sync_run(
        &self,
        api: &AgentApi,
        status: &Status,
    ) -> Result<(Vec<PathBuf>, u64), SyncError> {
        self.note_current(status);
        let prefix = format!("{}-", status.segment_stem);
        let current = self.current.borrow();
        let wanted = status.logs.iter().filter(|l| {
            l.name.starts_with(&prefix)
                || status
                    .probes
                    .iter()
                    .any(|p| p.file == l.name && current.contains(&p.run))
        });
        let (mut files, mut fetched) = (Vec::new(), 0);
        let mut names = Vec::new();
        let mut wanted_count = 0;
        for log in wanted {
            wanted_count += 1;
            fetched += self.sync(api, &log.name, log.bytes)?;
            let path = self.path_of(&log.name);
            if path.exists() {
                files.push(path);
                names.push(log.name.clone());
            }
        }
        files.sort();
        names.sort();
        *self.read.borrow_mut() = (names, wanted_count < status.logs.len());
        Ok((files, fetched))
    }

    /// Copies what is new of this agent run's own segments only (its hub's
    /// or its tap's records, its time exchanges), no probe run's: what a
    /// sweep joins with the logs of its own connections. Returns the local
    /// copies, in the order of their names.
    pub fn sync_segments(
        &self,
        api: &AgentApi,
        status: &Status,
    ) -> Result<Vec<PathBuf>, SyncError> {
        let prefix = format!("{}-", status.segment_stem);
        let mut files = Vec::new();
        for log in status.logs.iter().filter(|l| l.name.starts_with(&prefix)) {
            self.sync(api, &log.name, log.bytes)?;
            let path = self.path_of(&log.name);
            if path.exists() {
                files.push(path);
            }
        }
        files.sort();
        Ok(files)
    }

    /// A mirror in `dir` (created); logs already there are continued.
    pub fn new(dir: &Path) -> anyhow::Result<Mirror> {
        std::fs::create_dir_all(dir.join("probes"))
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Mirror {
            dir: dir.to_owned(),
            begun: Instant::now(),
            current: RefCell::default(),
            seen: RefCell::default(),
            read: RefCell::default(),
        })
    }

    /// Adds the probe runs `status` shows uploading, or stored to since
    /// the audit began, to this audit's.
    fn note_current(&self, status: &Status) {
        let since = self.begun.elapsed() + RECENT;
        let mut current = self.current.borrow_mut();
        let mut seen = self.seen.borrow_mut();
        for p in &status.probes {
            seen.entry(p.run.clone()).or_insert_with(|| p.label());
            let recent = p
                .idle_ms
                .is_none_or(|idle| Duration::from_millis(idle) <= since);
            if p.uploading || recent {
                current.insert(p.run.clone());
            }
        }
    }

    /// The logs the audit read, by the agent's names, when the agent's data
    /// directory holds others too (so `report DIR` would read more than
    /// the audit did); `None` when it holds only these.
    pub fn logs_read_among_others(&self) -> Option<Vec<String>> {
        let read = self.read.borrow();
        read.1.then(|| read.0.clone())
    }

    /// The probe runs the agent holds that are not this audit's: earlier
    /// runs (a probe restarted, a device gone), by name and run id.
    pub fn earlier_runs(&self) -> Vec<String> {
        let current = self.current.borrow();
        self.seen
            .borrow()
            .iter()
            .filter(|(run, _)| !current.contains(*run))
            .map(|(run, label)| format!("{label} (run {})", &run[..8.min(run.len())]))
            .collect()
    }

    /// Where the copy of `name` is.
    pub fn path_of(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Brings the copy of `name` up to the agent's file (in whole frames),
    /// which `/audit/status` said is `agent_bytes` long: a copy already that
    /// long costs no request. Returns the bytes fetched.
    pub fn sync(&self, api: &AgentApi, name: &str, agent_bytes: u64) -> Result<u64, SyncError> {
        let path = self.path_of(name);
        let mut have = std::fs::metadata(&path).map_or(0, |m| m.len());
        if have == agent_bytes {
            return Ok(0);
        }
        let mut fetched = 0;
        for _ in 0..MAX_PIECES_PER_SYNC {
            let piece = match api.log_piece(name, have)? {
                Some(piece) => piece,
                None => {
                    // The agent cut its file back (a torn tail after a
                    // crash): start the copy again.
                    std::fs::write(&path, b"").map_err(|e| SyncError::Local(path.clone(), e))?;
                    have = 0;
                    continue;
                }
            };
            if piece.bytes.is_empty() {
                break;
            }
            let mut file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| SyncError::Local(path.clone(), e))?;
            file.write_all(&piece.bytes)
                .map_err(|e| SyncError::Local(path.clone(), e))?;
            have += piece.bytes.len() as u64;
            fetched += piece.bytes.len() as u64;
            if have >= piece.file_bytes {
                break;
            }
        }
        Ok(fetched)
    }
}

/// A sync that failed: on the agent's side or on ours.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The agent did not answer as it should.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The local copy could not be written.
    #[error("cannot write {0}: {1}")]
    Local(PathBuf, std::io::Error),
}
