//! A fan-out shard: one thread, one mio poll, a set of clients, and the tight
//! send loop.
//!
//! Each broadcast arrives as one pre-encoded frame. The loop writes that same
//! buffer to every client of the shard in the configured order and stores a
//! clock reading per client into a preallocated slot vector; nothing else
//! happens per client. Clients whose send buffer is full keep the remainder
//! queued and are finished when mio reports them writable. Reads (pings, close,
//! misbehaviour) are handled between broadcasts.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::thread::JoinHandle;

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use skewscope_core::record::{
    AgentConnectionClosed, AgentRecord, CloseReason, SendCompleted, SendOrder, SendOutcome,
    SendSlot, ShardSends, TxStamp,
};
use skewscope_os::clock::mono_ns;
use slab::Slab;
use tungstenite::protocol::CloseFrame;
use tungstenite::protocol::frame::Frame;

use crate::counters::ClientCounters;
use crate::engine::client::{Client, Offer};
use crate::engine::send_order::Sequencer;
use crate::engine::wire::Wire;
use crate::recorder::Recorder;
use skewscope_core::client_frames::{ClientFrame, ClientFrameError};

/// How long a shard may leave a heartbeat unanswered before it counts as
/// stuck. A broadcast to 10,000 clients takes milliseconds, and a shard
/// looks at its commands between client reads, so only a shard that has
/// stopped working is this late. With the unit's `WatchdogSec=30s` (pinged
/// every 15 s), a stuck shard gets the agent restarted within about 50 s.
pub const SHARD_STUCK_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

const WAKER: Token = Token(usize::MAX);
const READ_CHUNK: usize = 64 * 1024;
/// Most bytes read from one client per turn. A client that sends more
/// (a flood, or just a big upload) is come back to after the shard has
/// looked at its commands and its other clients: a broadcast never waits
/// behind one client's chatter.
pub const READ_BUDGET: usize = 4 * READ_CHUNK;

/// How every shard behaves; fixed for the agent's life.
#[derive(Clone, Copy, Debug)]
pub struct ShardConfig {
    /// Send order within the loop.
    pub order: SendOrder,
    /// Read the clock per client and record the slots (off only to measure the cost).
    pub record_send_times: bool,
    /// Largest inbound frame or message a client may send.
    pub max_frame: usize,
    /// Most bytes a slow client may have pending before it is dropped.
    pub max_queue_bytes: usize,
    /// Ask the kernel for TX timestamps of every broadcast write to a probe.
    pub tx_timestamps: bool,
    /// At shutdown, how long the shard waits for its clients' replies to
    /// its close frames before dropping what is left (`--close-wait-ms`).
    pub close_wait: std::time::Duration,
    /// Test hook (`SKEWSCOPE_AGENT_TEST_STALL_SHARD=N`, in builds with the
    /// `test-hooks` feature only): shard N's thread blocks for good at its
    /// first broadcast, alive but stuck, so a test can see the watchdog
    /// restart the agent.
    #[cfg(any(test, feature = "test-hooks"))]
    pub stall_shard: Option<u16>,
}

/// One broadcast as shards see it: the frame, encoded once.
#[derive(Debug)]
pub struct EncodedBroadcast {
    /// Broadcast id.
    pub id: u64,
    /// The complete WebSocket frame, identical for every client.
    pub frame: Arc<[u8]>,
    /// The same message compressed (RSV1), for the clients that agreed to
    /// permessage-deflate; `None` when off or when it did not shrink.
    pub compressed: Option<Arc<[u8]>>,
}

/// A freshly upgraded client handed to a shard.
#[derive(Debug)]
pub struct NewClient {
    /// The agent's connection id.
    pub id: u64,
    /// The socket, already non-blocking.
    pub stream: std::net::TcpStream,
    /// Bytes the client sent right after its upgrade request.
    pub leftover: Vec<u8>,
    /// It agreed to permessage-deflate: it gets the compressed frame, and
    /// may send compressed messages.
    pub deflate: bool,
    /// It named itself a probe (`?probe=`). Only a probe's copies are joined
    /// with receipts, so only its socket is given kernel TX stamps: their
    /// cost follows the probes, not the audience.
    pub probe: bool,
    /// Its TLS session (`wss://`), handshake done; `None` for `ws://`.
    pub tls: Option<Box<rustls::ServerConnection>>,
}

