"""A named clock reports the app's own actions: the run's start, its
exchanges, the hub connections of subscribe() (labelled for the agent's
hub), and each acted message's receipt and action, uploaded exactly once,
across reconnects, restarts and SIGKILL. Against the fake agent, which
checks each event as the agent's decoder does."""

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from conftest import run, wait_until
from fake_agent import FakeAgent
from skewscope_clock import ClockError, connect_clock
from skewscope_clock.appclock import boot_id
from skewscope_clock.spool import AppDir, Run

KIOSK = Path(__file__).resolve().parent / "kiosk.py"


def events_of(agent, run_id):
    r = agent.ingest.run(run_id)
    return [] if r is None else r.events


def kinds(events):
    return [e["kind"] for e in events]


def test_a_new_run_starts_with_its_header_and_ends_stored_and_removed(tmp_path):
    async def body():
        async with FakeAgent(token="site-secret") as agent:
            clock = await connect_clock(agent.clock_url, token="site-secret", name="kiosk-1", state_dir=tmp_path, timeout=20)
            run_id = clock.run_id
            await wait_until(lambda: clock.exchanges >= 4, 30, "4 exchanges")
            await clock.close()
            status = clock.upload_status()
            return agent, run_id, status, clock.exchanges

    agent, run_id, status, exchanges = run(body())
    events = events_of(agent, run_id)
    assert kinds(events)[:4] == ["started", "identity", "app", "clock_tags"]
    started, identity, app, tags = events[:4]
    assert started["name"] == "kiosk-1" and started["url"].endswith("/clock") and started["connections"] == 0
    assert started["version"] == "skewscope_clock.py 1"
    assert identity == {"kind": "identity", "run_id": run_id, "clock_id": f"app-{boot_id()}"}
    assert app["module"] == "skewscope_clock.py 1" and app["runtime"].startswith("CPython 3.") and "websockets" in app["runtime"]
    assert tags["keyed"] is True and tags["refused"] == 0
    # Every exchange kept, on the app clock (t1 < t4) and the agent's (t2 <= t3).
    xs = [e for e in events if e["kind"] == "exchange"]
    assert len(xs) == exchanges
    assert all(x["t1_ms"] <= x["t4_ms"] and x["t2_ms"] <= x["t3_ms"] for x in xs)
    # The app clock reads as this host's wall time (one host: the agent's).
    assert all(abs(x["t1_ms"] - x["t2_ms"]) < 1000 for x in xs)
    assert events[-1]["kind"] == "stopped"
    assert status.events == status.acked == len(events) and status.error is None and status.unrecorded == 0
    assert not agent.ingest.rejected
    # Finished: the run's files are gone (the lock file stays).
    assert [p.name for p in (tmp_path / "apps").iterdir() for p in p.iterdir()] == ["lock"]


