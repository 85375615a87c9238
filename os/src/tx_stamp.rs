//! Kernel transmit timestamps (`SO_TIMESTAMPING` on the error queue): turning
//! them on for a socket and reading what the kernel queued. Which broadcast a
//! stamp belongs to is the agent's accounting, not the OS's.
//!
//! Stamps are keyed by byte offset (`SOF_TIMESTAMPING_OPT_ID` with
//! `OPT_ID_TCP`: the counter is zero after the option is set, so a write
//! ending at stream byte N is stamped with id N − 1).

use std::io::{self, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd};

use nix::cmsg_space;
use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, SockaddrStorage, TimestampingFlag, recvmsg, setsockopt, sockopt,
};
use nix::sys::time::TimeSpec;
use skewscope_core::record::TxKind;

/// `SCM_TSTAMP_SND` and `SCM_TSTAMP_SCHED` from linux/errqueue.h.
const SCM_TSTAMP_SND: u32 = 0;
const SCM_TSTAMP_SCHED: u32 = 1;

/// Turns transmit timestamping on for one socket: the software stamp only,
/// taken as the packet leaves for the device (`TX_SOFTWARE`), which is all
/// the report uses. Asking for `TX_SCHED` too queued a second error-queue
/// message per write, for a stamp nothing read.
pub fn enable(socket: &impl AsFd) -> io::Result<()> {
    let bits = libc::SOF_TIMESTAMPING_TX_SOFTWARE
        | libc::SOF_TIMESTAMPING_SOFTWARE
        | libc::SOF_TIMESTAMPING_OPT_ID
        | libc::SOF_TIMESTAMPING_OPT_ID_TCP
        | libc::SOF_TIMESTAMPING_OPT_TSONLY;
    let flags = TimestampingFlag::from_bits_retain(bits);
    setsockopt(socket, sockopt::Timestamping, &flags).map_err(io::Error::from)
}

/// One transmit stamp the kernel queued.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxStampRead {
    /// The stamp's id: the stream offset of the last byte it covers (wraps).
    pub id: u32,
    /// Which stamp.
    pub kind: TxKind,
    /// The stamp, kernel `CLOCK_REALTIME` nanoseconds.
    pub realtime_ns: u64,
}

/// Reads the stamps queued on the socket's error queue, without blocking,
/// until the queue is empty or `on` says it expects no more (returns false):
/// then the read that would only find the queue empty is not made. What is
/// left is read at the next stamp's wake-up (each queued stamp wakes the
/// socket's error readiness again).
pub fn drain(socket: &impl AsRawFd, mut on: impl FnMut(TxStampRead) -> bool) {
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
                    let ns = t.system.tv_sec() as i128 * 1_000_000_000 + t.system.tv_nsec() as i128;
                    stamp = u64::try_from(ns).ok();
                }
                ControlMessageOwned::Ipv4RecvErr(e, _) | ControlMessageOwned::Ipv6RecvErr(e, _) => {
                    error = Some(e)
                }
                _ => {}
            }
        }
        let (Some(realtime_ns), Some(e)) = (stamp, error) else {
            continue;
        };
        if e.ee_origin != libc::SO_EE_ORIGIN_TIMESTAMPING {
            continue;
        }
        // Only software stamps are asked for; a scheduler stamp (another
        // tool's setting on a shared socket) is still named for what it is.
        let kind = match e.ee_info {
            SCM_TSTAMP_SND => TxKind::Software,
            SCM_TSTAMP_SCHED => TxKind::Sched,
            _ => continue,
        };
        let more = on(TxStampRead {
            id: e.ee_data,
            kind,
            realtime_ns,
        });
        if !more {
            return;
        }
    }
}
