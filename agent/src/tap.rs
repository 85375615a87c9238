//! `--tap-port`: the agent beside a server it does not replace. One thread
//! reads the server's outgoing packets ([`skewscope_os::packet_capture`]),
//! follows each connection into messages ([`skewscope_core::tap`]; with
//! `--tap-protocol`, the payloads of the protocol on them), groups copies
//! into broadcasts, and records them in the agent's log.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use skewscope_core::record::{
    AgentRecord, TapBroadcast, TapConnectionEvent, TapConnectionTotals, TapCopy, TapCountersRecord,
    TapStarted,
};
use skewscope_core::server_frames::DEFAULT_MAX_MESSAGE;
use skewscope_core::tap::broadcasts::{DEFAULT_WINDOW_NS, Grouper, TappedBroadcast, TappedCopy};
use skewscope_core::tap::protocol::{Protocol, TapReading};
use skewscope_core::tap::{Tap, TapEvent};
use skewscope_os::packet_capture::PacketCapture;

use crate::recorder::Recorder;

/// At a stop, how long to wait for one more block of the ring before
/// it counts as empty (blocks are handed over 40 ms after their first packet).
const DRAIN_WAIT: Duration = Duration::from_millis(100);

/// How often the tap's counters are recorded.
const COUNTERS_EVERY: Duration = Duration::from_secs(2);

