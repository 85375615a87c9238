"""The upload against a fake /ingest that keeps the agent's rules (events
stored in order, a resend trimmed, a gap refused) and misbehaves on
request: it drops acknowledgements, answers late or busy, acknowledges
more than was sent, or loses what it had. Whatever it does, every event is
stored exactly once, or the loss is said and nothing is resent from 0."""

import asyncio
import json

import pytest

from conftest import run, wait_until
from fake_agent import FakeAgent
from skewscope_clock import upload as upload_module
from skewscope_clock.spool import AppDir, Run
from skewscope_clock.upload import Uploader, _next_seq, _Refused


def new_run(tmp_path, agent, name="kiosk-1"):
    d = AppDir(tmp_path, name)
    r = Run.create(
        d.path, name=name, boot_id="boot-a", clock_url=agent.clock_url, ingest_url=agent.clock_url.replace("/clock", "/ingest")
    )
    r.emit({"kind": "started", "name": name, "url": agent.clock_url, "connections": 0, "version": "skewscope_clock.py 1", "at_ms": 1.0})
    r.emit({"kind": "identity", "run_id": r.run_id, "clock_id": "app-test"})
    r.emit({"kind": "app", "module": "skewscope_clock.py 1", "runtime": "test"})
    return d, r


def emit_some(r, n, start=0, text_bytes=0):
    for i in range(start, start + n):
        r.emit({"kind": "receipt", "conn": 0, "message": {"text": f"{i}:" + "x" * text_bytes, "occurrence": 0}, "at_ms": 100.0 + i})


def stored_texts(agent, r):
    return [e["message"]["text"].split(":")[0] for e in agent.ingest.run(r.run_id).events if e["kind"] == "receipt"]


async def stored_all(agent, r, timeout=30):
    await wait_until(
        lambda: agent.ingest.run(r.run_id) is not None and len(agent.ingest.run(r.run_id).events) == r.next_seq and r.acked == r.next_seq,
        timeout,
        f"all {r.next_seq} events of the run stored and acknowledged",
    )


def test_every_event_stored_once_in_order_with_the_runs_secret_and_the_token(tmp_path):
    async def body():
        async with FakeAgent() as agent:
            d, r = new_run(tmp_path, agent)
            up = Uploader(r, token="site-token")
            up.start()
            emit_some(r, 20)
            await stored_all(agent, r)
            emit_some(r, 5, start=20)  # events after the first batches go too
            await stored_all(agent, r)
            await up.stop()
            assert stored_texts(agent, r) == [str(i) for i in range(25)]
            hello = agent.ingest.hellos[0]
            assert hello == {"version": 1, "run_id": r.run_id, "secret": r.secret}
            assert agent.ingest.headers[0]["authorization"] == "Bearer site-token"
            assert agent.ingest.subprotocols[0] == "skewscope-ingest"
            assert agent.ingest.run(r.run_id).duplicates == 0 and not agent.ingest.rejected
            # Acknowledged events are off the disk.
            assert [p.read_bytes() for p in r.path.glob("events-*")] == [b""]
            d.release()

    run(body())


def test_a_refused_token_is_said_once_and_kept_in_the_status(tmp_path, caplog):
    async def body():
        async with FakeAgent() as agent:
            agent.ingest_token = "site-token"
            d, r = new_run(tmp_path, agent)
            up = Uploader(r)  # no token=
            with caplog.at_level("WARNING", logger="skewscope_clock"):
                up.start()
                emit_some(r, 3)
                await wait_until(lambda: up.token_refusals >= 2, 30, "two refused tries")
                await up.stop()
            said = [m for m in caplog.messages if "token=" in m]
            assert len(said) == 1, caplog.messages
            assert "HTTP 401" in said[0] and "--token-file" in said[0]
            assert "HTTP 401" in up.state and "token=" in up.state
            assert agent.ingest.run(r.run_id) is None  # nothing stored
            d.release()

    run(body())


def test_dropped_and_late_acks_resume_from_what_the_agent_stored(tmp_path, monkeypatch):
    monkeypatch.setattr(upload_module, "ACK_WAIT_S", 0.5)

    async def body():
        async with FakeAgent() as agent:
            d, r = new_run(tmp_path, agent)
            agent.ingest.drop_acks = 2  # stored, then the connection cut before the ack
            agent.ingest.silent_acks = 1  # stored, the ack never comes
            up = Uploader(r)
            up.start()
            for k in range(5):
                emit_some(r, 5, start=5 * k)
                await stored_all(agent, r)
            await up.stop()
            assert stored_texts(agent, r) == [str(i) for i in range(25)]
            # One connection, one more after each cut and after the silence:
            # each hello said where to go on from, nothing was stored twice.
            assert agent.ingest.connections == 4
            assert agent.ingest.run(r.run_id).duplicates == 0 and not agent.ingest.rejected
            d.release()

    run(body())


def test_busy_waits_and_tries_again(tmp_path):
    async def body():
        async with FakeAgent() as agent:
            d, r = new_run(tmp_path, agent)
            agent.ingest.busy = 2
            up = Uploader(r)
            up.start()
            emit_some(r, 10)
            await stored_all(agent, r)
            await up.stop()
            assert up.busy == 2
            assert stored_texts(agent, r) == [str(i) for i in range(10)]
            assert agent.ingest.connections == 1  # busy is not a reason to reconnect
            d.release()

    run(body())


