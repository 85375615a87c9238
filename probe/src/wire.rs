//! The probe's end of a WebSocket once the upgrade is done. tungstenite
//! makes the upgrade; from the `101` on, frames are read here with the
//! core's [`ServerFrames`], because tungstenite refuses the RSV1 bit that
//! marks a permessage-deflate message, and compressed messages are inflated
//! with the core's [`Inflater`] (pure Rust).
//!
//! What the probe sends is small and rare: pongs, a close, and what a
//! protocol riding on the WebSocket owes the server (a subscription, a
//! heart-beat, an acknowledgement: [`Wire::send_message`]). What is owed is
//! written while the probe waits to read, as far as the socket takes it;
//! only the latest ping's pong is kept (RFC 6455 §5.5.3 allows that), and
//! the protocol's messages are bounded ([`MAX_OWED`]), so a server that
//! never reads cannot grow what the probe holds for it.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use skewscope_core::permessage_deflate::Accepted;
use skewscope_core::permessage_deflate::inflate::{InflateError, Inflater};
use skewscope_core::server_frames::{ServerEvent, ServerFrameError, ServerFrames};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio_tungstenite::MaybeTlsStream;

use skewscope_os::rx_stamp::RxStamped;

/// The socket under the WebSocket: plain or TLS, kernel-stamped either way.
pub(crate) type Stream = MaybeTlsStream<RxStamped>;

/// Most bytes of protocol messages waiting for a server that does not read
/// (acknowledgements, heart-beats): past it the connection is closed.
pub(crate) const MAX_OWED: usize = 1 << 20;

/// Close codes the probe sends (RFC 6455 §7.4.1).
pub(crate) mod code {
    /// The purpose of the connection is fulfilled.
    pub(crate) const NORMAL: u16 = 1000;
    /// The probe is going away (stopped).
    pub(crate) const AWAY: u16 = 1001;
    /// The server broke the protocol.
    pub(crate) const PROTOCOL: u16 = 1002;
    /// A text message that is not UTF-8.
    pub(crate) const INVALID: u16 = 1007;
    /// The server's behaviour is not acceptable (a flood of control frames,
    /// a server that never reads what it is owed).
    pub(crate) const POLICY: u16 = 1008;
    /// A message over `--max-message`.
    pub(crate) const SIZE: u16 = 1009;
}

/// What the server sent, one frame or message at a time.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Incoming {
    /// A data message, inflated if it came compressed.
    Message {
        /// Its payload as the application sees it.
        payload: Vec<u8>,
        /// Sent as text (else binary).
        text: bool,
    },
    /// A ping (its pong is queued) or a pong.
    Control,
    /// The server's close: its code and reason, if it gave them.
    Close(Option<(u16, String)>),
}

/// Why reading stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WireError {
    /// The socket failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The server sent what RFC 6455 or the negotiated extension forbids.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A message over `--max-message`, before or after inflating.
    #[error("message too big: {0}")]
    Size(String),
    /// A text message that is not UTF-8.
    #[error("a text message that is not UTF-8")]
    Utf8,
    /// The server does not read what the protocol owes it.
    #[error(
        "the server reads nothing: over {MAX_OWED} bytes of acknowledgements and heart-beats wait for it"
    )]
    Backlog,
    /// The protocol riding on the connection ended it.
    #[error("{0}")]
    Layer(#[from] skewscope_core::protocol_layer::LayerError),
}

impl WireError {
    /// The close code to tell the server, `None` when the socket is gone.
    pub(crate) fn close_code(&self) -> Option<(u16, &'static str)> {
        match self {
            WireError::Io(_) => None,
            WireError::Protocol(_) => Some((code::PROTOCOL, "protocol error")),
            WireError::Size(_) => Some((code::SIZE, "message too big")),
            WireError::Utf8 => Some((code::INVALID, "invalid UTF-8")),
            WireError::Backlog => Some((code::POLICY, "not reading")),
            WireError::Layer(e) => Some((e.close_code(), "")),
        }
    }
}

/// One upgraded connection, read and written by the probe itself.
pub(crate) struct Wire {
    stream: Stream,
    buf: Box<[u8]>,
    frames: ServerFrames,
    /// Events read but not yet handed out.
    events: VecDeque<ServerEvent>,
    inflater: Option<Inflater>,
    max_message: usize,
    /// A frame being written, and how much of it is out.
    writing: Vec<u8>,
    written: usize,
    /// The payload of the latest ping not yet answered.
    pong_owed: Option<Vec<u8>>,
    /// The protocol's messages waiting, framed, and their bytes.
    owed: VecDeque<Vec<u8>>,
    owed_bytes: usize,
    /// Bytes written but not yet flushed (TLS holds them until flushed).
    unflushed: bool,
    /// Writing failed: the socket is gone, and reading will say so.
    write_failed: bool,
    /// The masking keys' source.
    mask: fastrand::Rng,
    /// What was wrong with the stream, handed out once the messages read
    /// before it have been: a bad frame loses nothing that came first.
    broken: Option<WireError>,
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wire")
            .field("deflate", &self.inflater.is_some())
            .finish_non_exhaustive()
    }
}

