//! The agent's record log on disk: a run is a sequence of segment files in the
//! data directory, each a complete log that starts with the run's `Started`
//! record, so any segment reads on its own and the collector can join them.
//!
//! A segment ends when it reaches `--segment-bytes` or on SIGHUP; the data
//! directory is kept under `--max-data-bytes` by removing the oldest segments,
//! each with a log line. The disk never fills because of skewscope.

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};

use skewscope_core::log::{LogKind, LogWriter};
use skewscope_core::record::AgentRecord;
use skewscope_os::log_files::FileLogWriter;

/// Sizes that bound the log.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A segment moves on past this size.
    pub segment_bytes: u64,
    /// The data directory's record logs stay under this in total.
    pub max_data_bytes: u64,
}

/// The open segment and how to open the next.
pub struct SegmentedLog {
    dir: PathBuf,
    /// `agent-<start seconds>-<pid>`: shared by the run's segments.
    stem: String,
    sequence: u32,
    writer: LogWriter<BufWriter<File>>,
    path: PathBuf,
    limits: Limits,
    /// The run's `Started` and `Identity`, repeated at the head of every segment.
    preamble: Vec<AgentRecord>,
}

impl SegmentedLog {
    /// Creates `dir` if needed and opens the run's first segment.
    pub fn create(dir: &Path, stem: String, limits: Limits) -> io::Result<SegmentedLog> {
        std::fs::create_dir_all(dir)?;
        let path = segment_path(dir, &stem, 0);
        let writer = LogWriter::create(&path, LogKind::Agent)?;
        let log = SegmentedLog {
            dir: dir.to_owned(),
            stem,
            sequence: 0,
            writer,
            path,
            limits,
            preamble: Vec::new(),
        };
        log.enforce_budget();
        Ok(log)
    }

    /// The segment being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends a record, moving on to a new segment first if this one is full.
    pub fn append(&mut self, record: &AgentRecord) -> io::Result<()> {
        if self.preamble.len() < 2
            && matches!(record, AgentRecord::Started(_) | AgentRecord::Identity(_))
        {
            self.preamble.push(record.clone());
        }
        if self.writer.bytes_written() >= self.limits.segment_bytes {
            self.next_segment()?;
        }
        self.writer.append(record)
    }

    /// Pushes buffered bytes to the OS.
    pub fn flush(&mut self) -> io::Result<()> {
        self.writer.flush()
    }

    /// Drops buffered records without writing them (they are counted
    /// lost after a failed write).
    pub fn discard_buffered(&mut self) -> io::Result<()> {
        self.writer.discard_buffered()
    }

    /// Flushes and makes the segment durable.
    pub fn sync(&mut self) -> io::Result<()> {
        self.writer.sync()
    }

    /// Closes the current segment and opens the next (SIGHUP, or size).
    pub fn next_segment(&mut self) -> io::Result<()> {
        self.writer.sync()?;
        self.sequence += 1;
        let path = segment_path(&self.dir, &self.stem, self.sequence);
        self.writer = LogWriter::create(&path, LogKind::Agent)?;
        self.path = path;
        for record in &self.preamble {
            self.writer.append(record)?;
        }
        self.enforce_budget();
        Ok(())
    }

    /// Removes the oldest segments (never the open one) until the directory's
    /// record logs fit in `max_data_bytes`.
    fn enforce_budget(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let mut logs: Vec<(std::time::SystemTime, PathBuf, u64)> = entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "sklog"))
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                Some((meta.modified().ok()?, e.path(), meta.len()))
            })
            .collect();
        logs.sort();
        // Uploaded probe runs count against the budget too, but are never
        // removed here: when they alone fill it, ingest stops acknowledging.
        let uploads =
            crate::ingest::store::record_bytes(&self.dir.join(crate::ingest::store::PROBES_DIR));
        let mut total: u64 = logs.iter().map(|l| l.2).sum::<u64>() + uploads;
        for (_, path, size) in logs {
            if total <= self.limits.max_data_bytes {
                break;
            }
            if path == self.path {
                continue;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => {
                    total -= size;
                    tracing::info!(
                        target: "agent::recorder",
                        "removed old record segment {} ({size} bytes) to stay under --max-data-bytes {}",
                        path.display(),
                        self.limits.max_data_bytes
                    );
                }
                Err(e) => {
                    tracing::warn!(target: "agent::recorder", "cannot remove {}: {e}", path.display())
                }
            }
        }
    }
}

/// The run's stem (`agent-SECS-PID`) from one of its segments' paths.
pub fn stem_of(segment: &Path) -> String {
    let name = segment
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // `STEM-NNNN.sklog`
    name.rsplit_once('-')
        .map_or(name.clone(), |(stem, _)| stem.to_owned())
}

fn segment_path(dir: &Path, stem: &str, sequence: u32) -> PathBuf {
    dir.join(format!("{stem}-{sequence:04}.sklog"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use skewscope_core::Stamp;
    use skewscope_core::record::{AgentStarted, SendOrder};

    fn started() -> AgentRecord {
        AgentRecord::Started(AgentStarted {
            host: "h".into(),
            version: "t".into(),
            at: Stamp::default(),
            shards: 1,
            order: SendOrder::Fixed,
            per_client_times: true,
        })
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn segments_rotate_by_size_and_each_starts_with_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            segment_bytes: 200,
            max_data_bytes: 1 << 30,
        };
        let mut log = SegmentedLog::create(dir.path(), "agent-1-2".into(), limits).unwrap();
        log.append(&started()).unwrap();
        for _ in 0..40 {
            log.append(&AgentRecord::Stopped(Stamp::default())).unwrap();
        }
        log.sync().unwrap();
        let names = files(dir.path());
        assert!(names.len() > 2, "{names:?}");
        assert_eq!(names[0], "agent-1-2-0000.sklog");
        for name in &names {
            let skewscope_core::log::AnyLog::Agent(d) =
                skewscope_os::log_files::read_file(&dir.path().join(name)).unwrap()
            else {
                panic!()
            };
            assert_eq!(d.records.first(), Some(&started()), "{name}");
        }
    }

    #[test]
    fn the_oldest_segments_go_to_stay_under_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        // An old run's leftovers.
        std::fs::write(dir.path().join("agent-0-1-0000.sklog"), vec![0u8; 3000]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let limits = Limits {
            segment_bytes: 500,
            max_data_bytes: 2000,
        };
        let mut log = SegmentedLog::create(dir.path(), "agent-1-2".into(), limits).unwrap();
        assert!(!files(dir.path()).contains(&"agent-0-1-0000.sklog".to_owned()));
        log.append(&started()).unwrap();
        for _ in 0..200 {
            log.append(&AgentRecord::Stopped(Stamp::default())).unwrap();
        }
        log.sync().unwrap();
        let total: u64 = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert!(total <= 2000 + 500, "{total}");
        assert!(log.path().exists());
    }
}
