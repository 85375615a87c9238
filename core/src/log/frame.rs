//! The framing of a record log's body, shared by the whole-body reader
//! ([`super`]), the incremental decoder ([`super::BodyDecoder`]), the probe's
//! uploader and the agent's ingest:
//!
//! ```text
//! record:  length u32 LE | crc32 u32 LE (of the payload) | postcard payload
//! ```

use crate::convert;
use serde::Serialize;

/// Size of a record's frame header (length and checksum).
pub const FRAME_HEADER_LEN: usize = 8;
/// Largest record accepted: bounds memory when reading a corrupt length.
pub const MAX_RECORD_LEN: usize = 64 * 1024 * 1024;

/// Appends one framed record to `out`.
pub fn encode_record<R: Serialize>(record: &R, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0u8; FRAME_HEADER_LEN]);
    // postcard serialising plain data into a Vec cannot fail.
    let mut body = postcard::to_extend(record, std::mem::take(out)).expect("postcard into Vec");
    // A record is kilobytes; the readers refuse a frame over MAX_FRAME.
    let len = convert::count(body.len() - start - FRAME_HEADER_LEN);
    let crc = crc32fast::hash(&body[start + FRAME_HEADER_LEN..]);
    body[start..start + 4].copy_from_slice(&len.to_le_bytes());
    body[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    *out = body;
}

/// What starts at one offset of a record log's body.
#[derive(Debug, PartialEq, Eq)]
pub enum FrameAt<'a> {
    /// An intact frame: its payload.
    Intact(&'a [u8]),
    /// Too few bytes for the frame its header announces (or for a header).
    Truncated,
    /// A length of zero or over [`MAX_RECORD_LEN`], or a checksum that
    /// does not hold.
    Corrupt,
}

/// Reads the frame at `pos` of a log body: what the reader, the probe's
/// uploader and the agent's ingest all frame records by.
pub fn frame_at(body: &[u8], pos: usize) -> FrameAt<'_> {
    let rest = &body[pos..];
    if rest.len() < FRAME_HEADER_LEN {
        return FrameAt::Truncated;
    }
    let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
    let crc = u32::from_le_bytes(rest[4..8].try_into().unwrap());
    // No record encodes to nothing, so a zero length is damage: eight zero
    // bytes (a hole a file system or a failed write left) would otherwise
    // pass as a frame, since the CRC of nothing is 0.
    if len == 0 || len > MAX_RECORD_LEN {
        return FrameAt::Corrupt;
    }
    if rest.len() < FRAME_HEADER_LEN + len {
        return FrameAt::Truncated;
    }
    let payload = &rest[FRAME_HEADER_LEN..FRAME_HEADER_LEN + len];
    if crc32fast::hash(payload) == crc {
        FrameAt::Intact(payload)
    } else {
        FrameAt::Corrupt
    }
}

/// Longest frame a resynchronisation takes as the next intact one. In
/// damaged bytes every offset is a candidate, and checking one costs a CRC
/// over the length it announces: random bytes announce up to
/// [`MAX_RECORD_LEN`], which made resynchronising over 32 MiB of garbage take
/// over a minute. Records are far smaller (a 10,000-client tapped broadcast
/// is about 400 KB); one over this right after damage is counted as skipped.
pub const RESYNC_MAX_LEN: usize = 1 << 20;

/// Finds the next offset at or after `from` where an intact frame starts:
/// how every reader steps over damage (the log reader, the probe's
/// uploader, a follower of `/audit/log`).
pub fn resync(body: &[u8], from: usize) -> Option<usize> {
    match scan_for_frame(body, from, true) {
        Scan::Found(at) => Some(at),
        Scan::NeedMore(_) | Scan::Nothing => None,
    }
}

/// How much of `body` after `from` can be handed to a reader that follows a
/// log while it is written (the agent serving `/audit/log`): whole frames
/// only, so a frame still being written is never sent half. A damaged stretch
/// followed by intact frames is included (the reader counts it as skipped)
/// rather than stalling the follower forever. Stops after `limit` bytes, or
/// later if the first frame alone is larger. Returns an offset into `body`.
pub fn whole_frames_end(body: &[u8], from: usize, limit: usize) -> usize {
    let mut pos = from;
    while pos < body.len() && pos - from < limit {
        match frame_at(body, pos) {
            FrameAt::Intact(payload) => pos += FRAME_HEADER_LEN + payload.len(),
            FrameAt::Truncated => break,
            FrameAt::Corrupt => match resync(body, pos + 1) {
                Some(next) => pos = next,
                None => break,
            },
        }
    }
    pos
}

/// Looks for the next offset at or after `from` of `body` where an intact
/// frame starts; `ended` says no bytes follow `body`. Linear in the bytes
/// scanned: a candidate's CRC is computed only if its length is at most
/// [`RESYNC_MAX_LEN`] and what follows it could be a frame too (the end, or a
/// header with a possible length), which random bytes pass about once in
/// 260,000 offsets.
pub(crate) fn scan_for_frame(body: &[u8], from: usize, ended: bool) -> Scan {
    let length_at = |b: &[u8]| u32::from_le_bytes(b[..4].try_into().unwrap()) as usize;
    for at in from..body.len() {
        let rest = &body[at..];
        if rest.len() < FRAME_HEADER_LEN {
            if ended {
                continue;
            }
            return Scan::NeedMore(at);
        }
        let len = length_at(rest);
        if len == 0 || len > RESYNC_MAX_LEN {
            continue;
        }
        // The candidate and the length after it must both be here.
        if rest.len() < FRAME_HEADER_LEN + len + 4 && !ended {
            return Scan::NeedMore(at);
        }
        if rest.len() < FRAME_HEADER_LEN + len {
            continue;
        }
        let after = &rest[FRAME_HEADER_LEN + len..];
        let plausible = after.len() < 4 || length_at(after) <= MAX_RECORD_LEN;
        if plausible && matches!(frame_at(body, at), FrameAt::Intact(p) if !p.is_empty()) {
            return Scan::Found(at);
        }
    }
    if ended {
        Scan::Nothing
    } else {
        Scan::NeedMore(body.len())
    }
}

/// What a scan for the next intact frame found.
pub(crate) enum Scan {
    /// One starts here.
    Found(usize),
    /// The bytes up to here hold none; more are needed to go on.
    NeedMore(usize),
    /// None, and the body has ended.
    Nothing,
}
