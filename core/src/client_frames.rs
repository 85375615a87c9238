//! What clients send the hub, parsed without I/O.
//!
//! A broadcast hub mostly ignores what clients say, but it must still read it:
//! answer pings, honour close, and close clients that send garbage, oversized
//! frames or a fragmented message that never ends. The header is parsed with
//! tungstenite's frame codec; data payloads are skipped, not buffered, so a
//! client's chatter costs no memory.
//!
//! With permessage-deflate negotiated, a compressed message (RSV1) is the
//! exception: it is kept, compressed, up to `--max-frame`, and inflated at
//! its end to check that it fits `--max-frame` inflated too (and is UTF-8
//! if text). The hub's answer sets `client_no_context_takeover`, so every
//! message inflates alone and nothing is kept between messages.

use std::io::Cursor;

use tungstenite::protocol::frame::FrameHeader;

use crate::convert;
use crate::permessage_deflate::inflate::{InflateError, Inflater};
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
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClientFrameError {
    /// A frame, or a fragmented message in total, exceeded `--max-frame`.
    #[error("frame or message larger than the {0}-byte limit")]
    TooLarge(usize),
    /// The bytes are not a valid client WebSocket stream.
    #[error("protocol error: {0}")]
    Protocol(&'static str),
    /// A text message (or a close reason) is not valid UTF-8 (RFC 6455
    /// §8.1), also when the bad sequence is split across frames or reads.
    #[error("text that is not valid UTF-8")]
    InvalidUtf8,
}

impl ClientFrameError {
    /// The close code the hub sends before closing the connection (RFC 6455 §7.4.1).
    pub fn close_code(&self) -> u16 {
        match self {
            ClientFrameError::TooLarge(_) => 1009,
            ClientFrameError::Protocol(_) => 1002,
            ClientFrameError::InvalidUtf8 => 1007,
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
    /// The data message in progress is text: its payload is checked.
    text: bool,
    /// The data frame whose payload is being skipped: its mask, how far
    /// into its payload we are, whether it ends its message.
    frame_mask: [u8; 4],
    frame_offset: u64,
    frame_final: bool,
    /// The text checked so far, across frames and reads.
    utf8: Utf8Stream,
    /// permessage-deflate was negotiated: RSV1 marks a compressed message.
    deflate: bool,
    /// The compressed message in progress, unmasked (`None`: the message
    /// in progress, if any, is not compressed).
    compressed: Option<Vec<u8>>,
}

impl ClientFrameParser {
    /// A parser for a client that negotiated permessage-deflate (without
    /// client context takeover): its compressed messages are inflated and
    /// checked, not refused.
    pub fn with_deflate() -> ClientFrameParser {
        ClientFrameParser {
            deflate: true,
            ..ClientFrameParser::default()
        }
    }

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
                let n = convert::index(self.skipping).min(bytes.len());
                self.skipping -= n as u64;
                self.payload(&bytes[..n], max_frame)?;
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
        let header_len = convert::index(cursor.position());
        let starts_message = matches!(header.opcode, OpCode::Data(Data::Text | Data::Binary));
        if header.rsv2 || header.rsv3 || (header.rsv1 && !(self.deflate && starts_message)) {
            return Err(ClientFrameError::Protocol("reserved bits set"));
        }
        let Some(mask) = header.mask else {
            return Err(ClientFrameError::Protocol("client frame not masked"));
        };
        match header.opcode {
            OpCode::Data(data) => {
                self.check_data(data, header.is_final, len, max_frame)?;
                if header.rsv1 {
                    self.compressed = Some(Vec::new());
                }
                // Skip the payload (it may be far larger than what is
                // buffered), checking text as it passes.
                let here = (buf.len() - header_len).min(convert::index(len));
                self.skipping = len - here as u64;
                self.frame_mask = mask;
                self.frame_offset = 0;
                self.frame_final = header.is_final;
                self.payload(&buf[header_len..header_len + here], max_frame)?;
                Ok(header_len + here)
            }
            OpCode::Control(control) => {
                if !header.is_final || len > 125 {
                    return Err(ClientFrameError::Protocol("invalid control frame"));
                }
                let end = header_len + convert::index(len);
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
                    Control::Close => on(ClientFrame::Close(close_code(&payload)?)),
                    Control::Reserved(_) => {
                        return Err(ClientFrameError::Protocol("reserved opcode"));
                    }
                }
                Ok(end)
            }
        }
    }

    /// Payload bytes of the current data frame, in order: text is
    /// unmasked in small pieces and checked; the frame's end, if it ends
    /// a text message, must end a character.
    fn payload(&mut self, bytes: &[u8], max_frame: usize) -> Result<(), ClientFrameError> {
        if let Some(kept) = self.compressed.as_mut() {
            // Bounded by --max-frame: check_data counted the message's length.
            kept.extend(
                bytes.iter().enumerate().map(|(i, b)| {
                    b ^ self.frame_mask[((self.frame_offset + i as u64) % 4) as usize]
                }),
            );
            self.frame_offset += bytes.len() as u64;
            if self.skipping == 0 && self.frame_final {
                let kept = self.compressed.take().unwrap_or_default();
                let text = std::mem::take(&mut self.text);
                return inflated(&kept, text, max_frame);
            }
            return Ok(());
        }
        if self.text {
            let mut piece = [0u8; 512];
            for chunk in bytes.chunks(piece.len()) {
                let piece = &mut piece[..chunk.len()];
                for (i, (out, b)) in piece.iter_mut().zip(chunk).enumerate() {
                    *out = b ^ self.frame_mask[((self.frame_offset + i as u64) % 4) as usize];
                }
                self.frame_offset += chunk.len() as u64;
                self.utf8.feed(piece)?;
            }
        }
        if self.skipping == 0 && self.frame_final {
            if self.text {
                self.utf8.finish()?;
            }
            self.text = false;
        }
        Ok(())
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
        if data == Data::Text {
            self.text = true;
        }
        // A header may announce up to 2^64 - 1 bytes: saturate, so the
        // check below refuses it rather than the sum wrapping (found by the
        // client_frames fuzz target with overflow checks on).
        self.message_len = self.message_len.saturating_add(len);
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

/// A whole compressed message, `kept`: it must inflate, within
/// `--max-frame`, and be UTF-8 if text.
fn inflated(kept: &[u8], text: bool, max: usize) -> Result<(), ClientFrameError> {
    let plain = Inflater::new(true)
        .message(kept, max)
        .map_err(|e| match e {
            InflateError::TooLarge(_) => ClientFrameError::TooLarge(max),
            InflateError::Corrupt => {
                ClientFrameError::Protocol("a compressed message that does not inflate")
            }
        })?;
    if text && std::str::from_utf8(&plain).is_err() {
        return Err(ClientFrameError::InvalidUtf8);
    }
    Ok(())
}

/// A close frame's status code, if it has one (RFC 6455 §5.5.1, §7.4):
/// one byte, a code no endpoint may send, or a reason that is not UTF-8 is
/// a protocol error, never echoed back.
fn close_code(payload: &[u8]) -> Result<Option<u16>, ClientFrameError> {
    match payload {
        [] => Ok(None),
        [_] => Err(ClientFrameError::Protocol("one-byte close payload")),
        [hi, lo, reason @ ..] => {
            let code = u16::from_be_bytes([*hi, *lo]);
            if !matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999) {
                return Err(ClientFrameError::Protocol(
                    "close code that may not be sent",
                ));
            }
            std::str::from_utf8(reason).map_err(|_| ClientFrameError::InvalidUtf8)?;
            Ok(Some(code))
        }
    }
}

/// UTF-8 checked as it streams by: at most three bytes of an unfinished
/// character are kept between pieces.
#[derive(Debug, Default)]
struct Utf8Stream {
    tail: [u8; 4],
    tail_len: usize,
}

impl Utf8Stream {
    fn feed(&mut self, mut bytes: &[u8]) -> Result<(), ClientFrameError> {
        // Finish the character a previous piece began, a byte at a time.
        while self.tail_len > 0 {
            let Some((&b, rest)) = bytes.split_first() else {
                return Ok(());
            };
            self.tail[self.tail_len] = b;
            self.tail_len += 1;
            bytes = rest;
            match std::str::from_utf8(&self.tail[..self.tail_len]) {
                Ok(_) => self.tail_len = 0,
                Err(e) if e.error_len().is_some() => return Err(ClientFrameError::InvalidUtf8),
                Err(_) if self.tail_len == 4 => return Err(ClientFrameError::InvalidUtf8),
                Err(_) => {}
            }
        }
        match std::str::from_utf8(bytes) {
            Ok(_) => Ok(()),
            Err(e) if e.error_len().is_some() => Err(ClientFrameError::InvalidUtf8),
            Err(e) => {
                let rest = &bytes[e.valid_up_to()..];
                self.tail[..rest.len()].copy_from_slice(rest);
                self.tail_len = rest.len();
                Ok(())
            }
        }
    }

    /// The message ended: it must not end inside a character.
    fn finish(&mut self) -> Result<(), ClientFrameError> {
        let unfinished = self.tail_len > 0;
        self.tail_len = 0;
        if unfinished {
            Err(ClientFrameError::InvalidUtf8)
        } else {
            Ok(())
        }
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

    /// A compressed data frame (RSV1) of `plain`, as a client with
    /// permessage-deflate sends it.
    fn compressed(op: Data, plain: &[u8]) -> Vec<u8> {
        let deflated = crate::permessage_deflate::inflate::build::Deflater::new().message(plain);
        let mut frame = Frame::message(deflated, OpCode::Data(op), true);
        frame.header_mut().rsv1 = true;
        client_frame(frame)
    }

    #[test]
    fn compressed_messages_are_inflated_and_checked_when_deflate_was_agreed() {
        let mut stream = compressed(Data::Text, "héllo ".repeat(100).as_bytes());
        stream.extend(client_frame(Frame::ping(b"after".to_vec())));
        for chunk in [1, 3, 7, 64, 4096] {
            let mut p = ClientFrameParser::with_deflate();
            let got = feed_all(&mut p, &stream, chunk).unwrap();
            assert_eq!(
                got,
                vec![ClientFrame::Ping(b"after".to_vec())],
                "chunk {chunk}"
            );
        }
        // Without the agreement, RSV1 is a protocol error.
        assert_eq!(
            feed_all(&mut ClientFrameParser::default(), &stream, 4096),
            Err(ClientFrameError::Protocol("reserved bits set"))
        );
        // A bomb: 100 KB of zeros is a few hundred bytes compressed, and
        // over the limit (1000) inflated.
        let bomb = compressed(Data::Binary, &vec![0u8; 100_000]);
        assert!(bomb.len() < 1000);
        assert_eq!(
            feed_all(&mut ClientFrameParser::with_deflate(), &bomb, 4096),
            Err(ClientFrameError::TooLarge(1000))
        );
        // Text that is not UTF-8 once inflated; garbage that does not inflate.
        let bad_text = compressed(Data::Text, &[0xff, 0xfe, b'a']);
        assert_eq!(
            feed_all(&mut ClientFrameParser::with_deflate(), &bad_text, 4096),
            Err(ClientFrameError::InvalidUtf8)
        );
        let mut garbage = Frame::message(vec![0xff; 16], OpCode::Data(Data::Binary), true);
        garbage.header_mut().rsv1 = true;
        assert!(matches!(
            feed_all(
                &mut ClientFrameParser::with_deflate(),
                &client_frame(garbage),
                4096
            ),
            Err(ClientFrameError::Protocol(_))
        ));
        // RSV1 belongs on a message's first frame only.
        let mut first = Frame::message(b"ab".to_vec(), OpCode::Data(Data::Binary), false);
        first.header_mut().rsv1 = false;
        let mut rest = Frame::message(b"cd".to_vec(), OpCode::Data(Data::Continue), true);
        rest.header_mut().rsv1 = true;
        let mut both = client_frame(first);
        both.extend(client_frame(rest));
        assert_eq!(
            feed_all(&mut ClientFrameParser::with_deflate(), &both, 4096),
            Err(ClientFrameError::Protocol("reserved bits set"))
        );
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

    fn text_frames(texts: &[(&[u8], bool, Data)]) -> Vec<u8> {
        texts
            .iter()
            .flat_map(|(t, fin, op)| {
                client_frame(Frame::message(t.to_vec(), OpCode::Data(*op), *fin))
            })
            .collect()
    }

    #[test]
    fn text_must_be_utf8_even_split_across_frames_and_reads() {
        let euro = "€".as_bytes(); // three bytes
        // Valid: the character split across two fragments.
        let good = text_frames(&[
            (&euro[..1], false, Data::Text),
            (&euro[1..], true, Data::Continue),
        ]);
        // Invalid: a lone continuation byte; a message that ends mid-character;
        // the bad byte only in the second fragment.
        let stray = text_frames(&[(b"ok \x80", true, Data::Text)]);
        let cut = text_frames(&[(&euro[..2], true, Data::Text)]);
        let late = text_frames(&[
            (&euro[..2], false, Data::Text),
            (b"x", true, Data::Continue),
        ]);
        for chunk in [1, 2, 5, 4096] {
            assert_eq!(
                feed_all(&mut ClientFrameParser::default(), &good, chunk),
                Ok(vec![])
            );
            for bad in [&stray, &cut, &late] {
                let err = feed_all(&mut ClientFrameParser::default(), bad, chunk).unwrap_err();
                assert_eq!(
                    (err.clone(), err.close_code()),
                    (ClientFrameError::InvalidUtf8, 1007)
                );
            }
        }
        // Binary is not text: any bytes.
        let binary = text_frames(&[(&[0xff, 0x80], true, Data::Binary)]);
        assert_eq!(
            feed_all(&mut ClientFrameParser::default(), &binary, 1),
            Ok(vec![])
        );
    }

    #[test]
    fn close_frames_that_may_not_be_sent_are_protocol_errors() {
        let close = |payload: &[u8]| {
            let mask = [1u8, 2, 3, 4];
            let mut f = vec![0x88, 0x80 | payload.len() as u8];
            f.extend(mask);
            f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
            feed_all(&mut ClientFrameParser::default(), &f, 100)
        };
        for code in [999u16, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535] {
            let err = close(&code.to_be_bytes()).unwrap_err();
            assert_eq!(err.close_code(), 1002, "code {code}");
        }
        for code in [1000u16, 1001, 1003, 1007, 1011, 1014, 3000, 4999] {
            assert_eq!(
                close(&code.to_be_bytes()),
                Ok(vec![ClientFrame::Close(Some(code))])
            );
        }
        assert_eq!(close(&[3]).unwrap_err().close_code(), 1002, "one byte");
        assert_eq!(close(&[]), Ok(vec![ClientFrame::Close(None)]));
        let mut bad_reason = 1000u16.to_be_bytes().to_vec();
        bad_reason.extend([0xc3, 0x28]);
        assert_eq!(
            close(&bad_reason).unwrap_err(),
            ClientFrameError::InvalidUtf8
        );
    }

    #[test]
    fn a_continuation_announcing_2_to_the_64_bytes_is_too_large_not_an_overflow() {
        // A first fragment, then a continuation whose 64-bit length brings
        // the message's total past u64::MAX.
        let mut stream = data(Data::Text, false, 10);
        stream.extend([0x80, 0x80 | 127]);
        stream.extend(u64::MAX.to_be_bytes());
        stream.extend([1, 2, 3, 4]);
        let mut p = ClientFrameParser::default();
        assert_eq!(
            p.feed(&stream, 1000, |_| {}),
            Err(ClientFrameError::TooLarge(1000))
        );
    }
}
