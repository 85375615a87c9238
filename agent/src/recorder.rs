//! The background thread that writes the agent's record log.
//!
//! Shards hand over whole per-broadcast slot vectors (a move, no encoding on the
//! hot path) and get the emptied vectors back for reuse. This thread is never
//! woken per record: while records come it wakes every [`FLUSH_EVERY`], then
//! encodes, writes and flushes everything queued, so it does not compete with
//! the send loops for a core in the middle of a broadcast (measured: waking it
//! per broadcast cost 12-27 % of a 100-client fan-out on 2 cores). A crash
//! loses at most that much and leaves at worst one torn record.
//!
//! When a wake finds nothing to write, it sleeps until a record comes: the
//! first one after a quiet spell unparks it (one atomic swap on the
//! sender's side), and it waits [`FLUSH_EVERY`] more before writing, so the
//! rest of that broadcast's records come in the same drain. An idle agent
//! so never wakes for its log.
//!
//! Every record written is shown to a [`RecordObserver`] (the live join's
//! feed): events go up, and the recorder knows nothing of who listens.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::thread::JoinHandle;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use skewscope_core::Stamp;
use skewscope_core::record::{AgentRecord, RecordsLost, SendSlot, ShardSends};

use crate::segments::{Limits, SegmentedLog};

/// Longest time a record waits in memory before it is written out.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

enum Message {
    Record(AgentRecord),
    Sends(ShardSends, Sender<Vec<SendSlot>>),
}

/// Something told of every record the recorder writes, on its thread,
/// in log order.
pub trait RecordObserver: Send {
    /// `record` was appended to the log (or lost with it: it is shown either way).
    fn observe(&mut self, record: &AgentRecord);
}

/// An observer that looks at nothing, for a recorder no one watches.
#[cfg(test)]
#[derive(Debug, Default)]
pub struct Unobserved;

#[cfg(test)]
impl RecordObserver for Unobserved {
    fn observe(&mut self, _: &AgentRecord) {}
}

/// A cheap handle to send records to the recorder thread.
#[derive(Clone)]
pub struct Recorder {
    tx: Sender<Message>,
    /// The recorder thread, to wake when it sleeps for want of records.
    thread: std::thread::Thread,
    asleep: Arc<AtomicBool>,
}

/// Owns the recorder thread; `finish` writes the last record and syncs.
pub struct RecorderThread {
    handle: Recorder,
    stop: Arc<AtomicBool>,
    new_segment: Arc<AtomicBool>,
    lost: Counter,
    thread: JoinHandle<()>,
    /// The run's first segment.
    pub path: PathBuf,
}

impl Recorder {
    /// Queues a record for writing. Never blocks.
    pub fn record(&self, record: AgentRecord) {
        // The receiver only goes away after `finish`, when no shard is running.
        let _ = self.tx.send(Message::Record(record));
        self.wake_if_asleep();
    }

    /// Queues a shard's sends; the emptied slot vector comes back on `recycle`.
    pub fn record_sends(&self, sends: ShardSends, recycle: Sender<Vec<SendSlot>>) {
        let _ = self.tx.send(Message::Sends(sends, recycle));
        self.wake_if_asleep();
    }

    /// The first record after a quiet spell wakes the thread; while it
    /// runs its own timer, this is one atomic swap and nothing more.
    fn wake_if_asleep(&self) {
        // Pairs with the fence in `sleep_until_a_record`: either that side
        // sees this record in the channel, or this side sees it asleep.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.asleep.load(Ordering::Relaxed) && self.asleep.swap(false, Ordering::AcqRel) {
            self.thread.unpark();
        }
    }
}

