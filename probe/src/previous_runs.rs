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
    list(out, name)
}

/// Every earlier run of probe `name` beside `out` (kept `--out` logs and
/// `--out-dir` runs), `out` itself left out.
pub fn list(out: &Path, name: &str) -> io::Result<Vec<PreviousRun>> {
    let mut runs = Vec::new();
    for path in earlier_logs(out, name)? {
        if let Some(run_id) = run_id_of(&path) {
            runs.push(PreviousRun { path, run_id });
        }
    }
    runs.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(runs)
}

/// This probe's earlier logs beside `out` that hold no record at all (a
/// run killed before its first flush, a header and nothing): nothing in
/// them can be lost, and nothing names their run.
pub fn empty_logs(out: &Path, name: &str) -> io::Result<Vec<PathBuf>> {
    Ok(earlier_logs(out, name)?
        .into_iter()
        .filter(|path| std::fs::metadata(path).is_ok_and(|m| m.len() <= HEADER_LEN as u64))
        .collect())
}

/// Files beside `out` named as this probe's earlier logs: `STEM.run-ID.sklog`
/// (kept `--out` logs) or `probe-NAME-START-PID.sklog` (`--out-dir` runs;
/// exactly, so probe `kiosk` never takes probe `kiosk-2`'s logs).
fn earlier_logs(out: &Path, name: &str) -> io::Result<Vec<PathBuf>> {
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let kept_prefix = format!("{}.run-", stem(out));
    let out_dir_prefix = format!("probe-{name}-");
    let mut logs = Vec::new();
    for entry in std::fs::read_dir(&dir)?.flatten() {
        let file = entry.file_name().to_string_lossy().into_owned();
        let Some(base) = file.strip_suffix(".sklog") else {
            continue;
        };
        let out_dir_run = base.strip_prefix(&out_dir_prefix).is_some_and(|rest| {
            rest.split_once('-').is_some_and(|(start, pid)| {
                [start, pid]
                    .iter()
                    .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            })
        });
        let path = entry.path();
        if (out_dir_run || file.starts_with(&kept_prefix)) && path != out {
            logs.push(path);
        }
    }
    Ok(logs)
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
    use skewscope_os::log_files::FileLogWriter;

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

    #[test]
    fn another_probe_whose_name_starts_alike_keeps_its_logs() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("probe-kiosk-1700000100-5.sklog");
        log_of_run(&dir.path().join("probe-kiosk-1700000000-9.sklog"), 1);
        log_of_run(&dir.path().join("probe-kiosk-2-1700000000-9.sklog"), 2);
        log_of_run(&dir.path().join("probe-kiosk-1700000000-9.sklog.bak"), 3);
        let ids: Vec<u128> = list(&out, "kiosk")
            .unwrap()
            .iter()
            .map(|r| r.run_id)
            .collect();
        assert_eq!(ids, vec![1]);
        let ids: Vec<u128> = list(&out, "kiosk-2")
            .unwrap()
            .iter()
            .map(|r| r.run_id)
            .collect();
        assert_eq!(ids, vec![2]);
    }

    #[test]
    fn a_log_killed_before_its_first_record_is_found_empty() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("probe-kiosk-1700000100-5.sklog");
        let empty = dir.path().join("probe-kiosk-1700000000-9.sklog");
        let mut log = LogWriter::create(&empty, LogKind::Probe).unwrap();
        log.flush().unwrap();
        std::fs::write(dir.path().join("probe-kiosk-1700000001-9.sklog"), b"").unwrap();
        log_of_run(&dir.path().join("probe-kiosk-1700000002-9.sklog"), 1);
        let mut found = empty_logs(&out, "kiosk").unwrap();
        found.sort();
        assert_eq!(
            found,
            vec![empty, dir.path().join("probe-kiosk-1700000001-9.sklog")]
        );
        assert_eq!(list(&out, "kiosk").unwrap().len(), 1);
    }
}
