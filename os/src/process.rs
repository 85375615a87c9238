//! Another process on this host, watched from outside: the CPU time it has
//! used and what it was started as. A load test (`skewscope sweep
//! --server-pid`) charges the server it loads with the CPU each stage cost
//! it, and names what it ran.

use std::io;
use std::path::Path;
use std::time::Duration;

/// What `/proc` counts CPU time in (`USER_HZ`) when the aux vector does
/// not say: 100 on every architecture skewscope builds for.
const DEFAULT_TICKS_PER_SECOND: u64 = 100;

/// The aux vector's entry for `USER_HZ` (`AT_CLKTCK` in `<elf.h>`).
const AT_CLKTCK: u64 = 17;

/// The CPU time a process has used so far: the run time of each of its
/// threads alive now, to the nanosecond (`/proc/PID/task/*/schedstat`),
/// or where the kernel keeps no schedstat, its user and system time in
/// clock ticks (`/proc/PID/stat`: 10 ms steps, too coarse for a short
/// stage). Over a window, a thread that ended within it loses its time;
/// children are not in it: a server of several worker processes is
/// measured by each worker's pid.
pub fn cpu_time(pid: u32) -> io::Result<Duration> {
    match threads_run_time(pid) {
        Some(ns) => Ok(Duration::from_nanos(ns)),
        None => stat_cpu_time(pid),
    }
}

/// The sum of the run times of `pid`'s threads; `None` without schedstat.
fn threads_run_time(pid: u32) -> Option<u64> {
    let mut sum = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let Ok(sched) = std::fs::read_to_string(task.ok()?.path().join("schedstat")) else {
            continue; // the thread ended meanwhile
        };
        sum += sched.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(sum)
}

/// utime + stime of `/proc/PID/stat`, its threads (and those ended) included.
fn stat_cpu_time(pid: u32) -> io::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let ticks = stat_cpu_ticks(&stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("/proc/{pid}/stat: no CPU times in {stat:?}"),
        )
    })?;
    let per_second = ticks_per_second();
    Ok(Duration::from_nanos(
        (u128::from(ticks) * 1_000_000_000 / u128::from(per_second)) as u64,
    ))
}

/// Whether a process with this id runs now (and this process may read it).
pub fn exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}/stat")).exists()
}

/// What the process was started as: its command line, arguments joined by
/// spaces; `None` when it is gone or hides it (a kernel thread).
pub fn command_line(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let words: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect();
    (!words.is_empty()).then(|| words.join(" "))
}

/// utime + stime from a `/proc/PID/stat` line. The command name (field 2)
/// is in parentheses and may hold spaces and parentheses itself, so the
/// fields are counted after the last `)`.
fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace();
    // Field 3 (state) is the first after the name; utime is field 14.
    let utime: u64 = fields.nth(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// `USER_HZ`, as the kernel told this process in its aux vector.
fn ticks_per_second() -> u64 {
    std::fs::read("/proc/self/auxv")
        .ok()
        .and_then(|auxv| aux_value(&auxv, AT_CLKTCK))
        .filter(|hz| *hz > 0)
        .unwrap_or(DEFAULT_TICKS_PER_SECOND)
}

/// The value of entry `key` in an aux vector of native-word pairs.
fn aux_value(auxv: &[u8], key: u64) -> Option<u64> {
    const WORD: usize = std::mem::size_of::<usize>();
    let word = |bytes: &[u8]| -> u64 {
        let mut b = [0u8; 8];
        b[..WORD].copy_from_slice(bytes);
        u64::from_ne_bytes(b)
    };
    auxv.chunks_exact(2 * WORD)
        .map(|pair| (word(&pair[..WORD]), word(&pair[WORD..])))
        .take_while(|(k, _)| *k != 0)
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_fields_are_counted_after_the_name_whatever_it_holds() {
        let stat = "1234 (uvicorn: a (b) c) S 1 2 3 4 5 6 7 8 9 10 250 75 0 0 20 0 3 0";
        assert_eq!(stat_cpu_ticks(stat), Some(325));
        assert_eq!(stat_cpu_ticks("1234 (x) S 1"), None);
    }

    #[test]
    fn this_process_is_seen_using_cpu() {
        let me = std::process::id();
        assert!(exists(me));
        let before = cpu_time(me).unwrap();
        let start = std::time::Instant::now();
        let mut spin = 0u64;
        while start.elapsed() < Duration::from_millis(60) {
            spin = spin.wrapping_add(std::hint::black_box(1));
        }
        assert!(spin > 0);
        assert!(cpu_time(me).unwrap() > before);
        assert!(stat_cpu_time(me).unwrap() > Duration::ZERO);
        assert!(command_line(me).is_some());
        assert!(!exists(u32::MAX));
        assert_eq!(ticks_per_second(), 100);
    }
}
