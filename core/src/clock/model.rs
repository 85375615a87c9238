//! The clock model: one device's clock against the agent's, from its time
//! exchanges, as an estimate with a bound that holds.
//!
//! The same type serves every place that needs the agent's time: the probe
//! (as exchanges come, asking about now and the moment it will act), the
//! agent's live join (as uploads come) and the report (with the whole run,
//! so a moment also gains from the exchanges after it). Given the same
//! exchanges, each gets the same answer at the same moment.
//!
//! A query at device time t reads the [`crate::clock::region`] built from
//! the exchanges of t's *segment* within [`HORIZON_NS`] of t (and always the
//! nearest one on each side). A segment ends where a new exchange leaves no
//! consistent clock at all: that is proof the model's assumption broke (the
//! agent's clock stepped, or one was slewed faster than
//! [`crate::clock::region::WANDER`] allows), and what came before must not
//! be carried across. The break is decided as exchanges arrive, so the probe
//! and the report draw it in the same place. A moment between two segments
//! gets the union of both answers: it is not known on which side of the
//! break it fell.

use std::cell::RefCell;
use std::collections::VecDeque;

use crate::Stamp;
use crate::clock::exchange::Exchange;
use crate::clock::hull::{self, Point};
use crate::clock::region::{self, Extent, Scratch};
use crate::convert;

/// How far from a moment its exchanges count (300 s): far enough that the
/// exchanges pin the drift down to a few ppm on a jittery link, near enough
/// that the frequency wander allowed ([`crate::clock::region::WANDER`])
/// holds. Beyond it an exchange would loosen by more than 300 µs anyway.
pub const HORIZON_NS: u64 = 300_000_000_000;

/// The agent's clock at one moment, as a device knows it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// The agent's wall clock minus this device's monotonic clock: add it to
    /// a monotonic reading to get the agent's time. The middle of the
    /// interval, rounded down.
    pub agent_minus_mono_ns: i64,
    /// The truth lies within this of the estimate (rounded up).
    pub bound_ns: u64,
    /// The middle of the drift range the exchanges allow, agent against
    /// device, in parts per billion.
    pub drift_ppb: f64,
    /// Half that range's width: ±[`crate::clock::region::MAX_DRIFT`] until
    /// exchanges far enough apart pin it down.
    pub drift_bound_ppb: f64,
}

impl Estimate {
    /// The agent's wall time at device monotonic time `mono_ns`.
    pub fn agent_time_ns(&self, mono_ns: u64) -> i128 {
        i128::from(mono_ns) + i128::from(self.agent_minus_mono_ns)
    }

    /// The correction of a stamp taken at this estimate's moment: how far the
    /// device's wall clock was from the agent's then.
    pub fn correction(&self, stamp: Stamp) -> Correction {
        let theta = self.agent_time_ns(stamp.mono_ns) - i128::from(stamp.wall_ns);
        Correction {
            theta_ns: convert::narrow(theta),
            bound_ns: self.bound_ns,
        }
    }
}

/// How to move one device wall time into the agent's clock: add `theta_ns`;
/// the truth lies within `bound_ns` of the result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Correction {
    /// Agent clock minus device wall clock.
    pub theta_ns: i64,
    /// Error bound of `theta_ns`.
    pub bound_ns: u64,
}

impl Correction {
    /// `wall_ns` (the device's wall clock) in the agent's clock.
    pub fn agent_wall_ns(&self, wall_ns: u64) -> i64 {
        convert::narrow(i128::from(wall_ns) + i128::from(self.theta_ns))
    }

    /// (`wall_ns` in the agent's clock, less the bound, plus the bound).
    pub fn interval(&self, wall_ns: u64) -> (i64, i64, i64) {
        let at = self.agent_wall_ns(wall_ns);
        let e = convert::signed(self.bound_ns);
        (at, at - e, at + e)
    }
}

/// The region's extent at a moment, with what it is relative to: the raw
/// numbers both implementations must agree on, bit for bit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    /// The ψ every relative value is measured from: the first exchange's
    /// upper bound in the window asked.
    pub base_ns: i64,
    /// The device monotonic time every relative time is measured from.
    pub origin_mono_ns: u64,
    /// The extent, relative to `base_ns` and `origin_mono_ns`.
    pub extent: Extent,
}

