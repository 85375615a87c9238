//! What clients send the hub, parsed without I/O.
//!
//! A broadcast hub mostly ignores what clients say, but it must still read it:
//! answer pings, honour close, and close clients that send garbage, oversized
//! frames or a fragmented message that never ends. The header is parsed with
//! tungstenite's frame codec; data payloads are skipped, not buffered, so a
//! client's chatter costs no memory.

use std::io::Cursor;

use tungstenite::protocol::frame::FrameHeader;
use tungstenite::protocol::frame::coding::{Control, Data, OpCode};

/// Most fragments one message may have: bounds a client that sends empty
/// continuation frames forever.
pub const MAX_FRAGMENTS: u32 = 4096;

/// Something a client said that the hub must act on.
#[derive(Debug, PartialEq, Eq)]
pub enum ClientFrame {
    /// A ping: answer with a pong carrying the same payload.
    Ping(Vec<u8>),
    /// An unsolicited pong: nothing to answer, but it counts against the
    /// client's control-frame rate.
    Pong,
    /// A close frame, with its status code if it had one.
    Close(Option<u16>),
}

/// Why a client is closed by the hub.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClientFrameError {
    /// A frame, or a fragmented message in total, exceeded `--max-frame`.
    #[error("frame or message larger than the {0}-byte limit")]
    TooLarge(usize),
    /// The bytes are not a valid client WebSocket stream.
    #[error("protocol error: {0}")]
    Protocol(&'static str),
}

impl ClientFrameError {
    /// The close code the hub sends before closing the connection (RFC 6455 §7.4.1).
    pub fn close_code(&self) -> u16 {
        match self {
            ClientFrameError::TooLarge(_) => 1009,
            ClientFrameError::Protocol(_) => 1002,
        }
    }
}

/// Incremental parser of one client's inbound byte stream.
#[derive(Debug, Default)]
pub struct ClientFrameParser {
    /// Bytes of an incomplete header or control frame.
    partial: Vec<u8>,
    /// Data payload bytes still to skip.
    skipping: u64,
    /// Total size of the fragmented data message in progress.
    message_len: u64,
    /// Fragments of the data message in progress (0: none in progress).
    fragments: u32,
}

impl ClientFrameParser {
    /// Feeds bytes read from the socket; calls `on` for each control frame.
    /// An error means the client must be closed.
    pub fn feed(
        &mut self,
        mut bytes: &[u8],
        max_frame: usize,
        mut on: impl FnMut(ClientFrame),
    ) -> Result<(), ClientFrameError> {
        loop {
            if self.skipping > 0 {
                let n = (self.skipping as usize).min(bytes.len());
                self.skipping -= n as u64;
                bytes = &bytes[n..];
            }
            if bytes.is_empty() {
                return Ok(());
            }
            // Parse from the stashed partial frame plus the new bytes, copying only
            // when a frame straddles two reads.
            let (consumed, from_partial) = if self.partial.is_empty() {
                (self.parse_one(bytes, max_frame, &mut on)?, false)
            } else {
                let had = self.partial.len();
                let take = bytes.len().min(14 + 125);
                self.partial.extend_from_slice(&bytes[..take]);
                let joined = std::mem::take(&mut self.partial);
                let used = self.parse_one(&joined, max_frame, &mut on)?;
                if used == 0 {
                    self.partial = joined;
                    bytes = &bytes[take..];
                    if self.partial.len() > 14 + 125 {
                        return Err(ClientFrameError::Protocol("incomplete frame too long"));
                    }
                    continue;
                }
                (used - had, true)
            };
            if consumed == 0 && !from_partial {
                self.partial.extend_from_slice(bytes);
                return Ok(());
            }
            bytes = &bytes[consumed..];
        }
    }

    /// Parses one frame at the start of `buf`; returns bytes consumed (0: need more).
    fn parse_one(
        &mut self,
        buf: &[u8],
        max_frame: usize,
        on: &mut impl FnMut(ClientFrame),
    ) -> Result<usize, ClientFrameError> {
        let mut cursor = Cursor::new(buf);
        let (header, len) = match FrameHeader::parse(&mut cursor) {
            Ok(Some(h)) => h,
            Ok(None) => return Ok(0),
            Err(_) => return Err(ClientFrameError::Protocol("unreadable frame header")),
        };
        let header_len = cursor.position() as usize;
        if header.rsv1 || header.rsv2 || header.rsv3 {
            return Err(ClientFrameError::Protocol("reserved bits set"));
        }
        let Some(mask) = header.mask else {
            return Err(ClientFrameError::Protocol("client frame not masked"));
        };
        match header.opcode {
            OpCode::Data(data) => {
                self.check_data(data, header.is_final, len, max_frame)?;
                // Skip the payload; it may be far larger than what is buffered.
                let here = (buf.len() - header_len).min(len as usize);
                self.skipping = len - here as u64;
                Ok(header_len + here)
            }
            OpCode::Control(control) => {
                if !header.is_final || len > 125 {
                    return Err(ClientFrameError::Protocol("invalid control frame"));
                }
                let end = header_len + len as usize;
                if buf.len() < end {
                    return Ok(0);
                }
                let mut payload = buf[header_len..end].to_vec();
                for (i, b) in payload.iter_mut().enumerate() {
                    *b ^= mask[i % 4];
                }
                match control {
                    Control::Ping => on(ClientFrame::Ping(payload)),
                    Control::Pong => on(ClientFrame::Pong),
                    Control::Close => {
                        let code = (payload.len() >= 2)
                            .then(|| u16::from_be_bytes([payload[0], payload[1]]));
                        on(ClientFrame::Close(code));
                    }
                    Control::Reserved(_) => {
                        return Err(ClientFrameError::Protocol("reserved opcode"));
                    }
                }
                Ok(end)
            }
        }
    }

