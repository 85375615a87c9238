//! One WebSocket client as a shard holds it: its socket, the bytes still owed to
//! it, and its inbound parser.
//!
//! The queue holds shared references to pre-encoded frames plus an offset, never
//! per-client copies: a slow client costs a few words per pending frame. A
//! TLS client's frame is sealed for it when it reaches the front of its
//! queue (or at once, when nothing is queued): at most one sealed copy per
//! client is held.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::Arc;

use mio::net::TcpStream;

use crate::engine::tx_tracker::TxTracker;
use crate::engine::wire::Wire;
use skewscope_core::client_frames::ClientFrameParser;
use skewscope_core::control_rate::ControlRate;

/// Bytes owed to a client: a shared broadcast frame or a control frame of its own.
#[derive(Debug)]
enum Chunk {
    /// A broadcast frame, shared with every other client.
    Broadcast { frame: Arc<[u8]>, id: u64 },
    /// A pong or close frame for this client alone.
    Control(Vec<u8>),
    /// Either of those sealed by the client's TLS session (`id`: the
    /// broadcast's), or records the session owed on their own (`None`).
    Sealed { bytes: Vec<u8>, id: Option<u64> },
}

impl Chunk {
    fn bytes(&self) -> &[u8] {
        match self {
            Chunk::Broadcast { frame, .. } => frame,
            Chunk::Control(v) => v,
            Chunk::Sealed { bytes, .. } => bytes,
        }
    }

    fn broadcast(&self) -> Option<u64> {
        match self {
            Chunk::Broadcast { id, .. } => Some(*id),
            Chunk::Control(_) => None,
            Chunk::Sealed { id, .. } => *id,
        }
    }
}

/// Result of offering a broadcast frame to a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offer {
    /// Entirely written to the socket.
    Written,
    /// Partly or not written; the rest waits for writability.
    Queued,
    /// Queueing would exceed the bound: drop this client.
    OverBound,
    /// The socket failed: close this client.
    Failed,
}

/// A connected WebSocket client.
#[derive(Debug)]
pub struct Client {
    /// The agent's connection id.
    pub id: u64,
    /// The socket (non-blocking, registered with the shard's poll).
    pub stream: TcpStream,
    /// Parser of what the client sends.
    pub inbound: ClientFrameParser,
    queue: VecDeque<Chunk>,
    /// Bytes of the front chunk already written.
    front_offset: usize,
    /// Bytes still owed, over all chunks.
    queued_bytes: usize,
    /// Byte accounting for kernel TX stamps (`--tx-timestamps` only).
    pub tx: Option<TxTracker>,
    /// Its allowance of control frames.
    pub control: ControlRate,
    /// It had more to read when its read budget ran out: the shard comes
    /// back to it after looking at commands.
    pub more_to_read: bool,
    /// It agreed to permessage-deflate: broadcasts go to it compressed.
    pub deflate: bool,
    /// Plain, or its TLS session.
    pub wire: Wire,
}

impl Client {
    /// Wraps a freshly upgraded socket, at `now_ns` (monotonic).
    pub fn new(id: u64, stream: TcpStream, now_ns: u64) -> Client {
        Client {
            id,
            stream,
            inbound: ClientFrameParser::default(),
            queue: VecDeque::new(),
            front_offset: 0,
            queued_bytes: 0,
            tx: None,
            control: ControlRate::new(now_ns),
            more_to_read: false,
            deflate: false,
            wire: Wire::Plain,
        }
    }

    /// Writes a broadcast frame, or queues what the socket would not take.
    /// Frames stay whole and in order: while anything is queued, new frames queue
    /// behind it.
    pub fn offer(&mut self, frame: &Arc<[u8]>, id: u64, max_queue: usize) -> Offer {
        if self.queue.is_empty() {
            // A TLS client's copy, sealed for it; a plain client's is the frame.
            let sealed = match self.wire.seals().then(|| self.wire.seal(frame)) {
                Some(Ok(sealed)) => Some(sealed),
                Some(Err(_)) => return Offer::Failed,
                None => None,
            };
            let bytes: &[u8] = sealed.as_deref().unwrap_or(frame);
            let len = bytes.len();
            let written = write_some(&mut self.stream, bytes);
            if let (Some(tx), Ok(n)) = (self.tx.as_mut(), &written) {
                tx.wrote(*n);
                if *n == len {
                    tx.frame_done(id);
                }
            }
            match written {
                Ok(n) if n == len => return Offer::Written,
                Ok(n) => {
                    self.front_offset = n;
                    self.queued_bytes = len - n;
                    self.queue.push_back(match sealed {
                        Some(bytes) => Chunk::Sealed {
                            bytes,
                            id: Some(id),
                        },
                        None => Chunk::Broadcast {
                            frame: frame.clone(),
                            id,
                        },
                    });
                    return Offer::Queued;
                }
                Err(_) => return Offer::Failed,
            }
        }
        if self.queued_bytes + frame.len() > max_queue {
            return Offer::OverBound;
        }
        self.queued_bytes += frame.len();
        self.queue.push_back(Chunk::Broadcast {
            frame: frame.clone(),
            id,
        });
        Offer::Queued
    }

