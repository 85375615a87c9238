//! Writing the record log off the receive path.
//!
//! Receive tasks hand records to a [`Recorder`], which only queues them: no
//! encoding, no file I/O and no lock on a socket's path. One dedicated thread
//! appends them to the log and flushes at least every [`FLUSH_INTERVAL`], so a
//! probe killed with SIGKILL loses at most the last fraction of a second and
//! leaves at worst one torn record, which the core's log reader skips.

use std::fs::File;
use std::io::{self, BufWriter};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use skewscope_core::log::LogWriter;
use skewscope_core::record::ProbeRecord;
use skewscope_os::log_files::FileLogWriter;
use tokio::sync::oneshot;

use crate::shutdown::{StopHandle, StopReason};

/// Longest a written record may sit in the process's buffer before it is handed
/// to the OS (where it survives the process being killed).
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// Queues records for the writer thread. Cheap to clone, one per connection.
///
/// The queue is unbounded on purpose: back-pressure from a slow disk would
/// delay the receive loops and so distort the very timestamps being recorded.
/// A receipt is a few dozen bytes, so even 10,000 connections take long to
/// build up a backlog that matters.
#[derive(Clone, Debug)]
pub(crate) struct Recorder {
    tx: mpsc::Sender<Entry>,
}

/// What the writer thread is handed.
#[derive(Debug)]
pub(crate) enum Entry {
    Record(ProbeRecord),
    /// SIGHUP: sync, close and reopen the log file (after a rotation).
    Reopen,
}

impl Recorder {
    /// Queues one record without blocking.
    ///
    /// If the writer has already failed the record is dropped here: the failure
    /// has stopped the run and is reported by [`crate::RunningProbe::finish`].
    pub(crate) fn record(&self, record: ProbeRecord) {
        let _ = self.tx.send(Entry::Record(record));
    }

    /// A handle for reopening the log from a signal handler. It does not keep
    /// the writer alive: [`ReopenHandle::close`] lets the run end.
    pub(crate) fn reopen_handle(&self) -> ReopenHandle {
        ReopenHandle(Arc::new(Mutex::new(Some(self.tx.clone()))))
    }
}

/// Asks the writer to reopen the log file (SIGHUP after a log rotation):
/// appended to if it is still there, created afresh (starting with this run's
/// `Started` record) if it was moved away. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ReopenHandle(Arc<Mutex<Option<mpsc::Sender<Entry>>>>);

impl ReopenHandle {
    /// Reopens the log, if the run is still going.
    pub fn reopen(&self) {
        if let Some(tx) = self.0.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            let _ = tx.send(Entry::Reopen);
        }
    }

    /// Lets go of the writer so the run can finish.
    pub(crate) fn close(&self) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

/// What the writer put in the log, counted as it was written, so the summary
/// reports what the file holds rather than what was attempted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    pub(crate) opened: u32,
    pub(crate) failed: u32,
    pub(crate) receipts: u64,
}

impl Totals {
    fn count(&mut self, record: &ProbeRecord) {
        match record {
            ProbeRecord::ConnectionOpened(_) => self.opened += 1,
            ProbeRecord::ConnectionFailed(_) => self.failed += 1,
            ProbeRecord::Receipt(_) => self.receipts += 1,
            _ => {}
        }
    }
}

/// The log reached its `--max-log-bytes` (the bound, in bytes).
#[derive(Debug, thiserror::Error)]
#[error("the record log reached {0} bytes")]
pub(crate) struct LogFullError(pub(crate) u64);

/// The writer's result, delivered once every [`Recorder`] is gone and the log is
/// synced to disk.
pub(crate) type Finished = oneshot::Receiver<io::Result<Totals>>;

/// Starts the writer thread on `log`. It runs until every [`Recorder`] clone is
/// dropped, then syncs the file. On a write error it raises `stop` so the run
/// ends instead of measuring into a log that no longer records anything.
pub(crate) fn spawn(
    log: LogWriter<BufWriter<File>>,
    path: std::path::PathBuf,
    max_bytes: Option<u64>,
    stop: StopHandle,
) -> io::Result<(Recorder, Finished)> {
    let (tx, rx) = mpsc::channel();
    let (done_tx, done_rx) = oneshot::channel();
    thread::Builder::new()
        .name("skewscope-recorder".to_owned())
        .spawn(move || {
            let result = write_all(log, &path, max_bytes, &rx);
            if result.is_err() {
                stop.raise(StopReason::RecorderFailed);
            }
            // Nobody waiting for the result is fine: the run was abandoned.
            let _ = done_tx.send(result);
        })?;
    Ok((Recorder { tx }, done_rx))
}

