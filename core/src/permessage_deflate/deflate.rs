//! The hub's side of permessage-deflate: a broadcast's payload compressed
//! once, on its own (the hub answers `server_no_context_takeover`), so one
//! compressed frame serves every client that agreed, as one plain frame
//! serves the rest. Pure Rust (miniz_oxide).

use miniz_oxide::deflate::core::{CompressorOxide, create_comp_flags_from_zip_params};
use miniz_oxide::deflate::stream::deflate;
use miniz_oxide::{MZFlush, MZStatus};

/// zlib's default level: a broadcast is compressed once, whatever the
/// number of clients, so a level that costs more CPU per byte than this
/// buys little on messages of a few KB.
pub const LEVEL: u8 = 6;

/// The tail every sync flush ends with, which RFC 7692 §7.2.1 strips.
const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// A compressor for messages that each stand alone.
pub struct MessageDeflater(Box<CompressorOxide>);

impl Default for MessageDeflater {
    fn default() -> Self {
        // Raw deflate (negative window bits): the 15-bit window.
        let flags = create_comp_flags_from_zip_params(i32::from(LEVEL), -15, 0);
        MessageDeflater(Box::new(CompressorOxide::new(flags)))
    }
}

impl std::fmt::Debug for MessageDeflater {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageDeflater").finish_non_exhaustive()
    }
}

impl MessageDeflater {
    /// `plain` compressed as a permessage-deflate message without context
    /// takeover; `None` when that is not smaller, so the plain frame is sent.
    pub fn compress(&mut self, plain: &[u8]) -> Option<Vec<u8>> {
        self.0.reset();
        let mut out = vec![0u8; plain.len() / 2 + 64];
        let (mut read, mut written) = (0, 0);
        loop {
            let r = deflate(
                &mut self.0,
                &plain[read..],
                &mut out[written..],
                MZFlush::Sync,
            );
            read += r.bytes_consumed;
            written += r.bytes_written;
            match r.status {
                Ok(MZStatus::Ok) if read == plain.len() && written < out.len() => break,
                Ok(_) | Err(miniz_oxide::MZError::Buf) => {
                    if written >= plain.len() + TAIL.len() {
                        return None; // it would not be smaller
                    }
                    out.resize(out.len() * 2, 0);
                }
                Err(_) => return None,
            }
        }
        out.truncate(written);
        if !out.ends_with(&TAIL) {
            return None;
        }
        out.truncate(written - TAIL.len());
        (out.len() < plain.len()).then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permessage_deflate::inflate::Inflater;

    #[test]
    fn each_message_inflates_alone_to_what_was_compressed() {
        let mut hub = MessageDeflater::default();
        let state = r#"{"scene":"lobby","cues":[{"light":1,"level":40},{"light":2,"level":40}]}"#;
        let big = state.repeat(400);
        for plain in [state.as_bytes(), big.as_bytes(), state.as_bytes()] {
            let compressed = hub.compress(plain).expect("JSON compresses");
            assert!(compressed.len() < plain.len());
            // A fresh inflater each time: no context is carried over.
            let back = Inflater::new(true).message(&compressed, 1 << 24).unwrap();
            assert_eq!(back, plain);
        }
    }

    #[test]
    fn what_does_not_shrink_is_sent_plain() {
        let mut hub = MessageDeflater::default();
        let mut rng = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d);
        let noise: Vec<u8> = std::iter::repeat_with(|| rng.u8(..)).take(4096).collect();
        assert_eq!(hub.compress(&noise), None);
        assert_eq!(hub.compress(b"ab"), None);
        // And the compressor is still good for the next message.
        assert!(hub.compress(&[b'x'; 1000]).is_some());
    }
}
