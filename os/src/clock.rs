//! Reading the clocks. A [`Stamp`] is plain data in the core; this is where
//! one is taken.
//!
//! Two steady clocks stamp records. The agent's stamps are on
//! `CLOCK_MONOTONIC` ([`now`], [`mono_ns`]): the server's own time base,
//! which every one of its records and timers shares. A probe's are on
//! `CLOCK_MONOTONIC_RAW` ([`now_raw`], [`raw_ns`]): the device's crystal as
//! it runs, which no time daemon moves. NTP's frequency corrections and
//! slews move `CLOCK_MONOTONIC` with the wall clock, and a device's NTP
//! slewing out an outage's error (chrony at up to 83,333 ppm) breaks what
//! the clock model assumes of the clock it works on: simulated over seven
//! days, that let the truth out of 61 of 12.1 × 10⁶ bounds for up to 13 s
//! on `CLOCK_MONOTONIC`, and out of none on the raw clock
//! (docs/benchmarks.md, clock models over days).

use nix::time::{ClockId, clock_gettime};
use skewscope_core::Stamp;

/// Reads one clock through libc (the vDSO: no syscall), in nanoseconds.
fn read(clock: ClockId) -> u64 {
    // CLOCK_REALTIME, CLOCK_MONOTONIC(_RAW) and CLOCK_BOOTTIME exist on every
    // Linux this runs on (2.6.39 on): this cannot fail.
    let ts = clock_gettime(clock).expect("clock_gettime of a standard clock");
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// A pair read further apart than this is read again (up to
/// [`PAIR_TRIES`] times): two vDSO reads take well under a microsecond, so
/// a wider bracket means the thread lost its core between them.
pub const PAIR_TEAR_NS: u64 = 2_000;

/// Reads of a pair before the narrowest is kept as it is.
pub const PAIR_TRIES: usize = 3;

/// One wall reading between two monotonic ones.
#[derive(Clone, Copy)]
struct Bracket {
    before: u64,
    wall: u64,
    after: u64,
}

impl Bracket {
    fn tear(&self) -> u64 {
        self.after - self.before
    }

    fn midpoint(&self) -> u64 {
        self.before + self.tear() / 2
    }
}

/// Reads `wall` between two monotonic readings until the bracket is at
/// most `tight_ns` wide, at most [`PAIR_TRIES`] times; the narrowest.
fn bracket(wall: impl Fn() -> u64, tight_ns: u64) -> Bracket {
    bracket_on(ClockId::CLOCK_MONOTONIC, wall, tight_ns)
}

/// [`bracket`] with `steady` read on both sides.
fn bracket_on(steady: ClockId, wall: impl Fn() -> u64, tight_ns: u64) -> Bracket {
    let mut narrowest: Option<Bracket> = None;
    for _ in 0..PAIR_TRIES {
        let b = Bracket {
            before: read(steady),
            wall: wall(),
            after: read(steady),
        };
        if narrowest.is_none_or(|n| b.tear() < n.tear()) {
            narrowest = Some(b);
        }
        if b.tear() <= tight_ns {
            break;
        }
    }
    narrowest.expect("PAIR_TRIES is at least one")
}

/// Both clocks as one moment: what every record's time is.
///
/// The wall clock is read between two monotonic reads and paired with
/// their midpoint, so a thread preempted between two reads cannot pair a
/// wall time with a monotonic time read microseconds later (an action
/// planned from such a pair fires that much late, outside any bound: seen
/// once in CI, 12 µs over the probes' bound). A bracket wider than
/// [`PAIR_TEAR_NS`] is read again; the narrowest of [`PAIR_TRIES`] is
/// kept, so the pair is off by at most half of it.
pub fn now() -> Stamp {
    stamp_on(ClockId::CLOCK_MONOTONIC)
}

/// The wall clock paired with `steady`, as [`now`] says.
fn stamp_on(steady: ClockId) -> Stamp {
    let b = bracket_on(steady, || read(ClockId::CLOCK_REALTIME), PAIR_TEAR_NS);
    Stamp {
        wall_ns: b.wall,
        mono_ns: b.midpoint(),
    }
}

/// `CLOCK_MONOTONIC` alone: the cheapest stamp, taken per client on the
/// agent's hot path.
pub fn mono_ns() -> u64 {
    read(ClockId::CLOCK_MONOTONIC)
}

/// A probe's moment: the wall clock paired with `CLOCK_MONOTONIC_RAW`
/// (see the module's doc: why the raw clock), read as [`now`] reads its
/// pair, so the two are off by at most half a narrow bracket.
pub fn now_raw() -> Stamp {
    stamp_on(ClockId::CLOCK_MONOTONIC_RAW)
}

/// `CLOCK_MONOTONIC_RAW` alone: the clock a probe's stamps, clock model
/// and timers are on (through the vDSO where the kernel offers it there).
pub fn raw_ns() -> u64 {
    read(ClockId::CLOCK_MONOTONIC_RAW)
}

/// `CLOCK_MONOTONIC` − `CLOCK_MONOTONIC_RAW` now, ns: what turns a probe's
/// raw moments into the monotonic clock the apps beside it read (and
/// back). NTP moves it by at most what it slews (chrony: up to 83,333 ppm),
/// so it converts a moment a few milliseconds away to within microseconds.
/// Read as a bracketed pair, like [`now`].
pub fn mono_minus_raw_ns() -> i64 {
    let b = bracket_on(
        ClockId::CLOCK_MONOTONIC_RAW,
        || read(ClockId::CLOCK_MONOTONIC),
        PAIR_TEAR_NS,
    );
    b.wall as i64 - b.midpoint() as i64
}

/// How long this host has been suspended since it booted:
/// `CLOCK_BOOTTIME` − `CLOCK_MONOTONIC`. The monotonic clock stops in
/// suspend and the boot-time clock does not; NTP slews both alike. So the
/// difference grows by each sleep's length and by nothing else, and a
/// probe that sees it grow knows it slept: a clock model fed before the
/// sleep maps this device's monotonic clock onto the agent's off by the
/// whole sleep (measured in docs/benchmarks.md, clock models over days).
/// Read as a bracketed pair, like [`now`].
pub fn suspended_ns() -> u64 {
    let b = bracket(|| read(ClockId::CLOCK_BOOTTIME), PAIR_TEAR_NS);
    b.wall.saturating_sub(b.midpoint())
}

/// `CLOCK_REALTIME` as the kernel keeps it: the clock kernel timestamps
/// (`SO_TIMESTAMPING`) are taken on. Intervals between a kernel stamp and now
/// are measured with it, so they stay right even when the process's libc
/// clock is shifted (as `faketime` does in tests).
///
/// Read through the vDSO (no syscall) when the libc clock is the kernel's
/// ([`libc_realtime_is_kernels`]), else with a raw syscall: a probe pays a
/// syscall per receipt only where something shifts its clock.
pub fn kernel_realtime_ns() -> u64 {
    if libc_realtime_is_kernels() {
        read(ClockId::CLOCK_REALTIME)
    } else {
        raw_realtime_ns()
    }
}

/// The kernel's realtime and the monotonic clock at one moment, for
/// converting kernel stamps (realtime) to the monotonic clock: monotonic is
/// read on both sides of the realtime reading and the midpoint taken, tried
/// again (up to three times) when a preemption stretched the bracket past
/// 20 µs. Giving up, it returns the later monotonic reading, so a converted
/// stamp errs late, never early.
pub fn kernel_realtime_and_mono_ns() -> (u64, u64) {
    const TIGHT_NS: u64 = 20_000;
    let b = bracket(kernel_realtime_ns, TIGHT_NS);
    if b.tear() <= TIGHT_NS {
        (b.wall, b.midpoint())
    } else {
        (b.wall, b.after)
    }
}

/// Whether libc's `CLOCK_REALTIME` is the kernel's, decided once per
/// process: not when a libfaketime is preloaded (`LD_PRELOAD` names it: it
/// may shift the clock later, as the tests' stepping files do), nor when
/// the two readings differ by more than a millisecond at the first call
/// (a shift preloaded some other way).
pub fn libc_realtime_is_kernels() -> bool {
    static SAME: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SAME.get_or_init(|| {
        let preloaded = std::env::var_os("LD_PRELOAD")
            .is_some_and(|p| p.to_string_lossy().contains("faketime"));
        let libc = read(ClockId::CLOCK_REALTIME);
        let kernel = raw_realtime_ns();
        !preloaded && libc.abs_diff(kernel) < 1_000_000
    })
}

/// `CLOCK_REALTIME` by the raw syscall, bypassing libc.
#[allow(unsafe_code)]
fn raw_realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // Why raw: libc's clock_gettime is what an LD_PRELOADed libfaketime
    // replaces, and this reading must be the kernel's own (nix offers only the
    // libc call).
    // SAFETY: the syscall writes one timespec into `ts`, which is valid and
    // writable; CLOCK_REALTIME exists on every Linux.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_reads_plausible_clocks() {
        let a = now();
        let b = now();
        assert!(b.mono_ns >= a.mono_ns);
        // After 2020-01-01.
        assert!(a.wall_ns > 1_577_836_800_000_000_000);
    }

    #[test]
    fn the_raw_clock_is_read_and_paired_with_the_wall_clock() {
        let a = now_raw();
        let r = raw_ns();
        let b = now_raw();
        assert!(
            a.mono_ns <= r && r <= b.mono_ns,
            "{} {r} {}",
            a.mono_ns,
            b.mono_ns
        );
        // The wall clock against the raw clock, as the monotonic pair has
        // it, give or take what the two steady clocks parted by since boot
        // (mono_minus_raw_ns) and the time between the readings.
        let m = now();
        let parted = mono_minus_raw_ns();
        let raw_level = b.wall_ns as i128 - b.mono_ns as i128;
        let mono_level = m.wall_ns as i128 - m.mono_ns as i128;
        assert!((raw_level - parted as i128 - mono_level).abs() < 5_000_000);
        // And the difference converts a raw reading to the monotonic clock.
        let mono = mono_ns() as i128;
        let converted = raw_ns() as i128 + parted as i128;
        assert!(
            (converted - mono).abs() < 5_000_000,
            "{converted} vs {mono}"
        );
    }

    #[test]
    fn the_time_suspended_does_not_grow_while_awake() {
        // A test process is not suspended between two reads: they agree
        // within the probe's threshold for a sleep (1 ms), by far.
        let a = suspended_ns();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let b = suspended_ns();
        assert!(b.abs_diff(a) < 1_000_000, "{a} then {b}");
    }

    #[test]
    fn a_realtime_and_mono_pair_is_taken_at_one_moment() {
        let (real, mono) = kernel_realtime_and_mono_ns();
        let now = now();
        // The same offset between the clocks as a fresh reading, within the
        // bracket (and the time between the two calls).
        let pair = real as i128 - mono as i128;
        let fresh = now.wall_ns as i128 - now.mono_ns as i128;
        assert!((pair - fresh).abs() < 5_000_000, "{pair} vs {fresh}");
    }

    #[test]
    fn kernel_realtime_agrees_with_libc() {
        let a = now().wall_ns;
        let k = kernel_realtime_ns();
        assert!(k.abs_diff(a) < 100_000_000, "{a} vs {k}");
        let r = raw_realtime_ns();
        assert!(r.abs_diff(a) < 100_000_000, "{a} vs {r}");
        // No faketime in a plain test process: the vDSO path is taken.
        if std::env::var_os("LD_PRELOAD").is_none() {
            assert!(libc_realtime_is_kernels());
        }
    }
}
