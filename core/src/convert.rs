//! Integer conversions between the types times and counts come in, each
//! with its rule said once, so no `as` can wrap or truncate a figure
//! silently (core denies the cast lints outside tests).
//!
//! Nanoseconds since 1970 fit an `i64` until 2262 and durations for 292
//! years, so a conversion that would overflow saturates: a figure pinned
//! at its end is visible in a report, a wrapped one is a plausible lie.

/// A `u64` (a wall time or a duration in ns, a count) as an `i64`, at most
/// `i64::MAX`.
pub fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// An `i64` that cannot mean less than nothing (a spread, a bound, a
/// lead) as a `u64`: a negative one is 0.
pub fn unsigned(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

/// An `i128` (a sum or difference of times worked in wide arithmetic) as an
/// `i64`, saturating at both ends.
pub fn narrow(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

/// An `i128` that cannot mean less than nothing as a `u64`: negative is 0,
/// and it saturates at `u64::MAX`.
pub fn narrow_unsigned(v: i128) -> u64 {
    u64::try_from(v).unwrap_or(if v < 0 { 0 } else { u64::MAX })
}

/// A count of things in memory (copies, actions, runs) as the `u32` the
/// records hold, at most `u32::MAX`.
pub fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// A length or an offset read from a peer's bytes as a `usize`: exact on
/// 64-bit targets, `usize::MAX` past a 32-bit device's address space
/// (every caller bounds it by what it holds next).
pub fn index(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// A float (a scaled or modelled time, already rounded as its caller
/// wants) as a `u64`: NaN and negatives are 0, and it saturates at
/// `u64::MAX`, which is what Rust's float-to-integer `as` does.
#[expect(
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "float-to-integer `as` saturates and maps NaN to 0: the rule this function names"
)]
pub fn from_float(x: f64) -> u64 {
    x as u64
}

/// A float as an `i64`, saturating at both ends, NaN as 0.
#[expect(
    clippy::cast_possible_truncation,
    reason = "float-to-integer `as` saturates and maps NaN to 0: the rule this function names"
)]
pub fn from_float_signed(x: f64) -> i64 {
    x as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_conversion_saturates_rather_than_wraps() {
        assert_eq!(signed(u64::MAX), i64::MAX);
        assert_eq!(signed(7), 7);
        assert_eq!(unsigned(-5), 0);
        assert_eq!(unsigned(5), 5);
        assert_eq!(narrow(i128::MAX), i64::MAX);
        assert_eq!(narrow(i128::MIN), i64::MIN);
        assert_eq!(narrow(-3), -3);
        assert_eq!(narrow_unsigned(-3), 0);
        assert_eq!(narrow_unsigned(i128::MAX), u64::MAX);
        assert_eq!(count(usize::MAX), u32::MAX);
        assert_eq!(index(12), 12);
        assert_eq!(from_float(f64::NAN), 0);
        assert_eq!(from_float(-1.0), 0);
        assert_eq!(from_float(1e30), u64::MAX);
        assert_eq!(from_float(2.9), 2);
        assert_eq!(from_float_signed(-1e30), i64::MIN);
    }
}
