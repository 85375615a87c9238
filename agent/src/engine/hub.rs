//! The hub: owns the shards, assigns clients to them, and starts broadcasts.
//!
//! A broadcast is encoded into one WebSocket frame here (and, with
//! permessage-deflate on (the default), one compressed frame for the clients that agreed to
//! permessage-deflate), stamped, recorded, and handed to every shard at once;
//! each shard's loop writes those same buffers.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, TryLockError};

use prometheus_client::metrics::counter::Counter;
use skewscope_core::identity::{TestMessage, encode_test_message, payload_hash};
use skewscope_core::permessage_deflate::deflate::MessageDeflater;
use skewscope_core::record::{AgentConnectionOpened, AgentRecord, BroadcastStarted};
use tungstenite::protocol::frame::Frame;
use tungstenite::protocol::frame::coding::{Data, OpCode};

use crate::counters::ClientCounters;
use crate::engine::shard::{EncodedBroadcast, NewClient, ShardConfig, ShardHandle, encode};
use crate::quiet::{FanoutQuiet, InFlight};
use crate::recorder::Recorder;

/// How the hub runs its shards; fixed for the agent's life.
#[derive(Clone, Copy, Debug)]
pub struct HubConfig {
    /// Shard threads to start (at least one).
    pub shards: usize,
    /// Pin shard i to the i-th core the agent may run on (`--pin-shards`),
    /// when there are as many cores as shards.
    pub pin_shards: bool,
    /// Compress each broadcast once for the clients that agreed to
    /// permessage-deflate (unless `--no-deflate`).
    pub deflate: bool,
    /// How every shard behaves.
    pub shard: ShardConfig,
}

/// What a broadcast reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Broadcasted {
    /// Broadcast id (in the agent's log).
    pub id: u64,
    /// Test sequence number, for `/start_test`.
    pub seq: Option<u64>,
    /// The time to act it carries (`/start_test?lead=`), agent wall clock.
    pub at_wall_ns: Option<u64>,
    /// Clients it was sent to.
    pub clients: u32,
}

/// `payload` compressed with the shared compressor, or, while another
/// thread holds it, with one of its own: never waited for, so a small body
/// readied on the thread that serves every request is not held while a
/// large one is compressed on a blocking thread (no context is kept
/// between messages, so either gives the same bytes).
fn compress_unwaited(shared: &Mutex<MessageDeflater>, payload: &[u8]) -> Option<Vec<u8>> {
    match shared.try_lock() {
        Ok(mut deflater) => deflater.compress(payload),
        Err(TryLockError::Poisoned(p)) => p.into_inner().compress(payload),
        Err(TryLockError::WouldBlock) => MessageDeflater::default().compress(payload),
    }
}

/// A payload encoded for the shards but not yet sent: what
/// [`Hub::ready_to_send`] makes and [`Hub::send`] sends.
#[derive(Debug)]
pub struct ReadyBroadcast {
    frame: Arc<[u8]>,
    compressed: Option<Arc<[u8]>>,
    hash: u64,
    len: u32,
    text: bool,
}

/// The fan-out engine's front door, shared by every HTTP task.
pub struct Hub {
    shards: Mutex<Vec<ShardHandle>>,
    recorder: Recorder,
    next_conn: AtomicU64,
    next_broadcast: AtomicU64,
    next_seq: AtomicU64,
    /// Broadcasts being fanned out right now.
    in_flight: InFlight,
    /// Compresses each broadcast once (unless `--no-deflate`).
    deflater: Option<Mutex<MessageDeflater>>,
    /// Clients in and out (the shards hold clones).
    clients: ClientCounters,
    /// Broadcasts started.
    broadcasts: Counter,
}

