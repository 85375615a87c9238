"""The model in other units, the schedule, and times in any unit: what the
page module's own tests check, for this port."""

import math

import pytest

from skewscope_clock import (
    FASTEST_NS,
    LOOSE_AFTER_PAIR,
    MAX_BURST_ROUNDS,
    ClockModel,
    Estimate,
    Schedule,
    to_epoch_seconds,
)


def exchange(t1, offset, up, down, turnaround=0.01):
    """An exchange with the server `offset` ahead, `up` and `down` each way."""
    t2 = t1 + up + offset
    t3 = t2 + turnaround
    return t1, t2, t3, t3 - offset + down


def test_two_exchanges_best_paths_both_count_in_milliseconds():
    m = ClockModel(ns_per_unit=1e6)
    truth = 2.5
    assert m.add(*exchange(1000, truth, 0.05, 0.9))
    assert m.add(*exchange(1001, truth, 0.9, 0.05))
    e = m.at(1001.5)
    assert abs(e.agent_minus_mono_ns / 1e6 - truth) <= e.bound_ns / 1e6
    assert e.bound_ns / 1e6 < 0.1


def test_an_exchange_that_could_not_happen_is_refused():
    m = ClockModel()
    assert m.add(10, 5, 6, 9) is False  # reply before the request
    assert m.add(10, 5, 4, 12) is False  # the server's times reversed
    assert m.add(10, 5, 6, math.nan) is False
    assert m.add(10, True, 6, 12) is False
    assert m.at(10) is None


def test_nanoseconds_of_todays_wall_clock_stay_exact():
    # 1.76e18 ns is past a double's 2^53: the model keeps them as ints.
    m = ClockModel()
    wall = 1_764_000_000_000_000_001
    assert m.add(1_000, wall, wall + 10, 1_000 + 2_000)
    e = m.at(1_000)
    assert isinstance(e.agent_minus_mono_ns, int)
    assert abs(e.agent_minus_mono_ns - (wall - 1_000)) <= e.bound_ns <= 2_000


def test_one_host_on_a_jittery_link_measures_no_drift_it_cannot_defend():
    m = ClockModel(ns_per_unit=1e6)
    seed = 7

    def random():
        nonlocal seed
        seed = (seed * 1103515245 + 12345) % 2147483648
        return seed / 2147483648

    for t in range(0, 300_000, 500):
        m.add(*exchange(t, 0, 1 - 3 * math.log(1 - random()), 1 - 3 * math.log(1 - random())))
    e = m.at(300_000)
    assert abs(e.drift_ppb) <= e.drift_bound_ppb
    assert abs(e.agent_minus_mono_ns) <= e.bound_ns


def drive(s, requests, bound):
    """Runs a schedule with the bound ``bound(round)``; the request times."""
    sent = []
    for i in range(requests):
        at = s.next_request_at()
        sent.append(at)
        b = bound(i // 2)
        s.done(at + 1_000_000, None if b is None else Estimate(0, b, 0.0, 0.0))
    return sent


def test_the_schedule_pairs_bursts_then_keeps_the_steady_rate():
    s = Schedule(0, 1e9)
    sent = drive(s, 2 * MAX_BURST_ROUNDS, lambda r: 1e6 / 2 ** min(r, 10))
    assert sent[1] == sent[0] + 1_000_000, "the second of a pair at the first's reply"
    assert s.bursting is False
    steady = drive(s, 4, lambda r: 1e6 / 2**10)
    assert steady[2] - steady[0] == 1e9
    # A loosely known drift brings the pairs closer, never under FASTEST_NS.
    t = s.next_request_at()
    s.done(t + 1e6, Estimate(0, 1e6 / 2**10, 0.0, 400_000.0))
    s.done(t + 2e6, Estimate(0, 1e6 / 2**10, 0.0, 400_000.0))
    assert s.next_request_at() - t == FASTEST_NS
    # A bound over twice the best of the horizon: a burst again, soon.
    t = s.next_request_at()
    s.done(t + 1e6, Estimate(0, 1e6, 0.0, 0.0))
    s.done(t + 2e6, Estimate(0, 1e6, 0.0, 0.0))
    assert s.bursting and s.next_request_at() - t < FASTEST_NS


def test_a_pair_that_missed_the_links_best_brings_the_next_sooner():
    """As schedule.rs: over LOOSE_AFTER_PAIR times the best, half the interval."""
    s = Schedule(0, 1e9)
    drive(s, 2 * MAX_BURST_ROUNDS, lambda r: 100_000)
    assert s.bursting is False
    at = s.next_request_at()
    drive(s, 2, lambda r: 100_000 * 1.1)
    assert s.next_request_at() - at == 1e9
    at = s.next_request_at()
    drive(s, 2, lambda r: 100_000 * 1.5)
    assert s.bursting is False and s.next_request_at() - at == 5e8
    assert LOOSE_AFTER_PAIR == 1.15


def test_a_burst_stops_at_its_cap_and_hurry_bursts_at_once():
    s = Schedule(0, 1e9)
    drive(s, 2 * MAX_BURST_ROUNDS, lambda r: None)
    assert s.bursting is False
    t = Schedule(0, 1e9)
    drive(t, 2 * MAX_BURST_ROUNDS, lambda r: 1e5)
    assert t.hurry(t.next_request_at()) is True
    drive(t, 2 * MAX_BURST_ROUNDS, lambda r: 1e5)
    now = t.next_request_at() - 5e8
    assert t.hurry(now) is True
    assert t.next_request_at() == now
    assert t.hurry(now + 1e6) is False


def test_times_to_act_in_any_unit_become_epoch_seconds():
    ms = 1_764_633_600_123
    assert to_epoch_seconds(ms / 1000) == ms / 1000
    assert to_epoch_seconds(ms) == ms / 1000
    assert to_epoch_seconds(ms * 1000) == ms / 1000
    assert to_epoch_seconds(ms * 1_000_000) == ms / 1000
    assert to_epoch_seconds("1764633600.5", "s") == 1_764_633_600.5
    assert to_epoch_seconds(1_764_633_600_500, "ms") == 1_764_633_600.5
    # Nanoseconds as an int are divided exactly, not through a float first.
    assert to_epoch_seconds(1_796_554_800_250_000_001) == 1_796_554_800_250_000_001 / 10**9
    assert to_epoch_seconds("1796554800250000000") == 1_796_554_800.25
    for bad in ("soon", math.inf, None, True):
        with pytest.raises(ValueError):
            to_epoch_seconds(bad)
    with pytest.raises(ValueError):
        to_epoch_seconds(1.0, "fortnights")