impl Interval {
    /// The estimate the extent gives: its middle (rounded down), and the
    /// bound to both ends (rounded up).
    pub fn estimate(&self) -> Estimate {
        let middle = ((self.extent.lo + self.extent.hi) / 2.0).floor();
        let bound = (self.extent.hi - middle)
            .max(middle - self.extent.lo)
            .ceil();
        Estimate {
            agent_minus_mono_ns: self
                .base_ns
                .saturating_add(convert::from_float_signed(middle)),
            bound_ns: convert::from_float(bound),
            drift_ppb: (self.extent.drift_lo + self.extent.drift_hi) / 2.0 * 1e9,
            drift_bound_ppb: (self.extent.drift_hi - self.extent.drift_lo) / 2.0 * 1e9,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Kept {
    exchange: Exchange,
    segment: u64,
}

/// The hulls of one window, kept for the next query with the same window
/// (a broadcast's receipts on one device all ask nearly the same moment).
#[derive(Clone, Debug, Default)]
struct Window {
    key: (u64, usize, usize, usize, usize),
    origin: u64,
    base: i64,
    upper_before: Vec<Point>,
    upper_after: Vec<Point>,
    lower_before: Vec<Point>,
    lower_after: Vec<Point>,
}

#[derive(Clone, Debug, Default)]
struct QueryState {
    window: Option<Window>,
    scratch: Scratch,
    points: Vec<Point>,
}

/// One device's clock against the agent's: the exchanges, split into
/// segments where the model broke, and queries at any moment.
#[derive(Clone, Debug, Default)]
pub struct ClockModel {
    /// By time sent.
    exchanges: VecDeque<Kept>,
    /// Segment of the next exchange that breaks the model.
    next_segment: u64,
    /// Moments whose window left no consistent clock (answered from the
    /// nearest exchange alone).
    conflicts: std::cell::Cell<u64>,
    query: RefCell<QueryState>,
}

impl PartialEq for ClockModel {
    fn eq(&self, other: &Self) -> bool {
        self.exchanges == other.exchanges
    }
}

impl ClockModel {
    /// No exchange yet.
    pub fn new() -> ClockModel {
        ClockModel::default()
    }

    /// The model of a whole run's exchanges, in any order.
    pub fn from_exchanges(mut exchanges: Vec<Exchange>) -> ClockModel {
        exchanges.sort_by_key(|e| (e.sent_mono_ns, e.received_mono_ns));
        let mut model = ClockModel::new();
        for e in exchanges {
            model.add(e);
        }
        model
    }

    /// Takes in one exchange. In time order (as a probe makes them) a new
    /// exchange that leaves no consistent clock starts a new segment; one
    /// older than the latest is filed in its place without that check.
    pub fn add(&mut self, exchange: Exchange) {
        *self.query.get_mut() = QueryState::default();
        let in_order = self
            .exchanges
            .back()
            .is_none_or(|last| last.exchange.sent_mono_ns <= exchange.sent_mono_ns);
        if !in_order {
            let at = self
                .exchanges
                .partition_point(|k| k.exchange.sent_mono_ns <= exchange.sent_mono_ns);
            let segment = self.exchanges[at.saturating_sub(1)].segment;
            self.exchanges.insert(at, Kept { exchange, segment });
            return;
        }
        let segment = self.exchanges.back().map_or(0, |k| k.segment);
        self.exchanges.push_back(Kept { exchange, segment });
        let last = self.exchanges.len() - 1;
        if last > 0 && self.window_in(segment, exchange.sent_mono_ns).0.is_none() {
            self.next_segment = self.next_segment.max(segment) + 1;
            self.exchanges[last].segment = self.next_segment;
        }
    }

    /// Forgets exchanges sent before `mono_ns`, keeping the latest: answers
    /// at moments from `mono_ns + HORIZON_NS` on are unchanged.
    pub fn forget_before(&mut self, mono_ns: u64) {
        let mut forgot = false;
        while self.exchanges.len() > 1 && self.exchanges[0].exchange.sent_mono_ns < mono_ns {
            self.exchanges.pop_front();
            forgot = true;
        }
        if forgot {
            *self.query.get_mut() = QueryState::default();
        }
    }

    /// Exchanges held.
    pub fn len(&self) -> usize {
        self.exchanges.len()
    }

    /// Whether no exchange is held.
    pub fn is_empty(&self) -> bool {
        self.exchanges.is_empty()
    }

    /// The exchanges held, by time sent.
    pub fn exchanges(&self) -> impl Iterator<Item = &Exchange> {
        self.exchanges.iter().map(|k| &k.exchange)
    }

    /// Times the model broke: a new exchange left no consistent clock.
    pub fn breaks(&self) -> u64 {
        let mut segments: Vec<u64> = self.exchanges.iter().map(|k| k.segment).collect();
        segments.dedup();
        segments.len().saturating_sub(1) as u64
    }

    /// Moments asked whose window left no consistent clock though their
    /// segment's exchanges each did: answered from the nearest exchange alone.
    pub fn conflicts(&self) -> u64 {
        self.conflicts.get()
    }

    /// The agent's clock at device monotonic time `mono_ns`; `None` with no
    /// exchange.
    pub fn at(&self, mono_ns: u64) -> Option<Estimate> {
        Some(self.interval(mono_ns)?.estimate())
    }

    /// The region's extent at `mono_ns`, raw: what the JavaScript port must
    /// reproduce to the bit (its shared vectors hold these).
    pub fn interval(&self, mono_ns: u64) -> Option<Interval> {
        let first_after = self
            .exchanges
            .partition_point(|k| k.exchange.sent_mono_ns <= mono_ns);
        let Some(before) = first_after.checked_sub(1) else {
            let segment = self.exchanges.front()?.segment;
            return self.interval_in(segment, mono_ns);
        };
        let segment = self.exchanges[before].segment;
        let own = self.interval_in(segment, mono_ns)?;
        match self.exchanges.get(first_after) {
            // Between two segments: either side's clock may hold.
            Some(next) if next.segment != segment => {
                let other = self.interval_in(next.segment, mono_ns)?;
                Some(union(own, other))
            }
            _ => Some(own),
        }
    }

    /// The agent's wall time `agent_ns` on this device's monotonic clock,
    /// with the bound at that moment: where to act. `None` with no exchange.
    pub fn mono_of_agent_time(&self, agent_ns: u64, near_mono_ns: u64) -> Option<(u64, Estimate)> {
        let mut mono = near_mono_ns;
        let mut estimate = self.at(mono)?;
        // The drift is at most 100 ppm: each pass cuts the error 10,000-fold.
        for _ in 0..3 {
            let next = convert::narrow_unsigned(
                i128::from(agent_ns) - i128::from(estimate.agent_minus_mono_ns),
            );
            if next == mono {
                break;
            }
            mono = next;
            estimate = self.at(mono)?;
        }
        Some((mono, estimate))
    }

    /// The extent at `mono_ns` from one segment's exchanges: its window, or
    /// (when the window leaves no consistent clock) its nearest exchange.
    fn interval_in(&self, segment: u64, mono_ns: u64) -> Option<Interval> {
        match self.window_in(segment, mono_ns) {
            (Some(found), _) => Some(found),
            (None, None) => None,
            (None, Some(nearest)) => {
                self.conflicts.set(self.conflicts.get() + 1);
                self.solve(segment, nearest, nearest + 1, mono_ns)
            }
        }
    }

    /// The extent at `mono_ns` from one segment's window, or `None` and the
    /// segment's nearest exchange when that window leaves no consistent
    /// clock (or `(None, None)`: the segment has no exchange).
    fn window_in(&self, segment: u64, mono_ns: u64) -> (Option<Interval>, Option<usize>) {
        let start = self.exchanges.partition_point(|k| k.segment < segment);
        let end = self.exchanges.partition_point(|k| k.segment <= segment);
        if start == end {
            return (None, None);
        }
        // Exchanges are sorted by time sent, and segments are runs of them.
        let sent_by = |mono: u64, inclusive: bool| {
            let p = self.exchanges.partition_point(|k| {
                if inclusive {
                    k.exchange.sent_mono_ns <= mono
                } else {
                    k.exchange.sent_mono_ns < mono
                }
            });
            p.clamp(start, end)
        };
        let split = sent_by(mono_ns, true);
        let mut first = sent_by(mono_ns.saturating_sub(HORIZON_NS), false);
        let mut last = sent_by(mono_ns.saturating_add(HORIZON_NS), true);
        // Always the nearest exchange on each side.
        if split > start {
            first = first.min(split - 1);
        }
        if split < end {
            last = last.max(split + 1);
        }
        let nearest = if split > start { split - 1 } else { split };
        (self.solve(segment, first, last, mono_ns), Some(nearest))
    }

    /// The extent at `mono_ns` from exchanges `first..last`.
    fn solve(&self, segment: u64, first: usize, last: usize, mono_ns: u64) -> Option<Interval> {
        let mut guard = self.query.borrow_mut();
        let state = &mut *guard;
        let origin = self.exchanges[first].exchange.sent_mono_ns;
        let base = self.exchanges[first].exchange.upper_ns;
        let relative_at = |mono: u64| (i128::from(mono) - i128::from(origin)) as f64;
        let relative = |v: i64| (i128::from(v) - i128::from(base)) as f64;
        let t = relative_at(mono_ns);
        let window = self.exchanges.range(first..last);
        let split_upper = window
            .clone()
            .take_while(|k| k.exchange.sent_mono_ns <= mono_ns)
            .count();
        let split_lower = window
            .clone()
            .filter(|k| k.exchange.received_mono_ns <= mono_ns)
            .count();
        let key = (segment, first, last, split_upper, split_lower);
        if state.window.as_ref().is_none_or(|w| w.key != key) {
            let mut w = state.window.take().unwrap_or_default();
            w.key = key;
            w.origin = origin;
            w.base = base;
            state.points.clear();
            state.points.extend(window.clone().map(|k| Point {
                at: relative_at(k.exchange.sent_mono_ns),
                value: relative(k.exchange.upper_ns),
            }));
            hull::lower(
                state.points[..split_upper].iter().copied(),
                &mut w.upper_before,
            );
            hull::lower(
                state.points[split_upper..].iter().copied(),
                &mut w.upper_after,
            );
            // The lower points by time received (the order sent unless
            // exchanges overlapped).
            state.points.clear();
            state.points.extend(window.map(|k| Point {
                at: relative_at(k.exchange.received_mono_ns),
                value: relative(k.exchange.lower_ns),
            }));
            state.points.sort_by(|a, b| a.at.total_cmp(&b.at));
            hull::upper(
                state.points[..split_lower].iter().copied(),
                &mut w.lower_before,
            );
            hull::upper(
                state.points[split_lower..].iter().copied(),
                &mut w.lower_after,
            );
            state.window = Some(w);
        }
        let w = state.window.as_ref().expect("set above");
        let extent = region::solve(
            t,
            [&w.upper_before, &w.upper_after],
            [&w.lower_before, &w.lower_after],
            &mut state.scratch,
        )?;
        Some(Interval {
            base_ns: w.base,
            origin_mono_ns: w.origin,
            extent,
        })
    }
}

/// The least interval holding both (as integers: their bases differ).
fn union(a: Interval, b: Interval) -> Interval {
    let ends = |i: &Interval| {
        let e = i.estimate();
        (
            i128::from(e.agent_minus_mono_ns) - i128::from(e.bound_ns),
            i128::from(e.agent_minus_mono_ns) + i128::from(e.bound_ns),
        )
    };
    let (a_lo, a_hi) = ends(&a);
    let (b_lo, b_hi) = ends(&b);
    let (lo, hi) = (a_lo.min(b_lo), a_hi.max(b_hi));
    Interval {
        base_ns: a.base_ns,
        origin_mono_ns: a.origin_mono_ns,
        extent: Extent {
            lo: (lo - i128::from(a.base_ns)) as f64,
            hi: (hi - i128::from(a.base_ns)) as f64,
            drift_lo: a.extent.drift_lo.min(b.extent.drift_lo),
            drift_hi: a.extent.drift_hi.max(b.extent.drift_hi),
        },
    }
}

#[cfg(test)]
mod tests;
