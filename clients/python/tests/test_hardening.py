"""Hostile /clock peers (issue 43.3): every frame the Rust decoder's fuzz
corpus holds (fuzz/corpus/clock_json/*), and hand-made ones aimed at this
client (huge ints, NaN, deep nesting, the right id with wrong times), are
refused and counted, never raised; now() and bound() never return anything
non-finite; a good reply after them is still used; and close() ends within
its timeout however a peer floods the socket or ignores the close."""

import asyncio
import base64
import hashlib
import json
import math
import re
import time
from pathlib import Path

import pytest

from conftest import agent_reply, run, wait_until
from fake_agent import FakeAgent
from skewscope_clock import ClockError, connect_clock, parse_reply, reply_tag, time_key
from skewscope_clock.model import ClockModel

CORPUS = Path(__file__).resolve().parents[3] / "fuzz" / "corpus" / "clock_json"


def corpus_frames() -> list:
    """The corpus's files as frames: text when UTF-8, else binary."""
    frames = []
    for path in sorted(CORPUS.iterdir()):
        data = path.read_bytes()
        try:
            frames.append(data.decode("utf-8"))
        except UnicodeDecodeError:
            frames.append(data)
    return frames


def hand_made(request_text: str, key: bytes | None) -> tuple[list, int]:
    """Frames aimed at this client for one request: (frames, how many of
    them a keyed clock refuses by their tag rather than ignores)."""
    request = json.loads(request_text)
    rid, t1 = request["id"], request["t1"]
    now = time.time_ns()
    frames = [
        "null", "1", "-0", "[]", '"a string"', "true", "NaN", "Infinity", "-Infinity",
        "[" * 60_000,  # nesting past Python's recursion limit
        "9" * 5_000,  # past int's string limit
        '{"id": NaN}', '{"id": 1e400}', "{\"id\": %d}" % 10**400,
        "{\"id\": %d, \"t1\": %d, \"t2_ns\": NaN, \"t3_ns\": NaN}" % (rid, t1),
        "{\"id\": %d, \"t1\": %d, \"t2_ns\": 1e400, \"t3_ns\": -1e400}" % (rid, t1),
        b'{"id": %d}' % rid,  # binary
    ]
    bound = [
        {"id": rid, "t1": t1, "t2_ns": 10**400, "t3_ns": 10**400},
        {"id": rid, "t1": t1, "t2_ns": 2**64, "t3_ns": 2**64},
        {"id": rid, "t1": t1, "t2_ns": 0, "t3_ns": 0},
        {"id": rid, "t1": t1, "t2_ns": -5, "t3_ns": 5},
        {"id": rid, "t1": t1, "t2_ns": float(now), "t3_ns": float(now)},
        {"id": rid, "t1": t1, "t2_ns": True, "t3_ns": True},
        {"id": rid, "t1": t1, "t2_ns": str(now), "t3_ns": str(now)},
        {"id": rid, "t1": t1},
        {"id": rid, "t1": t1, "t2_ns": now + 10**9, "t3_ns": now},  # reversed
        {"id": str(rid), "t1": t1, "t2_ns": now, "t3_ns": now},
        {"id": float(rid), "t1": t1, "t2_ns": now, "t3_ns": now},
        {"id": True, "t1": t1, "t2_ns": now, "t3_ns": now},
        {"id": rid + 10**400, "t1": t1, "t2_ns": now, "t3_ns": now},
        {"id": [rid], "t1": t1, "t2_ns": now, "t3_ns": now},
    ]
    frames += [json.dumps(b) for b in bound]
    tagged = 0
    if key is not None:
        def auth(t2s, t3s, tag=None):
            return json.dumps({"id": rid, "t1": t1, "auth": {"t2_ns": t2s, "t3_ns": t3s,
                                                             "tag": tag or reply_tag(key, request_text, t2s, t3s)}})
        keyed = [
            auth(str(2**64), str(2**64)),  # verified, but past u64
            auth("99999999999999999999", "99999999999999999999"),  # 20 digits, > 2^64
            auth("1" * 21, "1" * 21),  # 21 digits
            auth("0", "0"),  # verified, but not after the epoch
            auth(str(now + 3_000_000), str(now + 3_000_000), tag=reply_tag(key, request_text, str(now), str(now))),
            auth(str(now), str(now), tag="00" * 16),
            json.dumps({"id": rid, "t1": t1, "auth": "forged"}),
            json.dumps({"id": rid, "t1": t1, "t2_ns": now, "t3_ns": now}),  # untagged
        ]
        frames += keyed
        tagged = len(keyed)
    return frames, tagged


