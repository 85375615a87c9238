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
}
