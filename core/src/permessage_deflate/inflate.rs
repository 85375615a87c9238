//! Inflating what a permessage-deflate server sends: each compressed
//! message back to the plaintext its client sees. The probe reads its own
//! messages with it; the tap, copies that were compressed differently for
//! each connection, so they still hash alike.
//!
//! With context takeover (the default, and what uvicorn and Python
//! websockets do) one connection's messages are one deflate stream, so its
//! inflater lives as long as the connection: about 43 KiB (the 32 KiB window
//! and tables). Pure Rust (miniz_oxide).

use miniz_oxide::inflate::stream::{InflateState, inflate};
use miniz_oxide::{DataFormat, MZError, MZFlush, MZStatus};

/// What one connection's inflater holds.
pub const INFLATER_BYTES: usize = std::mem::size_of::<InflateState>();

/// The tail RFC 7692 §7.2.1 strips from every compressed message.
const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// A compressed message that does not inflate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InflateError {
    /// Not a deflate stream, or not this connection's.
    #[error("a compressed message that does not inflate")]
    Corrupt,
    /// Inflates to more than the limit.
    #[error("a compressed message that inflates past {0} bytes")]
    TooLarge(usize),
}

/// One connection's server-to-client decompression.
pub struct Inflater {
    window: Window,
}

/// Where an inflater's 32 KiB window lives.
enum Window {
    /// The connection's own: with context takeover, its messages are one
    /// deflate stream.
    Own(Box<InflateState>),
    /// This thread's, shared by every connection whose server compresses
    /// each message alone (`server_no_context_takeover`): nothing lasts
    /// between messages, so one warm window serves them all, and such a
    /// connection holds none (a probe's 200 connections would otherwise hold
    /// 8 MiB of windows, each cold in the cache when its message comes).
    Shared,
}

thread_local! {
    static SHARED: std::cell::RefCell<Option<Box<InflateState>>> =
        const { std::cell::RefCell::new(None) };
}

impl Inflater {
    /// An inflater for a connection whose handshake said whether the server
    /// takes over its context between messages.
    pub fn new(server_no_context_takeover: bool) -> Inflater {
        let window = if server_no_context_takeover {
            Window::Shared
        } else {
            Window::Own(InflateState::new_boxed(DataFormat::Raw))
        };
        Inflater { window }
    }

    /// Whether this connection holds a window of its own ([`INFLATER_BYTES`]);
    /// not when its messages stand alone and share the thread's.
    pub fn owns_window(&self) -> bool {
        matches!(self.window, Window::Own(_))
    }

    /// The plaintext of one compressed message, at most `max` bytes.
    pub fn message(&mut self, compressed: &[u8], max: usize) -> Result<Vec<u8>, InflateError> {
        match &mut self.window {
            Window::Own(state) => inflate_message(state, compressed, max),
            Window::Shared => SHARED.with(|shared| {
                let mut shared = shared.borrow_mut();
                let state = shared.get_or_insert_with(|| InflateState::new_boxed(DataFormat::Raw));
                // Zeroed too: a malformed message that reaches back past its
                // own start reads zeros, never another connection's bytes.
                state.reset(DataFormat::Raw);
                inflate_message(state, compressed, max)
            }),
        }
    }
}

/// Inflates one message (with the tail RFC 7692 strips put back) straight
/// into its output.
fn inflate_message(
    state: &mut InflateState,
    compressed: &[u8],
    max: usize,
) -> Result<Vec<u8>, InflateError> {
    // Room for typical ratios at once; grown as needed, bounded by `max`.
    let mut out = vec![0u8; (compressed.len() * 4 + 64).min(max + 1)];
    let mut written = 0;
    for (pass, input) in [compressed, &TAIL[..]].into_iter().enumerate() {
        let mut input = input;
        loop {
            if written == out.len() {
                if out.len() > max {
                    return Err(InflateError::TooLarge(max));
                }
                let grown = (out.len() * 2).min(max + 1).max(out.len() + 1);
                out.resize(grown, 0);
            }
            let r = inflate(state, input, &mut out[written..], MZFlush::Sync);
            written += r.bytes_written;
            if written > max {
                return Err(InflateError::TooLarge(max));
            }
            input = &input[r.bytes_consumed..];
            let room = written < out.len();
            let stalled = r.bytes_consumed == 0 && r.bytes_written == 0;
            match r.status {
                // A final block (BFINAL) ended the stream: what may follow
                // is the tail put back, nothing else. Bytes after it would
                // never be consumed (a fuzzed message spun here forever).
                Ok(MZStatus::StreamEnd) if input.is_empty() || pass == 1 => break,
                Ok(MZStatus::StreamEnd) => return Err(InflateError::Corrupt),
                Ok(MZStatus::Ok) if input.is_empty() && room => break,
                // Nothing left to do with what was given.
                Err(MZError::Buf) if input.is_empty() && room => break,
                // Room to write, input left, and no progress: it never will.
                Ok(_) | Err(MZError::Buf) if stalled && room => {
                    return Err(InflateError::Corrupt);
                }
                Ok(_) | Err(MZError::Buf) => {}
                Err(_) => return Err(InflateError::Corrupt),
            }
        }
    }
    out.truncate(written);
    Ok(out)
}