def test_an_ack_beyond_what_was_sent_is_refused_and_nothing_is_dropped(tmp_path):
    async def body():
        async with FakeAgent() as agent:
            d, r = new_run(tmp_path, agent)
            emit_some(r, 10)
            agent.ingest.ack_beyond = 1
            up = Uploader(r)
            up.start()
            await stored_all(agent, r)
            await up.stop()
            assert up.refused == 1
            assert agent.ingest.connections >= 2  # closed, and connected again later
            # Nothing was dropped on the hostile ack's word: all stored, once.
            assert stored_texts(agent, r) == [str(i) for i in range(10)]
            d.release()

    run(body())


def test_an_agent_that_lost_events_is_said_and_the_run_not_resent(tmp_path):
    async def body():
        async with FakeAgent() as agent:
            d, r = new_run(tmp_path, agent)
            emit_some(r, 10)
            up = Uploader(r)
            up.start()
            await stored_all(agent, r)
            batches = agent.ingest.batches
            agent.ingest.lose(r.run_id, keep=4)  # its data directory replaced
            await agent.hub.drop_all()
            for ws in list(agent.server.connections):
                ws.transport.abort()  # the upload reconnects, says hello
            emit_some(r, 3, start=10)
            await wait_until(lambda: r.halted is not None, 30, "the run halted")
            assert "lost events 4 to 12" in up.error and "no longer uploaded" in up.error
            await wait_until(lambda: up._task.done(), 30, "the upload to end")
            # Nothing resent from 0 or from 4: the agent has what it kept.
            assert agent.ingest.batches == batches
            assert len(agent.ingest.run(r.run_id).events) == 4
            # The run stays on disk, with the reason.
            r.close()
            assert Run.load(r.path).halted == up.error
            d.release()

    run(body())


def test_large_events_go_in_batches_of_at_most_256_kib(tmp_path):
    async def body():
        async with FakeAgent() as agent:
            d, r = new_run(tmp_path, agent)
            emit_some(r, 40, text_bytes=30_000)
            up = Uploader(r)
            up.start()
            await stored_all(agent, r)
            await up.stop()
            assert agent.ingest.batches >= 5
            assert agent.ingest.max_batch_bytes <= 256 * 1024
            assert stored_texts(agent, r) == [str(i) for i in range(40)]
            d.release()

    run(body())


def test_a_killed_uploader_resumes_from_the_disk_exactly_once(tmp_path, monkeypatch):
    """The process dies with events the agent stored but whose
    acknowledgement never came; the next start reads the run back, the
    agent's hello says how far it has them, and the rest is uploaded: each
    event stored once."""
    monkeypatch.setattr(upload_module, "ACK_WAIT_S", 0.5)

    async def body():
        async with FakeAgent() as agent:
            d, r = new_run(tmp_path, agent)
            emit_some(r, 10)
            up = Uploader(r)
            up.start()
            await stored_all(agent, r)
            agent.ingest.silent_acks = 100  # from here, stored but never acknowledged
            emit_some(r, 10, start=10)
            await wait_until(lambda: len(agent.ingest.run(r.run_id).events) == 23, 30, "the second batch stored")
            # The kill: no stop, no goodbye.
            up._task.cancel()
            r.close()
            d.release()
            agent.ingest.silent_acks = 0
            d2 = AppDir(tmp_path, "kiosk-1")
            again = Run.load(r.path)
            assert again.acked == 13 and again.next_seq == 23 and len(again.pending) == 10
            up2 = Uploader(again)
            up2.start()
            emit_some(again, 2, start=20)
            await stored_all(agent, again)
            await up2.stop()
            assert stored_texts(agent, again) == [str(i) for i in range(22)]
            d2.release()

    run(body())


@pytest.mark.parametrize(
    "answer",
    [
        b'{"ack": {"next_seq": 1}}',  # binary
        "null",
        "[1]",
        '"ack"',
        '{"ack": {"next_seq": NaN}}',
        '{"ack": {"next_seq": 1e400}}',
        '{"ack": {"next_seq": -1}}',
        '{"ack": {"next_seq": 1.0}}',
        '{"ack": {"next_seq": true}}',
        '{"ack": {"next_seq": %d}}' % 10**400,
        '{"ack": 3}',
        '{"ack": {"next_seq": 1}, "busy": {"next_seq": 1}}',
        "[" * 100_000,
        "not json",
    ],
)
def test_an_answer_that_is_not_one_is_refused_never_raised(answer):
    with pytest.raises(_Refused):
        _next_seq(answer)


def test_answers_that_are_ones():
    assert _next_seq('{"ack": {"next_seq": 7}}') == (7, None)
    assert _next_seq('{"busy": {"next_seq": 7, "reason": "disk full"}}') == (7, "disk full")
    assert json.loads('{"ack":{"next_seq":3}}')  # the agent's own encoding
    assert _next_seq('{"ack":{"next_seq":3}}') == (3, None)