def _object(frame):
    """What the frame decodes to as strict JSON (no NaN or Infinity, which
    JSON does not have), None if it is not JSON."""
    if not isinstance(frame, str):
        return None

    def refuse(name):
        raise ValueError(name)

    try:
        return json.loads(frame, parse_constant=refuse)
    except (ValueError, RecursionError):
        return None


@pytest.mark.parametrize("token", [None, "site-secret"])
def test_hostile_frames_are_refused_counted_and_a_good_reply_still_used(token):
    corpus = corpus_frames()
    assert len(corpus) > 100, f"the corpus at {CORPUS} is missing"
    sent = {"frames": 0, "tagged": 0, "genuine_t2": []}
    readings = []

    async def body():
        async with FakeAgent(token=token) as agent:
            flood_on = asyncio.Event()

            async def hostile(ws, text):
                if not flood_on.is_set() or sent["frames"]:
                    return
                frames, tagged = hand_made(text, agent.key)
                frames = corpus + frames
                # With a token, a frame that is an object carrying this very
                # request's id reaches the tag check (and fails it): refused.
                # Every other is ignored before any other field is read.
                rid = json.loads(text)["id"]
                sent["tagged"] = sum(
                    1 for f in frames
                    if isinstance(p := _object(f), dict) and type(p.get("id")) is int and p["id"] == rid
                )
                assert sent["tagged"] >= tagged
                for f in frames:
                    await ws.send(f)
                sent["frames"] = len(frames)

            agent.before_reply = hostile
            kept = []
            clock = await connect_clock(agent.clock_url, token=token, timeout=20, on_exchange=kept.append)

            async def read_clock():
                while True:
                    readings.append((clock.now(), clock.bound()))
                    await asyncio.sleep(0.002)

            reader = asyncio.ensure_future(read_clock())
            try:
                await wait_until(lambda: clock.exchanges >= 2, 30, "2 exchanges")
                before = clock.exchanges
                flood_on.set()
                await wait_until(lambda: sent["frames"] and clock.ignored + clock.refused >= sent["frames"], 30,
                                 "every hostile frame read")
                # The genuine reply that followed them was used.
                await wait_until(lambda: clock.exchanges > before, 30, "an exchange after them")
                assert clock.error is None and not clock.closed
            finally:
                reader.cancel()
                await asyncio.gather(reader, return_exceptions=True)
                await clock.close()
            return clock, kept

    clock, kept = run(body())
    assert clock.ignored + clock.refused == sent["frames"]
    if token is None:
        assert clock.refused == 0
    else:
        assert clock.refused == sent["tagged"]
    assert readings and all(math.isfinite(now) and math.isfinite(bound) for now, bound in readings)
    # Only genuine times were kept: each within a second of this host's.
    assert all(abs(x.t2 - time.time_ns()) < 60 * 10**9 for x in kept)


def test_parse_reply_takes_objects_only_and_never_raises():
    for frame in corpus_frames() + ["[" * 100_000, "9" * 10_000, "NaN", b"\x00", None, 1.5]:
        result = parse_reply(frame)
        assert result is None or isinstance(result, dict)
    assert parse_reply('{"id": 1}') == {"id": 1}


def test_the_model_refuses_huge_and_non_finite_exchanges():
    model = ClockModel(ns_per_unit=1)
    t = 1_000_000
    for bad in (10**400, 2**64, -(2**64), math.nan, math.inf, -math.inf, True, "1", None):
        assert model.add(t, bad, bad, t + 10) is False
        assert model.add(bad, t, t, t + 10) is False
    assert model.at(t) is None
    assert model.add(t, 1_764_000_000_000_000_000, 1_764_000_000_000_000_100, t + 1000)
    e = model.at(t + 500)
    assert math.isfinite(e.agent_minus_mono_ns) and math.isfinite(e.bound_ns)


