"""The steady clock: the model and the timers keep time on
CLOCK_MONOTONIC_RAW (NTP's slews do not bend it), and everything leaving
the module is on time.monotonic_ns(), converted with the clocks' difference."""

import asyncio

import skewscope_clock.client as client
from skewscope_clock import Exchange

#: The two clocks' difference in this test (this VM's was 234 ms).
D = 234_000_000
#: The server's clock minus the steady clock.
AHEAD = 5_000_000_000


def _clock_on_a_fake_steady_clock(monkeypatch, seen):
    now = [10_000_000_000]
    monkeypatch.setattr(client, "steady_ns", lambda: now[0])
    monkeypatch.setattr(client, "monotonic_minus_steady_ns", lambda: D)
    monkeypatch.setattr(client, "_suspended_ns", lambda: None)
    c = client.Clock("ws://127.0.0.1:9/clock", on_exchange=seen.append)
    c._synced = asyncio.Event()
    return c, now


def test_exchanges_feed_the_model_on_the_steady_clock_and_leave_on_the_monotonic(monkeypatch):
    seen = []
    c, now = _clock_on_a_fake_steady_clock(monkeypatch, seen)
    for _ in range(4):
        t1 = now[0]
        t4 = t1 + 1_000_000
        now[0] = t4
        c._answered(Exchange(t1, t1 + AHEAD + 500_000, t1 + AHEAD + 500_000, t4))
        now[0] += 250_000_000
    assert c.exchanges == 4
    # The app's copy is on its monotonic clock: t1 and t4 moved by D.
    first = seen[0]
    assert first.t1 == 10_000_000_000 + D and first.t4 == 10_001_000_000 + D
    assert first.t2 == 10_000_000_000 + AHEAD + 500_000
    # The model's, on the steady clock: now() is the server's clock.
    assert abs(c.now() * 1e9 - (now[0] + AHEAD)) <= c.bound() * 1e9 + 1_000
    # An estimate asked at a monotonic moment answers for it, its offset
    # the server minus the monotonic clock.
    e = c.estimate(now[0] + D)
    assert abs(e.offset_ns - (AHEAD - D)) <= e.bound_ns + 1_000
    assert c.estimate().offset_ns == e.offset_ns


def test_the_model_keeps_time_on_the_raw_clock_where_there_is_one():
    """NTP steers CLOCK_MONOTONIC (chrony slews at up to 83 ms/s), not
    CLOCK_MONOTONIC_RAW: the model follows the crystal, not the daemon."""
    import time

    from skewscope_clock import STEADY_CLOCK, monotonic_minus_steady_ns, steady_ns

    if not hasattr(time, "CLOCK_MONOTONIC_RAW"):
        assert STEADY_CLOCK == "monotonic" and monotonic_minus_steady_ns() == 0
        return
    assert STEADY_CLOCK == "raw"
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW)
    s = steady_ns()
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW)
    assert before <= s <= after
    # The difference ties a monotonic reading to the steady clock.
    d = monotonic_minus_steady_ns()
    mono, steady = time.monotonic_ns(), steady_ns()
    assert abs((mono - steady) - d) < 1_000_000


def test_a_wait_on_the_steady_clock_is_asked_short_of_the_sleeping_clock():
    from skewscope_clock.steady import SLEW_SHARE, STEADY_CLOCK, sleep_s

    assert sleep_s(0) == 0.0 and sleep_s(-5) == 0.0
    if STEADY_CLOCK == "raw":
        # Never past the moment even if the sleeping clock runs 1/12 fast.
        assert sleep_s(8_000_000) == 0.007
        assert sleep_s(12_000_000) * (1 + 1 / 12) * 1e9 < 12_000_000
        assert SLEW_SHARE < 12