enum Command {
    Add(NewClient),
    Broadcast(Arc<EncodedBroadcast>, tokio::sync::oneshot::Sender<u32>),
    Shutdown,
    /// The hub asks whether the thread still handles commands.
    Heartbeat,
    /// Test hook: the thread panics, as a bug in it would.
    #[cfg(test)]
    Crash,
}

/// The hub's handle to a running shard.
pub struct ShardHandle {
    tx: Sender<Command>,
    waker: Arc<Waker>,
    /// Set after a command is sent, before the wake: the shard checks it
    /// between clients, not only once per poll.
    command_pending: Arc<AtomicBool>,
    clients: Arc<AtomicUsize>,
    /// When an unanswered heartbeat was asked for (monotonic ns), 0 if none.
    heartbeat_asked_at: Arc<AtomicU64>,
    /// Every shard's clients, for `/metrics` and `/healthz`.
    counters: ClientCounters,
    thread: Option<JoinHandle<()>>,
}

impl ShardHandle {
    /// Starts shard `index` on its own thread, pinned to `core` if given;
    /// it counts its clients in and out into `counters`.
    pub fn spawn(
        index: u16,
        config: ShardConfig,
        recorder: Recorder,
        counters: ClientCounters,
        core: Option<usize>,
    ) -> io::Result<ShardHandle> {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let (tx, rx) = mpsc::channel();
        let (recycle_tx, recycle_rx) = mpsc::channel();
        let clients = Arc::new(AtomicUsize::new(0));
        let command_pending = Arc::new(AtomicBool::new(false));
        let heartbeat_asked_at = Arc::new(AtomicU64::new(0));
        let shard = Shard {
            counters: counters.clone(),
            command_pending: command_pending.clone(),
            heartbeat_asked_at: heartbeat_asked_at.clone(),
            backlog: Vec::new(),
            index,
            config,
            poll,
            commands: rx,
            clients: Slab::new(),
            order: Vec::new(),
            sequencer: Sequencer::new(config.order, fastrand::Rng::new()),
            scratch: vec![0; READ_CHUNK],
            doomed: Vec::new(),
            recorder,
            recycle_tx,
            recycle_rx,
            count: clients.clone(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("shard-{index}"))
            .spawn(move || {
                if let Some(core) = core
                    && let Err(e) = skewscope_os::cpu::pin_this_thread(core)
                {
                    tracing::warn!(target: "agent::engine", "shard {index} not pinned to core {core}: {e}");
                }
                shard.run()
            })?;
        Ok(ShardHandle {
            tx,
            waker,
            command_pending,
            clients,
            heartbeat_asked_at,
            counters,
            thread: Some(thread),
        })
    }

    /// Whether the shard's thread still handles commands: a heartbeat is
    /// asked for, and one asked for earlier must have been answered within
    /// `stuck_after`. A thread that is alive but stuck (blocked, or in a
    /// loop that never looks at its commands) answers nothing, so the
    /// watchdog sees it as it sees a dead one.
    pub fn responsive(&self, now_mono_ns: u64, stuck_after: std::time::Duration) -> bool {
        let asked = self.heartbeat_asked_at.load(Ordering::Acquire);
        if asked == 0 {
            let now = now_mono_ns.max(1);
            let first = self
                .heartbeat_asked_at
                .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
            if first {
                self.send(Command::Heartbeat);
            }
            return true;
        }
        now_mono_ns.saturating_sub(asked) < stuck_after.as_nanos() as u64
    }

    /// Whether the shard's thread still runs.
    pub fn alive(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Clients currently served by this shard.
    pub fn clients(&self) -> usize {
        self.clients.load(Ordering::Relaxed)
    }

    /// Hands a client to the shard.
    pub fn add(&self, client: NewClient) {
        // Counted now so the hub's least-loaded choice sees it at once.
        self.clients.fetch_add(1, Ordering::Relaxed);
        self.counters.connected.inc();
        if client.deflate {
            self.counters.deflate.inc();
        }
        self.send(Command::Add(client));
    }

    /// Queues a broadcast; `done` receives how many clients it targeted.
    pub fn broadcast(&self, job: Arc<EncodedBroadcast>, done: tokio::sync::oneshot::Sender<u32>) {
        self.send(Command::Broadcast(job, done));
    }

    /// Test hook: makes the shard's thread panic.
    #[cfg(test)]
    pub(crate) fn crash(&self) {
        self.send(Command::Crash);
    }

    /// Closes every client, records it, and waits for the thread to end.
    pub fn shutdown(&mut self) {
        self.send(Command::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    fn send(&self, command: Command) {
        if self.tx.send(command).is_ok() {
            self.command_pending.store(true, Ordering::Release);
            // A failed wake means the shard's poll is gone: the shard is ending.
            let _ = self.waker.wake();
        }
    }
}

struct Shard {
    index: u16,
    command_pending: Arc<AtomicBool>,
    heartbeat_asked_at: Arc<AtomicU64>,
    /// Clients whose read budget ran out with bytes left, in turn order.
    backlog: Vec<usize>,
    config: ShardConfig,
    poll: Poll,
    commands: Receiver<Command>,
    clients: Slab<Client>,
    /// Slab keys in connection order.
    order: Vec<usize>,
    sequencer: Sequencer,
    scratch: Vec<u8>,
    doomed: Vec<(usize, CloseReason)>,
    recorder: Recorder,
    recycle_tx: Sender<Vec<SendSlot>>,
    recycle_rx: Receiver<Vec<SendSlot>>,
    count: Arc<AtomicUsize>,
    /// Every shard's clients (connected, deflate, closed by reason).
    counters: ClientCounters,
}

impl Shard {
    fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        'serving: loop {
            // With clients still to read, only look for what else happened.
            let timeout = (!self.backlog.is_empty()).then_some(std::time::Duration::ZERO);
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!(target: "agent::engine", "shard {} poll failed: {e}", self.index);
                break;
            }
            // Commands first, and again after every client read: a broadcast
            // should not wait behind client chatter.
            if !self.commands_if_pending() {
                break;
            }
            for event in events.iter() {
                let key = event.token().0;
                if event.token() == WAKER || !self.clients.contains(key) {
                    continue;
                }
                // A stamping socket's error readiness is its queued TX
                // stamps. A real error on a TCP socket (a reset, a timeout)
                // also closes its read side, so it is still read below; a
                // read per stamp would only find nothing (a recv per copy).
                let stamps = event.is_error() && self.clients[key].tx.is_some();
                if stamps {
                    self.drain_tx_stamps(key);
                }
                if event.is_writable() {
                    self.on_writable(key);
                }
                if event.is_readable() || event.is_read_closed() || (event.is_error() && !stamps) {
                    self.on_readable(key);
                    if !self.commands_if_pending() {
                        break 'serving;
                    }
                }
            }
            // One more turn for each client that had more to read.
            for key in std::mem::take(&mut self.backlog) {
                let Some(client) = self.clients.get_mut(key) else {
                    continue;
                };
                if std::mem::take(&mut client.more_to_read) {
                    self.on_readable(key);
                    if !self.commands_if_pending() {
                        break 'serving;
                    }
                }
            }
            self.reap();
        }
        self.close_all();
    }

    /// Handles the commands sent since the last look; false once told to
    /// shut down.
    fn commands_if_pending(&mut self) -> bool {
        !self.command_pending.swap(false, Ordering::AcqRel) || self.drain_commands()
    }

    /// Handles every pending command; false once told to shut down.
    fn drain_commands(&mut self) -> bool {
        loop {
            match self.commands.try_recv() {
                Ok(Command::Broadcast(job, done)) => {
                    #[cfg(any(test, feature = "test-hooks"))]
                    if self.config.stall_shard == Some(self.index) {
                        tracing::warn!(
                            target: "agent::engine",
                            "shard {} stalls for good (SKEWSCOPE_AGENT_TEST_STALL_SHARD)",
                            self.index
                        );
                        loop {
                            std::thread::park();
                        }
                    }
                    let targets = self.fan_out(&job);
                    let _ = done.send(targets);
                }
                Ok(Command::Add(new)) => self.add(new),
                Ok(Command::Heartbeat) => self.heartbeat_asked_at.store(0, Ordering::Release),
                #[cfg(test)]
                Ok(Command::Crash) => panic!("shard {} crashed (test hook)", self.index),
                Ok(Command::Shutdown) | Err(TryRecvError::Disconnected) => return false,
                Err(TryRecvError::Empty) => return true,
            }
            // Clients that failed in a send loop leave before the next command.
            self.reap();
        }
    }

    /// The hot path: write one frame to every client, one clock read per client.
    fn fan_out(&mut self, job: &EncodedBroadcast) -> u32 {
        let loop_start_mono_ns = mono_ns();
        let n = self.order.len();
        let record = self.config.record_send_times;
        let mut slots = if record {
            let mut v = self.recycle_rx.try_recv().unwrap_or_default();
            v.reserve(n);
            v
        } else {
            Vec::new()
        };
        let mut targets = 0u32;
        for (i, key) in self.sequencer.next(&self.order).enumerate() {
            let client = &mut self.clients[key];
            let frame = match &job.compressed {
                Some(compressed) if client.deflate => compressed,
                _ => &job.frame,
            };
            let offer = client.offer(frame, job.id, self.config.max_queue_bytes);
            let outcome = match offer {
                Offer::Written => SendOutcome::Written,
                Offer::Queued => SendOutcome::Queued,
                Offer::OverBound => {
                    self.doomed.push((key, CloseReason::QueueOverflow));
                    SendOutcome::Dropped
                }
                Offer::Failed => {
                    self.doomed
                        .push((key, CloseReason::SocketError("write failed".into())));
                    SendOutcome::Failed
                }
            };
            if record {
                slots.push(SendSlot {
                    conn: client.id,
                    position: i as u32,
                    outcome,
                    mono_ns: mono_ns(),
                });
            }
            targets += 1;
        }
        if record {
            self.recorder.record_sends(
                ShardSends {
                    broadcast: job.id,
                    shard: self.index,
                    loop_start_mono_ns,
                    slots,
                },
                self.recycle_tx.clone(),
            );
        }
        targets
    }

    fn add(&mut self, new: NewClient) {
        let mut stream = TcpStream::from_std(new.stream);
        let entry = self.clients.vacant_entry();
        let key = entry.key();
        if let Err(e) = self.poll.registry().register(
            &mut stream,
            Token(key),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            self.count.fetch_sub(1, Ordering::Relaxed);
            self.counters.connected.dec();
            if new.deflate {
                self.counters.deflate.dec();
            }
            self.record_close(new.id, CloseReason::SocketError(format!("register: {e}")));
            return;
        }
        let mut client = Client::new(new.id, stream, mono_ns());
        if new.deflate {
            client.deflate = true;
            client.inbound = skewscope_core::client_frames::ClientFrameParser::with_deflate();
        }
        let mut leftover = new.leftover;
        if let Some(session) = new.tls {
            client.wire = Wire::tls(session);
            leftover.extend(client.wire.take_buffered());
        }
        if self.config.tx_timestamps && new.probe {
            match skewscope_os::tx_stamp::enable(&client.stream) {
                Ok(()) => client.tx = Some(Default::default()),
                Err(e) => tracing::warn!(
                    target: "agent::engine",
                    "no TX timestamps for connection {}: {e}",
                    new.id
                ),
            }
        }
        entry.insert(client);
        self.order.push(key);
        if !leftover.is_empty() {
            self.take_inbound(key, &leftover);
        }
    }

    /// Records the kernel TX stamps queued on a client's socket, converted to
    /// the monotonic clock the rest of the agent's records use.
    fn drain_tx_stamps(&mut self, key: usize) {
        let client = &mut self.clients[key];
        let conn = client.id;
        let (Some(tx), stream) = (client.tx.as_mut(), &client.stream) else {
            return;
        };
        // One pair of clock reads, taken at one moment, maps every stamp
        // of this batch (a preemption between two plain reads moved stamps
        // early by its length).
        let (real_now, mono_now) = skewscope_os::clock::kernel_realtime_and_mono_ns();
        let recorder = &self.recorder;
        tx.drain(stream, |m| {
            let age = real_now.saturating_sub(m.realtime_ns);
            recorder.record(AgentRecord::TxStamp(TxStamp {
                broadcast: m.broadcast,
                conn,
                kind: m.kind,
                mono_ns: mono_now.saturating_sub(age),
            }));
        });
    }

    fn on_writable(&mut self, key: usize) {
        let client = &mut self.clients[key];
        if !client.has_queued() {
            return;
        }
        let conn = client.id;
        let recorder = &self.recorder;
        let result = client.flush(|broadcast| {
            recorder.record(AgentRecord::SendCompleted(SendCompleted {
                broadcast,
                conn,
                mono_ns: mono_ns(),
            }))
        });
        if let Err(e) = result {
            self.doomed
                .push((key, CloseReason::SocketError(e.to_string())));
        }
    }

    fn on_readable(&mut self, key: usize) {
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut budget = READ_BUDGET;
        loop {
            if budget == 0 {
                // Edge-triggered: no new event will say it is still readable.
                let client = &mut self.clients[key];
                if !client.more_to_read {
                    client.more_to_read = true;
                    self.backlog.push(key);
                }
                break;
            }
            let want = budget.min(scratch.len());
            match self.clients[key].read(&mut scratch[..want]) {
                Ok(0) => {
                    self.doomed.push((key, CloseReason::ClientClosed));
                    break;
                }
                Ok(n) => {
                    budget -= n;
                    if !self.take_inbound(key, &scratch[..n]) {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.doomed
                        .push((key, CloseReason::SocketError(e.to_string())));
                    break;
                }
            }
        }
        self.scratch = scratch;
    }

    /// Parses bytes a client sent; false once the client is to be closed.
    /// Pings are answered within the client's queue bound and control-frame
    /// rate; nothing after its close frame is acted on.
    fn take_inbound(&mut self, key: usize, bytes: &[u8]) -> bool {
        let max_frame = self.config.max_frame;
        let max_queue = self.config.max_queue_bytes;
        let now = mono_ns();
        let client = &mut self.clients[key];
        let mut replies = Vec::new();
        let mut closed = None;
        let mut over_rate = false;
        let control = &mut client.control;
        let result = client.inbound.feed(bytes, max_frame, |inbound| {
            if closed.is_some() || over_rate {
                return;
            }
            match inbound {
                ClientFrame::Ping(payload) => {
                    over_rate = !control.allow(now);
                    if !over_rate {
                        replies.push(Frame::pong(payload));
                    }
                }
                ClientFrame::Pong => over_rate = !control.allow(now),
                ClientFrame::Close(code) => closed = Some(code),
            }
        });
        let mut close = match (result, closed) {
            (Err(e), _) => Some((
                e.close_code(),
                match &e {
                    ClientFrameError::TooLarge(_) => CloseReason::FrameTooLarge,
                    ClientFrameError::Protocol(what) => CloseReason::ProtocolError((*what).into()),
                    ClientFrameError::InvalidUtf8 => CloseReason::ProtocolError(e.to_string()),
                },
            )),
            (Ok(()), Some(code)) => Some((code.unwrap_or(1000), CloseReason::ClientClosed)),
            (Ok(()), None) if over_rate => Some((1008, CloseReason::TooManyControlFrames)),
            (Ok(()), None) => None,
        };
        for frame in replies {
            match client.send_control(encode(frame), max_queue) {
                Offer::Written | Offer::Queued => {}
                Offer::OverBound => {
                    close.get_or_insert((1008, CloseReason::QueueOverflow));
                    break;
                }
                Offer::Failed => {
                    self.doomed
                        .push((key, CloseReason::SocketError("write failed".into())));
                    return false;
                }
            }
        }
        match close {
            Some((code, reason)) => {
                let frame = Frame::close(Some(CloseFrame {
                    code: code.into(),
                    reason: "".into(),
                }));
                // Best effort, past the bound: the client is going either way.
                let _ = client.send_control(encode(frame), usize::MAX);
                self.doomed.push((key, reason));
                false
            }
            None => true,
        }
    }

    /// Removes the clients marked for closing, recording why.
    fn reap(&mut self) {
        if self.doomed.is_empty() {
            return;
        }
        let doomed = std::mem::take(&mut self.doomed);
        for (key, reason) in doomed {
            let Some(mut client) = self.clients.try_remove(key) else {
                continue; // doomed twice
            };
            let _ = self.poll.registry().deregister(&mut client.stream);
            self.count.fetch_sub(1, Ordering::Relaxed);
            self.counters.connected.dec();
            if client.deflate {
                self.counters.deflate.dec();
            }
            self.record_close(client.id, reason);
        }
        let clients = &self.clients;
        self.order.retain(|&k| clients.contains(k));
    }

    fn close_all(&mut self) {
        for (_, client) in self.clients.iter_mut() {
            let frame = Frame::close(Some(CloseFrame {
                code: 1001.into(),
                reason: "server shutting down".into(),
            }));
            let _ = client.send_control(encode(frame), usize::MAX);
        }
        let closing: Vec<(u64, bool)> = self
            .clients
            .iter()
            .map(|(_, c)| (c.id, c.deflate))
            .collect();
        for &(id, deflate) in &closing {
            self.record_close(id, CloseReason::Shutdown);
            self.counters.connected.dec();
            if deflate {
                self.counters.deflate.dec();
            }
        }
        self.await_closes();
        self.clients.clear();
        self.order.clear();
        self.count.store(0, Ordering::Relaxed);
    }

    /// After sending every client a close: waits up to its `close_wait` for
    /// each one's own close (or its end) before dropping its socket, so a
    /// browser sees a clean close rather than a reset.
    fn await_closes(&mut self) {
        let deadline = std::time::Instant::now() + self.config.close_wait;
        let mut events = Events::with_capacity(1024);
        let mut scratch = std::mem::take(&mut self.scratch);
        while !self.clients.is_empty() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() || self.poll.poll(&mut events, Some(left)).is_err() {
                break;
            }
            for event in events.iter() {
                let key = event.token().0;
                let Some(client) = self.clients.get_mut(key) else {
                    continue;
                };
                if event.is_writable() {
                    let _ = client.flush(|_| {});
                }
                let mut done = false;
                while !done {
                    match client.read(&mut scratch) {
                        Ok(0) => done = true,
                        Ok(n) => {
                            let mut closed = false;
                            let fed = client.inbound.feed(&scratch[..n], usize::MAX, |f| {
                                closed |= matches!(f, ClientFrame::Close(_));
                            });
                            done = closed || fed.is_err();
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(_) => done = true,
                    }
                }
                if done {
                    let mut gone = self.clients.remove(key);
                    let _ = self.poll.registry().deregister(&mut gone.stream);
                }
            }
        }
        self.scratch = scratch;
    }

    fn record_close(&self, conn: u64, reason: CloseReason) {
        self.counters.closed_for(&reason);
        self.recorder
            .record(AgentRecord::ConnectionClosed(AgentConnectionClosed {
                conn,
                at: skewscope_os::clock::now(),
                reason,
            }));
    }
}

/// Encodes a server frame (unmasked) into bytes.
pub fn encode(frame: Frame) -> Vec<u8> {
    let mut out = Vec::with_capacity(frame.len());
    // Formatting into a Vec cannot fail.
    frame.format(&mut out).expect("format into Vec");
    out
}
