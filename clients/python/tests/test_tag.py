"""The reply tag: the vector Rust, JavaScript and Python agree on, and a
clock with the token that refuses altered replies from a server on the path."""

import json
import math
import re
import time

from websockets.asyncio.server import serve

from conftest import FakeClockServer, agent_reply, run, wait_until
from skewscope_clock import check_reply, connect_clock, reply_tag, time_key

VECTOR_REQUEST = '{"id":1,"t1":1000}'
VECTOR_T2 = "1764000000000000001"
VECTOR_T3 = "1764000000000000002"
VECTOR_TAG = "2507b9ac663f4096104e8f8263461495"


def test_the_tag_is_the_one_the_agent_and_the_page_compute():
    key = time_key("site-secret")
    assert len(key) == 32
    assert reply_tag(key, VECTOR_REQUEST, VECTOR_T2, VECTOR_T3) == VECTOR_TAG
    reply = {"auth": {"t2_ns": VECTOR_T2, "t3_ns": VECTOR_T3, "tag": VECTOR_TAG}}
    # The times come from the tagged digits, exactly (a float would not hold them).
    assert check_reply(key, VECTOR_REQUEST, reply) == (1764000000000000001, 1764000000000000002)


def test_a_reply_that_does_not_verify_is_refused():
    key = time_key("site-secret")
    good = {"auth": {"t2_ns": VECTOR_T2, "t3_ns": VECTOR_T3, "tag": VECTOR_TAG}}
    # Another request's text (an old reply replayed), another token.
    assert check_reply(key, '{"id":2,"t1":1000}', good) is None
    assert check_reply(time_key("guess"), VECTOR_REQUEST, good) is None
    # A time moved, the tag cut short or not hex, no auth at all.
    for auth in (
        {"t2_ns": "1764000000003000001", "t3_ns": VECTOR_T3, "tag": VECTOR_TAG},
        {"t2_ns": VECTOR_T2, "t3_ns": VECTOR_T3, "tag": VECTOR_TAG[:30]},
        {"t2_ns": VECTOR_T2, "t3_ns": VECTOR_T3, "tag": "zz" + VECTOR_TAG[2:]},
        {"t2_ns": int(VECTOR_T2), "t3_ns": VECTOR_T3, "tag": VECTOR_TAG},
        {"t2_ns": " " + VECTOR_T2, "t3_ns": VECTOR_T3, "tag": VECTOR_TAG},
    ):
        assert check_reply(key, VECTOR_REQUEST, {"auth": auth}) is None, auth
    assert check_reply(key, VECTOR_REQUEST, {"t2_ns": 1, "t3_ns": 2}) is None
    assert check_reply(key, VECTOR_REQUEST, "not a reply") is None
    # The agent's own encoding of a reply verifies under its key.
    text = '{"id": 7, "t1": 123}'
    reply = agent_reply(text, 1764000000123789012, 1764000000123801345, key)
    assert check_reply(key, text, json.loads(json.dumps(reply))) == (1764000000123789012, 1764000000123801345)


def test_altered_replies_are_refused_counted_and_never_used():
    server = FakeClockServer("site-secret")
    kept = []

    async def body():
        async with serve(server.handler, "127.0.0.1", 0) as srv:
            port = srv.sockets[0].getsockname()[1]
            clock = await connect_clock(
                f"ws://127.0.0.1:{port}/clock", token="site-secret", timeout=20, on_exchange=kept.append
            )
            try:
                assert clock.authenticated
                await wait_until(lambda: clock.refused >= 3 and len(kept) >= 4, 30, "3 refused and 4 kept exchanges")
                a = time.time()
                now = clock.now()
                b = time.time()
                bound = clock.bound()
                assert math.isfinite(bound)
                assert abs(now - a) <= bound + (b - a) + 0.001, (now, a, b, bound)
                return clock.refused, clock.exchanges
            finally:
                await clock.close()

    refused, exchanges = run(body())
    assert refused >= 3
    # Each request went out as {"id": N, "t1": T}: T the monotonic clock, ns.
    for text in server.requests:
        assert re.fullmatch(r'\{"id": [0-9]+, "t1": [0-9]+\}', text), text
    # Only genuine replies reached the model: none of the altered times.
    assert exchanges == len(kept)
    assert all(x.t2 in server.genuine_t2 for x in kept)
    assert not any(x.t2 in server.altered_t2 for x in kept)
    # The forgeries that raced a genuine reply did not cost its exchange.
    assert any(x.t2 in server.raced_t2 for x in kept), "no genuine reply after a forgery was used"
