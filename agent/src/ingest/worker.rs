//! The ingest's one worker thread, at the lowest CPU priority: it opens
//! runs, checks each batch (every frame's checksum and record) and appends
//! it with its sync. Uploads so never take the runtime thread (which serves
//! `/publish` and `/start_test`) or a core the shards need: on a 2-core
//! server, storing 1,000 receipts costs about a millisecond of CPU, a third
//! of a 1,000-client fan-out.

use std::sync::Arc;
use std::sync::mpsc;

use skewscope_core::ingest::{IngestError, accept_batch};
use tokio::sync::oneshot;

use super::store::{IngestStore, OpenError, OpenRun};
use crate::live::LiveFeed;

/// What storing a batch came to.
#[derive(Debug)]
pub enum Stored {
    /// Durable: acknowledge the run's new `next_seq`.
    Ack,
    /// Nothing stored (data budget or disk full): why.
    Busy(String),
    /// Nothing stored: a newer connection has taken the run over.
    TakenOver,
}

/// What the worker is asked to do.
enum Task {
    Open {
        run_id: u128,
        secret: Option<u128>,
        reply: oneshot::Sender<Result<OpenRun, OpenError>>,
    },
    Batch {
        run: OpenRun,
        first_seq: u64,
        frames: Vec<u8>,
        reply: oneshot::Sender<(OpenRun, Result<Stored, IngestError>)>,
    },
}

/// A handle to the worker thread; it ends when the last handle goes.
#[derive(Clone)]
pub struct Worker {
    tasks: mpsc::Sender<Task>,
}

impl Worker {
    /// Starts the worker thread for `store`; what it stores goes up to the
    /// live join through `live`. It sleeps until a task comes.
    pub fn start(store: Arc<IngestStore>, live: LiveFeed) -> std::io::Result<Worker> {
        let (tasks, queue) = mpsc::channel();
        std::thread::Builder::new()
            .name("ingest".into())
            .spawn(move || {
                if let Err(e) = skewscope_os::priority::lower_this_thread() {
                    tracing::warn!(target: "agent::ingest", "the ingest thread runs at normal priority: {e}");
                }
                while let Ok(task) = queue.recv() {
                    work(&store, &live, task);
                }
            })?;
        Ok(Worker { tasks })
    }

    /// Claims and opens run `run_id` for a hello that gave `secret` (see
    /// [`IngestStore::open`]).
    pub async fn open(&self, run_id: u128, secret: Option<u128>) -> Result<OpenRun, OpenError> {
        let (reply, answer) = oneshot::channel();
        self.tasks
            .send(Task::Open {
                run_id,
                secret,
                reply,
            })
            .map_err(|_| gone())?;
        answer.await.map_err(|_| gone())?
    }

    /// Checks a batch against `run` and stores what is new in it; gives the
    /// run back either way. `None` when the worker is gone (shutting down).
    pub async fn store(
        &self,
        run: OpenRun,
        first_seq: u64,
        frames: Vec<u8>,
    ) -> Option<(OpenRun, Result<Stored, IngestError>)> {
        let (reply, answer) = oneshot::channel();
        let task = Task::Batch {
            run,
            first_seq,
            frames,
            reply,
        };
        self.tasks.send(task).ok()?;
        answer.await.ok()
    }
}

fn gone() -> std::io::Error {
    std::io::Error::other("the agent is shutting down")
}

fn work(store: &IngestStore, live: &LiveFeed, task: Task) {
    match task {
        Task::Open {
            run_id,
            secret,
            reply,
        } => {
            let _ = reply.send(store.open(run_id, secret));
        }
        Task::Batch {
            mut run,
            first_seq,
            frames,
            reply,
        } => {
            if !store.holds(&run) {
                let _ = reply.send((run, Ok(Stored::TakenOver)));
                return;
            }
            let stored = match accept_batch(run.run_id, run.next_seq, first_seq, &frames) {
                Ok(accepted) => {
                    store.counters.duplicates.inc_by(accepted.duplicates);
                    match store.append(&mut run, accepted.new_frames, accepted.new_records) {
                        Ok(()) => {
                            live.uploaded(run.run_id, accepted.records);
                            Ok(Stored::Ack)
                        }
                        Err(e) => {
                            store.counters.busy.inc();
                            Ok(Stored::Busy(e.to_string()))
                        }
                    }
                }
                Err(e) => Err(e),
            };
            let _ = reply.send((run, stored));
        }
    }
}