def test_subscribe_stamps_labels_reconnects_and_records_what_is_acted_on(tmp_path):
    acted = []

    async def body():
        async with FakeAgent() as agent:
            clock = await connect_clock(agent.clock_url, name="lobby", state_dir=tmp_path, timeout=20)
            run_id = clock.run_id
            got = []
            async with clock.subscribe(agent.hub_url) as hub:
                await wait_until(lambda: agent.hub.clients, 30, "the subscription")
                soon = json.dumps({"at": clock.now() + 0.15})
                await agent.hub.broadcast(soon)
                await agent.hub.broadcast(soon)  # the same payload again: occurrence 1
                await agent.hub.broadcast("not json")
                await agent.hub.broadcast(b"\x00\xff")
                late = json.dumps({"at": clock.now() - 0.05})
                await agent.hub.broadcast(late)
                async for m in hub:
                    got.append(m)
                    if m.text == late:
                        break
                # Acted on: the second copy of `soon` (not the first), and `late`.
                a1 = clock.act_at(json.loads(got[1].text)["at"], acted.append, message=got[1])
                a2 = clock.act_at(json.loads(late)["at"], acted.append, message=got[4])
                assert a2.done()
                async with asyncio.timeout(10):
                    await a1
                # The hub drops the connection: a new one, with a new number and label.
                await agent.hub.drop_all()
                await wait_until(lambda: len(agent.hub.paths) == 2 and agent.hub.clients, 30, "the reconnection")
                await agent.hub.broadcast("after")
                async for m in hub:
                    got.append(m)
                    break
            await clock.close()
            return agent, run_id, got, clock.upload_status()

    agent, run_id, got, status = run(body())
    assert [m.conn for m in got] == [0, 0, 0, 0, 0, 1]
    assert [m.occurrence for m in got[:2]] == [0, 1]
    assert got[3].text == b"\x00\xff" and got[3].binary
    assert all(a.read_ms <= b.read_ms for a, b in zip(got, got[1:]))
    assert agent.hub.paths == [f"/ws?probe=app.{run_id}.0", f"/ws?probe=app.{run_id}.1"]
    events = events_of(agent, run_id)
    body_kinds = [k for k in kinds(events) if k not in ("exchange", "clock_tags")]
    assert body_kinds[:3] == ["started", "identity", "app"]
    rest = [e for e in events if e["kind"] not in ("started", "identity", "app", "exchange", "clock_tags")]
    # Only the acted-on messages have receipts; each receipt before its action.
    receipts = [e for e in rest if e["kind"] == "receipt"]
    actions = [e for e in rest if e["kind"] == "action"]
    assert [r["message"] for r in receipts] == [
        {"text": got[1].text, "occurrence": 1},
        {"text": got[4].text, "occurrence": 0},
    ]
    assert [r["at_ms"] for r in receipts] == [got[1].read_ms, got[4].read_ms]
    assert sorted(a["message"]["text"] for a in actions) == sorted([got[1].text, got[4].text])
    on_time = next(a for a in actions if a["message"]["text"] == got[1].text)
    late = next(a for a in actions if a["message"]["text"] == got[4].text)
    assert on_time["late_ms"] == 0 and on_time["done_ms"] >= on_time["target_ms"]
    assert on_time["act_at_ms"] == pytest.approx(json.loads(got[1].text)["at"] * 1e3, abs=1e-3)
    assert on_time["offset_ms"] is not None and on_time["bound_ms"] is not None and on_time["bound_ms"] >= 0
    # The late one: read after its time, by the read minus the moment aimed at.
    assert late["late_ms"] == pytest.approx(got[4].read_ms - late["target_ms"], abs=1e-3) and late["late_ms"] > 40
    # The late one ran at once (first), and says it did not run at its moment.
    assert len(acted) == 2 and acted[0].missed and acted[0].target < acted[1].target
    # Connections: opened 0, closed 0 (dropped), opened 1, closed 1 (by the app).
    conns = [(e["kind"], e["conn"]) for e in rest if e["kind"] in ("opened", "closed")]
    assert conns == [("opened", 0), ("closed", 0), ("opened", 1), ("closed", 1)]
    assert events[-1]["kind"] == "stopped"
    assert status.events == status.acked == len(events) and not agent.ingest.rejected


def test_raw_text_from_the_apps_own_socket_gets_one_connection_and_counts(tmp_path):
    async def body():
        async with FakeAgent() as agent:
            clock = await connect_clock(agent.clock_url, name="kiosk-raw", state_dir=tmp_path, timeout=20)
            run_id = clock.run_id
            at = clock.now() - 0.01
            for text in ("go", "go", b"\x01"):
                clock.act_at(at, lambda acted: None, message=text)
            await clock.close()
            return agent, run_id

    agent, run_id = run(body())
    events = events_of(agent, run_id)
    receipts = [e for e in events if e["kind"] == "receipt"]
    assert [(r["conn"], r["message"]) for r in receipts] == [
        (0, {"text": "go", "occurrence": 0}),
        (0, {"text": "go", "occurrence": 1}),
        (0, {"hex": "01", "occurrence": 0}),
    ]
    assert not [e for e in events if e["kind"] == "opened"]  # no opened event for it
    assert len([e for e in events if e["kind"] == "action"]) == 3


def test_without_a_name_nothing_is_written_or_uploaded(tmp_path, monkeypatch):
    monkeypatch.setenv("SKEWSCOPE_STATE_DIR", str(tmp_path / "state"))

    async def body():
        async with FakeAgent() as agent:
            clock = await connect_clock(agent.clock_url, timeout=20)
            async with clock.subscribe(agent.hub_url) as hub:
                await wait_until(lambda: agent.hub.clients, 30, "the subscription")
                await agent.hub.broadcast("hello")
                async for m in hub:
                    clock.act_at(clock.now() - 1, lambda a: None, message=m)
                    break
            await clock.close()
            assert clock.run_id is None and clock.upload_status() is None
            return agent

    agent = run(body())
    assert agent.hub.paths == ["/ws"]  # no label
    assert agent.ingest.connections == 0
    assert not (tmp_path / "state").exists()


