//! Reading a log's body as it comes, in pieces, with memory bounded by the
//! largest frame rather than by the file: a report over a long run must not
//! hold the whole file, and a reader of a growing log gets the same records
//! in any split.
//!
//! [`BodyDecoder`] is handed bytes ([`BodyDecoder::push`]) and yields frames;
//! it keeps only the bytes of the frame it is looking at (while
//! resynchronising, of the candidate frame, at most [`RESYNC_MAX_LEN`]). Damage is handled
//! as [`super::decode_records`] always did: a torn tail is flagged, a
//! corrupt stretch skipped and counted, resynchronising in linear time.

use super::frame::{FRAME_HEADER_LEN, FrameAt, Scan, frame_at, scan_for_frame};

/// What the decoder has for its caller.
#[derive(Debug, PartialEq, Eq)]
pub enum Next<'a> {
    /// An intact frame's payload.
    Frame(&'a [u8]),
    /// More bytes are needed before anything can be said ([`BodyDecoder::push`],
    /// or [`BodyDecoder::finish`] at the end of the input).
    NeedMore,
    /// Every byte pushed has been accounted for, and the input has ended.
    End,
}

/// Why the decoder is scanning for the next intact frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Damage {
    /// A frame announced more bytes than follow it.
    Truncated,
    /// A frame's length or checksum did not hold.
    Corrupt,
}

/// An incremental decoder of record frames (see the module doc).
#[derive(Debug, Default)]
pub struct BodyDecoder {
    buf: Vec<u8>,
    /// Where the next frame (or the damaged stretch) starts in `buf`.
    pos: usize,
    /// While resynchronising: why, and the next offset to try.
    scanning: Option<(Damage, usize)>,
    ended: bool,
    skipped: u64,
    torn_tail: bool,
}

impl BodyDecoder {
    /// A decoder at the start of a log body.
    pub fn new() -> BodyDecoder {
        BodyDecoder::default()
    }

