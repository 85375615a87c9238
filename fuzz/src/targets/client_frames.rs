//! What a client sends the hub: frames, masked, possibly compressed.

use skewscope_core::client_frames::ClientFrameParser;

use crate::chunks::pieces;

/// Largest frame the fuzzed parser accepts: small, so limits are reached.
const MAX_FRAME: usize = 4096;

/// A client's byte stream, with and without permessage-deflate: read in
/// pieces it gives the control frames and the verdict that reading it at
/// once gives (a socket splits reads anywhere).
pub fn client_frames(data: &[u8]) {
    for deflate in [false, true] {
        let whole = read(deflate, &[data]);
        let split = read(deflate, &pieces(data));
        assert_eq!(
            whole, split,
            "deflate {deflate}: pieces change what is read"
        );
    }
}

/// The control frames seen (as text) and whether the stream was refused.
fn read(deflate: bool, input: &[&[u8]]) -> (Vec<String>, bool) {
    let mut parser = if deflate {
        ClientFrameParser::with_deflate()
    } else {
        ClientFrameParser::default()
    };
    let mut seen = Vec::new();
    for piece in input {
        if parser
            .feed(piece, MAX_FRAME, |frame| seen.push(format!("{frame:?}")))
            .is_err()
        {
            return (seen, true);
        }
    }
    (seen, false)
}
