//! The open-file limit: every client is a socket, and the soft limit (often
//! 1,024) would stop a hub or a probe at its thousandth connection.

use std::io;

use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit, setrlimit};

/// Descriptors kept free beyond the sockets asked for: stdio, logs, epoll and
/// wake-up descriptors, DNS lookups.
const HEADROOM: u64 = 64;

/// The open-file limit is too low for what was asked.
#[derive(Debug, thiserror::Error)]
pub enum FileLimitError {
    /// The hard limit is below what is needed.
    #[error(
        "{sockets} sockets need about {needed} open files but the hard limit is {hard}; raise it (ulimit -Hn, or LimitNOFILE= in the systemd unit)"
    )]
    HardLimit {
        /// Sockets asked for.
        sockets: u32,
        /// Descriptors needed in all.
        needed: u64,
        /// The hard limit.
        hard: u64,
    },
    /// getrlimit/setrlimit failed.
    #[error("cannot read or raise the open-file limit: {0}")]
    Os(#[from] io::Error),
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns the new soft
/// limit.
pub fn raise_open_file_limit() -> io::Result<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(io::Error::from)?;
    if soft == hard {
        return Ok(widen(soft));
    }
    // An unlimited hard limit still caps at the kernel's nr_open. (rlim_t is
    // u32 on the armv7 glibc target, u64 elsewhere.)
    #[allow(clippy::useless_conversion)]
    let target = if hard == RLIM_INFINITY {
        nr_open().and_then(|n| n.try_into().ok()).unwrap_or(1 << 20)
    } else {
        hard
    };
    setrlimit(Resource::RLIMIT_NOFILE, target, hard).map_err(io::Error::from)?;
    Ok(widen(target))
}

/// `rlim_t` is 32 bits on 32-bit glibc targets (the armv7 devices) and 64 bits
/// elsewhere, so this conversion is the identity only on some targets.
#[allow(clippy::useless_conversion)]
fn widen(value: libc::rlim_t) -> u64 {
    u64::from(value)
}

/// The kernel's per-process ceiling on open files.
fn nr_open() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Makes room for `sockets` more open files, or says clearly why there is none.
pub fn ensure_open_files(sockets: u32) -> Result<(), FileLimitError> {
    let in_use = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    let needed = in_use + u64::from(sockets) + HEADROOM;
    let limit = raise_open_file_limit()?;
    if limit < needed {
        return Err(FileLimitError::HardLimit {
            sockets,
            needed,
            hard: limit,
        });
    }
    Ok(())
}

/// How many sockets this process can still open: its open-file limit
/// (raised to the hard limit first) and the room left under it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketRoom {
    /// The open-file limit, after raising the soft limit to the hard one.
    pub limit: u64,
    /// Descriptors open now plus those kept free for logs and the runtime.
    pub taken: u64,
}

impl SocketRoom {
    /// Sockets that fit: what a load generator may open at once.
    pub fn sockets(&self) -> u64 {
        self.limit.saturating_sub(self.taken)
    }
}

/// The room for sockets in this process, to plan connections within it
/// rather than fail at the limit (`skewscope sweep` cuts a stage to it).
pub fn socket_room() -> io::Result<SocketRoom> {
    let limit = raise_open_file_limit()?;
    let in_use = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    Ok(SocketRoom {
        limit,
        taken: in_use + HEADROOM,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_few_files_always_fit() {
        ensure_open_files(10).unwrap();
    }

    #[test]
    fn more_than_the_kernel_allows_is_a_clear_error() {
        // No kernel lets one process open u32::MAX files (nr_open caps it).
        let err = ensure_open_files(u32::MAX).unwrap_err();
        assert!(matches!(err, FileLimitError::HardLimit { .. }), "{err}");
        assert!(err.to_string().contains("LimitNOFILE"));
    }

    #[test]
    fn the_room_is_the_limit_less_what_is_taken() {
        let room = socket_room().unwrap();
        assert!(room.taken > HEADROOM, "{room:?}");
        assert_eq!(room.sockets(), room.limit - room.taken);
        ensure_open_files(room.sockets().min(1000) as u32).unwrap();
    }
}
