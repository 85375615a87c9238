//! One direction of a TCP connection, put back in order from captured
//! segments: each byte once, with the capture time of the segment that
//! first carried it. Retransmissions keep the first transmission's time
//! and are counted; segments captured out of order wait (bounded) until the
//! gap before them fills.

use crate::convert;
use std::collections::BTreeMap;

/// Most bytes held waiting for a gap to fill before the direction is given
/// up as lost (a capture that missed a segment never fills it).
pub const MAX_PENDING_BYTES: usize = 4 * 1024 * 1024;

/// The direction could not be followed any more.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("more than {MAX_PENDING_BYTES} bytes wait behind a gap the capture never filled")]
pub struct GapNeverFilled;

/// One direction's reassembly state.
#[derive(Debug)]
pub struct Reassembler {
    /// Sequence number of the next byte expected.
    next_seq: u32,
    /// Stream offset of that byte (bytes delivered so far).
    next_offset: u64,
    /// Segments ahead of `next`, by stream offset: bytes and capture time.
    pending: BTreeMap<u64, (Vec<u8>, u64)>,
    pending_bytes: usize,
    /// Segments that carried only bytes already delivered.
    pub retransmitted: u64,
    /// Segments captured ahead of a gap.
    pub reordered: u64,
}

impl Reassembler {
    /// A direction whose SYN carried sequence number `isn`.
    pub fn after_syn(isn: u32) -> Reassembler {
        Reassembler {
            next_seq: isn.wrapping_add(1),
            next_offset: 0,
            pending: BTreeMap::new(),
            pending_bytes: 0,
            retransmitted: 0,
            reordered: 0,
        }
    }

    /// Bytes delivered in order so far.
    #[cfg(test)]
    pub fn delivered(&self) -> u64 {
        self.next_offset
    }

    /// Takes a segment captured at `at_ns`; hands every byte that is now
    /// in order to `deliver`, with the capture time of the segment that
    /// first carried it.
    pub fn push(
        &mut self,
        seq: u32,
        payload: &[u8],
        at_ns: u64,
        deliver: &mut impl FnMut(&[u8], u64),
    ) -> Result<(), GapNeverFilled> {
        if payload.is_empty() {
            return Ok(());
        }
        // Where it starts relative to what is expected, across wrap-around.
        let ahead = i64::from(seq.wrapping_sub(self.next_seq).cast_signed());
        let next = convert::signed(self.next_offset);
        let start = next + ahead;
        let end = start + convert::signed(payload.len() as u64);
        if end <= next {
            self.retransmitted += 1;
            return Ok(());
        }
        if start > next {
            self.reordered += 1;
            self.hold(convert::unsigned(start), payload, at_ns);
            if self.pending_bytes > MAX_PENDING_BYTES {
                return Err(GapNeverFilled);
            }
            return Ok(());
        }
        // In order, perhaps with a head already delivered (a resend that
        // carries new bytes too): those new bytes are this capture's.
        let fresh = &payload[convert::index(convert::unsigned(next - start))..];
        self.advance(fresh, at_ns, deliver);
        self.drain(deliver);
        Ok(())
    }

    fn hold(&mut self, offset: u64, payload: &[u8], at_ns: u64) {
        // A resend of a held segment keeps the first capture.
        if let Some((held, _)) = self.pending.get(&offset)
            && held.len() >= payload.len()
        {
            self.retransmitted += 1;
            return;
        }
        if let Some((old, _)) = self.pending.insert(offset, (payload.to_vec(), at_ns)) {
            self.pending_bytes -= old.len();
        }
        self.pending_bytes += payload.len();
    }

    fn advance(&mut self, bytes: &[u8], at_ns: u64, deliver: &mut impl FnMut(&[u8], u64)) {
        deliver(bytes, at_ns);
        self.next_offset += bytes.len() as u64;
        // A delivery is a segment or what was held, far under 4 GiB.
        self.next_seq = self.next_seq.wrapping_add(convert::count(bytes.len()));
    }

    /// Delivers held segments the stream has now reached.
    fn drain(&mut self, deliver: &mut impl FnMut(&[u8], u64)) {
        while let Some((&offset, _)) = self.pending.first_key_value() {
            if offset > self.next_offset {
                return;
            }
            let (bytes, at_ns) = self.pending.remove(&offset).expect("just seen");
            self.pending_bytes -= bytes.len();
            let skip = convert::index(self.next_offset - offset);
            if skip >= bytes.len() {
                self.retransmitted += 1;
                continue;
            }
            self.advance(&bytes[skip..], at_ns, deliver);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(r: &mut Reassembler, segments: &[(u32, &[u8], u64)]) -> Vec<(Vec<u8>, u64)> {
        let mut out = Vec::new();
        for &(seq, payload, at) in segments {
            r.push(seq, payload, at, &mut |b, t| out.push((b.to_vec(), t)))
                .unwrap();
        }
        out
    }

    #[test]
    fn in_order_segments_pass_through_with_their_times() {
        let mut r = Reassembler::after_syn(99);
        let out = run(&mut r, &[(100, b"abc", 1), (103, b"de", 2)]);
        assert_eq!(out, vec![(b"abc".to_vec(), 1), (b"de".to_vec(), 2)]);
        assert_eq!(r.delivered(), 5);
    }

    #[test]
    fn a_resend_keeps_the_first_time_and_is_counted() {
        let mut r = Reassembler::after_syn(0);
        let out = run(&mut r, &[(1, b"abc", 1), (1, b"abc", 5), (2, b"bcdef", 6)]);
        // The whole resend is dropped; the partial one gives only its new bytes.
        assert_eq!(out, vec![(b"abc".to_vec(), 1), (b"def".to_vec(), 6)]);
        assert_eq!(r.retransmitted, 1);
    }

    #[test]
    fn out_of_order_segments_wait_for_the_gap() {
        let mut r = Reassembler::after_syn(0);
        let out = run(&mut r, &[(4, b"def", 2), (7, b"g", 3), (1, b"abc", 4)]);
        assert_eq!(
            out,
            vec![
                (b"abc".to_vec(), 4),
                (b"def".to_vec(), 2),
                (b"g".to_vec(), 3)
            ]
        );
        assert_eq!(r.reordered, 2);
    }

    #[test]
    fn sequence_numbers_wrap() {
        let mut r = Reassembler::after_syn(u32::MAX - 2);
        let out = run(&mut r, &[(u32::MAX - 1, b"ab", 1), (0, b"cd", 2)]);
        assert_eq!(out, vec![(b"ab".to_vec(), 1), (b"cd".to_vec(), 2)]);
        assert_eq!(r.delivered(), 4);
    }

    #[test]
    fn a_gap_that_never_fills_gives_up_bounded() {
        let mut r = Reassembler::after_syn(0);
        let chunk = vec![0u8; 64 * 1024];
        let mut result = Ok(());
        for i in 0..100u32 {
            result = r.push(10 + i * chunk.len() as u32, &chunk, 1, &mut |_, _| {});
            if result.is_err() {
                break;
            }
        }
        assert_eq!(result, Err(GapNeverFilled));
    }
}