def test_closing_the_clock_ends_a_subscriptions_iteration(tmp_path):
    async def body():
        async with FakeAgent() as agent:
            clock = await connect_clock(agent.clock_url, name="kiosk-1", state_dir=tmp_path, timeout=20)
            run_id = clock.run_id
            got = []

            async def follow():
                async with clock.subscribe(agent.hub_url) as hub:
                    async for m in hub:
                        got.append(m)

            reader = asyncio.ensure_future(follow())
            await wait_until(lambda: agent.hub.clients, 30, "the subscription")
            await agent.hub.broadcast("one")
            await wait_until(lambda: got, 30, "a message")
            await clock.close()
            async with asyncio.timeout(10):
                await reader  # the iteration ended by itself
            return agent, run_id

    agent, run_id = run(body())
    events = events_of(agent, run_id)
    closed = [e for e in events if e["kind"] == "closed"]
    assert [(e["conn"], e["reason"]) for e in closed] == [(0, "clock closed")]
    assert kinds(events)[-1] == "stopped"


def test_one_clock_per_name_and_state_dir(tmp_path):
    async def body():
        async with FakeAgent() as agent:
            first = await connect_clock(agent.clock_url, name="kiosk-1", state_dir=tmp_path, timeout=20)
            try:
                with pytest.raises(ClockError, match="another process runs the app 'kiosk-1'"):
                    await connect_clock(agent.clock_url, name="kiosk-1", state_dir=tmp_path, timeout=20)
            finally:
                await first.close()
            # Once closed, the name is free again (and starts a new run).
            second = await connect_clock(agent.clock_url, name="kiosk-1", state_dir=tmp_path, timeout=20)
            assert second.run_id != first.run_id
            await second.close()

    run(body())


def test_a_run_of_another_boot_is_stopped_uploaded_and_a_new_one_started(tmp_path):
    async def body():
        async with FakeAgent() as agent:
            # An unfinished run left by another boot, with a connection open.
            d = AppDir(tmp_path, "kiosk-1")
            old = Run.create(d.path, name="kiosk-1", boot_id="another-boot", clock_url=agent.clock_url,
                             ingest_url=agent.clock_url.replace("/clock", "/ingest"))
            old.emit({"kind": "started", "name": "kiosk-1", "url": agent.clock_url, "connections": 0,
                      "version": "skewscope_clock.py 1", "at_ms": 5000.0})
            old.emit({"kind": "identity", "run_id": old.run_id, "clock_id": "app-another-boot"})
            c = old.new_conn()
            old.opened(c, 5001.0)
            old.emit({"kind": "exchange", "t1_ms": 5002.0, "t2_ms": 9.0, "t3_ms": 9.0, "t4_ms": 5002.5})
            old.close()
            d.release()
            clock = await connect_clock(agent.clock_url, name="kiosk-1", state_dir=tmp_path, timeout=20)
            assert clock.run_id != old.run_id and not clock.upload_status().resumed
            await clock.close()
            return agent, old.run_id, clock.run_id

    agent, old_id, new_id = run(body())
    old_events = events_of(agent, old_id)
    assert kinds(old_events) == ["started", "identity", "opened", "exchange", "closed", "stopped"]
    # Closed and stopped at its last event's time, on its own clock.
    assert old_events[-2] == {"kind": "closed", "conn": 0, "at_ms": 5002.5, "reason": "app restarted"}
    assert old_events[-1] == {"kind": "stopped", "at_ms": 5002.5}
    assert kinds(events_of(agent, new_id))[:3] == ["started", "identity", "app"]
    assert not any((tmp_path / "apps").glob("*/*/meta.json"))  # both finished, both removed


def test_an_agent_away_at_close_leaves_the_run_for_the_next_start(tmp_path):
    async def body():
        async with FakeAgent() as agent:
            agent.ingest.refuse_connections = True
            clock = await connect_clock(agent.clock_url, name="kiosk-1", state_dir=tmp_path, timeout=20)
            run_id = clock.run_id
            t0 = time.monotonic()
            await clock.close(upload_timeout=0.5)
            # close() gave the upload its time, no more (plus the sockets' close).
            assert time.monotonic() - t0 < 0.5 + 2.0 + 1.0
            status = clock.upload_status()
            assert status.acked < status.events
            agent.ingest.refuse_connections = False
            # The next start of the name uploads it (in the background), and
            # starts a new run: the old one was stopped.
            clock2 = await connect_clock(agent.clock_url, name="kiosk-1", state_dir=tmp_path, timeout=20)
            assert clock2.run_id != run_id
            await wait_until(lambda: len(events_of(agent, run_id)) == status.events, 30, "the earlier run uploaded")
            await clock2.close()
            return agent, run_id, status

    agent, run_id, status = run(body())
    assert kinds(events_of(agent, run_id))[-1] == "stopped"