impl Wire {
    /// Takes over `stream` after its `101`. `after_upgrade` is what the
    /// server sent right behind the response, read with it; `deflate` is
    /// what it accepted of permessage-deflate; reads are `read_buffer` bytes.
    pub(crate) fn new(
        stream: Stream,
        after_upgrade: &[u8],
        deflate: Option<Accepted>,
        max_message: usize,
        read_buffer: usize,
    ) -> Wire {
        let mut wire = Wire {
            stream,
            buf: vec![0; read_buffer].into_boxed_slice(),
            frames: ServerFrames::for_client(max_message, deflate.is_some()),
            events: VecDeque::new(),
            inflater: deflate.map(|a| Inflater::new(a.server_no_context_takeover)),
            max_message,
            writing: Vec::new(),
            written: 0,
            pong_owed: None,
            owed: VecDeque::new(),
            owed_bytes: 0,
            unflushed: false,
            write_failed: false,
            // Masking guards proxies against a script that chooses the
            // bytes a browser sends; a probe's pongs echo the server's own.
            mask: fastrand::Rng::new(),
            broken: None,
        };
        if let Err(e) = wire.frames.push(after_upgrade, 0, &mut wire.events) {
            wire.broken = Some(frame_error(e));
        }
        wire
    }

    /// The socket, for its addresses and TLS session.
    pub(crate) fn get_ref(&self) -> &Stream {
        &self.stream
    }

    /// The next thing the server sent; `None` once it closed the socket.
    /// What is owed the server is written meanwhile.
    pub(crate) async fn next(&mut self) -> Option<Result<Incoming, WireError>> {
        loop {
            if let Some(event) = self.events.pop_front() {
                return Some(self.incoming(event));
            }
            if let Some(e) = self.broken.take() {
                return Some(Err(e));
            }
            let n = match std::future::poll_fn(|cx| self.poll_read_writing_owed(cx)).await {
                Ok(0) => return None,
                Ok(n) => n,
                Err(e) => return Some(Err(e.into())),
            };
            if let Err(e) = self.frames.push(&self.buf[..n], 0, &mut self.events) {
                self.broken = Some(frame_error(e));
            }
        }
    }

    /// Queues a data message for the server (a protocol's subscription,
    /// heart-beat or acknowledgement); it is written while reading.
    pub(crate) fn send_message(&mut self, text: bool, payload: &[u8]) -> Result<(), WireError> {
        if self.write_failed {
            return Ok(());
        }
        let frame = self.masked_frame(if text { 0x1 } else { 0x2 }, payload);
        self.owed_bytes += frame.len();
        if self.owed_bytes > MAX_OWED {
            return Err(WireError::Backlog);
        }
        self.owed.push_back(frame);
        Ok(())
    }

    /// Writes what is owed as far as the socket takes it (being woken when
    /// it takes more), then reads.
    fn poll_read_writing_owed(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.poll_write_owed(cx);
        let mut buf = ReadBuf::new(&mut self.buf);
        match Pin::new(&mut self.stream).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(buf.filled().len())),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Writes the pong owed and the protocol's messages, a frame at a
    /// time, until the socket would block; a failed write drops them all
    /// (the socket is gone: reading finds out).
    fn poll_write_owed(&mut self, cx: &mut Context<'_>) {
        while !self.write_failed {
            if self.written == self.writing.len() {
                let next = match self.pong_owed.take() {
                    Some(payload) => Some(self.masked_frame(0xA, &payload)),
                    None => self
                        .owed
                        .pop_front()
                        .inspect(|f| self.owed_bytes -= f.len()),
                };
                let Some(frame) = next else {
                    if self.unflushed && Pin::new(&mut self.stream).poll_flush(cx).is_ready() {
                        self.unflushed = false;
                    }
                    return;
                };
                self.writing = frame;
                self.written = 0;
            }
            match Pin::new(&mut self.stream).poll_write(cx, &self.writing[self.written..]) {
                Poll::Ready(Ok(n)) if n > 0 => {
                    self.written += n;
                    self.unflushed = true;
                }
                Poll::Pending => return,
                Poll::Ready(_) => {
                    self.write_failed = true;
                    self.writing.clear();
                    self.written = 0;
                    self.owed.clear();
                    self.owed_bytes = 0;
                }
            }
        }
    }

