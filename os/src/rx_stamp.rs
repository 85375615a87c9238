//! Kernel receive timestamps beneath the WebSocket reader.
//!
//! [`RxStamped`] is the TCP stream tokio-tungstenite reads from. It asks the
//! kernel for software RX timestamps (`SO_TIMESTAMPING`) and reads with
//! `recvmsg`, keeping the stamp of the last segment each read consumed. When a
//! message completes, the connection turns that stamp into how long ago the
//! kernel had the message (on the kernel's own clock), so a receipt has both the
//! kernel's and the process's view of when it arrived.
//!
//! For TCP the kernel reports the stamp of the last segment a `recvmsg` read.
//! A message read together with later bytes therefore gets a stamp that is, if
//! anything, late, and never later than its userspace stamp.

use std::io::{self, IoSliceMut};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use nix::cmsg_space;
use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, SockaddrStorage, TimestampingFlag, recvmsg, setsockopt, sockopt,
};
use nix::sys::time::TimeSpec;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// The kernel stamp of the latest read, shared with the connection's receive loop.
#[derive(Clone, Debug, Default)]
pub struct LastRx(Arc<AtomicU64>);

impl LastRx {
    /// How long before `kernel_now_ns` (a [`crate::clock::kernel_realtime_ns`]
    /// reading) the kernel received the bytes of the latest read; `None` when
    /// it gave no stamp.
    pub fn delay_ns(&self, kernel_now_ns: u64) -> Option<u64> {
        let stamp = self.0.load(Ordering::Acquire);
        if stamp == 0 {
            return None;
        }
        kernel_now_ns.checked_sub(stamp)
    }
}

/// A TCP stream whose reads carry kernel receive timestamps.
#[derive(Debug)]
pub struct RxStamped {
    inner: TcpStream,
    last: LastRx,
    /// Whether the kernel accepted the timestamping option.
    enabled: bool,
}

impl RxStamped {
    /// Asks the kernel for software RX stamps on `stream` (carrying on without
    /// them where it refuses) and returns the wrapped stream and its stamp handle.
    pub fn new(stream: TcpStream) -> (RxStamped, LastRx) {
        let flags = TimestampingFlag::SOF_TIMESTAMPING_RX_SOFTWARE
            | TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE;
        let enabled = setsockopt(&stream, sockopt::Timestamping, &flags).is_ok();
        let last = LastRx::default();
        (
            RxStamped {
                inner: stream,
                last: last.clone(),
                enabled,
            },
            last,
        )
    }

    /// The wrapped socket, for its addresses.
    pub fn get_ref(&self) -> &TcpStream {
        &self.inner
    }

    /// The socket back (its timestamping left on: a plain `read` ignores
    /// the stamps).
    pub fn into_inner(self) -> TcpStream {
        self.inner
    }

    fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        let fd = self.inner.as_raw_fd();
        let mut iov = [IoSliceMut::new(buf)];
        let mut space = cmsg_space!(TimeSpec, TimeSpec, TimeSpec);
        let msg = recvmsg::<SockaddrStorage>(fd, &mut iov, Some(&mut space), MsgFlags::empty())
            .map_err(io::Error::from)?;
        let mut stamp = 0u64;
        for cmsg in msg.cmsgs().map_err(io::Error::from)? {
            if let ControlMessageOwned::ScmTimestampsns(t) = cmsg {
                let ns = t.system.tv_sec() as i128 * 1_000_000_000 + t.system.tv_nsec() as i128;
                stamp = u64::try_from(ns).unwrap_or(0);
            }
        }
        let n = msg.bytes;
        if n > 0 {
            self.last.0.store(stamp, Ordering::Release);
        }
        Ok(n)
    }
}

impl AsyncRead for RxStamped {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.enabled {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        loop {
            ready!(this.inner.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            let room = unfilled.len();
            let mut read = None;
            // A read shorter than the buffer emptied the socket's queue:
            // readiness is cleared now (said as WouldBlock), instead of by a
            // second recvmsg that fails with EAGAIN, one wasted syscall per
            // message. tokio clears it only if no readiness event came in
            // since it was polled, so bytes that arrive meanwhile still wake
            // the reader.
            let outcome = this.inner.try_io(Interest::READABLE, || {
                let n = this.recv(unfilled)?;
                read = Some(n);
                if n > 0 && n < room {
                    Err(io::ErrorKind::WouldBlock.into())
                } else {
                    Ok(n)
                }
            });
            match (outcome, read) {
                (Ok(n), _) | (Err(_), Some(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                (Err(e), None) if e.kind() == io::ErrorKind::WouldBlock => continue,
                (Err(e), None) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for RxStamped {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