impl std::fmt::Debug for Inflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inflater")
            .field("shared_window", &matches!(self.window, Window::Shared))
            .finish_non_exhaustive()
    }
}

/// A message compressed as a permessage-deflate server with context
/// takeover sends it, for tests of everything that reads them.
#[cfg(test)]
pub(crate) mod build {
    use miniz_oxide::deflate::core::{CompressorOxide, create_comp_flags_from_zip_params};
    use miniz_oxide::deflate::stream::deflate;
    use miniz_oxide::{MZFlush, MZStatus};

    /// One side's compressor; `message` compresses the next message.
    pub(crate) struct Deflater(Box<CompressorOxide>);

    impl Deflater {
        pub(crate) fn new() -> Deflater {
            // Raw deflate (negative window bits), default level.
            let flags = create_comp_flags_from_zip_params(6, -15, 0);
            Deflater(Box::new(CompressorOxide::new(flags)))
        }

        pub(crate) fn message(&mut self, plain: &[u8]) -> Vec<u8> {
            let mut out = vec![0u8; plain.len() + 64];
            let r = deflate(&mut self.0, plain, &mut out, MZFlush::Sync);
            assert_eq!(r.status, Ok(MZStatus::Ok));
            assert_eq!(r.bytes_consumed, plain.len());
            out.truncate(r.bytes_written);
            assert!(out.ends_with(&[0, 0, 0xff, 0xff]));
            out.truncate(out.len() - 4);
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::build::Deflater;
    use super::*;

    #[test]
    fn messages_of_one_stream_inflate_in_turn() {
        let mut server = Deflater::new();
        let mut tap = Inflater::new(false);
        let text = "Lorem ipsum dolor sit amet, ".repeat(16);
        // The second copy is far shorter compressed: it refers to the first.
        let first = server.message(text.as_bytes());
        let second = server.message(text.as_bytes());
        assert!(
            second.len() < first.len() / 2,
            "{} {}",
            first.len(),
            second.len()
        );
        assert_eq!(tap.message(&first, 1 << 20).unwrap(), text.as_bytes());
        assert_eq!(tap.message(&second, 1 << 20).unwrap(), text.as_bytes());
    }

    #[test]
    fn without_context_takeover_each_message_stands_alone() {
        let mut tap = Inflater::new(true);
        for word in ["alpha", "beta"] {
            let alone = Deflater::new().message(word.as_bytes());
            assert_eq!(tap.message(&alone, 1 << 20).unwrap(), word.as_bytes());
        }
    }

    #[test]
    fn connections_without_context_takeover_share_one_window_and_stay_apart() {
        let hub = |plain: &[u8]| {
            crate::permessage_deflate::deflate::MessageDeflater::default()
                .compress(plain)
                .unwrap()
        };
        let big = "0123456789abcdef".repeat(8192); // 128 KiB: the output grows
        let mut inflaters = [Inflater::new(true), Inflater::new(true)];
        for (i, plain) in [
            (0, "first connection ".repeat(30)),
            (1, big.clone()),
            (0, "again, the first ".repeat(30)),
        ] {
            let got = inflaters[i]
                .message(&hub(plain.as_bytes()), 1 << 20)
                .unwrap();
            assert_eq!(got, plain.as_bytes());
        }
        let [mut a, mut b] = inflaters;
        let bomb = hub(&vec![0u8; 1 << 20]);
        assert_eq!(b.message(&bomb, 1000), Err(InflateError::TooLarge(1000)));
        // The window is still good for the next message.
        assert_eq!(
            a.message(&hub(b"ok ok ok ok"), 100).unwrap(),
            b"ok ok ok ok"
        );
    }

    #[test]
    fn garbage_and_bombs_are_refused() {
        let mut tap = Inflater::new(false);
        assert!(tap.message(&[0xff; 32], 1 << 20).is_err());
        let zeros = Deflater::new().message(&vec![0u8; 1 << 20]);
        let mut tap = Inflater::new(false);
        assert_eq!(tap.message(&zeros, 1000), Err(InflateError::TooLarge(1000)));
    }

    /// A stored final block: `01`, its length and the length's complement
    /// (little endian), then the bytes.
    const FINAL_HI: [u8; 7] = [0x01, 0x02, 0x00, 0xfd, 0xff, b'h', b'i'];

    #[test]
    fn a_message_ending_its_stream_with_a_final_block_inflates() {
        for takeover in [false, true] {
            let mut inflater = Inflater::new(!takeover);
            assert_eq!(inflater.message(&FINAL_HI, 100).unwrap(), b"hi");
        }
    }

    #[test]
    fn bytes_after_a_final_block_are_refused_not_spun_on() {
        // Found by the fuzz target client_frames: this spun forever.
        let message = [&FINAL_HI[..], b"zz"].concat();
        for takeover in [false, true] {
            let mut inflater = Inflater::new(!takeover);
            assert_eq!(inflater.message(&message, 100), Err(InflateError::Corrupt));
        }
        // And a connection whose stream has ended refuses what comes next.
        let mut inflater = Inflater::new(false);
        inflater.message(&FINAL_HI, 100).unwrap();
        assert_eq!(
            inflater.message(b"\x4a\x04\x00", 100),
            Err(InflateError::Corrupt)
        );
    }
}
