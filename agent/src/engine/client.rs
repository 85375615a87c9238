//! One WebSocket client as a shard holds it: its socket, the bytes still owed to
//! it, and its inbound parser.
//!
//! The queue holds shared references to pre-encoded frames plus an offset, never
//! per-client copies: a slow client costs a few words per pending frame.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::Arc;

use mio::net::TcpStream;

use crate::engine::tx_tracker::TxTracker;
use skewscope_core::client_frames::ClientFrameParser;

/// Bytes owed to a client: a shared broadcast frame or a control frame of its own.
#[derive(Debug)]
enum Chunk {
    /// A broadcast frame, shared with every other client.
    Broadcast { frame: Arc<[u8]>, id: u64 },
    /// A pong or close frame for this client alone.
    Control(Vec<u8>),
}

impl Chunk {
    fn bytes(&self) -> &[u8] {
        match self {
            Chunk::Broadcast { frame, .. } => frame,
            Chunk::Control(v) => v,
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
}

impl Client {
    /// Wraps a freshly upgraded socket.
    pub fn new(id: u64, stream: TcpStream) -> Client {
        Client {
            id,
            stream,
            inbound: ClientFrameParser::default(),
            queue: VecDeque::new(),
            front_offset: 0,
            queued_bytes: 0,
            tx: None,
        }
    }

    /// Writes a broadcast frame, or queues what the socket would not take.
    /// Frames stay whole and in order: while anything is queued, new frames queue
    /// behind it.
    pub fn offer(&mut self, frame: &Arc<[u8]>, id: u64, max_queue: usize) -> Offer {
        if self.queue.is_empty() {
            let written = write_some(&mut self.stream, frame);
            if let (Some(tx), Ok(n)) = (self.tx.as_mut(), &written) {
                tx.wrote(*n);
                if *n == frame.len() {
                    tx.frame_done(id);
                }
            }
            match written {
                Ok(n) if n == frame.len() => return Offer::Written,
                Ok(n) => {
                    self.front_offset = n;
                    self.queued_bytes = frame.len() - n;
                    self.queue.push_back(Chunk::Broadcast {
                        frame: frame.clone(),
                        id,
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
    /// Control frames are tiny and bounded by the reads that cause them.
    pub fn send_control(&mut self, frame: Vec<u8>) -> io::Result<()> {
        self.queued_bytes += frame.len();
        self.queue.push_back(Chunk::Control(frame));
        self.flush(|_| {})
    }

    /// Writes queued bytes until done or the socket is full; calls `completed` with
    /// the id of every broadcast frame that finished.
    pub fn flush(&mut self, mut completed: impl FnMut(u64)) -> io::Result<()> {
        while let Some(front) = self.queue.front() {
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
            if let Some(Chunk::Broadcast { id, .. }) = self.queue.pop_front() {
                if let Some(tx) = self.tx.as_mut() {
                    tx.frame_done(id);
                }
                completed(id);
            }
            self.front_offset = 0;
        }
        Ok(())
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