    /// Sends a control frame (pong, close) after whatever is already owed.
    /// It counts against `max_queue` like any byte owed: a client that
    /// pings and never reads is dropped at the bound (`OverBound`), not
    /// allowed to grow the agent's memory.
    pub fn send_control(&mut self, frame: Vec<u8>, max_queue: usize) -> Offer {
        if self.queued_bytes + frame.len() > max_queue {
            return Offer::OverBound;
        }
        self.queued_bytes += frame.len();
        self.queue.push_back(Chunk::Control(frame));
        match self.flush(|_| {}) {
            Ok(()) if self.queue.is_empty() => Offer::Written,
            Ok(()) => Offer::Queued,
            Err(_) => Offer::Failed,
        }
    }

    /// Bytes still owed to it.
    #[cfg(test)]
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// Writes queued bytes until done or the socket is full; calls `completed` with
    /// the id of every broadcast frame that finished.
    pub fn flush(&mut self, mut completed: impl FnMut(u64)) -> io::Result<()> {
        self.take_owed_records()?;
        while let Some(front) = self.queue.front_mut() {
            if self.wire.seals() && !matches!(front, Chunk::Sealed { .. }) {
                // Unsealed chunks are never partly written: seal it whole.
                let bytes = self.wire.seal(front.bytes())?;
                self.queued_bytes = self.queued_bytes + bytes.len() - front.bytes().len();
                *front = Chunk::Sealed {
                    id: front.broadcast(),
                    bytes,
                };
            }
            let bytes = &front.bytes()[self.front_offset..];
            let n = write_some(&mut self.stream, bytes)?;
            self.front_offset += n;
            self.queued_bytes -= n;
            if let Some(tx) = self.tx.as_mut() {
                tx.wrote(n);
            }
            if n < bytes.len() {
                return Ok(());
            }
            let done = self.queue.pop_front().and_then(|c| c.broadcast());
            self.front_offset = 0;
            if let Some(id) = done {
                if let Some(tx) = self.tx.as_mut() {
                    tx.frame_done(id);
                }
                completed(id);
            }
            self.take_owed_records()?;
        }
        Ok(())
    }

    /// Reads what the client sent (see [`Wire::read`]), then queues any
    /// record its TLS session owes in answer (a key update's).
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.wire.read(&mut self.stream, buf)?;
        if self.take_owed_records()? {
            self.flush(|_| {})?;
        }
        Ok(n)
    }

    /// With nothing queued, moves the records the TLS session owes into
    /// the queue (with something queued they go out with the next seal, in
    /// order); true when it queued some.
    fn take_owed_records(&mut self) -> io::Result<bool> {
        if !self.queue.is_empty() {
            return Ok(false);
        }
        let Some(bytes) = self.wire.owed()? else {
            return Ok(false);
        };
        self.queued_bytes += bytes.len();
        self.queue.push_back(Chunk::Sealed { bytes, id: None });
        Ok(true)
    }

    /// Whether bytes are still owed.
    pub fn has_queued(&self) -> bool {
        !self.queue.is_empty()
    }
}

/// One write that treats "would block" as zero bytes and retries interrupts.
fn write_some(stream: &mut TcpStream, bytes: &[u8]) -> io::Result<usize> {
    loop {
        match stream.write(bytes) {
            Ok(0) if !bytes.is_empty() => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// A client whose peer never reads, its socket already full.
    fn stalled() -> (Client, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let peer = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        let mut c = Client::new(1, TcpStream::from_std(server), 0);
        let frame: Arc<[u8]> = vec![0u8; 64 * 1024].into();
        let mut id = 0;
        while c.offer(&frame, id, usize::MAX) == Offer::Written {
            id += 1;
        }
        (c, peer)
    }

    fn pong() -> Vec<u8> {
        let mut f = vec![0x8a, 125];
        f.extend([0u8; 125]);
        f
    }

    #[test]
    fn control_frames_count_against_the_queue_bound() {
        let (mut c, _peer) = stalled();
        let max = c.queued_bytes() + 1000;
        let mut queued = 0;
        loop {
            match c.send_control(pong(), max) {
                Offer::Queued => queued += 1,
                Offer::OverBound => break,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(queued, 1000 / pong().len());
        assert!(c.queued_bytes() <= max);
    }

    #[test]
    fn a_partly_written_queue_finishes_in_order_once_the_peer_reads() {
        let (mut c, mut peer) = stalled();
        let more: Arc<[u8]> = vec![1u8; 10_000].into();
        assert_eq!(c.offer(&more, 100, usize::MAX), Offer::Queued);
        assert_eq!(c.send_control(pong(), usize::MAX), Offer::Queued);
        assert_eq!(c.offer(&more, 101, usize::MAX), Offer::Queued);
        let owed = c.queued_bytes();
        // The peer drains its side; flushing then finishes every frame.
        let reader = std::thread::spawn(move || {
            let mut sink = vec![0u8; 1 << 16];
            let mut total = 0usize;
            peer.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .unwrap();
            while let Ok(n) = peer.read(&mut sink) {
                if n == 0 {
                    break;
                }
                total += n;
            }
            total
        });
        let mut completed = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while c.has_queued() {
            assert!(std::time::Instant::now() < deadline, "never drained");
            c.flush(|id| completed.push(id)).unwrap();
        }
        assert_eq!(c.queued_bytes(), 0);
        // The frame that was cut first, then the two behind it, in order.
        assert_eq!(&completed[completed.len() - 2..], &[100, 101]);
        assert!(completed.windows(2).all(|w| w[0] < w[1]), "{completed:?}");
        drop(c);
        assert!(reader.join().unwrap() >= owed);
    }
}
