//! Keeping a probe's `--out-dir` within its limits at start
//! ([`skewscope_core::retention`] decides; this does the files).
//!
//! The earlier runs' logs are weighed oldest first (by modification time).
//! When they leave no room for the new run, the probe first asks the agent
//! (`--upload`) how much of each it has, uploading what it lacks, for at
//! most [`crate::uploader::FINAL_DRAIN`]; then the oldest logs it has in
//! full are deleted, as few as make room. A log the agent lacks is never
//! deleted: with no room left the run does not start, and says why. A log
//! that holds no record (a run killed before its first flush) is deleted
//! whatever the limits: there is nothing in it to keep.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use skewscope_core::record::LogsPruned;
use skewscope_core::retention::{EarlierLog, Retention};
use tokio::sync::watch;

use crate::error::ProbeError;
use crate::previous_runs::PreviousRun;
use crate::uploader::{self, Upload, UploadState};

/// What making room did.
pub struct Room {
    /// The earlier runs still to upload (those the agent already has in
    /// full are not uploaded again).
    pub to_upload: Vec<PreviousRun>,
    /// For the run's log (its `at` is set when it is written).
    pub pruned: LogsPruned,
    /// The most the new run's log may hold, when a byte limit is kept.
    pub budget: Option<u64>,
}

/// Makes room for a new run in the directory of `earlier` (every earlier
/// run of this probe there). `upload`: where the agent is, to learn what it
/// has; without it, no log is known to be anywhere else.
pub async fn make_room(
    retention: Retention,
    dir: &Path,
    mut earlier: Vec<PreviousRun>,
    empty: Vec<PathBuf>,
    upload: Option<&Upload>,
) -> Result<Room, ProbeError> {
    // Runs killed before their first record: nothing in them to lose.
    let mut deleted_empty = 0u32;
    for path in empty {
        if std::fs::remove_file(&path).is_ok() {
            deleted_empty += 1;
        }
    }
    let modified = |p: &PathBuf| {
        std::fs::metadata(p)
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH)
    };
    earlier.sort_by_key(|run| (modified(&run.path), run.path.clone()));
    let sizes: Vec<u64> = earlier
        .iter()
        .map(|run| std::fs::metadata(&run.path).map_or(0, |m| m.len()))
        .collect();
    let mut acked = vec![false; earlier.len()];
    let weigh = |acked: &[bool]| -> Vec<EarlierLog> {
        sizes
            .iter()
            .zip(acked)
            .map(|(&bytes, &acked_in_full)| EarlierLog {
                bytes,
                acked_in_full,
            })
            .collect()
    };
    if !retention.fits(&weigh(&acked))
        && let Some(upload) = upload
    {
        acked = uploaded_in_full(&earlier, upload).await;
    }
    let plan = retention.plan(&weigh(&acked));
    let budget = plan.budget.map_err(|why| ProbeError::DiskIsTheLimit {
        dir: dir.to_owned(),
        why: why.to_string(),
        uploading: upload.is_some(),
    })?;
    for &i in &plan.delete {
        std::fs::remove_file(&earlier[i].path).map_err(|e| {
            ProbeError::Config(format!(
                "cannot delete the earlier log {} (the agent has it in full): {e}",
                earlier[i].path.display()
            ))
        })?;
        tracing::info!(
            target: "probe",
            "deleted {} ({} bytes): the agent has it in full and --out-dir was at its limits",
            earlier[i].path.display(),
            sizes[i]
        );
    }
    let to_upload = earlier
        .into_iter()
        .zip(acked)
        .filter(|(_, acked)| !acked)
        .map(|(run, _)| run)
        .collect();
    Ok(Room {
        to_upload,
        pruned: LogsPruned {
            at: skewscope_os::clock::now_raw(),
            runs: plan.delete.len() as u32 + deleted_empty,
            bytes: plan.deleted_bytes,
            kept_runs: plan.kept_runs,
            kept_bytes: plan.kept_bytes,
            max_runs: retention.max_runs,
            max_bytes: retention.max_bytes,
        },
        budget,
    })
}

/// Uploads every earlier log (at once, each bounded by the uploader's final
/// drain): which the agent now has in full.
async fn uploaded_in_full(earlier: &[PreviousRun], upload: &Upload) -> Vec<bool> {
    let (_ended_tx, ended) = watch::channel(true);
    let mut sessions = Vec::new();
    for run in earlier {
        let earlier = Upload {
            log: run.path.clone(),
            run_id: run.run_id,
            follow: false,
            ..upload.clone()
        };
        let (state_tx, state) = watch::channel(UploadState::default());
        sessions.push((
            tokio::spawn(uploader::run(earlier, ended.clone(), state_tx)),
            state,
        ));
    }
    let mut acked = Vec::new();
    for (task, state) in sessions {
        let _ = task.await;
        acked.push(state.borrow().complete);
    }
    acked
}