    /// Appends the next bytes of the body. Bytes already decoded are
    /// dropped first, so the buffer holds at most the frame being read.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            if let Some((_, at)) = &mut self.scanning {
                *at -= self.pos;
            }
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Says the body has ended: what is left is decided on what was pushed.
    pub fn finish(&mut self) {
        self.ended = true;
    }

    /// Bytes that were not part of an intact frame so far.
    pub fn skipped_bytes(&self) -> u64 {
        self.skipped
    }

    /// Whether the body ended in the middle of a frame.
    pub fn torn_tail(&self) -> bool {
        self.torn_tail
    }

    /// Bytes held: what bounds this decoder's memory.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next frame, or what is needed to get one.
    pub fn next_frame(&mut self) -> Next<'_> {
        loop {
            if let Some((damage, from)) = self.scanning {
                match scan_for_frame(&self.buf, from, self.ended) {
                    Scan::Found(at) => {
                        self.skipped += (at - self.pos) as u64;
                        self.pos = at;
                        self.scanning = None;
                    }
                    Scan::NeedMore(at) => {
                        // No frame starts before `at`: those bytes are
                        // skipped now, so garbage is never held.
                        self.skipped += (at - self.pos) as u64;
                        self.pos = at;
                        self.scanning = Some((damage, at));
                        return Next::NeedMore;
                    }
                    Scan::Nothing => {
                        self.skipped += (self.buf.len() - self.pos) as u64;
                        self.torn_tail |= damage == Damage::Truncated;
                        self.pos = self.buf.len();
                        self.scanning = None;
                        return Next::End;
                    }
                }
            }
            if self.pos == self.buf.len() {
                return if self.ended {
                    Next::End
                } else {
                    Next::NeedMore
                };
            }
            match frame_at(&self.buf, self.pos) {
                FrameAt::Intact(payload) => {
                    let (start, len) = (self.pos + FRAME_HEADER_LEN, payload.len());
                    self.pos = start + len;
                    return Next::Frame(&self.buf[start..start + len]);
                }
                // More may come: a frame is only torn when the body has ended.
                FrameAt::Truncated if !self.ended => return Next::NeedMore,
                FrameAt::Truncated => self.scanning = Some((Damage::Truncated, self.pos + 1)),
                FrameAt::Corrupt => self.scanning = Some((Damage::Corrupt, self.pos + 1)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{Decoded, HEADER_LEN, LogKind, LogWriter, RESYNC_MAX_LEN, decode_records};
    use crate::record::{MessageKey, ProbeRecord, Receipt};

    fn log_body(n: u64) -> Vec<u8> {
        let mut w = LogWriter::new(Vec::new(), LogKind::Probe).unwrap();
        for i in 0..n {
            w.append(&ProbeRecord::Receipt(Receipt {
                conn: i as u32,
                key: MessageKey::Seq(i),
                hash: i,
                len: 450,
                at: crate::Stamp {
                    wall_ns: 1_700_000_000_000_000_000 + i,
                    mono_ns: i,
                },
                kernel_delay_ns: Some(i),
            }))
            .unwrap();
        }
        w.into_inner()[HEADER_LEN..].to_vec()
    }

    /// Decodes `body` pushed in pieces of the given sizes (cycled).
    fn in_pieces(body: &[u8], sizes: &[usize]) -> (Vec<ProbeRecord>, u64, bool, usize) {
        let mut d = BodyDecoder::new();
        let (mut records, mut at, mut most) = (Vec::new(), 0, 0);
        for &size in sizes.iter().cycle() {
            while let Next::Frame(p) = d.next_frame() {
                records.push(postcard::from_bytes(p).unwrap());
            }
            if at == body.len() {
                break;
            }
            let end = (at + size).min(body.len());
            d.push(&body[at..end]);
            most = most.max(d.buffered());
            at = end;
            if at == body.len() {
                d.finish();
            }
        }
        (records, d.skipped_bytes(), d.torn_tail(), most)
    }

    #[test]
    fn any_split_reads_what_reading_at_once_does_damage_included() {
        let mut body = log_body(50);
        let one = body.len() / 50;
        // A flipped byte in frame 7, 3 KB of garbage after frame 20, a torn tail.
        body[7 * one + FRAME_HEADER_LEN + 2] ^= 0x5a;
        let garbage: Vec<u8> = (0..3_000u32)
            .map(|i| i.wrapping_mul(2_654_435_761) as u8)
            .collect();
        body.splice(21 * one..21 * one, garbage);
        body.truncate(body.len() - 5);
        let whole: Decoded<ProbeRecord> = decode_records(&body);
        assert_eq!(whole.records.len(), 48);
        assert!(whole.torn_tail);
        for sizes in [&[1usize][..], &[3, 700, 17], &[one], &[4096]] {
            let (records, skipped, torn, _) = in_pieces(&body, sizes);
            assert_eq!(records, whole.records, "pieces of {sizes:?}");
            assert_eq!((skipped, torn), (whole.skipped_bytes, whole.torn_tail));
        }
    }

    #[test]
    fn the_buffer_holds_a_frame_not_the_body() {
        let body = log_body(10_000);
        let (records, _, _, most) = in_pieces(&body, &[64 * 1024]);
        assert_eq!(records.len(), 10_000);
        assert!(most < 2 * 64 * 1024, "held {most} bytes");
    }

    #[test]
    fn garbage_is_skipped_as_it_comes_not_held() {
        // 8 MiB of random bytes between two stretches of records.
        let good = log_body(100);
        let mut rng = fastrand::Rng::with_seed(0x2545_f491_4f6c_dd1d);
        let mut body = good.clone();
        body.extend(std::iter::repeat_with(|| rng.u8(..)).take(8 << 20));
        body.extend(&good);
        let (records, skipped, _, most) = in_pieces(&body, &[64 * 1024]);
        assert_eq!(records.len(), 200);
        assert_eq!(skipped, 8 << 20);
        // A candidate frame may announce up to 1 MiB, which is waited for.
        assert!(most < 2 * RESYNC_MAX_LEN, "held {most} bytes");
    }
}