impl Hub {
    /// Starts the shard threads; with `pin_shards`, shard i on the i-th
    /// core the agent may use, when there are at least as many. The hub
    /// and its shards count into `clients` and `broadcasts`.
    pub fn start(
        config: HubConfig,
        recorder: Recorder,
        clients: ClientCounters,
        broadcasts: Counter,
    ) -> std::io::Result<Hub> {
        let shards = config.shards.max(1);
        let cores = if config.pin_shards {
            match skewscope_os::cpu::allowed_cores() {
                Ok(cores) if cores.len() >= shards => Some(cores),
                Ok(cores) => {
                    tracing::warn!(
                        target: "agent::engine",
                        "--pin-shards: {shards} shards but {} cores allowed; not pinned",
                        cores.len()
                    );
                    None
                }
                Err(e) => {
                    tracing::warn!(target: "agent::engine", "--pin-shards: cannot read the allowed cores: {e}");
                    None
                }
            }
        } else {
            None
        };
        let handles = (0..shards)
            .map(|i| {
                let core = cores.as_ref().map(|c| c[i]);
                ShardHandle::spawn(
                    i as u16,
                    config.shard,
                    recorder.clone(),
                    clients.clone(),
                    core,
                )
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Hub {
            shards: Mutex::new(handles),
            recorder,
            next_conn: AtomicU64::new(1),
            next_broadcast: AtomicU64::new(1),
            next_seq: AtomicU64::new(1),
            in_flight: InFlight::new(),
            deflater: config
                .deflate
                .then(|| Mutex::new(MessageDeflater::default())),
            clients,
            broadcasts,
        })
    }

    /// Whether clients that offer permessage-deflate get it (unless `--no-deflate`).
    pub fn deflate(&self) -> bool {
        self.deflater.is_some()
    }

    /// Connected clients that agreed to permessage-deflate.
    pub fn deflate_clients(&self) -> usize {
        self.clients.deflate.get().max(0) as usize
    }

    /// A handle to wait until no broadcast is being fanned out.
    pub fn quiet(&self) -> FanoutQuiet {
        self.in_flight.quiet()
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
        self.clients.opened.inc();
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

    /// How many shards' threads ended or no longer handle their commands
    /// (see [`ShardHandle::responsive`]): the watchdog is pinged only at 0.
    pub fn shards_stuck(&self, now_mono_ns: u64, stuck_after: std::time::Duration) -> usize {
        let shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        shards
            .iter()
            .filter(|s| !(s.alive() && s.responsive(now_mono_ns, stuck_after)))
            .count()
    }

    /// Whether the hub has shards at all (none once it is shut down).
    pub fn has_shards(&self) -> bool {
        !self
            .shards
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Connected clients over all shards.
    pub fn clients(&self) -> usize {
        self.clients.connected.get().max(0) as usize
    }

    /// Broadcasts started so far in this run (ids are 1 to this).
    pub fn broadcasts(&self) -> u64 {
        self.next_broadcast.load(Ordering::Relaxed) - 1
    }

    /// Records `record` in the agent's log, after the broadcasts already
    /// recorded (a broadcast's `LeadChosen` follows its `Broadcast`).
    pub fn record(&self, record: AgentRecord) {
        self.recorder.record(record);
    }

    /// Broadcasts the built-in test message with the next sequence number;
    /// with a `lead`, its time to act is the moment it is built plus the
    /// lead (microseconds before the start is stamped).
    pub async fn start_test(&self, lead: Option<std::time::Duration>) -> Broadcasted {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let sent_wall_ns = skewscope_os::clock::now().wall_ns;
        let at_wall_ns = lead.map(|l| sent_wall_ns.saturating_add(l.as_nanos() as u64));
        let text = encode_test_message(TestMessage {
            seq,
            sent_wall_ns,
            at_wall_ns,
        });
        let ready = self.ready(text.into_bytes(), true);
        let mut sent = self.send(ready, Some(seq)).await;
        sent.at_wall_ns = at_wall_ns;
        sent
    }

    /// Makes `payload` ready to broadcast: its frame, its compressed frame
    /// for the clients that agreed to permessage-deflate, its hash. Work
    /// that grows with the payload and touches no shard, so a caller with a
    /// large one runs it off the thread that serves every request
    /// ([`Hub::send`] then takes a moment whatever the size).
    pub fn ready_to_send(&self, payload: Vec<u8>) -> ReadyBroadcast {
        let text = std::str::from_utf8(&payload).is_ok();
        self.ready(payload, text)
    }

    fn ready(&self, payload: Vec<u8>, text: bool) -> ReadyBroadcast {
        let opcode = OpCode::Data(if text { Data::Text } else { Data::Binary });
        let hash = payload_hash(&payload);
        let len = payload.len() as u32;
        // Compressed once for every client that agreed, if one is here; RSV1
        // marks it. One that joins meanwhile gets the plain frame, which is
        // always allowed.
        let wanted = self.deflater.is_some() && self.deflate_clients() > 0;
        let compressed = self
            .deflater
            .as_ref()
            .filter(|_| wanted)
            .and_then(|deflater| {
                let deflated = compress_unwaited(deflater, &payload)?;
                let mut message = Frame::message(deflated, opcode, true);
                message.header_mut().rsv1 = true;
                Some(Arc::<[u8]>::from(encode(message)))
            });
        let frame: Arc<[u8]> = encode(Frame::message(payload, opcode, true)).into();
        ReadyBroadcast {
            frame,
            compressed,
            hash,
            len,
            text,
        }
    }

    /// Stamps the start of a broadcast made ready by
    /// [`Hub::ready_to_send`], records it and hands it to every shard;
    /// returns once every shard has written it. The start is stamped after
    /// the encoding and hashing, so the fan-out span is the agent's
    /// sending, not its copying of a large payload.
    pub async fn send(&self, ready: ReadyBroadcast, seq: Option<u64>) -> Broadcasted {
        let ReadyBroadcast {
            frame,
            compressed,
            hash,
            len,
            text,
        } = ready;
        let id = self.next_broadcast.fetch_add(1, Ordering::Relaxed);
        self.broadcasts.inc();
        let start = skewscope_os::clock::now();
        // Recorded before any shard can record its sends for it.
        self.recorder
            .record(AgentRecord::Broadcast(BroadcastStarted {
                id,
                seq,
                hash,
                len,
                text,
                at: start,
            }));
        let job = Arc::new(EncodedBroadcast {
            id,
            frame,
            compressed,
        });
        let _in_flight = self.in_flight.start();
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
        Broadcasted {
            id,
            seq,
            clients,
            at_wall_ns: None,
        }
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
    use crate::recorder::{RecorderThread, Unobserved};
    use crate::segments::Limits;

    /// A hub of `shards` shards recording into a temporary directory.
    fn test_hub(shards: usize, pin_shards: bool) -> (Hub, RecorderThread, tempfile::TempDir) {
        test_hub_with(shards, |c| c.pin_shards = pin_shards)
    }

    /// A test hub whose shard settings `adjust` changes.
    fn test_hub_with(
        shards: usize,
        adjust: impl FnOnce(&mut HubConfig),
    ) -> (Hub, RecorderThread, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            segment_bytes: 1 << 20,
            max_data_bytes: 1 << 24,
        };
        let recorder =
            RecorderThread::start(dir.path(), limits, Counter::default(), Box::new(Unobserved))
                .unwrap();
        let mut config = HubConfig {
            shards,
            pin_shards: false,
            deflate: false,
            shard: ShardConfig {
                order: skewscope_core::record::SendOrder::Rotate,
                record_send_times: true,
                max_frame: 1 << 16,
                max_queue_bytes: 1 << 20,
                tx_timestamps: false,
                close_wait: std::time::Duration::from_millis(500),
                stall_shard: None,
            },
        };
        adjust(&mut config);
        let hub = Hub::start(
            config,
            recorder.handle(),
            crate::counters::AgentCounters::new(false).clients,
            Counter::default(),
        )
        .unwrap();
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
            tls: None,
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
        let sent = runtime.block_on(hub.send(hub.ready_to_send(b"after the crash".to_vec()), None));
        assert_eq!(sent.clients, 4);
        hub.shutdown();
        drop(peers);
        recorder.finish();
    }

    #[test]
    fn a_busy_compressor_is_not_waited_for_and_gives_the_same_bytes() {
        let payload = br#"{"scene":"lobby","level":50}"#.repeat(100);
        let shared = Mutex::new(MessageDeflater::default());
        let free = compress_unwaited(&shared, &payload).expect("it shrinks");
        // Held, as by a blocking thread compressing a large body: this call
        // would deadlock if it waited (the holder is this very thread).
        let held = shared.lock().unwrap();
        let busy = compress_unwaited(&shared, &payload).expect("it shrinks");
        drop(held);
        assert_eq!(busy, free);
    }

    #[test]
    fn a_stuck_shard_is_unhealthy_though_its_thread_is_alive() {
        use std::time::{Duration, Instant};
        let (hub, recorder, dir) = test_hub_with(2, |c| c.shard.stall_shard = Some(0));
        let now = skewscope_os::clock::mono_ns;
        // Shards that handle commands answer every heartbeat, however often asked.
        let generous = Duration::from_secs(5);
        for _ in 0..20 {
            assert_eq!(hub.shards_stuck(now(), generous), 0);
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
            runtime.block_on(publisher.send(publisher.ready_to_send(b"stall here".to_vec()), None));
        });
        let strict = Duration::from_millis(200);
        let deadline = Instant::now() + Duration::from_secs(20);
        while hub.shards_stuck(now(), strict) == 0 {
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
