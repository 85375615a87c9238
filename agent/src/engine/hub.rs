//! The hub: owns the shards, assigns clients to them, and starts broadcasts.
//!
//! A broadcast is encoded into one WebSocket frame here (and, with
//! permessage-deflate on (the default), one compressed frame for the clients that agreed to
//! permessage-deflate), stamped, recorded, and handed to every shard at once;
//! each shard's loop writes those same buffers.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use skewscope_core::identity::{TestMessage, encode_test_message, payload_hash};
use skewscope_core::permessage_deflate::deflate::MessageDeflater;
use skewscope_core::record::{AgentConnectionOpened, AgentRecord, BroadcastStarted};
use tungstenite::protocol::frame::Frame;
use tungstenite::protocol::frame::coding::{Data, OpCode};

use crate::engine::shard::{Job, NewClient, ShardConfig, ShardHandle, encode};
use crate::recorder::Recorder;

/// What a broadcast reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Broadcasted {
    /// Broadcast id (in the agent's log).
    pub id: u64,
    /// Test sequence number, for `/start_test`.
    pub seq: Option<u64>,
    /// Clients it was sent to.
    pub clients: u32,
}

/// The fan-out engine's front door, shared by every HTTP task.
pub struct Hub {
    shards: Mutex<Vec<ShardHandle>>,
    recorder: Recorder,
    next_conn: AtomicU64,
    next_broadcast: AtomicU64,
    next_seq: AtomicU64,
    /// Broadcasts being fanned out right now.
    in_flight: tokio::sync::watch::Sender<u32>,
    /// Compresses each broadcast once (unless `--no-deflate`).
    deflater: Option<Mutex<MessageDeflater>>,
}

/// Lets background work (storing probes' uploads) step aside while a
/// broadcast is fanned out: on a 2-core server the shards need both cores
/// for those few milliseconds, and the upload can wait that long.
#[derive(Clone)]
pub struct FanoutQuiet(tokio::sync::watch::Receiver<u32>);

impl FanoutQuiet {
    /// Resolves when no broadcast is in flight, or after `at_most` (so a
    /// stream of broadcasts back to back cannot starve the caller).
    pub async fn wait(&mut self, at_most: std::time::Duration) {
        let _ = tokio::time::timeout(at_most, self.0.wait_for(|n| *n == 0)).await;
    }

    /// Resolves when a broadcast starts (at once if one is in flight).
    pub async fn busy(&mut self) {
        if self.0.wait_for(|n| *n > 0).await.is_err() {
            // The hub is gone: no broadcast will ever start.
            std::future::pending::<()>().await;
        }
    }
}

/// Counts one broadcast in flight until dropped, even if its task is cancelled.
struct InFlight<'a>(&'a tokio::sync::watch::Sender<u32>);

