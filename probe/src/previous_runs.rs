//! Logs of this probe's earlier runs, kept for the uploader: a probe killed
//! before the agent acknowledged everything resumes that run's upload when it
//! starts again, instead of losing it to the new run's truncation of `--out`.
//!
//! `--out F` moves an existing log at `F` to `STEM.run-RUNID.sklog` beside
//! it; `--out-dir` never overwrites (each run is `probe-NAME-…`). Both kinds,
//! found next to the new log, are uploaded: the agent answers how much of
//! each run it has, so a run already stored costs one round trip.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use skewscope_core::log::{HEADER_LEN, LogKind, decode_records, read_header};
use skewscope_core::record::ProbeRecord;

/// The head of a log read to find its run id: `Started` and `Identity` are
/// its first two records.
const HEAD_BYTES: u64 = 64 * 1024;

/// An earlier run's log and its run id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreviousRun {
    /// The log.
    pub path: PathBuf,
    /// Its run id.
    pub run_id: u128,
}

/// Moves a probe log at `out` out of the way (keeping it), then lists every
/// earlier run of probe `name` beside `out`.
pub fn keep_and_list(out: &Path, name: &str) -> io::Result<Vec<PreviousRun>> {
    if let Some(run_id) = run_id_of(out) {
        let kept = out.with_file_name(format!("{}.run-{run_id:032x}.sklog", stem(out)));
        std::fs::rename(out, &kept)?;
    }
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let kept_prefix = format!("{}.run-", stem(out));
    let out_dir_prefix = format!("probe-{name}-");
    let mut runs = Vec::new();
    for entry in std::fs::read_dir(&dir)?.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let ours = file.starts_with(&kept_prefix) || file.starts_with(&out_dir_prefix);
        let path = entry.path();
        if !ours || !file.ends_with(".sklog") || path == out {
            continue;
        }
        if let Some(run_id) = run_id_of(&path) {
            runs.push(PreviousRun { path, run_id });
        }
    }
    runs.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(runs)
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The run id in a probe log's `Identity` record; `None` for anything else
/// (no file, not a probe log, a log from before run ids).
fn run_id_of(path: &Path) -> Option<u128> {
    let mut head = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(HEAD_BYTES)
        .read_to_end(&mut head)
        .ok()?;
    if read_header(path, &head).ok()? != LogKind::Probe {
        return None;
    }
    decode_records::<ProbeRecord>(&head[HEADER_LEN..])
        .records
        .into_iter()
        .find_map(|r| match r {
            ProbeRecord::Identity(i) => Some(i.run_id),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use skewscope_core::log::LogWriter;
    use skewscope_core::record::RunIdentity;

    fn log_of_run(path: &Path, run_id: u128) {
        let mut log = LogWriter::create(path, LogKind::Probe).unwrap();
        log.append(&ProbeRecord::Identity(RunIdentity {
            run_id,
            boot_id: None,
        }))
        .unwrap();
        log.flush().unwrap();
    }

    #[test]
    fn an_earlier_log_is_kept_and_found_with_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("kiosk.sklog");
        log_of_run(&out, 7);
        log_of_run(&dir.path().join("probe-kiosk-1700000000-9.sklog"), 8);
        log_of_run(&dir.path().join("probe-other-1700000000-9.sklog"), 9);
        std::fs::write(dir.path().join("kiosk.run-notes.sklog"), b"not a log").unwrap();
        let runs = keep_and_list(&out, "kiosk").unwrap();
        assert!(!out.exists(), "moved out of the new run's way");
        let ids: Vec<u128> = runs.iter().map(|r| r.run_id).collect();
        assert_eq!(ids, vec![7, 8]);
        assert!(
            runs[0]
                .path
                .ends_with(format!("kiosk.run-{:032x}.sklog", 7))
        );
        // Nothing at `out`: nothing moved, the earlier runs are still found.
        assert_eq!(keep_and_list(&out, "kiosk").unwrap(), runs);
    }
}
