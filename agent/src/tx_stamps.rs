//! Kernel transmit timestamps for broadcast writes (`--tx-timestamps`).
//!
//! Each client socket asks for software TX stamps (when the packet entered the
//! queueing discipline, and when it went to the driver), keyed by byte offset
//! (`SOF_TIMESTAMPING_OPT_ID` with `OPT_ID_TCP`: the counter is zero after the
//! option is set, so a write ending at stream byte N is stamped with id N − 1).
//! The stamps are read from the socket's error queue when the shard's poll
//! reports it, between broadcasts, never inside the send loop.

use std::collections::VecDeque;
use std::io::{self, IoSliceMut};
use std::os::fd::AsFd;
use std::os::fd::AsRawFd;

use nix::cmsg_space;
use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, SockaddrStorage, TimestampingFlag, recvmsg, setsockopt, sockopt,
};
use nix::sys::time::TimeSpec;
use wire::record::TxKind;

/// Frames remembered while their stamps are outstanding; older ones are given up.
const MAX_PENDING: usize = 1024;

/// `SCM_TSTAMP_SND` and `SCM_TSTAMP_SCHED` from linux/errqueue.h.
const SCM_TSTAMP_SND: u32 = 0;
const SCM_TSTAMP_SCHED: u32 = 1;

/// Turns transmit timestamping on for one client socket.
pub fn enable(socket: &impl AsFd) -> io::Result<()> {
    let bits = libc::SOF_TIMESTAMPING_TX_SOFTWARE
        | libc::SOF_TIMESTAMPING_TX_SCHED
        | libc::SOF_TIMESTAMPING_SOFTWARE
        | libc::SOF_TIMESTAMPING_OPT_ID
        | libc::SOF_TIMESTAMPING_OPT_ID_TCP
        | libc::SOF_TIMESTAMPING_OPT_TSONLY;
    let flags = TimestampingFlag::from_bits_retain(bits);
    setsockopt(socket, sockopt::Timestamping, &flags).map_err(io::Error::from)
}

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

    /// Reads every queued stamp from the socket's error queue.
    pub fn drain(&mut self, socket: &impl AsRawFd, mut on: impl FnMut(Matched)) {
        let fd = socket.as_raw_fd();
        let mut data = [0u8; 64];
        loop {
            let mut iov = [IoSliceMut::new(&mut data)];
            let mut space = cmsg_space!([TimeSpec; 3], libc::sock_extended_err, libc::sockaddr_in6);
            let flags = MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT;
            let Ok(msg) = recvmsg::<SockaddrStorage>(fd, &mut iov, Some(&mut space), flags) else {
                return; // EAGAIN: the queue is empty
            };
            let mut stamp = None;
            let mut error = None;
            let Ok(cmsgs) = msg.cmsgs() else { return };
            for cmsg in cmsgs {
                match cmsg {
                    ControlMessageOwned::ScmTimestampsns(t) => {
                        let ns =
                            t.system.tv_sec() as i128 * 1_000_000_000 + t.system.tv_nsec() as i128;
                        stamp = u64::try_from(ns).ok();
                    }
                    ControlMessageOwned::Ipv4RecvErr(e, _)
                    | ControlMessageOwned::Ipv6RecvErr(e, _) => error = Some(e),
                    _ => {}
                }
            }
            let (Some(realtime_ns), Some(e)) = (stamp, error) else {
                continue;
            };
            if e.ee_origin != libc::SO_EE_ORIGIN_TIMESTAMPING {
                continue;
            }
            let kind = match e.ee_info {
                SCM_TSTAMP_SND => TxKind::Software,
                SCM_TSTAMP_SCHED => TxKind::Sched,
                _ => continue,
            };
            if let Some(broadcast) = self.matched(e.ee_data, kind) {
                on(Matched {
                    broadcast,
                    kind,
                    realtime_ns,
                });
            }
        }
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