impl<'a> InFlight<'a> {
    fn start(counter: &'a tokio::sync::watch::Sender<u32>) -> InFlight<'a> {
        counter.send_modify(|n| *n += 1);
        InFlight(counter)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl Hub {
    /// Starts `shards` shard threads; with `pin_shards`, shard i on the
    /// i-th core the agent may use, when there are at least as many.
    pub fn start(shards: usize, config: ShardConfig, recorder: Recorder) -> std::io::Result<Hub> {
        let shards = shards.max(1);
        let cores = if config.pin_shards {
            match skewscope_os::cpu::allowed_cores() {
                Ok(cores) if cores.len() >= shards => Some(cores),
                Ok(cores) => {
                    eprintln!(
                        "skewscope-agent: --pin-shards: {shards} shards but {} cores allowed; not pinned",
                        cores.len()
                    );
                    None
                }
                Err(e) => {
                    eprintln!("skewscope-agent: --pin-shards: cannot read the allowed cores: {e}");
                    None
                }
            }
        } else {
            None
        };
        let handles = (0..shards)
            .map(|i| {
                let core = cores.as_ref().map(|c| c[i]);
                ShardHandle::spawn(i as u16, config, recorder.clone(), core)
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Hub {
            shards: Mutex::new(handles),
            recorder,
            next_conn: AtomicU64::new(1),
            next_broadcast: AtomicU64::new(1),
            next_seq: AtomicU64::new(1),
            in_flight: tokio::sync::watch::Sender::new(0),
            deflater: config
                .deflate
                .then(|| Mutex::new(MessageDeflater::default())),
        })
    }

    /// Whether clients that offer permessage-deflate get it (unless `--no-deflate`).
    pub fn deflate(&self) -> bool {
        self.deflater.is_some()
    }

    /// Connected clients that agreed to permessage-deflate.
    pub fn deflate_clients(&self) -> usize {
        let shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        shards.iter().map(ShardHandle::deflate_clients).sum()
    }

    /// A handle to wait until no broadcast is being fanned out.
    pub fn quiet(&self) -> FanoutQuiet {
        FanoutQuiet(self.in_flight.subscribe())
    }

    /// Reserves the id a new connection will have (sent in its upgrade response).
    pub fn next_connection_id(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    /// Records a new client and hands it to the least-loaded shard whose
    /// thread still runs (a dead one is the watchdog's to report, see
    /// [`Hub::shards_alive`]; its clients are not added to).
    pub fn attach(
        &self,
        client: NewClient,
        label: Option<String>,
        peer: String,
        subprotocol: Option<String>,
    ) {
        let shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        let Some((index, shard)) = shards
            .iter()
            .enumerate()
            .filter(|(_, s)| s.alive())
            .min_by_key(|(_, s)| s.clients())
        else {
            return; // shut down, or no shard left: dropping the socket closes it
        };
        self.recorder
            .record(AgentRecord::ConnectionOpened(AgentConnectionOpened {
                conn: client.id,
                label,
                peer,
                shard: index as u16,
                at: skewscope_os::clock::now(),
            }));
        if let Some(subprotocol) = subprotocol {
            self.recorder.record(AgentRecord::ConnectionSubprotocol(
                skewscope_core::record::ConnectionSubprotocol {
                    conn: client.id,
                    subprotocol,
                },
            ));
        }
        shard.add(client);
    }

    /// Whether every shard thread still runs.
    #[cfg(test)]
    pub fn shards_alive(&self) -> bool {
        let shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        !shards.is_empty() && shards.iter().all(ShardHandle::alive)
    }

    /// Whether every shard's thread runs and still handles its commands
    /// (see [`ShardHandle::responsive`]): what the watchdog is pinged on.
    pub fn shards_healthy(&self, now_mono_ns: u64, stuck_after: std::time::Duration) -> bool {
        let shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        !shards.is_empty()
            && shards
                .iter()
                .all(|s| s.alive() && s.responsive(now_mono_ns, stuck_after))
    }

    /// Connected clients over all shards.
    pub fn clients(&self) -> usize {
        let shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        shards.iter().map(ShardHandle::clients).sum()
    }

    /// Broadcasts started so far in this run (ids are 1 to this).
    pub fn broadcasts(&self) -> u64 {
        self.next_broadcast.load(Ordering::Relaxed) - 1
    }

    /// Broadcasts a payload: a text frame if it is UTF-8, else binary.
    pub async fn publish(&self, payload: &[u8]) -> Broadcasted {
        let text = std::str::from_utf8(payload).is_ok();
        self.broadcast(payload, text, None).await
    }

    /// Broadcasts the built-in test message with the next sequence number.
    pub async fn start_test(&self) -> Broadcasted {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let text = encode_test_message(TestMessage {
            seq,
            sent_wall_ns: skewscope_os::clock::now().wall_ns,
        });
        self.broadcast(text.as_bytes(), true, Some(seq)).await
    }

    /// Encodes and hashes the payload, then stamps the start: the fan-out
    /// span is the agent's sending, not its copying of a large payload (a
    /// 1 MiB `/publish` takes hundreds of µs to copy and hash).
    async fn broadcast(&self, payload: &[u8], text: bool, seq: Option<u64>) -> Broadcasted {
        let id = self.next_broadcast.fetch_add(1, Ordering::Relaxed);
        let opcode = OpCode::Data(if text { Data::Text } else { Data::Binary });
        let frame: Arc<[u8]> = encode(Frame::message(payload.to_vec(), opcode, true)).into();
        // Compressed once for every client that agreed, if one is here; RSV1
        // marks it. One that joins meanwhile gets the plain frame, which is
        // always allowed.
        let wanted = self.deflater.is_some() && self.deflate_clients() > 0;
        let compressed = self
            .deflater
            .as_ref()
            .filter(|_| wanted)
            .and_then(|deflater| {
                let deflated = deflater
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .compress(payload)?;
                let mut message = Frame::message(deflated, opcode, true);
                message.header_mut().rsv1 = true;
                Some(Arc::<[u8]>::from(encode(message)))
            });
        let hash = payload_hash(payload);
        let start = skewscope_os::clock::now();
        // Recorded before any shard can record its sends for it.
        self.recorder
            .record(AgentRecord::Broadcast(BroadcastStarted {
                id,
                seq,
                hash,
                len: payload.len() as u32,
                text,
                at: start,
            }));
        let job = Arc::new(Job {
            id,
            frame,
            compressed,
        });
        let _in_flight = InFlight::start(&self.in_flight);
        let waits: Vec<_> = {
            let shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
            shards
                .iter()
                .map(|shard| {
                    let (tx, rx) = tokio::sync::oneshot::channel();
                    shard.broadcast(job.clone(), tx);
                    rx
                })
                .collect()
        };
        let mut clients = 0;
        for wait in waits {
            clients += wait.await.unwrap_or(0);
        }
        Broadcasted { id, seq, clients }
    }

    /// Closes every client and stops the shard threads. Blocks until they end.
    pub fn shutdown(&self) {
        let mut shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        for shard in shards.iter_mut() {
            shard.shutdown();
        }
        shards.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::recorder::RecorderThread;
    use crate::segments::Limits;

    /// A hub of `shards` shards recording into a temporary directory.
    fn test_hub(shards: usize, pin_shards: bool) -> (Hub, RecorderThread, tempfile::TempDir) {
        test_hub_with(shards, |c| c.pin_shards = pin_shards)
    }

    /// A test hub whose shard settings `adjust` changes.
    fn test_hub_with(
        shards: usize,
        adjust: impl FnOnce(&mut ShardConfig),
    ) -> (Hub, RecorderThread, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            segment_bytes: 1 << 20,
            max_data_bytes: 1 << 24,
        };
        let recorder =
            RecorderThread::start(dir.path(), limits, Arc::new(Metrics::new(shards))).unwrap();
        let config = ShardConfig {
            order: skewscope_core::record::SendOrder::Rotate,
            record_send_times: true,
            max_frame: 1 << 16,
            max_queue_bytes: 1 << 20,
            tx_timestamps: false,
            pin_shards: false,
            stall_shard: None,
            deflate: false,
        };
        let mut config = config;
        adjust(&mut config);
        let hub = Hub::start(shards, config, recorder.handle()).unwrap();
        (hub, recorder, dir)
    }

    /// A non-blocking loopback socket, as the server hands a shard.
    fn new_client(id: u64, listener: &std::net::TcpListener) -> (NewClient, std::net::TcpStream) {
        let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, _) = listener.accept().unwrap();
        stream.set_nonblocking(true).unwrap();
        let client = NewClient {
            id,
            stream,
            leftover: Vec::new(),
            deflate: false,
            probe: true,
        };
        (client, peer)
    }

    #[test]
    fn a_dead_shard_gets_no_clients_and_the_watchdog_sees_it() {
        let (hub, recorder, _dir) = test_hub(2, false);
        assert!(hub.shards_alive());
        hub.shards.lock().unwrap()[0].crash();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while hub.shards_alive() {
            assert!(
                std::time::Instant::now() < deadline,
                "the shard did not die"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut peers = Vec::new();
        for id in 1..=4 {
            let (client, peer) = new_client(id, &listener);
            hub.attach(client, None, "127.0.0.1:1".into(), None);
            peers.push(peer);
        }
        let per_shard: Vec<usize> = hub
            .shards
            .lock()
            .unwrap()
            .iter()
            .map(ShardHandle::clients)
            .collect();
        assert_eq!(
            per_shard,
            vec![0, 4],
            "every new client went to the live shard"
        );
        // A broadcast still completes on the live shard, not waiting on the dead one.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let sent = runtime.block_on(hub.publish(b"after the crash"));
        assert_eq!(sent.clients, 4);
        hub.shutdown();
        drop(peers);
        recorder.finish();
    }

    #[test]
    fn a_stuck_shard_is_unhealthy_though_its_thread_is_alive() {
        use std::time::{Duration, Instant};
        let (hub, recorder, dir) = test_hub_with(2, |c| c.stall_shard = Some(0));
        let now = skewscope_os::clock::mono_ns;
        // Shards that handle commands answer every heartbeat, however often asked.
        let generous = Duration::from_secs(5);
        for _ in 0..20 {
            assert!(hub.shards_healthy(now(), generous));
            std::thread::sleep(Duration::from_millis(10));
        }
        // Shard 0 blocks at the broadcast; publish never completes, so it runs aside.
        let hub = Arc::new(hub);
        let publisher = hub.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(publisher.publish(b"stall here"));
        });
        let strict = Duration::from_millis(200);
        let deadline = Instant::now() + Duration::from_secs(20);
        while hub.shards_healthy(now(), strict) {
            assert!(Instant::now() < deadline, "the stuck shard was never seen");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(hub.shards_alive(), "stuck, not dead: the thread still runs");
        // A stuck thread cannot be joined: leave it, and the hub, to the process's end.
        std::mem::forget((hub, recorder, dir));
    }

    /// The cores each thread of this process named `name` may run on (other
    /// tests run hubs of their own at the same time).
    fn cores_of_threads(name: &str) -> Vec<String> {
        let mut found = Vec::new();
        for task in std::fs::read_dir("/proc/self/task")
            .into_iter()
            .flatten()
            .flatten()
        {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim() != name {
                continue;
            }
            let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            if let Some(v) = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            {
                found.push(v.trim().to_owned());
            }
        }
        found
    }

    #[test]
    fn pinned_shards_each_run_on_their_own_core() {
        let cores = skewscope_os::cpu::allowed_cores().unwrap();
        let shards = cores.len().min(2);
        let (hub, recorder, _dir) = test_hub(shards, true);
        for (i, core) in cores.iter().take(shards).enumerate() {
            let name = format!("shard-{i}");
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            // The thread pins itself as it starts.
            loop {
                let seen = cores_of_threads(&name);
                if seen.contains(&core.to_string()) {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{name}: {seen:?}, want {core}"
                );
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        hub.shutdown();
        recorder.finish();
    }
}