    fn check_data(
        &mut self,
        data: Data,
        is_final: bool,
        len: u64,
        max_frame: usize,
    ) -> Result<(), ClientFrameError> {
        match data {
            Data::Reserved(_) => return Err(ClientFrameError::Protocol("reserved opcode")),
            Data::Continue if self.fragments == 0 => {
                return Err(ClientFrameError::Protocol("continuation without a message"));
            }
            Data::Text | Data::Binary if self.fragments > 0 => {
                return Err(ClientFrameError::Protocol(
                    "new message inside a fragmented one",
                ));
            }
            _ => {}
        }
        self.message_len += len;
        self.fragments += 1;
        if len > max_frame as u64 || self.message_len > max_frame as u64 {
            return Err(ClientFrameError::TooLarge(max_frame));
        }
        if self.fragments > MAX_FRAGMENTS {
            return Err(ClientFrameError::Protocol(
                "too many fragments in one message",
            ));
        }
        if is_final {
            self.message_len = 0;
            self.fragments = 0;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tungstenite::protocol::frame::Frame;

    fn client_frame(mut frame: Frame) -> Vec<u8> {
        frame.header_mut().mask = Some([1, 2, 3, 4]);
        let mut out = Vec::new();
        frame.format(&mut out).unwrap();
        out
    }

    fn data(op: Data, fin: bool, len: usize) -> Vec<u8> {
        client_frame(Frame::message(vec![b'x'; len], OpCode::Data(op), fin))
    }

    fn feed_all(
        p: &mut ClientFrameParser,
        bytes: &[u8],
        chunk: usize,
    ) -> Result<Vec<ClientFrame>, ClientFrameError> {
        let mut got = Vec::new();
        for c in bytes.chunks(chunk) {
            p.feed(c, 1000, |i| got.push(i))?;
        }
        Ok(got)
    }

    #[test]
    fn pings_and_close_are_reported_across_any_split() {
        let mut stream = data(Data::Text, true, 300);
        stream.extend(client_frame(Frame::ping(b"hi".to_vec())));
        stream.extend(data(Data::Binary, true, 5));
        stream.extend(client_frame(Frame::close(Some(
            tungstenite::protocol::CloseFrame {
                code: 1000.into(),
                reason: "bye".into(),
            },
        ))));
        for chunk in [1, 2, 3, 7, 64, 10_000] {
            let got = feed_all(&mut ClientFrameParser::default(), &stream, chunk).unwrap();
            assert_eq!(
                got,
                vec![
                    ClientFrame::Ping(b"hi".to_vec()),
                    ClientFrame::Close(Some(1000))
                ],
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn oversized_frame_is_refused_from_its_header() {
        let big = data(Data::Binary, true, 1001);
        let err = feed_all(&mut ClientFrameParser::default(), &big[..20], 20).unwrap_err();
        assert_eq!(err, ClientFrameError::TooLarge(1000));
        assert_eq!(err.close_code(), 1009);
    }

    #[test]
    fn fragmented_message_is_bounded_in_total() {
        let mut stream = data(Data::Text, false, 400);
        stream.extend(data(Data::Continue, false, 400));
        stream.extend(data(Data::Continue, false, 400));
        assert_eq!(
            feed_all(&mut ClientFrameParser::default(), &stream, 50).unwrap_err(),
            ClientFrameError::TooLarge(1000)
        );
    }

    #[test]
    fn endless_empty_fragments_are_bounded_in_count() {
        let mut stream = data(Data::Text, false, 0);
        for _ in 0..MAX_FRAGMENTS {
            stream.extend(data(Data::Continue, false, 0));
        }
        assert!(matches!(
            feed_all(&mut ClientFrameParser::default(), &stream, 4096),
            Err(ClientFrameError::Protocol(_))
        ));
    }

    #[test]
    fn garbage_and_unmasked_frames_are_protocol_errors() {
        let garbage = b"GET / HTTP/1.1\r\n\r\n";
        assert!(matches!(
            feed_all(&mut ClientFrameParser::default(), garbage, 100),
            Err(ClientFrameError::Protocol(_))
        ));
        let mut unmasked = Vec::new();
        Frame::message(b"x".to_vec(), OpCode::Data(Data::Text), true)
            .format(&mut unmasked)
            .unwrap();
        assert_eq!(
            feed_all(&mut ClientFrameParser::default(), &unmasked, 100).unwrap_err(),
            ClientFrameError::Protocol("client frame not masked")
        );
    }

    #[test]
    fn continuation_without_start_is_a_protocol_error() {
        let stream = data(Data::Continue, true, 3);
        assert!(feed_all(&mut ClientFrameParser::default(), &stream, 100).is_err());
    }
}
