//! One rule for moving a copy's moment into the agent's clock, and one for
//! a broadcast whose copies are not all there.
//!
//! Every figure of skew "in the agent's timebase" — the report's receive
//! skew, its plotted points, its action skew and the live join's two on
//! `/metrics` — is a spread over placed moments. A spread over the copies
//! that have a clock is not a bound on the broadcast's skew: the copy left
//! out may be the late one. So a broadcast with any copy whose device had
//! no usable clock model at that moment has **no** corrected skew (its raw
//! skew stands), and the report counts those copies; before this rule the
//! report's receive skew skipped such copies while its action skew and the
//! live join dropped the broadcast, and the two could disagree.

use crate::clock::Correction;

/// One moment in the agent's clock: (estimate, bound), both in ns.
pub type Placed = (i64, i64);

/// `wall_ns` on a device, moved into the agent's clock by `correction`.
pub fn place(correction: Correction, wall_ns: u64) -> Placed {
    (
        correction.agent_wall_ns(wall_ns),
        i64::try_from(correction.bound_ns).unwrap_or(i64::MAX),
    )
}

/// The spread of moments on one device clock each, as they are (raw):
/// max − min; `None` with fewer than two. The one definition of a raw
/// skew: the report's, the live join's, actions' and frames'.
pub fn raw_spread(times: impl IntoIterator<Item = u64>) -> Option<u64> {
    let mut times = times.into_iter();
    let first = times.next()?;
    let (mut min, mut max, mut n) = (first, first, 1u32);
    for t in times {
        min = min.min(t);
        max = max.max(t);
        n += 1;
    }
    (n >= 2).then_some(max - min)
}

/// When a copy arrived on its device's clock: the kernel's receive stamp
/// (the read less the kernel's delay) where known, else the read. The one
/// definition the batch join and the live join use.
pub fn arrival_ns(read_wall_ns: u64, kernel_delay_ns: Option<u64>) -> u64 {
    read_wall_ns.saturating_sub(kernel_delay_ns.unwrap_or(0))
}

/// The spread of one broadcast's copies in the agent's clock as
/// (estimate, lower bound, upper bound); `None` with fewer than two copies
/// or when any copy is not placed (`None`): see the module's rule.
pub fn spread_of_all(copies: impl IntoIterator<Item = Option<Placed>>) -> Option<(i64, i64, i64)> {
    let placed: Option<Vec<Placed>> = copies.into_iter().collect();
    spread(&placed?)
}

/// The spread of `placed` moments: (max − min estimate, the least the
/// truth can be, the most it can be); `None` with fewer than two.
fn spread(placed: &[Placed]) -> Option<(i64, i64, i64)> {
    if placed.len() < 2 {
        return None;
    }
    let max_at = placed.iter().map(|c| c.0).max()?;
    let min_at = placed.iter().map(|c| c.0).min()?;
    let max_lo = placed.iter().map(|c| c.0 - c.1).max()?;
    let min_hi = placed.iter().map(|c| c.0 + c.1).min()?;
    let max_hi = placed.iter().map(|c| c.0 + c.1).max()?;
    let min_lo = placed.iter().map(|c| c.0 - c.1).min()?;
    Some((max_at - min_at, (max_lo - min_hi).max(0), max_hi - min_lo))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_unplaced_copy_leaves_the_broadcast_without_a_corrected_skew() {
        let placed = [Some((0, 10)), Some((100, 10))];
        assert_eq!(spread_of_all(placed), Some((100, 80, 120)));
        assert_eq!(raw_spread([5, 1, 9]), Some(8));
        assert_eq!(raw_spread([5]), None);
        assert_eq!(arrival_ns(100, Some(30)), 70);
        assert_eq!(arrival_ns(100, Some(300)), 0);
        assert_eq!(arrival_ns(100, None), 100);
        assert_eq!(spread_of_all([Some((0, 10)), None, Some((100, 10))]), None);
        assert_eq!(spread_of_all([Some((0, 10))]), None);
    }

    #[test]
    fn overlapping_bounds_let_the_truth_be_zero() {
        assert_eq!(
            spread_of_all([Some((0, 60)), Some((100, 60))]),
            Some((100, 0, 220))
        );
    }

    #[test]
    fn a_placed_moment_adds_theta_and_keeps_the_bound() {
        let c = Correction {
            theta_ns: -5,
            bound_ns: 7,
        };
        assert_eq!(place(c, 100), (95, 7));
    }
}
