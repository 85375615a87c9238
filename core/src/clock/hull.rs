//! Convex hulls of constraint points: which exchanges can bind the region at
//! all. An exchange's causality constraint is a point (when, value); against
//! a drift `s`, the tightest of a set of such points is the one least in
//! `value − s·when`, which is always a vertex of the set's lower hull (for
//! upper bounds) or upper hull (for lower bounds). Keeping only the hull
//! makes a query cost its few vertices instead of every exchange.
//!
//! The JavaScript port (`clients/js/skewscope-clock.js`, `hull`) does the
//! same floating-point operations in the same order, so both keep the same
//! vertices; the shared vectors check it.

/// A constraint point: when (relative ns) and the bound's value (relative ns).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Point {
    /// Device monotonic time, relative to the query's origin.
    pub at: f64,
    /// The bound on the agent's clock minus the device's, relative to the
    /// query's base.
    pub value: f64,
}

/// Twice the signed area of (o, a, b): positive for a left turn.
fn cross(o: Point, a: Point, b: Point) -> f64 {
    (a.at - o.at) * (b.value - o.value) - (a.value - o.value) * (b.at - o.at)
}

/// The lower hull of `points` (sorted by `at`), left to right: the points
/// an upper bound can be tight at.
pub(crate) fn lower(points: impl Iterator<Item = Point>, hull: &mut Vec<Point>) {
    hull.clear();
    for p in points {
        while hull.len() >= 2 && cross(hull[hull.len() - 2], hull[hull.len() - 1], p) <= 0.0 {
            hull.pop();
        }
        hull.push(p);
    }
}

/// The upper hull of `points` (sorted by `at`), left to right: the points
/// a lower bound can be tight at.
pub(crate) fn upper(points: impl Iterator<Item = Point>, hull: &mut Vec<Point>) {
    hull.clear();
    for p in points {
        while hull.len() >= 2 && cross(hull[hull.len() - 2], hull[hull.len() - 1], p) >= 0.0 {
            hull.pop();
        }
        hull.push(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pts(v: &[(f64, f64)]) -> Vec<Point> {
        v.iter().map(|&(at, value)| Point { at, value }).collect()
    }

    #[test]
    fn the_lower_hull_keeps_the_points_below_every_chord() {
        let mut h = Vec::new();
        lower(
            pts(&[(0.0, 5.0), (1.0, 1.0), (2.0, 4.0), (3.0, 2.0), (4.0, 6.0)]).into_iter(),
            &mut h,
        );
        assert_eq!(h, pts(&[(0.0, 5.0), (1.0, 1.0), (3.0, 2.0), (4.0, 6.0)]));
    }

    #[test]
    fn the_upper_hull_keeps_the_points_above_every_chord() {
        let mut h = Vec::new();
        upper(
            pts(&[(0.0, 5.0), (1.0, 1.0), (2.0, 4.0), (3.0, 2.0), (4.0, 6.0)]).into_iter(),
            &mut h,
        );
        assert_eq!(h, pts(&[(0.0, 5.0), (4.0, 6.0)]));
    }

    #[test]
    fn collinear_points_keep_only_the_ends() {
        let mut h = Vec::new();
        lower(
            pts(&[(0.0, 0.0), (1.0, 1.0), (2.0, 2.0)]).into_iter(),
            &mut h,
        );
        assert_eq!(h, pts(&[(0.0, 0.0), (2.0, 2.0)]));
    }
}
