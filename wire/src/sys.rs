//! The thin OS edge every skewscope binary shares: clocks, host name, and the
//! open-file limit. Everything else in this crate is pure.

use std::io;

/// Reads a clock in nanoseconds (`CLOCK_REALTIME` or `CLOCK_MONOTONIC`).
pub fn read_clock(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; both clock ids exist on every Linux.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    debug_assert_eq!(rc, 0, "clock_gettime failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `CLOCK_REALTIME` straight from the kernel, bypassing libc: the clock kernel
/// timestamps (`SO_TIMESTAMPING`) are taken on. Intervals between a kernel stamp
/// and now are measured with it, so they stay right even when the process's
/// libc clock is shifted (as `faketime` does in tests).
pub fn kernel_realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: raw clock_gettime with a valid, writable timespec.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clock_gettime,
            libc::CLOCK_REALTIME,
            &mut ts as *mut libc::timespec,
        )
    };
    debug_assert_eq!(rc, 0, "clock_gettime syscall failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The kernel's NTP discipline state, read with `adjtimex` (modes 0: read only).
pub fn kernel_clock() -> Option<crate::record::KernelClock> {
    // SAFETY: timex is plain data; all-zero (modes 0) asks only to read.
    let mut tx: libc::timex = unsafe { std::mem::zeroed() };
    // SAFETY: `tx` is a valid, writable timex.
    let state = unsafe { libc::adjtimex(&mut tx) };
    if state < 0 {
        return None;
    }
    let nano = tx.status & libc::STA_NANO != 0;
    let offset_ns = if nano {
        tx.offset as i64
    } else {
        tx.offset as i64 * 1_000
    };
    Some(crate::record::KernelClock {
        synchronized: tx.status & libc::STA_UNSYNC == 0 && state != libc::TIME_ERROR,
        status: tx.status,
        max_error_ns: (tx.maxerror as i64).max(0) as u64 * 1_000,
        est_error_ns: (tx.esterror as i64).max(0) as u64 * 1_000,
        offset_ns,
        // freq is ppm with a 16-bit fraction.
        freq_ppb: (tx.freq as i64 * 1_000) >> 16,
    })
}

/// This host's name, so reports can tell which records share a clock.
///
/// A missing name must not stop a measurement: falls back to `"unknown-host"`.
pub fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is valid and writable for its length; gethostname writes at
    // most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    let name = if rc == 0 {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).trim().to_owned()
    } else {
        String::new()
    };
    if name.is_empty() {
        "unknown-host".to_owned()
    } else {
        name
    }
}

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

/// Raises the soft `RLIMIT_NOFILE` (often 1024) to the hard limit and returns
/// the new soft limit: a hub or probe with thousands of sockets would otherwise
/// fail at the thousandth.
pub fn raise_open_file_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if limit.rlim_cur != limit.rlim_max {
        // An unlimited hard limit still caps at the kernel's nr_open.
        limit.rlim_cur = if limit.rlim_max == libc::RLIM_INFINITY {
            libc::rlim_t::try_from(nr_open().unwrap_or(1 << 20)).unwrap_or(libc::rlim_t::MAX)
        } else {
            limit.rlim_max
        };
        // SAFETY: `limit` is a valid rlimit with cur <= max.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(widen(limit.rlim_cur))
}

/// `rlim_t` is 32 bits on 32-bit glibc targets (the armv7 devices) and 64 bits
/// elsewhere, so this conversion is the identity only on some targets.
#[allow(clippy::useless_conversion)]
fn widen(value: libc::rlim_t) -> u64 {
    u64::from(value)
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_realtime_agrees_with_libc() {
        let a = read_clock(libc::CLOCK_REALTIME);
        let k = kernel_realtime_ns();
        assert!(k.abs_diff(a) < 100_000_000, "{a} vs {k}");
    }

    #[test]
    fn kernel_clock_state_is_readable() {
        let k = kernel_clock().expect("adjtimex reads");
        assert!(k.max_error_ns > 0 || k.synchronized);
    }

    #[test]
    fn host_name_is_never_empty() {
        assert!(!host_name().is_empty());
    }

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
}