def test_act_at_refuses_a_time_that_is_not_a_finite_number(tmp_path):
    async def body():
        async with FakeAgent() as agent:
            clock = await connect_clock(agent.clock_url, name="kiosk-1", state_dir=tmp_path, timeout=20)
            try:
                for bad in (math.nan, math.inf, -math.inf, 10**400, "1e999", "NaN", None, True, "soon"):
                    with pytest.raises(ValueError):
                        clock.act_at(bad, lambda acted: None, message="go")
                # Nothing was recorded for them.
                assert clock.upload_status().unrecorded == 0
                # A finite time beyond the agent's range acts (it waits) but is
                # not recorded: the agent would refuse its event.
                far = clock.act_at(1e300, lambda acted: None, message="go")
                assert not far.done() and far.cancel()
                assert clock.upload_status().unrecorded == 1
            finally:
                await clock.close()

    run(body())


# -- a peer that floods and never closes --------------------------------------

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


async def read_frame(reader) -> tuple[int, bytes]:
    b0, b1 = await reader.readexactly(2)
    n = b1 & 0x7F
    if n == 126:
        n = int.from_bytes(await reader.readexactly(2), "big")
    elif n == 127:
        n = int.from_bytes(await reader.readexactly(8), "big")
    mask = await reader.readexactly(4) if b1 & 0x80 else b"\0\0\0\0"
    data = bytes(c ^ mask[i % 4] for i, c in enumerate(await reader.readexactly(n)))
    return b0 & 0x0F, data


def frame(payload: bytes, opcode: int = 1) -> bytes:
    n = len(payload)
    head = bytes([0x80 | opcode]) + (bytes([n]) if n < 126 else bytes([126]) + n.to_bytes(2, "big"))
    return head + payload


class FloodingClock:
    """A raw WebSocket /clock on loopback: answers the first requests as the
    agent does, then writes unsolicited frames as fast as the socket takes
    them, never reads again (a close frame is never answered) and never
    closes. Any other path gets 404."""

    def __init__(self, answer: int = 3):
        self.answer = answer
        self.flooding = asyncio.Event()
        self.sent = 0
        self.writers = []

    async def handle(self, reader, writer) -> None:
        self.writers.append(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.split(b" ", 2)[1].startswith(b"/clock"):
                writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                writer.close()
                return
            key = re.search(rb"(?i)sec-websocket-key:\s*(\S+)", head).group(1)
            accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
            writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
            for _ in range(self.answer):
                opcode, data = await read_frame(reader)
                t2 = time.time_ns()
                writer.write(frame(json.dumps(agent_reply(data.decode(), t2, time.time_ns(), None)).encode()))
                await writer.drain()
            self.flooding.set()
            junk = frame(b'{"id": 123456789, "t2_ns": 1, "t3_ns": 2}')
            while True:
                writer.write(junk * 64)
                self.sent += 64
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass


def test_close_ends_within_its_timeout_under_a_flood_of_unsolicited_frames(tmp_path):
    async def body():
        peer = FloodingClock()
        server = await asyncio.start_server(peer.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            for name in (None, "kiosk-1"):
                peer.flooding.clear()
                clock = await connect_clock(f"ws://127.0.0.1:{port}/clock", timeout=20, name=name, state_dir=tmp_path)
                await asyncio.wait_for(peer.flooding.wait(), 30)
                sent = peer.sent
                await wait_until(lambda: peer.sent > sent + 1000, 30, "the flood")
                t0 = time.monotonic()
                await clock.close(timeout=1.0, upload_timeout=0.5)
                took = time.monotonic() - t0
                # Its promise: the timeout (plus the upload's, when named);
                # the slack is a loaded machine's scheduling, not a wait.
                allowed = 1.0 + (0.5 if name else 0.0)
                assert took < allowed + 1.0, f"close() took {took:.2f} s (timeout {allowed} s)"
                assert clock.closed
                with pytest.raises(ClockError):
                    await connect_clock(f"ws://127.0.0.1:{port}/nothing", timeout=5)
        finally:
            for w in peer.writers:
                w.transport.abort()
            server.close()

    run(body())
