//! The region every consistent clock lies in, and its extent at one moment.
//!
//! Write ψ(τ) for the agent's wall clock minus this device's monotonic
//! clock at device time τ. An exchange proves two things: the agent read its
//! t2 after the request left at τ1, so ψ(τ1) ≤ t2 − τ1 (an *upper* point at
//! τ1), and it wrote t3 before the reply came at τ4, so ψ(τ4) ≥ t3 − τ4 (a
//! *lower* point at τ4). Delays only loosen these; nothing a link does can
//! break them.
//!
//! Between exchanges ψ moves with the two clocks' relative frequency. The
//! model: over a window, that frequency stays within ±[`WANDER`] of some
//! drift `b`, and |b| ≤ [`MAX_DRIFT`]. So for a moment t and any exchange
//! time τ, ψ(τ) lies within `ψ(t) + b·(τ − t) ± WANDER·|τ − t|`. Each point
//! then bounds ψ(t) by a line in `b`:
//!
//! - upper point (τ, u): ψ(t) ≤ u + WANDER·|t − τ| + b·(t − τ);
//! - lower point (τ, l): ψ(t) ≥ l − WANDER·|t − τ| + b·(t − τ).
//!
//! The (ψ(t), b) pairs that meet every line form a convex polygon. Its
//! extent in ψ(t) is the tightest interval every consistent clock lies in:
//! the fastest up-path of one exchange and the fastest down-path of another
//! both count, carried to t by every drift the exchanges still allow. The
//! extent in `b` is the drift as measured: it can never leave the region.
//!
//! This is a two-variable linear program solved exactly: `hi(b)`, the least
//! of the upper lines, is concave and piecewise linear; `lo(b)`, the greatest
//! of the lower lines, convex. The drifts where `lo ≤ hi` are one interval;
//! over it, the largest `hi` and the least `lo` are at its ends or at a
//! breakpoint of an envelope. Cost: linear in the hull vertices handed in.
//!
//! Every operation here is plain `f64` arithmetic in a fixed order, and the
//! JavaScript port (`clients/js/skewscope-clock.js`, `solve`) does the same
//! operations in the same order: the shared vectors
//! (`clients/clock-vectors/`) hold both to the same bits.

use crate::clock::hull::Point;

/// The fastest two clocks may drift apart, dimensionless (100 ppm): two
/// crystals each within the ±50 ppm that boards' oscillators are made to,
/// with nothing disciplining either; an NTP-synced pair stays within a few
/// ppm. It matters only until the exchanges pin the drift down (within a
/// minute on Wi-Fi, seconds on a wired LAN). A clock that drifts faster (a
/// broken crystal, a discipline slewing hard after a big error) makes the
/// exchanges contradict each other: the model breaks, starts again from
/// the latest one, and the report counts the break.
pub const MAX_DRIFT: f64 = 100e-6;

/// How far the two clocks' relative frequency may wander from one drift
/// over a window (1 ppm): a crystal's temperature wander and a synced NTP
/// client's frequency corrections stay well inside it over minutes. It
/// loosens an exchange by 1 µs per second between it and the moment asked.
pub const WANDER: f64 = 1e-6;

/// The region's extent at one moment, relative to the query's origin.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Extent {
    /// The least ψ(t) any consistent clock has (relative ns).
    pub lo: f64,
    /// The greatest.
    pub hi: f64,
    /// The least drift consistent with every exchange (dimensionless).
    pub drift_lo: f64,
    /// The greatest.
    pub drift_hi: f64,
}

/// A bound on ψ(t) as a function of the drift: `intercept + slope·b`.
#[derive(Clone, Copy, Debug)]
struct Line {
    slope: f64,
    intercept: f64,
}

impl Line {
    fn at(self, b: f64) -> f64 {
        self.intercept + self.slope * b
    }
}

/// Scratch space a query reuses.
#[derive(Clone, Debug, Default)]
pub(crate) struct Scratch {
    upper_envelope: Vec<Line>,
    lower_envelope: Vec<Line>,
    candidates: Vec<f64>,
    gaps: Vec<f64>,
}

