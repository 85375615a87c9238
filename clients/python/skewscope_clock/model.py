"""The clock model and the exchange schedule, without I/O.

A port of skewscope-core's ``clock`` module (``model.rs``, ``region.rs``,
``hull.rs``, ``schedule.rs``) by way of the page module
``clients/js/skewscope-clock.js``, operation for operation: the shared
vectors (``clients/clock-vectors/vectors.json``) hold the Rust model's
answers, and this port must give the same bits for the same exchanges.

Why the care with numbers: JavaScript numbers are IEEE doubles, and so are
Python floats, but the two languages differ around them. Python's
``math.floor`` returns an int, its ``min``/``max`` ignore JavaScript's NaN
and signed-zero rules, and a division by zero raises. The helpers below
(``_js_*``) give JavaScript's results. Where the JavaScript subtracts two
integer-valued doubles (times in ns), this port subtracts Python ints and
rounds once (``float(a - b)``): IEEE subtraction is correctly rounded, so
that is the same double whenever JavaScript's operands were exact, and it
stays exact (as the Rust core's i128 arithmetic does) for the agent's
wall-clock nanoseconds, which a double cannot hold.

ψ(τ) is the server's wall clock minus this device's monotonic clock at
device time τ. An exchange (t1, t2, t3, t4) proves ψ(t1) ≤ t2 − t1 and
ψ(t4) ≥ t3 − t4. Between exchanges ψ moves with a drift b, |b| ≤
MAX_DRIFT, give or take WANDER. The (ψ(t), b) pairs consistent with every
exchange of t's window form a convex polygon; its extent in ψ(t) is the
interval every consistent clock lies in (docs/clock-model.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "MAX_DRIFT",
    "WANDER",
    "HORIZON_NS",
    "MIN_BURST_ROUNDS",
    "MAX_BURST_ROUNDS",
    "BURST_GAP_NS",
    "STILL_IMPROVING",
    "REBURST_GAP_NS",
    "HURRY_GAP_NS",
    "GROWTH_BETWEEN_PAIRS",
    "FASTEST_NS",
    "NEGLIGIBLE_GROWTH_NS",
    "Extent",
    "Interval",
    "Estimate",
    "ClockModel",
    "Schedule",
    "solve",
    "estimate_of",
]

#: The fastest two clocks may drift apart (100 ppm): two crystals each
#: within the ±50 ppm boards' oscillators are made to.
MAX_DRIFT = 100e-6
#: How far their relative frequency may wander from one drift (1 ppm).
WANDER = 1e-6
#: How far from a moment its exchanges count, ns (300 s): far enough to pin
#: the drift, near enough for the wander allowance to hold.
HORIZON_NS = 300_000_000_000


# ---------------------------------------------------------------------------
# JavaScript's number semantics, where Python's differ.
# ---------------------------------------------------------------------------


def _is_neg_zero(x) -> bool:
    return x == 0 and math.copysign(1.0, x) < 0


def _js_min(a, b):
    """``Math.min(a, b)``: NaN if either is; -0 below +0."""
    if a != a or b != b:
        return math.nan
    if a < b:
        return a
    if b < a:
        return b
    if a == 0 and (_is_neg_zero(a) or _is_neg_zero(b)):
        return -0.0
    return a


def _js_max(a, b):
    """``Math.max(a, b)``: NaN if either is; +0 above -0."""
    if a != a or b != b:
        return math.nan
    if a > b:
        return a
    if b > a:
        return b
    if a == 0 and not (_is_neg_zero(a) and _is_neg_zero(b)):
        return 0.0 if isinstance(a, float) or isinstance(b, float) else 0
    return a


def _js_floor(x: float) -> float:
    """``Math.floor(x)``, a float (Python's ``math.floor`` gives an int)."""
    if not math.isfinite(x):
        return x
    r = float(math.floor(x))
    return -0.0 if r == 0 and math.copysign(1.0, x) < 0 else r


def _js_ceil(x: float) -> float:
    """``Math.ceil(x)``: -0 for -1 < x ≤ -0."""
    if not math.isfinite(x):
        return x
    r = float(math.ceil(x))
    return -0.0 if r == 0 and math.copysign(1.0, x) < 0 else r


def _js_div(a, b) -> float:
    """``a / b`` on doubles: ±Infinity or NaN where Python raises."""
    if b == 0:
        if a != a or a == 0:
            return math.nan
        sign = math.copysign(1.0, a) * math.copysign(1.0, b)
        return math.copysign(math.inf, sign)
    return a / b


#: Ints the model takes: a double holds their magnitude (the agent's times
#: are u64 ns). A larger one (``10**400``) would overflow float() deep in
#: the solve: refused here, at the door.
_INT_LIMIT = 2**64


def _is_number(x) -> bool:
    """``Number.isFinite(x)``: a finite int or float (not a bool); ints
    within ±2^64."""
    if isinstance(x, bool):
        return False
    if isinstance(x, int):
        return -_INT_LIMIT < x < _INT_LIMIT
    return isinstance(x, float) and math.isfinite(x)


def _sub(a, b):
    """``a - b``: exact for ints (rounded once, later, by ``float()``)."""
    if isinstance(a, int) and isinstance(b, int):
        return a - b
    return float(a) - float(b)


def _mul(a, k):
    """``a * k`` as JavaScript computes it (exact for ints)."""
    if isinstance(a, int) and isinstance(k, int):
        return a * k
    return float(a) * float(k)


def _plus_integral(base, middle):
    """``base + middle`` where ``middle`` is integer-valued: exact for an int base."""
    if isinstance(base, int) and math.isfinite(middle):
        return base + int(middle)
    return float(base) + middle


def _partition_point(items, pred) -> int:
    """The first index where ``pred`` is false (``items`` partitioned by it)."""
    return _partition_point_in(items, 0, len(items), pred)


def _partition_point_in(items, lo, hi, pred) -> int:
    """``_partition_point`` over ``items[lo:hi]``, as an index into ``items``."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if pred(items[mid]):
            lo = mid + 1
        else:
            hi = mid
    return lo


# ---------------------------------------------------------------------------
# Hulls and the region (hull.rs, region.rs).
# ---------------------------------------------------------------------------

# A point is (at, value): relative ns, floats. A line is (slope, intercept).


def _cross(o, a, b) -> float:
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def _lower_hull(points):
    """The lower hull of points sorted by ``at``: where an upper bound can be tight."""
    hull = []
    for p in points:
        while len(hull) >= 2 and _cross(hull[-2], hull[-1], p) <= 0:
            hull.pop()
        hull.append(p)
    return hull


def _upper_hull(points):
    """The upper hull of points sorted by ``at``: where a lower bound can be tight."""
    hull = []
    for p in points:
        while len(hull) >= 2 and _cross(hull[-2], hull[-1], p) >= 0:
            hull.pop()
        hull.append(p)
    return hull


def _lower_envelope(lines):
    """The least of lines handed in with slopes not increasing."""
    env = []
    for line in lines:
        slope, intercept = line
        if env and env[-1][0] == slope:
            if intercept >= env[-1][1]:
                continue
            env.pop()
        while len(env) >= 2:
            a = env[-2]
            b = env[-1]
            if (intercept - a[1]) * (a[0] - b[0]) <= (b[1] - a[1]) * (a[0] - slope):
                env.pop()
            else:
                break
        env.append(line)
    return env


def _least(env, b: float) -> float:
    v = math.inf
    for slope, intercept in env:
        x = intercept + slope * b
        if x < v:
            v = x
    return v


@dataclass
class Extent:
    """The region's extent at one moment, relative to a query's origin and
    base: the raw numbers every port must agree on, bit for bit."""

    #: The least ψ(t) any consistent clock has (relative ns).
    lo: float
    #: The greatest.
    hi: float
    #: The least drift consistent with every exchange (dimensionless).
    drift_lo: float
    #: The greatest.
    drift_hi: float


def solve(t, upper_before, upper_after, lower_before, lower_after):
    """The region's extent at ``t`` from hull points (``(at, value)``) before
    and after it; ``None`` when no clock is consistent with them all (a
    clock stepped, or slewed beyond WANDER).

    A two-variable linear program solved exactly: the least of the upper
    lines against the greatest of the lower lines, over the drifts allowed.
    """
    up_lines = []
    for at, value in [*upper_before, *upper_after]:
        since = t - at
        up_lines.append((since, value + WANDER * abs(since)))
    up = _lower_envelope(up_lines)
    low_lines = []
    for side in (lower_after, lower_before):
        for i in range(len(side) - 1, -1, -1):
            at, value = side[i]
            since = t - at
            low_lines.append((-since, -(value - WANDER * abs(since))))
    low = _lower_envelope(low_lines)
    if not up or not low:
        return None

    def hi(b):
        return _least(up, b)

    def lo(b):
        return -_least(low, b)

    candidates = [-MAX_DRIFT, MAX_DRIFT]
    for env in (up, low):
        for i in range(len(env) - 1):
            x = _js_div(env[i + 1][1] - env[i][1], env[i][0] - env[i + 1][0])
            if x > -MAX_DRIFT and x < MAX_DRIFT:
                candidates.append(x)
    candidates.sort()  # stable, as JavaScript's; no NaN gets here
    gaps = [hi(b) - lo(b) for b in candidates]
    first = next((i for i, g in enumerate(gaps) if g >= 0), -1)
    if first < 0:
        return None
    last = len(gaps) - 1
    while gaps[last] < 0:
        last -= 1
    if first == 0:
        drift_lo = candidates[0]
    else:
        b0, b1, g0, g1 = candidates[first - 1], candidates[first], gaps[first - 1], gaps[first]
        # Never past the candidate where the gap is ≥ 0 (rounding can).
        drift_lo = _js_min(b0 + (b1 - b0) * _js_div(-g0, g1 - g0), b1)
    if last == len(candidates) - 1:
        drift_hi = candidates[last]
    else:
        b0, b1, g0, g1 = candidates[last], candidates[last + 1], gaps[last], gaps[last + 1]
        drift_hi = _js_max(b0 + (b1 - b0) * _js_div(g0, g0 - g1), b0)
    ext_lo = _js_min(lo(drift_lo), lo(drift_hi))
    ext_hi = _js_max(hi(drift_lo), hi(drift_hi))
    for i in range(first, last + 1):
        ext_lo = _js_min(ext_lo, lo(candidates[i]))
        ext_hi = _js_max(ext_hi, hi(candidates[i]))
    return Extent(ext_lo, ext_hi, drift_lo, drift_hi)


@dataclass
class Interval:
    """The region's extent at a moment with what it is relative to: ``base_ns``
    (the window's first upper bound) and ``origin_ns`` (its first send)."""

    base_ns: int | float
    origin_ns: int | float
    extent: Extent


@dataclass
class Estimate:
    """The server's clock at one moment, as the model knows it (ns).

    ``agent_minus_mono_ns`` added to a monotonic reading gives the server's
    wall time; the truth lies within ``bound_ns`` of it. The drift is the
    middle of the range the exchanges allow, ± half its width, in ppb.
    """

    agent_minus_mono_ns: int | float
    bound_ns: int | float
    drift_ppb: float
    drift_bound_ppb: float


def estimate_of(interval: Interval) -> Estimate:
    """An interval's estimate: its middle (rounded down) and the bound to both
    ends (rounded up), so the bound always covers the extent."""
    e = interval.extent
    lo, hi = e.lo, e.hi
    middle = _js_floor((lo + hi) / 2)
    bound = _js_max(_js_ceil(_js_max(hi - middle, middle - lo)), 0)
    if isinstance(bound, float) and math.isfinite(bound):
        bound = int(bound)
    return Estimate(
        agent_minus_mono_ns=_plus_integral(interval.base_ns, middle),
        bound_ns=bound,
        drift_ppb=((e.drift_lo + e.drift_hi) / 2) * 1e9,
        drift_bound_ppb=((e.drift_hi - e.drift_lo) / 2) * 1e9,
    )


def _union(a: Interval, b: Interval) -> Interval:
    """The least interval holding both (as integers: their bases differ)."""

    def ends(i):
        e = estimate_of(i)
        return _sub(e.agent_minus_mono_ns, e.bound_ns), e.agent_minus_mono_ns + e.bound_ns

    a_lo, a_hi = ends(a)
    b_lo, b_hi = ends(b)
    return Interval(
        base_ns=a.base_ns,
        origin_ns=a.origin_ns,
        extent=Extent(
            lo=float(_sub(_js_min(a_lo, b_lo), a.base_ns)),
            hi=float(_sub(_js_max(a_hi, b_hi), a.base_ns)),
            drift_lo=_js_min(a.extent.drift_lo, b.extent.drift_lo),
            drift_hi=_js_max(a.extent.drift_hi, b.extent.drift_hi),
        ),
    )


class _Kept:
    __slots__ = ("sent", "received", "upper", "lower", "segment")

    def __init__(self, sent, received, upper, lower, segment):
        self.sent = sent
        self.received = received
        self.upper = upper
        self.lower = lower
        self.segment = segment


class ClockModel:
    """The clock model: exchanges in, the server's clock out, with a bound
    that holds on any link.

    Exchanges are (t1, t2, t3, t4): t1 and t4 on this device's monotonic
    clock, t2 and t3 on the server's wall clock, in a unit of ``ns_per_unit``
    ns (1: nanoseconds, as ``time.monotonic_ns()`` and the agent's ``t2_ns``
    give them). Give ints for exact arithmetic; floats work as in JavaScript.
    """

    def __init__(self, ns_per_unit=1):
        self.ns_per_unit = ns_per_unit
        self.origin = None
        self.exchanges: list[_Kept] = []
        self.next_segment = 0
        #: Moments asked whose window left no consistent clock (answered
        #: from the nearest exchange alone).
        self.conflicts = 0
        # The hulls of the last window asked, as the Rust model keeps them:
        # a clock read in a loop then costs a few hull vertices, not every
        # exchange. Dropped whenever the exchanges change.
        self._window_key = None
        self._window = None
        self._max_received = None

    @property
    def size(self) -> int:
        """Exchanges held."""
        return len(self.exchanges)

    @property
    def breaks(self) -> int:
        """Times a new exchange left no consistent clock (the model started again)."""
        xs = self.exchanges
        return sum(1 for i in range(1, len(xs)) if xs[i].segment != xs[i - 1].segment)

    def to_ns(self, t):
        """A device time in the model's ns, relative to its first exchange."""
        return _mul(_sub(t, self.origin), self.ns_per_unit)

    def add(self, t1, t2, t3, t4) -> bool:
        """Takes in one exchange; False for one that cannot be true (reply
        before request, the server's times reversed, a turnaround longer than
        the round trip). In time order, one that leaves no consistent clock
        starts a new segment; an older one is filed in its place."""
        k = self.ns_per_unit
        if not all(_is_number(v) for v in (t1, t2, t3, t4)) or t4 < t1 or t3 < t2:
            return False
        upper = _mul(_sub(t2, t1), k)
        lower = _mul(_sub(t3, t4), k)
        if upper < lower:
            return False
        if self.origin is None:
            self.origin = t1
        self._forget_window()
        kept = _Kept(self.to_ns(t1), self.to_ns(t4), upper, lower, 0)
        xs = self.exchanges
        in_order = not xs or xs[-1].sent <= kept.sent
        if not in_order:
            at = _partition_point(xs, lambda x: x.sent <= kept.sent)
            kept.segment = xs[max(at - 1, 0)].segment
            xs.insert(at, kept)
            return True
        segment = xs[-1].segment if xs else 0
        kept.segment = segment
        xs.append(kept)
        if len(xs) > 1 and self._window_in(segment, kept.sent)[0] is None:
            self.next_segment = max(self.next_segment, segment) + 1
            kept.segment = self.next_segment
        self._forget_window()
        return True

    def forget_before(self, t) -> None:
        """Forgets exchanges sent before device time ``t``, keeping the latest:
        answers from ``t + HORIZON_NS`` on are unchanged."""
        if self.origin is None:
            return
        ns = self.to_ns(t)
        xs = self.exchanges
        n = 0
        while len(xs) - n > 1 and xs[n].sent < ns:
            n += 1
        if n:
            del xs[:n]
            self._forget_window()

    def interval(self, t):
        """The region's extent at device time ``t``, raw; None with no exchange."""
        if self.origin is None or not self.exchanges:
            return None
        return self._interval_ns(self.to_ns(t))

    def at(self, t):
        """The server's clock at device time ``t`` (an :class:`Estimate`), or None."""
        i = self.interval(t)
        return None if i is None else estimate_of(i)

    def _forget_window(self):
        self._window_key = None
        self._window = None
        self._max_received = None

    def _interval_ns(self, mono):
        xs = self.exchanges
        first_after = _partition_point(xs, lambda x: x.sent <= mono)
        if first_after == 0:
            return self._interval_in(xs[0].segment, mono)
        segment = xs[first_after - 1].segment
        own = self._interval_in(segment, mono)
        if own is None:
            return None
        if first_after < len(xs) and xs[first_after].segment != segment:
            # Between two segments: either side's clock may hold.
            other = self._interval_in(xs[first_after].segment, mono)
            return None if other is None else _union(own, other)
        return own

    def _interval_in(self, segment, mono):
        found, nearest = self._window_in(segment, mono)
        if found is not None or nearest is None:
            return found
        self.conflicts += 1
        return self._solve_range(nearest, nearest + 1, mono)

    def _window_in(self, segment, mono):
        xs = self.exchanges
        start = _partition_point(xs, lambda x: x.segment < segment)
        end = _partition_point(xs, lambda x: x.segment <= segment)
        if start == end:
            return None, None

        def clamp(p):
            return min(max(p, start), end)

        split = clamp(_partition_point(xs, lambda x: x.sent <= mono))
        early = _sub(mono, HORIZON_NS)
        late = mono + HORIZON_NS if isinstance(mono, int) else float(mono) + HORIZON_NS
        first = clamp(_partition_point(xs, lambda x: x.sent < early))
        last = clamp(_partition_point(xs, lambda x: x.sent <= late))
        # Always the nearest exchange on each side.
        if split > start:
            first = min(first, split - 1)
        if split < end:
            last = max(last, split + 1)
        nearest = split - 1 if split > start else split
        return self._solve_range(first, last, mono), nearest

    def _solve_range(self, first, last, mono):
        xs = self.exchanges
        origin = xs[first].sent
        base = xs[first].upper
        t = float(_sub(mono, origin))
        # The window's exchanges sent by `mono` (they are sorted by time sent).
        split_upper = _partition_point_in(xs, first, last, lambda x: x.sent <= mono) - first
        # Those received by it: a count, not a prefix (exchanges may overlap).
        # Every exchange is received no earlier than sent, so only the first
        # split_upper can count, and those before the first index whose
        # running maximum of `received` passes `mono` all do.
        if self._max_received is None:
            running, self._max_received = -math.inf, []
            for x in xs:
                running = x.received if x.received > running else running
                self._max_received.append(running)
        cut = first + split_upper
        sure = max(_partition_point_in(self._max_received, first, cut, lambda r: r <= mono), first)
        split_lower = (sure - first) + sum(1 for i in range(sure, cut) if xs[i].received <= mono)
        key = (first, last, split_upper, split_lower)
        if self._window_key != key:
            window = xs[first:last]
            uppers = [(float(_sub(x.sent, origin)), float(_sub(x.upper, base))) for x in window]
            lowers = [(float(_sub(x.received, origin)), float(_sub(x.lower, base))) for x in window]
            lowers.sort(key=lambda p: p[0])  # stable, as JavaScript's
            self._window = (
                _lower_hull(uppers[:split_upper]),
                _lower_hull(uppers[split_upper:]),
                _upper_hull(lowers[:split_lower]),
                _upper_hull(lowers[split_lower:]),
            )
            self._window_key = key
        extent = solve(t, *self._window)
        return None if extent is None else Interval(base, origin, extent)


# ---------------------------------------------------------------------------
# The exchange schedule (schedule.rs). Times are ns.
# ---------------------------------------------------------------------------

#: Pairs in a burst before it may stop.
MIN_BURST_ROUNDS = 4
#: Pairs in a burst at most.
MAX_BURST_ROUNDS = 24
#: Pause between a burst's pairs: one stall of the link does not hold them all.
BURST_GAP_NS = 25_000_000
#: A burst stops once its last MIN_BURST_ROUNDS pairs improved the bound by less.
STILL_IMPROVING = 0.05
#: Least time between a burst's end and the next one the schedule starts.
REBURST_GAP_NS = 10_000_000_000
#: Least time between bursts an action asks for.
HURRY_GAP_NS = 1_000_000_000
#: The steady pairs come often enough that the bound grows by at most this
#: share of itself between them.
GROWTH_BETWEEN_PAIRS = 0.03
#: The steady pairs' shortest interval.
FASTEST_NS = 100_000_000
#: Growth between pairs never worth exchanging more often for.
NEGLIGIBLE_GROWTH_NS = 10e3
#: A pair that leaves the bound over this many times the best of the horizon
#: did not find the link at its best: the next pair comes in half the interval.
LOOSE_AFTER_PAIR = 1.15


class Schedule:
    """When to exchange: bursts of pairs while the bound improves, then a
    steady rate; a burst again when the bound degrades.

    Why pairs: a radio in power save holds the first packet after a quiet
    spell and stays awake a moment after, so the second of a pair rides an
    awake radio. Why bursts: the estimate should be good before the first
    action, and on a jittery link one exchange rarely is.
    """

    def __init__(self, now_ns, interval_ns):
        self.interval_ns = _js_max(interval_ns, 1)
        self.burst = 0
        self.bursting = True
        self.second_of_pair = False
        self.next_at = now_ns
        self.round_started = now_ns
        self.last_burst_end = None
        self.burst_bounds: list = []
        self.best: list = []
        self.bursts = 1

    def next_request_at(self):
        """When the next request is due, ns."""
        return self.next_at

    def done(self, now_ns, estimate) -> None:
        """A request went out and was answered or not; ``estimate`` is the
        model's now (an :class:`Estimate`, or None)."""
        if not self.second_of_pair:
            self.second_of_pair = True
            self.next_at = now_ns
            return
        self.second_of_pair = False
        bound = estimate.bound_ns if estimate is not None else None
        if bound is not None:
            while self.best and self.best[-1][1] >= bound:
                self.best.pop()
            self.best.append((now_ns, bound))
            while self.best and self.best[0][0] + HORIZON_NS < now_ns:
                self.best.pop(0)
        if self.bursting:
            self.burst += 1
            self.burst_bounds.append(math.inf if bound is None else bound)
            if self._burst_should_go_on(self.burst):
                self.round_started = now_ns + BURST_GAP_NS
            else:
                self.bursting = False
                self.last_burst_end = now_ns
                self.round_started = now_ns + self._interval_for(estimate)
        else:
            degraded = bound is None or (bool(self.best) and bound > 2 * self.best[0][1])
            rested = self.last_burst_end is None or now_ns >= self.last_burst_end + REBURST_GAP_NS
            if degraded and rested:
                self._start_burst(now_ns + BURST_GAP_NS)
            else:
                interval = self._interval_for(estimate)
                if bound is not None and self.best and bound > self.best[0][1] * LOOSE_AFTER_PAIR:
                    # The pair did not find the link at its best: the next sooner.
                    interval = _js_max(_js_floor(interval / 2), _js_min(FASTEST_NS, interval))
                self.round_started = _js_max(self.round_started + interval, now_ns)
        self.next_at = self.round_started

    def hurry(self, now_ns) -> bool:
        """Bursts now unless one runs or one ended under HURRY_GAP_NS ago;
        whether it did. For an action whose bound is wider than its time to spare."""
        if self.bursting or (self.last_burst_end is not None and now_ns < self.last_burst_end + HURRY_GAP_NS):
            return False
        if not self.second_of_pair:
            self._start_burst(now_ns)
            self.next_at = now_ns
        else:
            self._start_burst(self.next_at)
        return True

    def _interval_for(self, estimate):
        if estimate is None:
            return self.interval_ns
        growth = estimate.drift_bound_ppb * 1e-9 + WANDER
        allowed = _js_max(GROWTH_BETWEEN_PAIRS * estimate.bound_ns, NEGLIGIBLE_GROWTH_NS) / growth
        return _js_min(
            _js_max(_js_floor(allowed), _js_min(FASTEST_NS, self.interval_ns)),
            self.interval_ns,
        )

    def _start_burst(self, at):
        self.bursting = True
        self.burst = 0
        self.burst_bounds = []
        self.round_started = at
        self.bursts += 1

    def _burst_should_go_on(self, rounds) -> bool:
        if rounds >= MAX_BURST_ROUNDS:
            return False
        n = len(self.burst_bounds)
        k = MIN_BURST_ROUNDS
        if n <= k:
            return True
        then = self.burst_bounds[n - 1 - k]
        now = self.burst_bounds[n - 1]
        return now == math.inf or now < then * (1 - STILL_IMPROVING)
