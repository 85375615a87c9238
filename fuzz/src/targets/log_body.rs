//! The record log reader and its resynchronisation after damage.

use skewscope_core::log::{
    BodyDecoder, FRAME_HEADER_LEN, HEADER_LEN, Next, decode_records, read_header,
};
use skewscope_core::record::{AgentRecord, ProbeRecord};

use crate::chunks::pieces;

/// A log's bytes (header and body): the header check refuses or names a
/// kind; the body decodes as either kind of record; read in pieces it gives
/// the frames that reading it at once gives; and every byte is accounted
/// for, as part of an intact frame or as skipped, never silently dropped.
pub fn log_body(data: &[u8]) {
    let _ = read_header(std::path::Path::new("fuzz.sklog"), data);
    let data = data.get(HEADER_LEN..).unwrap_or_default();
    let probe = decode_records::<ProbeRecord>(data);
    let agent = decode_records::<AgentRecord>(data);
    assert!(probe.skipped_bytes <= data.len() as u64);
    assert!(agent.skipped_bytes <= data.len() as u64);

    let (whole, whole_skipped) = frames(&[data]);
    let (split, split_skipped) = frames(&pieces(data));
    assert_eq!(
        whole, split,
        "frames differ when the body arrives in pieces"
    );
    assert_eq!(whole_skipped, split_skipped);
    let framed: usize = whole.iter().map(|p| FRAME_HEADER_LEN + p.len()).sum();
    assert_eq!(
        framed as u64 + whole_skipped,
        data.len() as u64,
        "bytes neither in a frame nor counted as skipped"
    );
}

/// The frames a [`BodyDecoder`] gives when fed these pieces, and the bytes
/// it skipped. Its buffer never holds more than what one frame may need.
fn frames(input: &[&[u8]]) -> (Vec<Vec<u8>>, u64) {
    let mut decoder = BodyDecoder::new();
    let mut out = Vec::new();
    // Frames until the decoder needs more bytes or has ended.
    let mut drain = |decoder: &mut BodyDecoder| {
        while let Next::Frame(payload) = decoder.next_frame() {
            out.push(payload.to_vec());
        }
    };
    for piece in input {
        decoder.push(piece);
        drain(&mut decoder);
    }
    decoder.finish();
    drain(&mut decoder);
    (out, decoder.skipped_bytes())
}
