//! What a server sends its clients, as the probe and the tap read it.

use skewscope_core::server_frames::{ServerEvent, ServerFrames};

use crate::chunks::pieces;

/// Largest message the fuzzed reader follows: small, so limits are reached.
const MAX_MESSAGE: usize = 4096;

/// A server's byte stream, read leniently (the tap) and as a client with
/// and without deflate (the probe): in pieces it gives the events and the
/// verdict that reading it at once gives.
pub fn server_frames(data: &[u8]) {
    for reader in 0..3 {
        let whole = read(reader, &[data]);
        let split = read(reader, &pieces(data));
        assert_eq!(whole, split, "reader {reader}: pieces change what is read");
    }
}

/// The events seen and whether the stream was refused.
fn read(reader: u8, input: &[&[u8]]) -> (Vec<ServerEvent>, bool) {
    let mut frames = match reader {
        0 => ServerFrames::new(MAX_MESSAGE),
        1 => ServerFrames::for_client(MAX_MESSAGE, false),
        _ => ServerFrames::for_client(MAX_MESSAGE, true),
    };
    let mut events = Vec::new();
    for piece in input {
        if frames.push(piece, 0, &mut events).is_err() {
            return (events, true);
        }
    }
    (events, false)
}