async def start_kiosk(agent, state_dir, name="kiosk-1"):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(KIOSK), agent.clock_url, agent.hub_url, "--name", name, "--state-dir", str(state_dir),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    return proc


async def read_until(proc, key, lines, timeout=60):
    """Reads the kiosk's JSON lines until one has ``key``; returns it."""
    async with asyncio.timeout(timeout):
        while True:
            raw = await proc.stdout.readline()
            if not raw:
                err = await proc.stderr.read()
                pytest.fail(f"the kiosk ended before saying {key!r}: {err.decode()[-2000:]}")
            line = json.loads(raw)
            lines.append(line)
            if key in line:
                return line


def test_a_kiosk_killed_with_sigkill_and_started_again_uploads_every_event_once(tmp_path):
    """The real process: SIGKILL right after it acted (its last events
    perhaps not uploaded, its hub connection open), then started again with
    the same name and state directory: it resumes the run, writes the old
    connection closed ("app restarted"), and every event arrives once."""

    async def body():
        async with FakeAgent() as agent:
            lines = []
            procs = []
            try:
                first = await start_kiosk(agent, tmp_path)
                procs.append(first)
                ready = await read_until(first, "ready", lines)
                run_id = ready["ready"]
                assert not ready["resumed"]
                assert (await read_until(first, "subscribed", lines))["subscribed"] == 0
                agent.ingest.silent_acks = 1000  # from now on nothing is acknowledged: it all stays to resend
                for i in range(3):
                    await agent.hub.broadcast(json.dumps({"n": i, "at": time.time() + 0.05}))
                    await read_until(first, "acted", lines)
                # Killed with an action pending: its message read (and its receipt
                # written, perhaps uploaded), the action never done.
                await agent.hub.broadcast(json.dumps({"n": 9, "at": time.time() + 5}))
                await read_until(first, "read", lines)
                first.send_signal(signal.SIGKILL)
                await first.wait()
                agent.ingest.silent_acks = 0
                second = await start_kiosk(agent, tmp_path)
                procs.append(second)
                ready2 = await read_until(second, "ready", lines)
                assert ready2["ready"] == run_id and ready2["resumed"]
                assert (await read_until(second, "subscribed", lines))["subscribed"] == 1
                for i in range(3, 5):
                    await agent.hub.broadcast(json.dumps({"n": i, "at": time.time() + 0.05}))
                    await read_until(second, "acted", lines)
                second.send_signal(signal.SIGTERM)
                status = (await read_until(second, "status", lines))["status"]
                async with asyncio.timeout(30):
                    assert await second.wait() == 0
            finally:
                for p in procs:
                    if p.returncode is None:
                        p.kill()
                        await p.wait()
            return agent, run_id, status

    agent, run_id, status = run(body(), timeout=120)
    events = events_of(agent, run_id)
    assert status["error"] is None and status["acked"] == status["events"] == len(events)
    assert agent.ingest.run(run_id).duplicates == 0 and not agent.ingest.rejected
    # One header, each acted message's receipt and action once.
    assert kinds(events).count("started") == 1 and kinds(events).count("app") == 1
    acted = [json.loads(e["message"]["text"])["n"] for e in events if e["kind"] == "action"]
    received = [json.loads(e["message"]["text"])["n"] for e in events if e["kind"] == "receipt"]
    assert sorted(received) == sorted(set(received)) and set(received) >= {3, 4}
    assert sorted(acted) == sorted(set(acted)) and set(acted) >= {3, 4} and 9 not in acted
    # The killed process's connection, closed by the next start.
    conns = [(e["kind"], e["conn"], e.get("reason")) for e in events if e["kind"] in ("opened", "closed")]
    assert conns == [("opened", 0, None), ("closed", 0, "app restarted"), ("opened", 1, None), ("closed", 1, "subscription closed by the app")]
    assert agent.hub.paths == [f"/ws?probe=app.{run_id}.0", f"/ws?probe=app.{run_id}.1"]
    assert events[-1]["kind"] == "stopped"