    /// An event as the connection sees it: messages inflated and checked,
    /// pings owed a pong.
    fn incoming(&mut self, event: ServerEvent) -> Result<Incoming, WireError> {
        match event {
            ServerEvent::Message(m) => {
                let payload = if m.compressed {
                    let inflater = self
                        .inflater
                        .as_mut()
                        .ok_or_else(|| WireError::Protocol("compressed without deflate".into()))?;
                    inflater
                        .message(&m.payload, self.max_message)
                        .map_err(|e| match e {
                            InflateError::TooLarge(_) => WireError::Size(e.to_string()),
                            InflateError::Corrupt => WireError::Protocol(e.to_string()),
                        })?
                } else {
                    m.payload
                };
                if m.text && std::str::from_utf8(&payload).is_err() {
                    return Err(WireError::Utf8);
                }
                Ok(Incoming::Message {
                    payload,
                    text: m.text,
                })
            }
            ServerEvent::Ping(payload) => {
                self.pong_owed = Some(payload);
                Ok(Incoming::Control)
            }
            ServerEvent::Pong => Ok(Incoming::Control),
            ServerEvent::Close(payload) => close_payload(&payload).map(Incoming::Close),
        }
    }

    /// Sends a close frame with `code` and `reason`, after any frame half
    /// written (a partial frame would corrupt the stream) and the
    /// protocol's messages still owed (its goodbye among them).
    pub(crate) async fn send_close(&mut self, code: u16, reason: &str) -> io::Result<()> {
        let mut payload = code.to_be_bytes().to_vec();
        payload.extend_from_slice(&reason.as_bytes()[..reason.len().min(123)]);
        let close = self.masked_frame(0x8, &payload);
        let mut rest = self.writing.split_off(self.written);
        self.writing.clear();
        self.written = 0;
        for frame in self.owed.drain(..) {
            rest.extend_from_slice(&frame);
        }
        self.owed_bytes = 0;
        rest.extend_from_slice(&close);
        self.stream.write_all(&rest).await?;
        self.stream.flush().await
    }

    /// A client frame (masked, RFC 6455 §5.3): a control frame's payload
    /// is cut to 125 bytes, a data frame's length is written in full.
    fn masked_frame(&mut self, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let payload = if opcode >= 0x8 {
            &payload[..payload.len().min(125)]
        } else {
            payload
        };
        let key = self.mask.u32(..).to_be_bytes();
        let mut frame = Vec::with_capacity(14 + payload.len());
        frame.push(0x80 | opcode);
        match payload.len() {
            n @ 0..=125 => frame.push(0x80 | n as u8),
            n @ 126..=0xffff => {
                frame.push(0x80 | 126);
                frame.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                frame.push(0x80 | 127);
                frame.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        frame.extend_from_slice(&key);
        frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        frame
    }
}

/// A frame error as the connection reports it.
fn frame_error(e: ServerFrameError) -> WireError {
    match e {
        ServerFrameError::TooLarge(_) => WireError::Size(e.to_string()),
        _ => WireError::Protocol(e.to_string()),
    }
}

/// A close frame's code and reason (RFC 6455 §5.5.1, §7.4): empty, or a
/// code that may be sent and a UTF-8 reason.
fn close_payload(payload: &[u8]) -> Result<Option<(u16, String)>, WireError> {
    match payload {
        [] => Ok(None),
        [_] => Err(WireError::Protocol("a close frame of one byte".into())),
        [high, low, reason @ ..] => {
            let code = u16::from_be_bytes([*high, *low]);
            let sendable = matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999);
            if !sendable {
                return Err(WireError::Protocol(format!(
                    "close code {code} may not be sent"
                )));
            }
            let reason = std::str::from_utf8(reason).map_err(|_| WireError::Utf8)?;
            Ok(Some((code, reason.to_owned())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_bad_frame_loses_nothing_read_before_it() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
        let (client, server) = tokio::join!(client, listener.accept());
        let (mut server, _) = server.unwrap();
        let (stamped, _) = RxStamped::new(client.unwrap());
        let mut wire = Wire::new(MaybeTlsStream::Plain(stamped), &[], None, 1 << 20, 4096);
        // After the upgrade, in one write: a good frame, then RSV1 unagreed.
        server
            .write_all(&[0x81, 0x02, b'o', b'k', 0xC1, 0x02, b'h', b'i'])
            .await
            .unwrap();
        let first = wire.next().await.unwrap().unwrap();
        assert_eq!(
            first,
            Incoming::Message {
                payload: b"ok".to_vec(),
                text: true,
            }
        );
        assert!(matches!(
            wire.next().await,
            Some(Err(WireError::Protocol(_)))
        ));
    }

    #[test]
    fn close_frames_are_read_as_rfc_6455_defines_them() {
        assert_eq!(close_payload(&[]).unwrap(), None);
        assert_eq!(
            close_payload(&[0x03, 0xe9, b'b', b'y', b'e']).unwrap(),
            Some((1001, "bye".to_owned()))
        );
        assert!(matches!(close_payload(&[3]), Err(WireError::Protocol(_))));
        for bad in [999u16, 1004, 1005, 1006, 1015, 2999, 5000] {
            let payload = bad.to_be_bytes();
            assert!(
                matches!(close_payload(&payload), Err(WireError::Protocol(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            close_payload(&[0x03, 0xe8, 0xff]),
            Err(WireError::Utf8)
        ));
    }
}
