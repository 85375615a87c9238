"""Against the real agent binary (target/debug/skewscope-agent, or
$SKEWSCOPE_AGENT): this host's clock, within the bound, with and without the
token; a wrong token has every reply refused. A missing binary fails."""

import asyncio
import math
import time

import pytest

from conftest import run, wait_until
from skewscope_clock import ClockError, connect_clock

#: Slack for time.time()'s float (a quarter of a microsecond today) and ours.
FLOAT_SLACK = 2e-6


async def check_offsets(clock, reads: int = 20) -> None:
    """The server's clock against this host's (the same clock: one host),
    read together: within the bound, plus the time the reads took."""
    for _ in range(reads):
        a = time.time()
        now = clock.now()
        b = time.time()
        bound = clock.bound()
        assert math.isfinite(bound)
        assert bound < 0.050, f"bound {bound * 1e3:.3f} ms on loopback"
        # now() read its clock between a and b, when the truth was in [a, b].
        assert a - bound - FLOAT_SLACK <= now <= b + bound + FLOAT_SLACK, (
            f"offset {(now - a) * 1e6:.1f} us, bound {bound * 1e6:.1f} us, reads {(b - a) * 1e6:.1f} us apart"
        )
        e = clock.estimate()
        assert e is not None and abs(e.drift_ppm) <= 100
        await asyncio.sleep(0.02)


def test_the_agents_clock_within_the_bound(agent):
    async def body():
        clock = await connect_clock(agent.url, timeout=20)
        try:
            assert not clock.authenticated
            await wait_until(lambda: clock.exchanges >= 8, 30, "8 exchanges")
            await check_offsets(clock)
            assert clock.refused == 0
            assert clock.error is None
        finally:
            await clock.close()

    run(body())


async def check_verified(clock) -> None:
    """A keyed clock: every reply verified, offsets within the bound; closed after."""
    try:
        assert clock.authenticated
        await wait_until(lambda: clock.exchanges >= 8, 30, "8 exchanges")
        await check_offsets(clock)
        assert clock.refused == 0
    finally:
        await clock.close()


def test_with_the_token_every_reply_is_verified(keyed_agent):
    async def body():
        await check_verified(await connect_clock(keyed_agent.url, token=keyed_agent.token, timeout=20))

    run(body())


def test_with_a_wrong_token_every_reply_is_refused(keyed_agent):
    async def body():
        with pytest.raises(ClockError, match="refused") as raised:
            await connect_clock(keyed_agent.url, token="not-the-token", timeout=3)
        return str(raised.value)

    message = run(body())
    assert "tag did not verify" in message


def test_no_agent_is_a_clear_error():
    async def body():
        with pytest.raises(ClockError, match="cannot reach"):
            # A port nothing listens on (the kernel refuses at once).
            await connect_clock("ws://127.0.0.1:9/clock", timeout=3)

    run(body())


def test_over_tls_with_the_sites_ca_and_refused_without_it(tls_agent):
    """``wss://`` to an agent with --tls-cert: Python's ssl trusting the
    site's CA syncs and verifies every reply; the system's roots do not know
    the agent, and that is a clear error."""
    import ssl

    async def body():
        trusted = ssl.create_default_context(cafile=str(tls_agent.ca))
        await check_verified(await connect_clock(tls_agent.url, token=tls_agent.token, ssl=trusted, timeout=20))
        with pytest.raises(ClockError, match="CERTIFICATE_VERIFY_FAILED"):
            await connect_clock(tls_agent.url, token=tls_agent.token, timeout=5)

    run(body())
