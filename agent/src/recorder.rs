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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::Duration;

use skewscope_core::Stamp;
use skewscope_core::record::{AgentRecord, RecordsLost, SendSlot, ShardSends};

use crate::metrics::Metrics;
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
    lost: Arc<AtomicU64>,
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
    /// Every record is also counted into `metrics` (off the shards).
    pub fn start(
        dir: &Path,
        limits: Limits,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<RecorderThread> {
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
        let lost = Arc::new(AtomicU64::new(0));
        let flags = (stop.clone(), new_segment.clone(), lost.clone());
        let thread = std::thread::Builder::new()
            .name("recorder".into())
            .spawn(move || {
                // Below the shards: the fan-out is what the box is for.
                if let Err(e) =
                    skewscope_os::priority::nice_this_thread(skewscope_os::priority::RECORDER_NICE)
                {
                    eprintln!("skewscope-agent: recorder runs at normal priority: {e}");
                }
                run(log, rx, &flags.0, &flags.1, &flags.2, &metrics)
            })?;
        Ok(RecorderThread {
            handle: Recorder { tx },
            stop,
            new_segment,
            lost,
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

    /// Records lost so far because writing failed (`/healthz`).
    pub fn lost(&self) -> Arc<AtomicU64> {
        self.lost.clone()
    }

    /// Writes the final record, flushes and syncs, and waits for the thread;
    /// returns how many records were lost over the run.
    pub fn finish(self) -> u64 {
        self.handle
            .record(AgentRecord::Stopped(skewscope_os::clock::now()));
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        let _ = self.thread.join();
        self.lost.load(Ordering::Relaxed)
    }
}

/// What the recorder lost while writing failed, until it works again.
struct Losses<'a> {
    /// Run total, shared with `/healthz`.
    total: &'a AtomicU64,
    /// Records appended since the last flush that worked: a failed flush
    /// loses them.
    unflushed: u64,
    /// Since writing last worked: how many, and since when.
    outage: Option<(u64, Stamp)>,
}

impl Losses<'_> {
    /// A write failed: the records buffered since the last good flush (and
    /// the one being written) are lost; the buffer is dropped so they never
    /// land later, out of order.
    fn failed(&mut self, writer: &mut SegmentedLog, e: &std::io::Error, with_this: bool) {
        let count = self.unflushed + u64::from(with_this);
        self.unflushed = 0;
        if self.outage.is_none() {
            // Keep serving clients; say when the log became incomplete.
            eprintln!(
                "skewscope-agent: writing the record log failed: {e}; records are being lost (counted, and said when writing works again)"
            );
        }
        let outage = self.outage.get_or_insert((0, skewscope_os::clock::now()));
        outage.0 += count;
        self.total.fetch_add(count, Ordering::Relaxed);
        let _ = writer.discard_buffered();
    }

    /// A flush worked: if writing had failed, say how much was lost, in the
    /// log and on stderr.
    fn flushed(&mut self, writer: &mut SegmentedLog) {
        self.unflushed = 0;
        if let Some((count, since)) = self.outage.take() {
            let at = skewscope_os::clock::now();
            let said = writer
                .append(&AgentRecord::RecordsLost(RecordsLost { count, since, at }))
                .and_then(|()| writer.flush());
            match said {
                Ok(()) => eprintln!(
                    "skewscope-agent: writing the record log works again; {count} records were lost"
                ),
                Err(e) => {
                    self.outage = Some((count, since));
                    self.failed(writer, &e, false);
                }
            }
        }
    }
}

fn run(
    mut writer: SegmentedLog,
    rx: Receiver<Message>,
    stop: &AtomicBool,
    reopen: &AtomicBool,
    lost: &AtomicU64,
    metrics: &Metrics,
) {
    let mut losses = Losses {
        total: lost,
        unflushed: 0,
        outage: None,
    };
    let append = |writer: &mut SegmentedLog, losses: &mut Losses<'_>, r: &AgentRecord| {
        metrics.observe(r);
        match writer.append(r) {
            Ok(()) => losses.unflushed += 1,
            Err(e) => losses.failed(writer, &e, true),
        }
    };
    loop {
        // Read the flag before draining, so everything sent before `finish` is written.
        let stopping = stop.load(Ordering::Acquire);
        loop {
            match rx.try_recv() {
                Ok(Message::Record(r)) => append(&mut writer, &mut losses, &r),
                Ok(Message::Sends(sends, recycle)) => {
                    let record = AgentRecord::ShardSends(sends);
                    append(&mut writer, &mut losses, &record);
                    if let AgentRecord::ShardSends(mut s) = record {
                        s.slots.clear();
                        let _ = recycle.send(s.slots);
                    }
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        match writer.flush() {
            Ok(()) => losses.flushed(&mut writer),
            Err(e) => losses.failed(&mut writer, &e, false),
        }
        if reopen.swap(false, Ordering::AcqRel) {
            match writer.next_segment() {
                Ok(()) => eprintln!("skewscope-agent: recording to {}", writer.path().display()),
                Err(e) => losses.failed(&mut writer, &e, false),
            }
        }
        if stopping {
            break;
        }
        std::thread::park_timeout(FLUSH_EVERY);
    }
    if let Err(e) = writer.sync() {
        losses.failed(&mut writer, &e, false);
    }
    let total = lost.load(Ordering::Relaxed);
    if total > 0 {
        eprintln!(
            "skewscope-agent: {total} records were lost over this run (the record log could not be written)"
        );
    }
}
