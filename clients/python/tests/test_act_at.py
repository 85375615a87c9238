"""act_at against the real agent: on time in the server's clock, never
before the target less the bound, late only by a few ms on a loaded box;
a time already past runs at once and says how late."""

import asyncio
import time

from conftest import run, wait_until
from skewscope_clock import Acted, connect_clock

#: What a loaded 2-core box may add after the moment (the design's is a read).
LATE_ALLOWANCE = 0.020
FLOAT_SLACK = 2e-6


def test_actions_run_at_their_time(agent):
    results = []

    def act(acted: Acted) -> None:
        wall = time.time()  # this host's clock is the agent's: the truth
        results.append((acted, wall, clock.now(), clock.bound()))

    async def body():
        nonlocal clock
        clock = await connect_clock(agent.url, timeout=20)
        try:
            await wait_until(lambda: clock.exchanges >= 8, 30, "8 exchanges")
            start = clock.now()
            targets = [start + lead for lead in (0.10, 0.15, 0.20, 0.25, 0.30)]
            actions = [
                clock.act_at(targets[0], act),
                clock.act_at(targets[1] * 1e3, act),  # ms, read from the magnitude
                clock.act_at(int(targets[2] * 1e6), act),  # us
                clock.act_at(int(targets[3] * 1e9), act),  # ns
                clock.act_at(targets[4], act, unit="s"),
            ]
            assert not any(a.done() for a in actions), "none at once"
            async with asyncio.timeout(10):
                done = [await a for a in actions]
            return targets, done
        finally:
            await clock.close()

    clock = None
    targets, done = run(body())
    assert len(results) == 5
    for want, (acted, wall, now, bound), returned in zip(targets, sorted(results, key=lambda r: r[0].target), done):
        assert abs(acted.target - want) < 1e-5
        assert returned == acted
        # Never early by the clock's own reading, and it says so.
        assert acted.actual >= acted.target and now >= acted.target
        assert 0 <= acted.late <= LATE_ALLOWANCE
        # In truth: not before the target less the bound, and not much after.
        assert wall >= acted.target - bound - FLOAT_SLACK, f"{(wall - acted.target) * 1e3:.3f} ms, bound {bound * 1e3:.3f} ms"
        assert wall - acted.target <= bound + LATE_ALLOWANCE, f"{(wall - acted.target) * 1e3:.3f} ms late"


def test_a_time_already_past_runs_at_once_and_says_how_late(agent):
    async def body():
        clock = await connect_clock(agent.url, timeout=20)
        try:
            calls = []
            target = clock.now() - 0.05
            action = clock.act_at(target, calls.append)
            # At once: before act_at returned.
            assert len(calls) == 1 and action.done()
            acted = calls[0]
            assert acted.late > 0.049 and acted.actual - acted.target == acted.late
            assert acted.missed  # it did not run at its moment: late, whatever the amount
            assert (await action) is acted
            # And one called off never runs.
            soon = clock.now() + 0.05
            later = clock.act_at(soon, calls.append)
            assert later.cancel()
            await wait_until(later.done, 5, "the cancelled action to end")
            await wait_until(lambda: clock.now() > soon + 0.01, 5, "its time to pass")
            assert len(calls) == 1
        finally:
            await clock.close()

    run(body())


def test_no_model_is_read_between_the_read_out_and_the_callback(agent):
    """The moment is planned and checked before the read-out: after it only
    the monotonic clock is read. A model read there (tens of microseconds in
    Python) made every action late by it."""
    reads_in_read_out = []
    read_outs = 0
    in_read_out = False

    async def body():
        nonlocal in_read_out
        clock = await connect_clock(agent.url, timeout=20)
        try:
            await wait_until(lambda: clock.exchanges >= 4, 30, "4 exchanges")
            model_at = clock.model.at
            read_out = clock._read_out

            def watched_at(t):
                if in_read_out:
                    reads_in_read_out.append(t)
                return model_at(t)

            def watched_read_out(moment):
                nonlocal in_read_out, read_outs
                in_read_out = True
                read_outs += 1
                return read_out(moment)

            def act(acted):
                nonlocal in_read_out
                in_read_out = False
                return acted

            clock.model.at = watched_at
            clock._read_out = watched_read_out
            start = clock.now()
            actions = [clock.act_at(start + lead, act) for lead in (0.05, 0.08, 0.11)]
            async with asyncio.timeout(10):
                done = [await a for a in actions]
            return done
        finally:
            await clock.close()

    done = run(body())
    assert len(done) == 3 and all(a.actual >= a.target for a in done)
    assert read_outs == 3, "each action waits in the read-out"
    assert reads_in_read_out == [], "the model was read after the read-out began"


def test_the_planned_moment_is_never_early_by_the_estimate_at_it():
    """A floored offset may swing by 1 ns between two neighbouring moments,
    so a plain fixed-point search can end one ns before the moment: the plan
    always ends at a moment the estimate there says is in time, and hands
    back that estimate."""
    from types import SimpleNamespace

    from skewscope_clock.client import Clock

    target = 1_000
    # At 499 the server's clock reads 999 (early); at 500, 1,001.
    offsets = {499: 500, 500: 501}

    def at(mono):
        off = offsets.get(mono, 500 if mono % 2 else 501)
        return SimpleNamespace(agent_minus_mono_ns=off, bound_ns=1_000)

    fake = SimpleNamespace(model=SimpleNamespace(at=at))
    for start in (400, 499, 500, 501, 600):
        used, moment = Clock._moment(fake, target, None, start)
        assert moment + used.agent_minus_mono_ns >= target, (start, moment)
        assert used.agent_minus_mono_ns == at(moment).agent_minus_mono_ns, (start, moment)
        assert moment <= 501, (start, moment)
    # No estimate at the plan: the one at this reading plans it; none at
    # all: the plan stands.
    none = SimpleNamespace(model=SimpleNamespace(at=lambda mono: None))
    assert Clock._moment(none, target, "old", 123) == ("old", 123)


def test_a_suspend_drops_the_model_at_once_until_the_next_exchange(agent, monkeypatch):
    """A device that slept (CLOCK_BOOTTIME grew past CLOCK_MONOTONIC) has a
    model off by the sleep: no answer from it until an exchange after the
    wake, which is asked for at once; one sleep counts once."""
    import skewscope_clock.client as client
    from skewscope_clock import ClockError

    async def body():
        clock = await connect_clock(agent.url, timeout=20)
        try:
            await wait_until(lambda: clock.exchanges >= 4, 30, "4 exchanges")
            clock.now()  # answers before
            asleep = client._suspended_ns() + 5_000_000  # 5 ms suspended
            monkeypatch.setattr(client, "_suspended_ns", lambda: asleep)
            before = clock.exchanges
            try:
                clock.now()
            except ClockError:
                refused = True
            else:
                refused = False
            assert clock.jumps == 1
            await wait_until(lambda: clock.exchanges > before, 5, "an exchange after the wake")
            clock.now()  # answers again
            return refused, clock.jumps
        finally:
            await clock.close()

    refused, jumps = run(body())
    assert refused, "the model answered after a suspend"
    assert jumps == 1, "one sleep, one drop"
