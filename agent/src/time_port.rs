//! The agent's UDP time port: answers probes' NTP-style exchanges so each
//! device's offset to the agent's clock can be estimated.
//!
//! It runs on its own thread with a blocking socket so the receive stamp (t2)
//! is taken the moment the request is read, not when an async task gets round
//! to it. Malformed, oversized and replayed packets are dropped and counted; a
//! reply is exactly the size of the request it answers. With a token, every
//! version-2 reply is tagged under the key derived from it (once, at start),
//! so probes holding the token refuse replies altered on the way. The tag is
//! computed after t3 is read (about a microsecond): the reply leaves later
//! than t3 says, which the exchange's bound already allows for (t3 is before
//! the send, the truth inside [t3, t4]).

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use skewscope_core::time_exchange::{Invalid, PACKET_LEN, ReplayGuard, Reply, Request, TimeKey};

use crate::counters::TimePortCounters;

/// Request ids remembered for refusing replays.
const REPLAY_WINDOW: usize = 4096;

/// The running time port.
pub struct TimePort {
    /// The address it answers on.
    pub addr: SocketAddr,
    /// Its counters.
    pub counters: TimePortCounters,
    /// The socket, shared with the thread: shutting its read side down is
    /// what wakes the thread to stop, so it never polls while idle.
    socket: Arc<UdpSocket>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TimePort {
    /// Starts answering on a socket already bound, counting into
    /// `counters`, tagging replies under `key` when there is one.
    pub fn serve_on(
        socket: UdpSocket,
        counters: TimePortCounters,
        key: Option<TimeKey>,
    ) -> std::io::Result<TimePort> {
        let addr = socket.local_addr()?;
        let socket = Arc::new(socket);
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s, sock) = (counters.clone(), stop.clone(), socket.clone());
        let thread = std::thread::Builder::new()
            .name("time-port".into())
            .spawn(move || serve(&sock, &c, &s, key.as_ref()))?;
        Ok(TimePort {
            addr,
            counters,
            socket,
            stop,
            thread: Some(thread),
        })
    }

    /// Stops answering and waits for the thread.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        skewscope_os::sockets::wake_receiver(&self.socket);
        if let Some(t) = self.thread.take()
            && t.join().is_err()
        {
            // Said, not hidden: it once panicked at every stop (a receive
            // on a socket whose read side was shut down).
            tracing::error!(target: "agent::time", "the time port's thread panicked while stopping");
        }
    }
}

impl Drop for TimePort {
    fn drop(&mut self) {
        self.stop();
    }
}

fn serve(
    socket: &UdpSocket,
    counters: &TimePortCounters,
    stop: &AtomicBool,
    key: Option<&TimeKey>,
) {
    // Larger than a packet, so an oversized datagram is seen as such.
    let mut buf = [0u8; PACKET_LEN + 16];
    let mut guard = ReplayGuard::new(REPLAY_WINDOW);
    loop {
        let received = socket.recv_from(&mut buf);
        if stop.load(Ordering::Acquire) {
            return;
        }
        let Ok((n, peer)) = received else {
            continue; // an ICMP error from an earlier reply
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
                let _ = socket.send_to(&reply.encode(&request, key), peer);
                &counters.answered
            }
            Ok(_) => &counters.replayed,
            // Untagged and BadTag are a probe's verdicts on replies.
            Err(Invalid::Malformed | Invalid::Untagged | Invalid::BadTag) => &counters.malformed,
            Err(Invalid::Oversized) => &counters.oversized,
        };
        counter.inc();
    }
}
