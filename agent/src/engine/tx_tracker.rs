//! Which broadcast each kernel transmit timestamp belongs to (`--tx-timestamps`).
//!
//! The kernel keys a stamp by the stream offset of the last byte it covers;
//! this tracker remembers where each broadcast's frame ended on one socket.
//! The stamps are read (by `skewscope_os::tx_stamp`) when the shard's poll
//! reports the error queue, between broadcasts, never inside the send loop.

use std::collections::VecDeque;
use std::os::fd::AsRawFd;

use skewscope_core::record::TxKind;

/// Frames remembered while their stamps are outstanding; older ones are given up.
const MAX_PENDING: usize = 1024;

/// One stamp matched to the broadcast it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Matched {
    /// Broadcast id.
    pub broadcast: u64,
    /// Which stamp.
    pub kind: TxKind,
    /// The stamp, kernel `CLOCK_REALTIME` nanoseconds.
    pub realtime_ns: u64,
}

/// Byte accounting for one socket: which stamp id belongs to which broadcast.
#[derive(Debug, Default)]
pub struct TxTracker {
    /// Bytes written since timestamping was enabled.
    written: u64,
    /// (id of a frame's last byte, broadcast id), oldest first.
    pending: VecDeque<(u32, u64)>,
}

impl TxTracker {
    /// Counts bytes accepted by a write.
    pub fn wrote(&mut self, n: usize) {
        self.written += n as u64;
    }

    /// The write that just completed ended broadcast `id`'s frame.
    pub fn frame_done(&mut self, broadcast: u64) {
        if self.pending.len() == MAX_PENDING {
            self.pending.pop_front();
        }
        // The kernel's id is a u32 that wraps.
        self.pending
            .push_back(((self.written.wrapping_sub(1)) as u32, broadcast));
    }

    /// Matches a stamp with id `id`; a SND stamp retires the frame and every
    /// older one (their stamps will not come).
    fn matched(&mut self, id: u32, kind: TxKind) -> Option<u64> {
        let at = self.pending.iter().position(|&(i, _)| i == id)?;
        let broadcast = self.pending[at].1;
        if kind == TxKind::Software {
            self.pending.drain(..=at);
        }
        Some(broadcast)
    }

    /// Reads the queued stamps from the socket's error queue and reports
    /// those that end a tracked frame; stops once no tracked frame is left
    /// waiting for its stamp (one `recvmsg` per copy, not two).
    pub fn drain(&mut self, socket: &impl AsRawFd, mut on: impl FnMut(Matched)) {
        skewscope_os::tx_stamp::drain(socket, |read| {
            if let Some(broadcast) = self.matched(read.id, read.kind) {
                on(Matched {
                    broadcast,
                    kind: read.kind,
                    realtime_ns: read.realtime_ns,
                });
            }
            !self.pending.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_last_byte_offsets_and_snd_retires_older_frames() {
        let mut t = TxTracker::default();
        t.wrote(454);
        t.frame_done(1); // bytes 0..=453
        t.wrote(200);
        t.wrote(254);
        t.frame_done(2); // ends at 907
        assert_eq!(t.matched(453, TxKind::Sched), Some(1));
        assert_eq!(t.matched(907, TxKind::Software), Some(2));
        // Frame 1's SND stamp never came; it was retired with frame 2's.
        assert_eq!(t.matched(453, TxKind::Software), None);
        assert_eq!(t.matched(1, TxKind::Software), None);
    }
}
