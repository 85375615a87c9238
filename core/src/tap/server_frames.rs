//! WebSocket frames a server sends (unmasked), read incrementally from a
//! reassembled byte stream: whole messages, each with the capture time of
//! the segment that carried its first byte and of the one that carried its
//! last. Control frames are skipped; fragmented messages are put together.

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
}

/// What the reader found, in stream order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerEvent {
    /// A complete data message.
    Message(TappedMessage),
    /// The server sent a close frame.
    Close,
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

#[derive(Clone, Copy, Debug)]
struct FrameHead {
    fin: bool,
    rsv1: bool,
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
    max_message: usize,
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
            max_message,
        }
    }

    /// Reads `bytes`, captured at `at_ns`; pushes what completes to `out`.
    pub fn push(
        &mut self,
        mut bytes: &[u8],
        at_ns: u64,
        out: &mut Vec<ServerEvent>,
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
                    let take = (*remaining).min(bytes.len() as u64) as usize;
                    *remaining -= take as u64;
                    let done = *remaining == 0;
                    if frame.opcode < 8 {
                        let m = self.message.as_mut().expect("a data frame has a message");
                        if m.payload.len() + take > self.max_message {
                            return Err(ServerFrameError::TooLarge(self.max_message));
                        }
                        m.payload.extend_from_slice(&bytes[..take]);
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
                    payload: Vec::with_capacity(len as usize),
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
    fn end_frame(&mut self, frame: FrameHead, at_ns: u64, out: &mut Vec<ServerEvent>) {
        self.state = State::Header {
            bytes: Vec::new(),
            first_at: None,
        };
        match frame.opcode {
            8 => out.push(ServerEvent::Close),
            9 | 10 => {}
            _ if frame.fin => {
                let m = self.message.take().expect("a data frame has a message");
                out.push(ServerEvent::Message(TappedMessage {
                    text: m.text,
                    compressed: m.compressed,
                    payload: m.payload,
                    first_byte_ns: m.first_at,
                    last_byte_ns: at_ns,
                }));
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
                ServerEvent::Close => None,
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
        assert_eq!(out.last(), Some(&ServerEvent::Close));
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