impl RecorderThread {
    /// Creates `dir` if needed, opens the run's first segment in it and starts
    /// the thread.
    /// Every record is shown to `observer`; records that cannot be written
    /// are counted in `lost`.
    pub fn start(
        dir: &Path,
        limits: Limits,
        lost: Counter,
        mut observer: Box<dyn RecordObserver>,
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
        let asleep = Arc::new(AtomicBool::new(false));
        let flags = Flags {
            stop: stop.clone(),
            reopen: new_segment.clone(),
            asleep: asleep.clone(),
        };
        let counted = lost.clone();
        let thread = std::thread::Builder::new()
            .name("recorder".into())
            .spawn(move || {
                // Below the shards: the fan-out is what the box is for.
                if let Err(e) =
                    skewscope_os::priority::nice_this_thread(skewscope_os::priority::RECORDER_NICE)
                {
                    tracing::warn!(target: "agent::recorder", "the recorder runs at normal priority: {e}");
                }
                run(log, &rx, &flags, &counted, observer.as_mut())
            })?;
        Ok(RecorderThread {
            handle: Recorder {
                tx,
                thread: thread.thread().clone(),
                asleep,
            },
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

    /// Writes the final record, flushes and syncs, and waits for the thread;
    /// returns how many records were lost over the run.
    pub fn finish(self) -> u64 {
        self.handle
            .record(AgentRecord::Stopped(skewscope_os::clock::now()));
        self.stop.store(true, Ordering::Release);
        self.thread.thread().unpark();
        let _ = self.thread.join();
        self.lost.get()
    }
}

/// What the recorder thread is told besides records.
struct Flags {
    /// Write what is queued, sync and end.
    stop: Arc<AtomicBool>,
    /// Move on to a new segment (SIGHUP).
    reopen: Arc<AtomicBool>,
    /// Set while it sleeps for want of records: the next one wakes it.
    asleep: Arc<AtomicBool>,
}

/// What the recorder lost while writing failed, until it works again.
struct Losses<'a> {
    /// Run total, shared with `/healthz` and `/metrics`.
    total: &'a Counter,
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
            tracing::error!(
                target: "agent::recorder",
                "writing the record log failed: {e}; records are being lost (counted, and said when writing works again)"
            );
        }
        let outage = self.outage.get_or_insert((0, skewscope_os::clock::now()));
        outage.0 += count;
        self.total.inc_by(count);
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
                Ok(()) => tracing::warn!(
                    target: "agent::recorder",
                    "writing the record log works again; {count} records were lost"
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
    rx: &Receiver<Message>,
    flags: &Flags,
    lost: &Counter,
    observer: &mut dyn RecordObserver,
) {
    let mut losses = Losses {
        total: lost,
        unflushed: 0,
        outage: None,
    };
    let mut append = |writer: &mut SegmentedLog, losses: &mut Losses<'_>, r: &AgentRecord| {
        observer.observe(r);
        match writer.append(r) {
            Ok(()) => losses.unflushed += 1,
            Err(e) => losses.failed(writer, &e, true),
        }
    };
    // A record taken while deciding to sleep, written at the next drain.
    let mut held: Option<Message> = None;
    loop {
        // Read the flag before draining, so everything sent before `finish` is written.
        let stopping = flags.stop.load(Ordering::Acquire);
        let mut drained = 0usize;
        loop {
            let next = match held.take() {
                Some(message) => Ok(message),
                None => rx.try_recv(),
            };
            match next {
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
            drained += 1;
        }
        if drained > 0 || losses.outage.is_some() {
            match writer.flush() {
                Ok(()) => losses.flushed(&mut writer),
                Err(e) => losses.failed(&mut writer, &e, false),
            }
        }
        if flags.reopen.swap(false, Ordering::AcqRel) {
            match writer.next_segment() {
                Ok(()) => tracing::info!(
                    target: "agent::recorder",
                    "recording to {}",
                    writer.path().display()
                ),
                Err(e) => losses.failed(&mut writer, &e, false),
            }
        }
        if stopping {
            break;
        }
        if drained == 0 && losses.outage.is_none() {
            held = sleep_until_a_record(rx, flags);
        }
        if !flags.stop.load(Ordering::Acquire) && !flags.reopen.load(Ordering::Acquire) {
            std::thread::park_timeout(FLUSH_EVERY);
        }
    }
    if let Err(e) = writer.sync() {
        losses.failed(&mut writer, &e, false);
    }
    let total = lost.get();
    if total > 0 {
        tracing::error!(
            target: "agent::recorder",
            "{total} records were lost over this run (the record log could not be written)"
        );
    }
}

/// Parks until a record is sent (or a stop or reopen asks); returns the
/// record it took to find one was there. The caller then waits
/// [`FLUSH_EVERY`] before it writes, as after any wake.
fn sleep_until_a_record(rx: &Receiver<Message>, flags: &Flags) -> Option<Message> {
    flags.asleep.store(true, Ordering::Relaxed);
    // Pairs with the fence in `Recorder::wake_if_asleep`: a record sent
    // before the flag was up woke no one, so look once more before sleeping.
    std::sync::atomic::fence(Ordering::SeqCst);
    let mut taken = None;
    while flags.asleep.load(Ordering::Acquire)
        && !flags.stop.load(Ordering::Acquire)
        && !flags.reopen.load(Ordering::Acquire)
    {
        if let Ok(message) = rx.try_recv() {
            taken = Some(message);
            break;
        }
        std::thread::park();
    }
    flags.asleep.store(false, Ordering::Relaxed);
    taken
}
