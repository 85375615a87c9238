//! What `chronyc -c tracking` prints, parsed. Running `chronyc` is I/O and
//! lives in `skewscope_os::clock_claims`; the parsing is pure, so it is here
//! and unit-tested (and fuzzable) without chronyd.

use crate::convert;
use crate::record::ChronyTracking;

/// Parses `chronyc -c tracking` (comma-separated, seconds as decimals).
pub fn parse_tracking(csv: &str) -> Option<ChronyTracking> {
    let f: Vec<&str> = csv.trim().split(',').collect();
    if f.len() < 14 {
        return None;
    }
    let ns = |i: usize| -> Option<i64> {
        let secs: f64 = f[i].trim().parse().ok()?;
        Some(convert::from_float_signed((secs * 1e9).round()))
    };
    Some(ChronyTracking {
        reference: f[1].to_owned(),
        stratum: f[2].trim().parse().ok()?,
        system_offset_ns: ns(4)?,
        last_offset_ns: ns(5)?,
        rms_offset_ns: ns(6)?.unsigned_abs(),
        root_delay_ns: ns(10)?.unsigned_abs(),
        root_dispersion_ns: ns(11)?.unsigned_abs(),
        leap: f[13].trim().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Stamp;
    use crate::record::{ClockState, KernelClock};

    const TRACKING: &str = "C0A80001,192.168.0.1,3,1764500000.123456789,-0.000012345,0.000003000,0.000020000,-7.123,0.001,0.050,0.000400000,0.000100000,64.5,Normal\n";

    #[test]
    fn chrony_csv_is_parsed_in_nanoseconds() {
        let t = parse_tracking(TRACKING).unwrap();
        assert_eq!(t.stratum, 3);
        assert_eq!(t.system_offset_ns, -12_345);
        assert_eq!(t.rms_offset_ns, 20_000);
        assert_eq!(t.root_delay_ns, 400_000);
        assert_eq!(t.root_dispersion_ns, 100_000);
        assert_eq!(t.leap, "Normal");
        assert_eq!(parse_tracking("506 Cannot talk to daemon"), None);
    }

    #[test]
    fn claimed_bound_prefers_chrony_and_refuses_an_unsynchronised_clock() {
        let kernel = KernelClock {
            synchronized: true,
            status: 0,
            max_error_ns: 2_000_000,
            est_error_ns: 1_000,
            offset_ns: 0,
            freq_ppb: 0,
        };
        let mut state = ClockState {
            at: Stamp::default(),
            kernel: Some(kernel),
            chrony: parse_tracking(TRACKING),
        };
        // 100 µs dispersion + 200 µs half delay + 12.345 µs offset.
        assert_eq!(state.claimed_bound_ns(), Some(312_345));
        state.chrony = None;
        assert_eq!(state.claimed_bound_ns(), Some(2_000_000));
        state.kernel = Some(KernelClock {
            synchronized: false,
            ..kernel
        });
        assert_eq!(state.claimed_bound_ns(), None);
    }
}
