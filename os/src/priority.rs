//! Thread CPU priority: background work on the server steps aside for the
//! fan-out and for the application the box exists for.

use std::io;

/// The nice value of background threads: the lowest priority that still
/// gets a share of a busy CPU (SCHED_IDLE could starve it).
pub const BACKGROUND_NICE: i32 = 19;

/// The nice value of the agent's recorder: below the shards, so encoding
/// and writing records never takes a core from a fan-out, but above the
/// background, so the log keeps up on a busy box.
pub const RECORDER_NICE: i32 = 10;

/// Gives the calling thread (only it: Linux keeps nice per thread) the
/// [`BACKGROUND_NICE`] priority. Lowering needs no privilege.
pub fn lower_this_thread() -> io::Result<()> {
    nice_this_thread(BACKGROUND_NICE)
}

/// Gives the calling thread nice value `nice` (only lowering needs no
/// privilege).
#[allow(unsafe_code)]
pub fn nice_this_thread(nice: i32) -> io::Result<()> {
    // Why libc: nix has no setpriority wrapper.
    let tid = nix::unistd::gettid().as_raw();
    // SAFETY: setpriority takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes the calling thread (only it) a real-time one, `SCHED_FIFO` at
/// `priority` (1 is the lowest): woken at once when its timer fires, ahead
/// of every ordinary thread, however busy the CPU. Needs `CAP_SYS_NICE` or
/// an `RLIMIT_RTPRIO` of at least `priority` (systemd: `LimitRTPRIO=`), and
/// no `RestrictRealtime=yes`; `EPERM` otherwise. The kernel's real-time
/// throttling still leaves ordinary threads 5 % of each second.
#[allow(unsafe_code)]
pub fn realtime_this_thread(priority: i32) -> io::Result<()> {
    // Why the raw syscall: nix has no sched_setscheduler wrapper, and musl's
    // (the devices' static probe) is a stub that returns ENOSYS, POSIX
    // making it per process. The kernel's call is per thread (0: this one)
    // and reads only `sched_priority`; musl's struct has more fields, so
    // the rest is zeroed rather than named.
    // SAFETY: an all-zero sched_param is a valid value of a plain C struct.
    let mut param: libc::sched_param = unsafe { std::mem::zeroed() };
    param.sched_priority = priority;
    // SAFETY: `param` is a valid sched_param that outlives the call; pid 0
    // is the calling thread; the kernel reads `param` and nothing else of ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_setscheduler,
            0,
            libc::SCHED_FIFO,
            &param as *const libc::sched_param,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks the kernel to wake the calling thread's timed sleeps on time: its
/// timer slack (by default 50 µs, by which a sleep may overrun so wake-ups
/// can be batched) becomes 1 ns. For a thread whose job is to act at a
/// moment; it costs that thread some batching, nothing else.
pub fn precise_timers_this_thread() -> io::Result<()> {
    nix::sys::prctl::set_timerslack(1).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_calling_thread_is_lowered() {
        let nice = |tid: i32| {
            let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
            let rest = &stat[stat.rfind(')').unwrap() + 2..];
            rest.split(' ').nth(16).unwrap().parse::<i32>().unwrap()
        };
        let main = nix::unistd::gettid().as_raw();
        let before = nice(main);
        let lowered = std::thread::spawn(move || {
            lower_this_thread().unwrap();
            nice(nix::unistd::gettid().as_raw())
        })
        .join()
        .unwrap();
        assert_eq!(lowered, BACKGROUND_NICE);
        assert_eq!(nice(main), before);
    }

    #[test]
    fn only_the_calling_thread_becomes_real_time_where_allowed() {
        // The scheduling policy, field 41 of a thread's stat (1: SCHED_FIFO).
        let policy = |tid: i32| {
            let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
            let rest = &stat[stat.rfind(')').unwrap() + 2..];
            rest.split(' ').nth(38).unwrap().parse::<i32>().unwrap()
        };
        let main = nix::unistd::gettid().as_raw();
        let (result, after) = std::thread::spawn(move || {
            let r = realtime_this_thread(1);
            (r, policy(nix::unistd::gettid().as_raw()))
        })
        .join()
        .unwrap();
        match result {
            Ok(()) => assert_eq!(after, libc::SCHED_FIFO),
            // Not allowed here (no CAP_SYS_NICE, no RLIMIT_RTPRIO): said as such.
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
                assert_eq!(after, libc::SCHED_OTHER);
            }
        }
        assert_eq!(policy(main), libc::SCHED_OTHER);
    }
}
