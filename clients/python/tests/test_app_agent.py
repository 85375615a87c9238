"""Against the real agent (an agent that takes apps' uploads: $SKEWSCOPE_AGENT,
or the staged /tmp/agent-new build, or target/debug): a kiosk acting on the
hub's `/publish?lead=200ms` broadcasts through subscribe(), SIGKILLed with an
action pending and started again with the same name and state directory.
The agent stores the run exactly once: every event the kiosk wrote, no
more, no gap (it refuses gaps and trims resends), which its acks, its
/audit/status and its /healthz counts say."""

import asyncio
import json
import os
import signal
import sys
import urllib.request

import pytest

from conftest import Agent, run
from test_app import KIOSK, read_until

TOKEN = "app-upload-secret"


def http(agent, path, body=None):
    req = urllib.request.Request(
        f"http://{agent.addr}{path}",
        data=body,
        method="POST" if body is not None else "GET",
        headers={"Authorization": f"Bearer {agent.token}"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


async def publish(agent, n):
    """A broadcast through the hub, its time to act written by the hub 200 ms ahead."""
    return await asyncio.to_thread(http, agent, "/publish?lead=200ms", json.dumps({"n": n}).encode())


@pytest.fixture
def upload_agent(tmp_path):
    """An agent of this test's own (its ingest counts are this run's only)."""
    workdir = tmp_path / "agent"
    workdir.mkdir()
    a = Agent(workdir, token=TOKEN)
    yield a
    a.stop()


async def start_kiosk(agent, state_dir):
    return await asyncio.create_subprocess_exec(
        sys.executable, str(KIOSK), agent.url, f"ws://{agent.addr}/ws", "--name", "kiosk-1",
        "--state-dir", str(state_dir), "--token", agent.token,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )


def test_a_kiosk_killed_and_restarted_is_stored_exactly_once_by_the_agent(upload_agent, tmp_path):
    agent = upload_agent
    state = tmp_path / "state"

    async def body():
        lines = []
        first = await start_kiosk(agent, state)
        try:
            run_id = (await read_until(first, "ready", lines))["ready"]
            assert (await read_until(first, "subscribed", lines))["subscribed"] == 0
            for n in range(3):
                sent = await publish(agent, n)
                assert sent["clients"] == 1, sent
                acted = await read_until(first, "acted", lines)
                assert json.loads(acted["acted"])["n"] == n
            # SIGKILL with an action pending: its message read, not acted on.
            await asyncio.to_thread(http, agent, "/publish?lead=5s", json.dumps({"n": 9}).encode())
            await read_until(first, "read", lines)
        finally:
            first.send_signal(signal.SIGKILL)
            await first.wait()
        second = await start_kiosk(agent, state)
        try:
            ready = await read_until(second, "ready", lines)
            assert ready["ready"] == run_id and ready["resumed"]
            assert (await read_until(second, "subscribed", lines))["subscribed"] == 1
            for n in range(3, 6):
                sent = await publish(agent, n)
                acted = await read_until(second, "acted", lines)
                assert json.loads(acted["acted"])["n"] == n
            second.send_signal(signal.SIGTERM)
            status = (await read_until(second, "status", lines))["status"]
            async with asyncio.timeout(30):
                assert await second.wait() == 0
        finally:
            if second.returncode is None:
                second.kill()
                await second.wait()
        return run_id, status

    run_id, status = run(body(), timeout=180)
    # Every event the run wrote was acknowledged: stored durably, in order.
    assert status["run_id"] == run_id and status["error"] is None and status["refused"] == 0
    assert status["acked"] == status["events"] > 0 and status["unrecorded"] == 0
    listed = http(agent, "/audit/status")
    probes = [p for p in listed["probes"] if p["run"] == run_id]
    assert len(probes) == 1, listed
    # The agent holds exactly the run's records: no more (nothing twice), no fewer.
    assert probes[0]["records"] == status["events"] and probes[0]["name"] == "kiosk-1"
    health = json.loads(urllib.request.urlopen(f"http://{agent.addr}/healthz", timeout=30).read())
    assert health["ingest"]["records"] == status["events"], health["ingest"]
    assert health["ingest"]["rejected"] == {}, health["ingest"]
    # Its state directory holds nothing of it any more: finished and removed.
    assert not list(state.glob("apps/*/*/meta.json"))
