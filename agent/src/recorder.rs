//! The background thread that writes the agent's record log.
//!
//! Shards hand over whole per-broadcast slot vectors (a move, no encoding on the
//! hot path) and get the emptied vectors back for reuse. This thread is never
//! woken per record: it sleeps [`FLUSH_EVERY`], then encodes, writes and flushes
//! everything queued, so it does not compete with the send loops for a core in
//! the middle of a broadcast (measured: waking it per broadcast cost 12-27 % of
//! a 100-client fan-out on 2 cores). A crash loses at most that much and leaves at
//! worst one torn record.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::Duration;

use skewscope_core::record::{AgentRecord, SendSlot, ShardSends};

use crate::segments::{Limits, SegmentedLog};

/// Longest time a record waits in memory before it is written out.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

enum Message {
    Record(AgentRecord),
    Sends(ShardSends, Sender<Vec<SendSlot>>),
}

/// A cheap handle to send records to the recorder thread.
#[derive(Clone)]
pub struct Recorder {
    tx: Sender<Message>,
}

/// Owns the recorder thread; `finish` writes the last record and syncs.
pub struct RecorderThread {
    handle: Recorder,
    stop: Arc<AtomicBool>,
    new_segment: Arc<AtomicBool>,
    thread: JoinHandle<()>,
    /// The run's first segment.
    pub path: PathBuf,
}

impl Recorder {
    /// Queues a record for writing. Never blocks.
    pub fn record(&self, record: AgentRecord) {
        // The receiver only goes away after `finish`, when no shard is running.
        let _ = self.tx.send(Message::Record(record));
    }

    /// Queues a shard's sends; the emptied slot vector comes back on `recycle`.
    pub fn record_sends(&self, sends: ShardSends, recycle: Sender<Vec<SendSlot>>) {
        let _ = self.tx.send(Message::Sends(sends, recycle));
    }
}

impl RecorderThread {
    /// Creates `dir` if needed, opens the run's first segment in it and starts
    /// the thread.
    pub fn start(dir: &Path, limits: Limits) -> std::io::Result<RecorderThread> {
        let stem = format!(
            "agent-{}-{}",
            skewscope_os::clock::now().wall_ns / 1_000_000_000,
            std::process::id()
        );
        let log = SegmentedLog::create(dir, stem, limits)?;
        let path = log.path().to_owned();
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let new_segment = Arc::new(AtomicBool::new(false));
        let flags = (stop.clone(), new_segment.clone());
        let thread = std::thread::Builder::new()
            .name("recorder".into())
            .spawn(move || {
                // Below the shards: the fan-out is what the box is for.
                if let Err(e) =
                    skewscope_os::priority::nice_this_thread(skewscope_os::priority::RECORDER_NICE)
                {
                    eprintln!("skewscope-agent: recorder runs at normal priority: {e}");
                }
                run(log, rx, &flags.0, &flags.1)
            })?;
        Ok(RecorderThread {
            handle: Recorder { tx },
            stop,
            new_segment,
            thread,
            path,
        })
    }

    /// A handle for shards and the HTTP side.
    pub fn handle(&self) -> Recorder {
        self.handle.clone()
    }

    /// Closes the current segment and starts the next (SIGHUP), so the closed
    /// one can be collected or moved while the agent runs.
    pub fn reopen(&self) {
        self.new_segment.store(true, Ordering::Release);
        self.thread.thread().unpark();
    }

    /// Whether the thread is still running (for the watchdog).
    pub fn alive(&self) -> bool {
        !self.thread.is_finished()
    }

    /// Writes the final record, flushes and syncs, and waits for the thread.
    pub fn finish(self) {
        self.handle
            .record(AgentRecord::Stopped(skewscope_os::clock::now()));
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

fn run(mut writer: SegmentedLog, rx: Receiver<Message>, stop: &AtomicBool, reopen: &AtomicBool) {
    let mut failed = false;
    let mut report = |result: std::io::Result<()>| {
        if let Err(e) = result
            && !failed
        {
            // Keep serving clients; say once that the log is incomplete.
            eprintln!(
                "skewscope-agent: writing the record log failed: {e}; records are being lost"
            );
            failed = true;
        }
    };
    loop {
        // Read the flag before draining, so everything sent before `finish` is written.
        let stopping = stop.load(Ordering::Acquire);
        loop {
            match rx.try_recv() {
                Ok(Message::Record(r)) => report(writer.append(&r)),
                Ok(Message::Sends(sends, recycle)) => {
                    let record = AgentRecord::ShardSends(sends);
                    report(writer.append(&record));
                    if let AgentRecord::ShardSends(mut s) = record {
                        s.slots.clear();
                        let _ = recycle.send(s.slots);
                    }
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        report(writer.flush());
        if reopen.swap(false, Ordering::AcqRel) {
            report(writer.next_segment());
            eprintln!("skewscope-agent: recording to {}", writer.path().display());
        }
        if stopping {
            break;
        }
        std::thread::park_timeout(FLUSH_EVERY);
    }
    report(writer.sync());
}
