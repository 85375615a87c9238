//! Which cores a thread may run on: the agent can pin shard i to core i,
//! so a shard's clients' socket state stays in one core's caches.

use std::io;

use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

/// The cores the calling thread may run on (its affinity mask, inherited
/// from the process, which `taskset` or systemd's `CPUAffinity=` may have
/// narrowed), in order.
pub fn allowed_cores() -> io::Result<Vec<usize>> {
    let set = sched_getaffinity(Pid::from_raw(0)).map_err(io::Error::from)?;
    Ok((0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect())
}

/// Pins the calling thread (only it) to `core`.
pub fn pin_this_thread(core: usize) -> io::Result<()> {
    let mut set = CpuSet::new();
    set.set(core).map_err(io::Error::from)?;
    sched_setaffinity(Pid::from_raw(0), &set).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_thread_runs_on_its_core_alone() {
        let cores = allowed_cores().unwrap();
        assert!(!cores.is_empty());
        let last = *cores.last().unwrap();
        let seen = std::thread::spawn(move || {
            pin_this_thread(last).unwrap();
            allowed_cores().unwrap()
        })
        .join()
        .unwrap();
        assert_eq!(seen, vec![last]);
        // The process (this thread) keeps its own mask.
        assert_eq!(allowed_cores().unwrap(), cores);
    }
}
