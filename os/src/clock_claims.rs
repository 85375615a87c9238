//! What a clock claims about itself: the kernel's NTP discipline state
//! (`adjtimex`) and, when chronyd answers, its tracking report. Blocking (it
//! may run `chronyc`): call it off any latency-sensitive thread.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use skewscope_core::record::{ChronyTracking, ClockState, KernelClock};

/// Longest wait for `chronyc`: a device without chronyd must not stall a probe.
const CHRONYC_TIMEOUT: Duration = Duration::from_millis(800);
/// How often a running `chronyc` is checked for having finished.
const CHRONYC_POLL: Duration = Duration::from_millis(10);

/// Reads the kernel's state and, if chronyd answers, its tracking figures,
/// stamped `at` (the caller's clocks: the agent's or a probe's).
pub fn read(at: skewscope_core::Stamp) -> ClockState {
    ClockState {
        at,
        kernel: kernel_clock(),
        chrony: chronyc_tracking(),
    }
}

/// The kernel's NTP discipline state, read with `adjtimex` (modes 0: read only).
#[allow(unsafe_code)]
pub fn kernel_clock() -> Option<KernelClock> {
    // Why libc: nix has no adjtimex wrapper.
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
    Some(KernelClock {
        synchronized: tx.status & libc::STA_UNSYNC == 0 && state != libc::TIME_ERROR,
        status: tx.status,
        max_error_ns: (tx.maxerror as i64).max(0) as u64 * 1_000,
        est_error_ns: (tx.esterror as i64).max(0) as u64 * 1_000,
        offset_ns,
        // freq is ppm with a 16-bit fraction.
        freq_ppb: (tx.freq as i64 * 1_000) >> 16,
    })
}

/// Runs `chronyc -c -n tracking` with a deadline and parses its answer;
/// `None` when chronyd is absent, silent or slow.
fn chronyc_tracking() -> Option<ChronyTracking> {
    let mut child = Command::new("chronyc")
        .args(["-c", "-n", "tracking"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let deadline = Instant::now() + CHRONYC_TIMEOUT;
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break,
            Ok(Some(_)) | Err(_) => return None,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            // A child process gives no readiness to wait on here: poll it.
            Ok(None) => std::thread::sleep(CHRONYC_POLL),
        }
    }
    let mut out = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take()?, &mut out).ok()?;
    skewscope_core::chrony::parse_tracking(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_clock_state_is_readable() {
        let k = kernel_clock().expect("adjtimex reads");
        assert!(k.max_error_ns > 0 || k.synchronized);
    }

    #[test]
    fn reading_never_fails() {
        let s = read(crate::clock::now());
        assert!(s.at.wall_ns > 0);
    }
}