/// The lower envelope (least value) of `lines`, handed in with slopes not
/// increasing; on equal slopes the least intercept is kept.
fn lower_envelope(lines: impl Iterator<Item = Line>, envelope: &mut Vec<Line>) {
    envelope.clear();
    for line in lines {
        if let Some(last) = envelope.last()
            && last.slope == line.slope
        {
            if line.intercept >= last.intercept {
                continue;
            }
            envelope.pop();
        }
        while envelope.len() >= 2 {
            let a = envelope[envelope.len() - 2];
            let b = envelope[envelope.len() - 1];
            // b is never least if `line` passes below `a` where b would.
            if (line.intercept - a.intercept) * (a.slope - b.slope)
                <= (b.intercept - a.intercept) * (a.slope - line.slope)
            {
                envelope.pop();
            } else {
                break;
            }
        }
        envelope.push(line);
    }
}

fn least(envelope: &[Line], b: f64) -> f64 {
    let mut v = f64::INFINITY;
    for line in envelope {
        let x = line.at(b);
        if x < v {
            v = x;
        }
    }
    v
}

/// The region's extent at `t` from the hull points before and after it
/// (each slice sorted by time; before ≤ t < after); `None` when no clock is
/// consistent with them all (the model's assumption broke: a clock stepped
/// or slewed beyond [`WANDER`]).
pub(crate) fn solve(
    t: f64,
    upper: [&[Point]; 2],
    lower: [&[Point]; 2],
    scratch: &mut Scratch,
) -> Option<Extent> {
    // Upper lines, least of them: slopes t − τ fall as τ rises.
    let upper_lines = upper.into_iter().flatten().map(|p| {
        let since = t - p.at;
        Line {
            slope: since,
            intercept: p.value + WANDER * since.abs(),
        }
    });
    lower_envelope(upper_lines, &mut scratch.upper_envelope);
    // Lower lines, greatest of them, as the least of their negations: the
    // negated slopes τ − t fall as τ falls, so the points go in reverse.
    let lower_lines = lower
        .into_iter()
        .rev()
        .flat_map(|s| s.iter().rev())
        .map(|p| {
            let since = t - p.at;
            Line {
                slope: -since,
                intercept: -(p.value - WANDER * since.abs()),
            }
        });
    lower_envelope(lower_lines, &mut scratch.lower_envelope);
    let (up, low) = (&scratch.upper_envelope, &scratch.lower_envelope);
    if up.is_empty() || low.is_empty() {
        return None;
    }
    let hi = |b: f64| least(up, b);
    let lo = |b: f64| -least(low, b);

    // Every breakpoint of either envelope inside the drift's range, and its ends.
    let candidates = &mut scratch.candidates;
    candidates.clear();
    candidates.push(-MAX_DRIFT);
    candidates.push(MAX_DRIFT);
    for envelope in [up, low] {
        for pair in envelope.windows(2) {
            let x = (pair[1].intercept - pair[0].intercept) / (pair[0].slope - pair[1].slope);
            if x > -MAX_DRIFT && x < MAX_DRIFT {
                candidates.push(x);
            }
        }
    }
    candidates.sort_by(f64::total_cmp);
    let gaps = &mut scratch.gaps;
    gaps.clear();
    gaps.extend(candidates.iter().map(|&b| hi(b) - lo(b)));
    // hi − lo is concave: where it is ≥ 0 is one run of candidates.
    let first = gaps.iter().position(|&g| g >= 0.0)?;
    let last = gaps.iter().rposition(|&g| g >= 0.0)?;
    let drift_lo = if first == 0 {
        candidates[0]
    } else {
        let (b0, b1, g0, g1) = (
            candidates[first - 1],
            candidates[first],
            gaps[first - 1],
            gaps[first],
        );
        // Never past the candidate where the gap is ≥ 0 (rounding can).
        (b0 + (b1 - b0) * (-g0 / (g1 - g0))).min(b1)
    };
    let drift_hi = if last == candidates.len() - 1 {
        candidates[last]
    } else {
        let (b0, b1, g0, g1) = (
            candidates[last],
            candidates[last + 1],
            gaps[last],
            gaps[last + 1],
        );
        (b0 + (b1 - b0) * (g0 / (g0 - g1))).max(b0)
    };
    let mut extent = Extent {
        lo: lo(drift_lo).min(lo(drift_hi)),
        hi: hi(drift_lo).max(hi(drift_hi)),
        drift_lo,
        drift_hi,
    };
    for &b in &candidates[first..=last] {
        extent.lo = extent.lo.min(lo(b));
        extent.hi = extent.hi.max(hi(b));
    }
    Some(extent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(at: f64, value: f64) -> Point {
        Point { at, value }
    }

    #[test]
    fn one_exchange_bounds_the_offset_by_its_round_trip() {
        // Sent at 0 with ψ ≤ 1000, answered at 2000 with ψ ≥ −1000.
        let mut s = Scratch::default();
        let e = solve(
            1_000.0,
            [&[p(0.0, 1_000.0)], &[]],
            [&[], &[p(2_000.0, -1_000.0)]],
            &mut s,
        )
        .unwrap();
        // At the midpoint the drift can move each end by 1000 ns × (100 + 1) ppm.
        assert!(
            (e.hi - (1_000.0 + 1_000.0 * (MAX_DRIFT + WANDER))).abs() < 1e-6,
            "{e:?}"
        );
        assert!(
            (e.lo - (-1_000.0 - 1_000.0 * (MAX_DRIFT + WANDER))).abs() < 1e-6,
            "{e:?}"
        );
        assert_eq!((e.drift_lo, e.drift_hi), (-MAX_DRIFT, MAX_DRIFT));
    }

    #[test]
    fn the_best_up_path_of_one_exchange_and_the_best_down_path_of_another_both_count() {
        // Truth ψ = 0, no drift. Exchange A: fast up (100), slow down (900);
        // exchange B a millisecond later: slow up (900), fast down (100).
        let mut s = Scratch::default();
        let upper = [p(0.0, 100.0), p(1_000_000.0, 900.0)];
        let lower = [p(1_000.0, -900.0), p(1_001_000.0, -100.0)];
        let e = solve(500_000.0, [&upper, &[]], [&lower, &[]], &mut s).unwrap();
        // Each exchange alone is ±500 wide at best; together about ±100,
        // plus what the drift allowed over half a millisecond.
        assert!(e.hi - e.lo < 2.0 * 100.0 + 1_200.0, "{e:?}");
        assert!(e.lo <= 0.0 && e.hi >= 0.0, "{e:?}");
    }

    #[test]
    fn contradicting_exchanges_leave_no_region() {
        // ψ ≤ 0 at time 0 and ψ ≥ 1 ms a microsecond later: no drift allowed does that.
        let mut s = Scratch::default();
        let e = solve(
            0.0,
            [&[p(0.0, 0.0)], &[]],
            [&[], &[p(1_000.0, 1_000_000.0)]],
            &mut s,
        );
        assert_eq!(e, None);
    }

    #[test]
    fn a_drift_is_pinned_by_exchanges_far_apart() {
        // ψ = 20 ppm × τ, exchanges every second for 100 s with 50 µs one way.
        let mut s = Scratch::default();
        let (mut upper, mut lower) = (Vec::new(), Vec::new());
        for i in 0..100 {
            let t1 = i as f64 * 1e9;
            let t4 = t1 + 100_000.0;
            upper.push(p(t1, 20e-6 * t1 + 50_000.0));
            lower.push(p(t4, 20e-6 * t4 - 50_000.0));
        }
        let e = solve(99.5e9, [&upper, &[]], [&lower, &[]], &mut s).unwrap();
        assert!(e.drift_lo <= 20e-6 && e.drift_hi >= 20e-6, "{e:?}");
        // ±(2 × 50 µs) over 100 s: ±2 ppm.
        assert!(e.drift_hi - e.drift_lo < 4.1e-6, "{e:?}");
        let truth = 20e-6 * 99.5e9;
        assert!(e.lo <= truth && truth <= e.hi, "{e:?}");
    }
}
