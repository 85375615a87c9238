//! What a STOMP broker sends a subscriber over a WebSocket, as the probe's
//! `--protocol stomp` reads it.

use skewscope_core::protocol_layer::{Frame, Layer};
use skewscope_core::stomp::{Stomp, StompOptions};

use crate::chunks::pieces;

/// Largest frame the fuzzed session takes: small, so the limit is reached.
const MAX_FRAME: usize = 4096;

/// The input as one WebSocket message or cut into several: the same bodies,
/// the same frames sent and the same verdict either way (frames may span
/// messages); no body over the limit.
pub fn stomp(data: &[u8]) {
    let whole = read(&[data]);
    let split = read(&pieces(data));
    assert_eq!(whole, split, "pieces change what is read");
    for body in &whole.0 {
        assert!(body.len() <= MAX_FRAME, "a body of {}", body.len());
    }
}

type Read = (Vec<Vec<u8>>, Vec<Frame>, bool);

fn read(input: &[&[u8]]) -> Read {
    let mut session = Stomp::new(StompOptions {
        destination: "/topic/show".to_owned(),
        login: None,
        passcode: None,
        headers: Vec::new(),
        heart_beat_ms: 1_000,
        max_frame: MAX_FRAME,
    });
    let mut out = Vec::new();
    session.start(0, &mut out);
    let mut bodies = Vec::new();
    for piece in input {
        let read = session.on_message(piece, true, 0, &mut out, &mut |b| bodies.push(b.to_vec()));
        if read.is_err() {
            return (bodies, out, true);
        }
    }
    (bodies, out, false)
}