/// Appends records until the channel closes, flushing every [`FLUSH_INTERVAL`]
/// while there is something unflushed; an idle probe does not wake up.
///
/// The thread is woken once per batch, not per record: after the first
/// record of a batch it sleeps out the flush interval (not waiting on the
/// channel, so senders wake nobody), then takes everything queued, appends
/// it and flushes. Per-receipt wake-ups cost the agent 12–27 % before it
/// dropped the same pattern; a probe on a small board pays them too.
fn write_all(
    mut log: LogWriter<BufWriter<File>>,
    path: &std::path::Path,
    max_bytes: Option<u64>,
    rx: &mpsc::Receiver<Entry>,
) -> io::Result<Totals> {
    let mut totals = Totals::default();
    // Started and Identity: what every reopened file must begin with.
    let mut preamble: Vec<ProbeRecord> = Vec::new();
    let mut take = |entry: Entry, log: &mut LogWriter<BufWriter<File>>| -> io::Result<()> {
        match entry {
            Entry::Record(record) => {
                log.append(&record)?;
                totals.count(&record);
                if let Some(max) = max_bytes.filter(|m| log.bytes_written() >= *m) {
                    log.append(&ProbeRecord::LogFull(skewscope_core::record::LogFull {
                        at: skewscope_os::clock::now_raw(),
                        max_bytes: max,
                    }))?;
                    log.sync()?;
                    return Err(io::Error::other(LogFullError(max)));
                }
                if preamble.len() < 2
                    && matches!(record, ProbeRecord::Started(_) | ProbeRecord::Identity(_))
                {
                    preamble.push(record);
                }
            }
            Entry::Reopen => {
                log.sync()?;
                let (reopened, created) =
                    LogWriter::reopen(path, skewscope_core::log::LogKind::Probe)?;
                *log = reopened;
                if created {
                    for record in &preamble {
                        log.append(record)?;
                    }
                }
            }
        }
        Ok(())
    };
    // Idle: block for the next entry; nothing is unflushed, so no timer.
    while let Ok(first) = rx.recv() {
        let due = Instant::now() + FLUSH_INTERVAL;
        take(first, &mut log)?;
        thread::sleep(due.saturating_duration_since(Instant::now()));
        let mut closed = false;
        loop {
            match rx.try_recv() {
                Ok(entry) => take(entry, &mut log)?,
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        log.flush()?;
        if closed {
            break;
        }
    }
    log.sync()?;
    Ok(totals)
}

#[cfg(test)]
mod tests {
    use skewscope_core::log::{AnyLog, LogKind};
    use skewscope_core::record::{MessageKey, Receipt};
    use skewscope_os::log_files::read_file;

    use super::*;
    use crate::shutdown;

    fn receipt(conn: u32) -> ProbeRecord {
        ProbeRecord::Receipt(Receipt {
            conn,
            key: MessageKey::Seq(1),
            hash: 9,
            len: 3,
            at: skewscope_os::clock::now_raw(),
            kernel_delay_ns: None,
        })
    }

    fn records_in(path: &std::path::Path) -> Vec<ProbeRecord> {
        match read_file(path) {
            Ok(AnyLog::Probe(decoded)) => decoded.records,
            // Nothing flushed yet, not even the header.
            Err(skewscope_core::log::LogError::NotALog { .. }) => Vec::new(),
            other => panic!("unexpected log: {other:?}"),
        }
    }

    fn started() -> ProbeRecord {
        ProbeRecord::Started(Box::new(skewscope_core::record::ProbeStarted {
            name: "p".into(),
            host: "h".into(),
            url: "ws://x/ws".into(),
            connections: 1,
            version: "t".into(),
            at: skewscope_os::clock::now_raw(),
        }))
    }

    #[tokio::test]
    async fn reopen_appends_in_place_or_starts_afresh_after_a_rotation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.sklog");
        let log = LogWriter::create(&path, LogKind::Probe).unwrap();
        let (stop, _shutdown) = shutdown::channel(None);
        let (recorder, finished) = spawn(log, path.clone(), None, stop).unwrap();
        let handle = recorder.reopen_handle();
        recorder.record(started());
        recorder.record(receipt(0));
        handle.reopen(); // still there: append
        recorder.record(receipt(1));
        handle.reopen();
        // logrotate moves the file away; the next reopen starts a new one.
        let mut moved = false;
        for _ in 0..50 {
            tokio::time::sleep(FLUSH_INTERVAL / 5).await;
            if records_in(&path).len() == 3 {
                std::fs::rename(&path, dir.path().join("probe.sklog.1")).unwrap();
                moved = true;
                break;
            }
        }
        assert!(moved, "records reach the file");
        handle.reopen();
        recorder.record(receipt(2));
        handle.close();
        drop(recorder);
        finished.await.unwrap().unwrap();
        assert_eq!(records_in(&dir.path().join("probe.sklog.1")).len(), 3);
        let fresh = records_in(&path);
        assert!(matches!(fresh[0], ProbeRecord::Started(_)), "{fresh:?}");
        assert!(
            matches!(fresh[1], ProbeRecord::Receipt(r) if r.conn == 2),
            "{fresh:?}"
        );
    }

    #[tokio::test]
    async fn writes_everything_then_syncs_when_the_last_recorder_goes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.sklog");
        let log = LogWriter::create(&path, LogKind::Probe).unwrap();
        let (stop, _shutdown) = shutdown::channel(None);
        let (recorder, finished) = spawn(log, path.clone(), None, stop).unwrap();
        let other = recorder.clone();
        for conn in 0..100 {
            recorder.record(receipt(conn));
        }
        other.record(ProbeRecord::Stopped(skewscope_os::clock::now_raw()));
        drop((recorder, other));
        let totals = finished.await.unwrap().unwrap();
        assert_eq!(totals.receipts, 100);
        let records = records_in(&path);
        assert_eq!(records.len(), 101);
        assert!(matches!(records[100], ProbeRecord::Stopped(_)));
    }

    #[tokio::test]
    async fn records_reach_the_file_within_the_flush_interval_while_running() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("probe.sklog");
        let log = LogWriter::create(&path, LogKind::Probe).unwrap();
        let (stop, _shutdown) = shutdown::channel(None);
        let (recorder, finished) = spawn(log, path.clone(), None, stop).unwrap();
        recorder.record(receipt(0));
        // Poll the file (bounded) until the record shows up without any sync.
        let mut seen = false;
        for _ in 0..50 {
            tokio::time::sleep(FLUSH_INTERVAL / 5).await;
            if records_in(&path).len() == 1 {
                seen = true;
                break;
            }
        }
        assert!(seen, "record not flushed within 10 flush intervals");
        drop(recorder);
        finished.await.unwrap().unwrap();
    }
}