/// The running tap; [`TapThread::stop`] records the last broadcasts and
/// counters.
pub struct TapThread {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TapThread {
    /// Opens the capture (so a missing capability is an error at start) and
    /// starts following `port`, reading its connections as `reading` says.
    pub fn start(
        port: u16,
        interface: Option<String>,
        ring_bytes: usize,
        reading: TapReading,
        recorder: Recorder,
    ) -> std::io::Result<TapThread> {
        let capture = PacketCapture::open(port, interface.as_deref(), ring_bytes)?;
        tracing::info!(
            target: "agent::tap",
            "tap running: recording the fan-out of the server on local TCP port {port} from its outgoing packets ({}; WebSockets read as {}{}); its clients (and probes) connect to it, not to this agent's /ws",
            interface
                .as_deref()
                .map_or_else(|| "every interface".to_owned(), |i| format!("interface {i}")),
            reading.protocol,
            if reading.events.is_empty() {
                String::new()
            } else {
                format!(", events {}", reading.events.join(", "))
            }
        );
        if skewscope_os::sockets::someone_listens_on(port) == Some(false) {
            tracing::warn!(
                target: "agent::tap",
                "nothing on this host listens on TCP port {port}: is --tap-port the port of the server whose clients the probes join? (a server started later is followed from its first connections on)"
            );
        }
        recorder.record(AgentRecord::TapStarted(TapStarted {
            port,
            interface,
            at: skewscope_os::clock::now(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("tap".into())
            .spawn(move || {
                // The server being tapped is what the box is for: the tap
                // takes what CPU is left, and the ring holds its packets
                // meanwhile (its drops are counted).
                if let Err(e) = skewscope_os::priority::lower_this_thread() {
                    tracing::warn!(target: "agent::tap", "the tap runs at normal priority: {e}");
                }
                run(capture, port, reading, &recorder, &flag)
            })?;
        Ok(TapThread {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops following, records what is still open, and waits.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(
    mut capture: PacketCapture,
    port: u16,
    reading: TapReading,
    recorder: &Recorder,
    stop: &AtomicBool,
) {
    let mut tap = Tap::new(port, DEFAULT_MAX_MESSAGE).reading(reading);
    let mut grouper = Grouper::new(DEFAULT_WINDOW_NS);
    let mut openings = Openings::default();
    let mut events = Vec::new();
    let mut last_counters = Instant::now();
    let mut stopping = false;
    // Capture time up to which every packet has been read: what closes a
    // broadcast, since a tap kept off the CPU reads packets late.
    let mut seen_ns = 0u64;
    loop {
        // Once asked to stop, what the ring still holds is read first: a
        // block is handed over at most 40 ms after its first packet.
        let wait = if stopping {
            DRAIN_WAIT
        } else {
            Duration::from_millis(100)
        };
        let read = capture.next_block(wait, |at_ns, bytes| {
            seen_ns = seen_ns.max(at_ns);
            tap.packet(at_ns, bytes, &mut events)
        });
        let horizon = match read {
            Ok(None) if stopping => break,
            // Nothing came for the wait: the ring is empty up to the
            // kernel's hand-over delay.
            Ok(None) => {
                let handover = skewscope_os::packet_capture::HANDOVER.as_nanos() as u64;
                seen_ns.max(skewscope_os::clock::now().wall_ns.saturating_sub(handover))
            }
            Ok(Some(_)) => seen_ns,
            Err(e) => {
                tracing::error!(target: "agent::tap", "capture failed: {e}; the tap stops");
                break;
            }
        };
        stopping |= stop.load(Ordering::Relaxed);
        for event in events.drain(..) {
            handle(event, &mut grouper, &mut openings, recorder);
        }
        for b in grouper.due(horizon) {
            record_broadcast(b, recorder);
        }
        if last_counters.elapsed() >= COUNTERS_EVERY {
            last_counters = Instant::now();
            record_counters(&tap, &mut capture, recorder);
        }
    }
    tap.finish(skewscope_os::clock::now().wall_ns, &mut events);
    for event in events.drain(..) {
        handle(event, &mut grouper, &mut openings, recorder);
    }
    for b in grouper.finish() {
        record_broadcast(b, recorder);
    }
    record_counters(&tap, &mut capture, recorder);
}

/// Openings of connections whose first message is yet to say what they
/// carry (a WebSocket with no subprotocol: Socket.IO or plain), recorded
/// once it has, so the log's opening names the protocol read.
#[derive(Default)]
struct Openings {
    waiting: HashMap<SocketAddr, (TapConnectionEvent, bool)>,
}

impl Openings {
    /// Records `client`'s opening if it waits, read as `protocol` (else as
    /// plain WebSocket: it carried no message).
    fn record(&mut self, client: SocketAddr, protocol: Option<Protocol>, recorder: &Recorder) {
        if let Some((mut opening, deflate)) = self.waiting.remove(&client) {
            opening.detail = detail(protocol.unwrap_or(Protocol::WebSocket), deflate);
            recorder.record(AgentRecord::TapConnectionOpened(opening));
        }
    }
}

/// An opening's detail: what it was read as, and its compression.
fn detail(protocol: Protocol, deflate: bool) -> String {
    if deflate {
        format!("{}, permessage-deflate", protocol.name())
    } else {
        protocol.name().to_owned()
    }
}

fn handle(event: TapEvent, grouper: &mut Grouper, openings: &mut Openings, recorder: &Recorder) {
    match event {
        TapEvent::Opened {
            client,
            at_ns,
            deflate,
            protocol,
        } => {
            grouper.opened(client, at_ns);
            let mut opening = TapConnectionEvent {
                client: client.to_string(),
                at_wall_ns: at_ns,
                detail: String::new(),
            };
            match protocol {
                Some(p) => {
                    opening.detail = detail(p, deflate);
                    recorder.record(AgentRecord::TapConnectionOpened(opening));
                }
                None => {
                    openings.waiting.insert(client, (opening, deflate));
                }
            }
        }
        TapEvent::Recognised { client, protocol } => {
            openings.record(client, Some(protocol), recorder)
        }
        TapEvent::Message {
            client,
            key,
            hash,
            len,
            first_byte_ns,
            last_byte_ns,
            open_websockets,
            ..
        } => {
            let copy = TappedCopy {
                client,
                first_byte_ns,
                last_byte_ns,
            };
            for b in grouper.copy(key, hash, len, copy, open_websockets) {
                record_broadcast(b, recorder);
            }
        }
        TapEvent::Closed {
            client,
            at_ns,
            reason,
        } => {
            openings.record(client, None, recorder);
            recorder.record(AgentRecord::TapConnectionClosed(TapConnectionEvent {
                client: client.to_string(),
                at_wall_ns: at_ns,
                detail: reason.into(),
            }))
        }
        TapEvent::Ended {
            client,
            at_ns,
            segments,
            resent,
            reordered,
        } => {
            openings.record(client, None, recorder);
            grouper.closed(client);
            recorder.record(AgentRecord::TapConnectionTotals(TapConnectionTotals {
                client: client.to_string(),
                at_wall_ns: at_ns,
                segments,
                resent,
                reordered,
            }))
        }
    }
}

fn record_broadcast(b: TappedBroadcast, recorder: &Recorder) {
    recorder.record(AgentRecord::TapBroadcast(TapBroadcast {
        id: b.id,
        seq: b.seq,
        hash: b.hash,
        len: b.len,
        copies: b
            .copies
            .iter()
            .map(|c| TapCopy {
                client: c.client.to_string(),
                first_byte_wall_ns: c.first_byte_ns,
                last_byte_wall_ns: c.last_byte_ns,
            })
            .collect(),
    }));
}

fn record_counters(tap: &Tap, capture: &mut PacketCapture, recorder: &Recorder) {
    let ring = capture.stats().unwrap_or_default();
    recorder.record(AgentRecord::TapCounters(TapCountersRecord {
        at: skewscope_os::clock::now(),
        tap: tap.counters(),
        inflater_bytes: tap.inflater_bytes() as u64,
        ring_packets: ring.packets,
        ring_drops: ring.drops,
    }));
}
