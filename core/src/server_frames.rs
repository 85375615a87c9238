//! WebSocket frames a server sends (unmasked), read incrementally from a
//! byte stream: whole messages, each with the time of the bytes that
//! carried its first and its last byte, and the control frames between
//! them. Fragmented messages are put together.
//!
//! The tap reads a server's stream with it leniently ([`ServerFrames::new`]);
//! the probe, as the client it is, strictly ([`ServerFrames::for_client`]):
//! reserved bits no extension gave meaning to are an error (RFC 6455 §5.2).

use crate::convert;

/// Largest message followed by default; a larger one ends the connection's
/// decoding (memory per connection stays bounded).
pub const DEFAULT_MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// One data message as the server sent it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TappedMessage {
    /// Sent as text (else binary).
    pub text: bool,
    /// Compressed with permessage-deflate (RSV1 on its first frame): the
    /// payload is as sent, still compressed.
    pub compressed: bool,
    /// The payload, fragments joined.
    pub payload: Vec<u8>,
    /// Capture time of the segment carrying the message's first byte.
    pub first_byte_ns: u64,
    /// Capture time of the segment carrying its last byte: when the
    /// server's kernel sent the whole message.
    pub last_byte_ns: u64,
}

/// What the stream holds that a server may not send.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ServerFrameError {
    /// Servers never mask (RFC 6455 §5.1): this is not a server's stream.
    #[error("a masked frame: not a server's stream")]
    Masked,
    /// An opcode RFC 6455 does not define.
    #[error("unknown opcode {0}")]
    Opcode(u8),
    /// A continuation with no message to continue, or a new message inside one.
    #[error("fragments out of order")]
    Fragments,
    /// A control frame that is fragmented or longer than 125 bytes.
    #[error("a malformed control frame")]
    Control,
    /// A message over the limit.
    #[error("a message over {0} bytes")]
    TooLarge(usize),
    /// A reserved bit no negotiated extension defines: RSV2 or RSV3, or RSV1
    /// without permessage-deflate, on a continuation or on a control frame.
    #[error("a frame with a reserved bit set that no extension defines")]
    ReservedBits,
}

/// What the reader found, in stream order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerEvent {
    /// A complete data message.
    Message(TappedMessage),
    /// A ping, with its payload (what the pong must echo).
    Ping(Vec<u8>),
    /// A pong.
    Pong,
    /// The server sent a close frame; its payload (code and reason, or empty).
    Close(Vec<u8>),
}

/// How strictly the reserved bits are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Strictness {
    /// Whatever the server sets is taken as it is (the tap observes).
    Lenient,
    /// As a client must: RSV1 only with permessage-deflate negotiated, on a
    /// message's first frame; RSV2 and RSV3 never.
    Client {
        /// permessage-deflate was negotiated.
        deflate: bool,
    },
}

#[derive(Debug)]
enum State {
    /// Reading a frame header (at most 10 bytes: servers send no mask).
    Header {
        bytes: Vec<u8>,
        first_at: Option<u64>,
    },
    /// Reading `remaining` payload bytes of a frame.
    Payload { frame: FrameHead, remaining: u64 },
}

/// A control frame's payload so far (at most 125 bytes).
type ControlPayload = Vec<u8>;

#[derive(Clone, Copy, Debug)]
struct FrameHead {
    fin: bool,
    rsv1: bool,
    /// RSV2 or RSV3.
    rsv23: bool,
    opcode: u8,
}

#[derive(Debug)]
struct Partial {
    text: bool,
    compressed: bool,
    payload: Vec<u8>,
    first_at: u64,
}

/// One connection's server-to-client frames, read as bytes arrive.
#[derive(Debug)]
pub struct ServerFrames {
    state: State,
    message: Option<Partial>,
    control: ControlPayload,
    max_message: usize,
    strictness: Strictness,
}

impl ServerFrames {
    /// A reader for a stream that starts at a frame boundary (just after
    /// the `101` response), following messages up to `max_message` bytes.
    pub fn new(max_message: usize) -> ServerFrames {
        ServerFrames {
            state: State::Header {
                bytes: Vec::new(),
                first_at: None,
            },
            message: None,
            control: Vec::new(),
            max_message,
            strictness: Strictness::Lenient,
        }
    }

