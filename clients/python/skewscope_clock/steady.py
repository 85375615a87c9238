"""The steady clock the module keeps time on: ``CLOCK_MONOTONIC_RAW`` where
the platform has it (Linux), else ``time.monotonic_ns()``.

Why not ``time.monotonic_ns()`` alone: NTP steers ``CLOCK_MONOTONIC``'s
rate. chrony corrects the frequency every few minutes and slews a large
error at up to 83 ms a second, so the clock the model follows would bend by
what the daemon did between two exchanges, which the model takes for the
server's clock moving. The raw clock runs at the crystal's own rate, which
the model's drift follows (the probe keeps time on it too).

``time.sleep()`` and asyncio's timers run on ``CLOCK_MONOTONIC``: a wait
worked out on the raw clock is asked :data:`SLEW_SHARE` short and looked at
again, so a slew that makes the sleeping clock run fast never makes a wait
end late.
"""

from __future__ import annotations

import time

__all__ = ["steady_ns", "monotonic_minus_steady_ns", "STEADY_CLOCK", "SLEW_SHARE"]

_RAW = getattr(time, "CLOCK_MONOTONIC_RAW", None)


def _raw_works() -> bool:
    if _RAW is None:
        return False
    try:
        time.clock_gettime_ns(_RAW)
    except OSError:
        return False
    return True


#: Which clock :func:`steady_ns` reads: ``"raw"`` (CLOCK_MONOTONIC_RAW) or
#: ``"monotonic"``. The app clock's state and a run's identity name it, so
#: a run is never resumed on the other one.
STEADY_CLOCK = "raw" if _raw_works() else "monotonic"

#: A wait on the steady clock is asked 1/SLEW_SHARE short of it on the
#: sleeping clock: NTP never slews faster than 1/12 (chrony's largest rate,
#: 83,333 ppm), so the wait never overshoots and one more look suffices.
SLEW_SHARE = 8

if STEADY_CLOCK == "raw":

    def steady_ns() -> int:
        """The steady clock now, ns (CLOCK_MONOTONIC_RAW)."""
        return time.clock_gettime_ns(_RAW)

else:

    def steady_ns() -> int:
        """The steady clock now, ns (``time.monotonic_ns()`` here: the
        platform has no raw clock)."""
        return time.monotonic_ns()


def monotonic_minus_steady_ns() -> int:
    """``time.monotonic_ns()`` minus :func:`steady_ns` now, from the tightest
    of a few bracketed reads (a preemption between two reads would shift
    it): what turns a moment on one into the other. It changes only as
    NTP steers the monotonic clock (ppm, or up to 1/12 while slewing)."""
    if STEADY_CLOCK == "monotonic":
        return 0
    best = None
    for _ in range(3):
        s1 = steady_ns()
        mono = time.monotonic_ns()
        s2 = steady_ns()
        if best is None or s2 - s1 < best[0]:
            best = (s2 - s1, mono - (s1 + s2) // 2)
    return best[1]


def sleep_s(steady_left_ns: int) -> float:
    """What to ask ``time.sleep()`` or ``asyncio.sleep()`` for, in seconds,
    to wait ``steady_left_ns`` of the steady clock: that much less
    1/:data:`SLEW_SHARE` (0 when nothing is left)."""
    if steady_left_ns <= 0:
        return 0.0
    if STEADY_CLOCK == "monotonic":
        return steady_left_ns / 1e9
    return (steady_left_ns - steady_left_ns // SLEW_SHARE) / 1e9
