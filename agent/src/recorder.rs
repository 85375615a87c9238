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

use wire::Stamp;
use wire::log::{LogKind, LogWriter};
use wire::record::{AgentRecord, SendSlot, ShardSends};

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
    thread: JoinHandle<()>,
    /// The log file being written.
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
    /// Creates `dir` if needed, opens a new log in it and starts the thread.
    pub fn start(dir: &Path) -> std::io::Result<RecorderThread> {
        std::fs::create_dir_all(dir)?;
        let now = Stamp::now();
        let path = dir.join(format!(
            "agent-{}-{}.sklog",
            now.wall_ns / 1_000_000_000,
            std::process::id()
        ));
        let writer = LogWriter::create(&path, LogKind::Agent)?;
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("recorder".into())
            .spawn(move || run(writer, rx, &stopped))?;
        Ok(RecorderThread {
            handle: Recorder { tx },
            stop,
            thread,
            path,
        })
    }

    /// A handle for shards and the HTTP side.
    pub fn handle(&self) -> Recorder {
        self.handle.clone()
    }

    /// Writes the final record, flushes and syncs, and waits for the thread.
    pub fn finish(self) {
        self.handle.record(AgentRecord::Stopped(Stamp::now()));
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        let _ = self.thread.join();
    }
}

fn run(
    mut writer: LogWriter<std::io::BufWriter<std::fs::File>>,
    rx: Receiver<Message>,
    stop: &AtomicBool,
) {
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
        if stopping {
            break;
        }
        std::thread::park_timeout(FLUSH_EVERY);
    }
    report(writer.sync());
}