    /// A reader for a client's own connection: as [`ServerFrames::new`], and
    /// a reserved bit the handshake gave no meaning to is an error
    /// (`deflate`: permessage-deflate was negotiated, so RSV1 marks a
    /// compressed message).
    pub fn for_client(max_message: usize, deflate: bool) -> ServerFrames {
        ServerFrames {
            strictness: Strictness::Client { deflate },
            ..ServerFrames::new(max_message)
        }
    }

    /// Reads `bytes`, captured at `at_ns`; pushes what completes to `out`.
    pub fn push(
        &mut self,
        mut bytes: &[u8],
        at_ns: u64,
        out: &mut impl Extend<ServerEvent>,
    ) -> Result<(), ServerFrameError> {
        while !bytes.is_empty() {
            match &mut self.state {
                State::Header {
                    bytes: head,
                    first_at,
                } => {
                    first_at.get_or_insert(at_ns);
                    let need = header_len(head).unwrap_or(2).saturating_sub(head.len());
                    let take = need.min(bytes.len());
                    head.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if header_len(head).is_some_and(|n| head.len() == n) {
                        let first_at = first_at.expect("set above");
                        let (frame, len) = decode_header(head)?;
                        self.begin(frame, len, first_at)?;
                        self.state = State::Payload {
                            frame,
                            remaining: len,
                        };
                        if len == 0 {
                            self.end_frame(frame, at_ns, out);
                        }
                    }
                }
                State::Payload {
                    frame, remaining, ..
                } => {
                    let frame = *frame;
                    let take = convert::index((*remaining).min(bytes.len() as u64));
                    *remaining -= take as u64;
                    let done = *remaining == 0;
                    if frame.opcode < 8 {
                        let m = self.message.as_mut().expect("a data frame has a message");
                        if m.payload.len() + take > self.max_message {
                            return Err(ServerFrameError::TooLarge(self.max_message));
                        }
                        m.payload.extend_from_slice(&bytes[..take]);
                    } else {
                        // At most 125 bytes: `begin` checked the length.
                        self.control.extend_from_slice(&bytes[..take]);
                    }
                    bytes = &bytes[take..];
                    if done {
                        self.end_frame(frame, at_ns, out);
                    }
                }
            }
        }
        Ok(())
    }

    /// A frame's header is read: start or continue its message.
    fn begin(&mut self, frame: FrameHead, len: u64, first_at: u64) -> Result<(), ServerFrameError> {
        if let Strictness::Client { deflate } = self.strictness {
            let first_data_frame = matches!(frame.opcode, 1 | 2);
            if frame.rsv23 || (frame.rsv1 && !(deflate && first_data_frame)) {
                return Err(ServerFrameError::ReservedBits);
            }
        }
        match frame.opcode {
            0 => {
                if self.message.is_none() {
                    return Err(ServerFrameError::Fragments);
                }
            }
            1 | 2 => {
                if self.message.is_some() {
                    return Err(ServerFrameError::Fragments);
                }
                if len > self.max_message as u64 {
                    return Err(ServerFrameError::TooLarge(self.max_message));
                }
                self.message = Some(Partial {
                    text: frame.opcode == 1,
                    compressed: frame.rsv1,
                    payload: Vec::with_capacity(convert::index(len)),
                    first_at,
                });
            }
            8..=10 => {
                if !frame.fin || len > 125 {
                    return Err(ServerFrameError::Control);
                }
            }
            other => return Err(ServerFrameError::Opcode(other)),
        }
        Ok(())
    }

    /// A frame's last byte arrived at `at_ns`.
    fn end_frame(&mut self, frame: FrameHead, at_ns: u64, out: &mut impl Extend<ServerEvent>) {
        self.state = State::Header {
            bytes: Vec::new(),
            first_at: None,
        };
        match frame.opcode {
            8 => out.extend([ServerEvent::Close(std::mem::take(&mut self.control))]),
            9 => out.extend([ServerEvent::Ping(std::mem::take(&mut self.control))]),
            10 => {
                self.control.clear();
                out.extend([ServerEvent::Pong]);
            }
            _ if frame.fin => {
                let m = self.message.take().expect("a data frame has a message");
                out.extend([ServerEvent::Message(TappedMessage {
                    text: m.text,
                    compressed: m.compressed,
                    payload: m.payload,
                    first_byte_ns: m.first_at,
                    last_byte_ns: at_ns,
                })]);
            }
            _ => {}
        }
    }
}

