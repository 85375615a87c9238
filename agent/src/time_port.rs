//! The agent's UDP time port: answers probes' NTP-style exchanges so each
//! device's offset to the agent's clock can be estimated.
//!
//! It runs on its own thread with a blocking socket so the receive stamp (t2)
//! is taken the moment the request is read, not when an async task gets round
//! to it. Malformed, oversized and replayed packets are dropped and counted; a
//! reply is exactly the size of the request it answers.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use skewscope_core::record::TimeServiceCounters;
use skewscope_core::time_exchange::{Invalid, PACKET_LEN, ReplayGuard, Reply, Request};

/// Request ids remembered for refusing replays.
const REPLAY_WINDOW: usize = 4096;
/// How often the thread checks whether it should stop.
const STOP_POLL: Duration = Duration::from_millis(100);

/// What the port has done, readable while it runs.
#[derive(Debug, Default)]
pub struct TimeCounters {
    answered: AtomicU64,
    malformed: AtomicU64,
    oversized: AtomicU64,
    replayed: AtomicU64,
}

impl TimeCounters {
    /// A consistent-enough copy for records and `/healthz`.
    pub fn snapshot(&self) -> TimeServiceCounters {
        TimeServiceCounters {
            answered: self.answered.load(Ordering::Relaxed),
            malformed: self.malformed.load(Ordering::Relaxed),
            oversized: self.oversized.load(Ordering::Relaxed),
            replayed: self.replayed.load(Ordering::Relaxed),
        }
    }
}

/// The running time port.
pub struct TimePort {
    /// The address it answers on.
    pub addr: SocketAddr,
    /// Its counters.
    pub counters: Arc<TimeCounters>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TimePort {
    /// Starts answering on a socket already bound.
    pub fn serve_on(socket: UdpSocket) -> std::io::Result<TimePort> {
        socket.set_read_timeout(Some(STOP_POLL))?;
        let addr = socket.local_addr()?;
        let counters = Arc::new(TimeCounters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (counters.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("time-port".into())
            .spawn(move || serve(&socket, &c, &s))?;
        Ok(TimePort {
            addr,
            counters,
            stop,
            thread: Some(thread),
        })
    }

    /// Stops answering and waits for the thread.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for TimePort {
    fn drop(&mut self) {
        self.stop();
    }
}

fn serve(socket: &UdpSocket, counters: &TimeCounters, stop: &AtomicBool) {
    // Larger than a packet, so an oversized datagram is seen as such.
    let mut buf = [0u8; PACKET_LEN + 16];
    let mut guard = ReplayGuard::new(REPLAY_WINDOW);
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, peer)) = socket.recv_from(&mut buf) else {
            continue; // timeout (check stop) or an ICMP error from an earlier reply
        };
        let t2_wall_ns = skewscope_os::clock::now().wall_ns;
        let counter = match Request::decode(&buf[..n]) {
            Ok(request) if guard.first_time(request.id) => {
                let reply = Reply {
                    id: request.id,
                    t1_wall_ns: request.t1_wall_ns,
                    t2_wall_ns,
                    t3_wall_ns: skewscope_os::clock::now().wall_ns,
                };
                // A lost reply is a lost sample; the probe asks again.
                let _ = socket.send_to(&reply.encode(), peer);
                &counters.answered
            }
            Ok(_) => &counters.replayed,
            Err(Invalid::Malformed) => &counters.malformed,
            Err(Invalid::Oversized) => &counters.oversized,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
