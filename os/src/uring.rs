//! One io_uring batch of sends: the benchmark's io_uring floor (feature
//! `uring`; no shipped binary uses it). Here because queueing a send whose
//! buffer the kernel reads later is `unsafe`.

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;

/// Sends `frame` to every socket through `ring`, as many per submission as
/// the queue holds, and waits for every completion; a short send is an error.
#[allow(unsafe_code)]
pub fn send_to_all(
    ring: &mut io_uring::IoUring,
    sockets: &[TcpStream],
    frame: &[u8],
) -> io::Result<()> {
    use io_uring::{opcode, types};
    let depth = ring.params().sq_entries() as usize;
    let len = u32::try_from(frame.len()).map_err(|_| io::Error::other("frame too large"))?;
    for chunk in sockets.chunks(depth) {
        {
            let mut sq = ring.submission();
            for (i, s) in chunk.iter().enumerate() {
                let send = opcode::Send::new(types::Fd(s.as_raw_fd()), frame.as_ptr(), len)
                    .flags(libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
                    .build()
                    .user_data(i as u64);
                // SAFETY: the kernel reads `frame` and uses the sockets' fds
                // until the completions below are reaped; both are borrowed for
                // this whole function, so they outlive every queued send.
                unsafe { sq.push(&send) }.map_err(|_| io::Error::other("submission queue full"))?;
            }
        }
        ring.submit_and_wait(chunk.len())?;
        for cqe in ring.completion() {
            if cqe.result() != frame.len() as i32 {
                return Err(io::Error::other(format!("short send: {}", cqe.result())));
            }
        }
    }
    Ok(())
}