/// How long the header that starts with `head` is, once that is known.
fn header_len(head: &[u8]) -> Option<usize> {
    let second = *head.get(1)?;
    Some(
        2 + match second & 0x7f {
            126 => 2,
            127 => 8,
            _ => 0,
        } + if second & 0x80 != 0 { 4 } else { 0 },
    )
}

fn decode_header(head: &[u8]) -> Result<(FrameHead, u64), ServerFrameError> {
    if head[1] & 0x80 != 0 {
        return Err(ServerFrameError::Masked);
    }
    let frame = FrameHead {
        fin: head[0] & 0x80 != 0,
        rsv1: head[0] & 0x40 != 0,
        rsv23: head[0] & 0x30 != 0,
        opcode: head[0] & 0x0f,
    };
    let len = match head[1] & 0x7f {
        126 => u64::from(u16::from_be_bytes([head[2], head[3]])),
        127 => u64::from_be_bytes(head[2..10].try_into().expect("8 bytes")),
        n => u64::from(n),
    };
    Ok((frame, len))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An unmasked server frame.
    pub(crate) fn frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![(u8::from(fin) << 7) | opcode];
        match payload.len() {
            n if n < 126 => f.push(n as u8),
            n if n <= 0xffff => {
                f.push(126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        f.extend_from_slice(payload);
        f
    }

    fn messages(events: &[ServerEvent]) -> Vec<(&[u8], u64, u64)> {
        events
            .iter()
            .filter_map(|e| match e {
                ServerEvent::Message(m) => {
                    Some((m.payload.as_slice(), m.first_byte_ns, m.last_byte_ns))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn several_frames_in_one_segment_and_one_frame_over_several() {
        let mut r = ServerFrames::new(DEFAULT_MAX_MESSAGE);
        let mut out = Vec::new();
        let mut segment = frame(true, 1, b"one");
        segment.extend(frame(true, 9, b"ping"));
        segment.extend(frame(true, 2, b"two"));
        r.push(&segment, 10, &mut out).unwrap();
        // A 300-byte message whose header and payload span three segments.
        let big = frame(true, 1, &[b'x'; 300]);
        r.push(&big[..1], 20, &mut out).unwrap();
        r.push(&big[1..100], 21, &mut out).unwrap();
        r.push(&big[100..], 22, &mut out).unwrap();
        let got = messages(&out);
        assert_eq!(got.len(), 3);
        assert_eq!(got[0], (&b"one"[..], 10, 10));
        assert_eq!(got[1], (&b"two"[..], 10, 10));
        assert_eq!((got[2].1, got[2].2, got[2].0.len()), (20, 22, 300));
    }

    #[test]
    fn fragments_join_and_control_frames_between_them_are_skipped() {
        let mut r = ServerFrames::new(DEFAULT_MAX_MESSAGE);
        let mut out = Vec::new();
        r.push(&frame(false, 1, b"hel"), 1, &mut out).unwrap();
        r.push(&frame(true, 10, b""), 2, &mut out).unwrap();
        r.push(&frame(true, 0, b"lo"), 3, &mut out).unwrap();
        r.push(&frame(true, 8, &[0x03, 0xe8]), 4, &mut out).unwrap();
        assert_eq!(messages(&out), vec![(&b"hello"[..], 1, 3)]);
        assert_eq!(out[0], ServerEvent::Pong);
        assert_eq!(out.last(), Some(&ServerEvent::Close(vec![0x03, 0xe8])));
    }

    #[test]
    fn a_ping_split_over_reads_keeps_its_payload() {
        let mut r = ServerFrames::new(DEFAULT_MAX_MESSAGE);
        let mut out = Vec::new();
        let ping = frame(true, 9, b"are you there");
        r.push(&ping[..4], 1, &mut out).unwrap();
        r.push(&ping[4..], 2, &mut out).unwrap();
        r.push(&frame(true, 9, b""), 3, &mut out).unwrap();
        assert_eq!(
            out,
            vec![
                ServerEvent::Ping(b"are you there".to_vec()),
                ServerEvent::Ping(Vec::new())
            ]
        );
    }

    #[test]
    fn a_client_refuses_reserved_bits_it_did_not_agree_to() {
        let with = |bits: u8, opcode: u8, fin: bool| {
            let mut f = frame(fin, opcode, b"x");
            f[0] |= bits;
            f
        };
        // (bytes, deflate negotiated, accepted)
        let cases = [
            (with(0x40, 1, true), true, true),
            (with(0x40, 2, true), true, true),
            (with(0x40, 1, true), false, false),
            (with(0x20, 1, true), true, false),
            (with(0x10, 2, true), true, false),
            (with(0x40, 9, true), true, false),
        ];
        for (bytes, deflate, accepted) in cases {
            let got = ServerFrames::for_client(100, deflate).push(&bytes, 1, &mut Vec::new());
            let want = if accepted {
                Ok(())
            } else {
                Err(ServerFrameError::ReservedBits)
            };
            assert_eq!(got, want, "{bytes:02x?} deflate {deflate}");
        }
        // RSV1 on a continuation: only the first frame says "compressed".
        let mut bytes = with(0x40, 1, false);
        bytes.extend(with(0x40, 0, true));
        assert_eq!(
            ServerFrames::for_client(100, true).push(&bytes, 1, &mut Vec::new()),
            Err(ServerFrameError::ReservedBits)
        );
        // The tap reads on whatever a server sets.
        assert_eq!(
            ServerFrames::new(100).push(&with(0x30, 1, true), 1, &mut Vec::new()),
            Ok(())
        );
    }

    #[test]
    fn what_a_server_never_sends_is_an_error() {
        let cases: Vec<(Vec<u8>, ServerFrameError)> = vec![
            (
                vec![0x81, 0x83, 1, 2, 3, 4, 0, 0, 0],
                ServerFrameError::Masked,
            ),
            (frame(true, 3, b""), ServerFrameError::Opcode(3)),
            (frame(true, 0, b"x"), ServerFrameError::Fragments),
            (frame(false, 9, b""), ServerFrameError::Control),
            (frame(true, 1, &[0; 200]), ServerFrameError::TooLarge(100)),
        ];
        for (bytes, error) in cases {
            let mut r = ServerFrames::new(100);
            assert_eq!(r.push(&bytes, 1, &mut Vec::new()), Err(error));
        }
        let mut r = ServerFrames::new(100);
        let mut inside = frame(false, 1, b"a");
        inside.extend(frame(true, 1, b"b"));
        assert_eq!(
            r.push(&inside, 1, &mut Vec::new()),
            Err(ServerFrameError::Fragments)
        );
    }

    #[test]
    fn compressed_messages_are_marked() {
        let mut r = ServerFrames::new(100);
        let mut out = Vec::new();
        let mut f = frame(true, 1, b"zz");
        f[0] |= 0x40;
        r.push(&f, 1, &mut out).unwrap();
        assert!(matches!(&out[0], ServerEvent::Message(m) if m.compressed && m.text));
    }

    #[test]
    fn read_byte_by_byte_it_finds_the_same_messages() {
        let mut stream = Vec::new();
        for n in [0usize, 5, 125, 126, 70_000] {
            stream.extend(frame(true, 2, &vec![7u8; n]));
        }
        let mut whole = Vec::new();
        ServerFrames::new(DEFAULT_MAX_MESSAGE)
            .push(&stream, 1, &mut whole)
            .unwrap();
        let mut r = ServerFrames::new(DEFAULT_MAX_MESSAGE);
        let mut bytewise = Vec::new();
        for b in &stream {
            r.push(std::slice::from_ref(b), 1, &mut bytewise).unwrap();
        }
        assert_eq!(whole, bytewise);
        assert_eq!(whole.len(), 5);
    }
}
