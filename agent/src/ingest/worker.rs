//! The ingest's one worker thread, at the lowest CPU priority: it opens
//! runs, checks each batch (every frame's checksum and record) and appends
//! it with its sync. Uploads so never take the runtime thread (which serves
//! `/publish` and `/start_test`) or a core the shards need: on a 2-core
//! server, storing 1,000 receipts costs about a millisecond of CPU, a third
//! of a 1,000-client fan-out.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;

use skewscope_core::ingest::{IngestError, accept_batch};
use tokio::sync::oneshot;

use super::store::{IngestStore, OpenError, OpenRun};
use crate::metrics::Metrics;

/// What storing a batch came to.
#[derive(Debug)]
pub enum Stored {
    /// Durable: acknowledge the run's new `next_seq`.
    Ack,
    /// Nothing stored (data budget or disk full): why.
    Busy(String),
}

enum Job {
    Open {
        run_id: u128,
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
    jobs: mpsc::Sender<Job>,
}

impl Worker {
    /// Starts the worker thread for `store`; what it stores also feeds the
    /// live join of `metrics`, which it ticks about once a second.
    pub fn start(store: Arc<IngestStore>, metrics: Arc<Metrics>) -> std::io::Result<Worker> {
        let (jobs, queue) = mpsc::channel();
        std::thread::Builder::new()
            .name("ingest".into())
            .spawn(move || {
                if let Err(e) = skewscope_os::priority::lower_this_thread() {
                    eprintln!("skewscope-agent: ingest runs at normal priority: {e}");
                }
                loop {
                    match queue.recv_timeout(TICK) {
                        Ok(job) => work(&store, &metrics, job),
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            metrics.tick(skewscope_os::clock::now().wall_ns);
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
            })?;
        Ok(Worker { jobs })
    }

    /// Claims and opens run `run_id` (see [`IngestStore::open`]).
    pub async fn open(&self, run_id: u128) -> Result<OpenRun, OpenError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job::Open { run_id, reply })
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
        let job = Job::Batch {
            run,
            first_seq,
            frames,
            reply,
        };
        self.jobs.send(job).ok()?;
        answer.await.ok()
    }
}

fn gone() -> OpenError {
    OpenError::Io(std::io::Error::other("the agent is shutting down"))
}

/// How often broadcasts are judged when no upload comes (finality by time).
const TICK: std::time::Duration = std::time::Duration::from_secs(1);

fn work(store: &IngestStore, metrics: &Metrics, job: Job) {
    match job {
        Job::Open { run_id, reply } => {
            let _ = reply.send(store.open(run_id));
        }
        Job::Batch {
            mut run,
            first_seq,
            frames,
            reply,
        } => {
            let stored = match accept_batch(run.run_id, run.next_seq, first_seq, &frames) {
                Ok(accepted) => {
                    store
                        .counters
                        .duplicates
                        .fetch_add(accepted.duplicates, Ordering::Relaxed);
                    match store.append(&mut run, accepted.new_frames, accepted.new_records) {
                        Ok(()) => {
                            metrics.ingested(
                                run.run_id,
                                &accepted.records,
                                skewscope_os::clock::now().wall_ns,
                            );
                            Ok(Stored::Ack)
                        }
                        Err(e) => {
                            store.counters.busy.fetch_add(1, Ordering::Relaxed);
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
