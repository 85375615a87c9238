"""A fake agent in-process, on one loopback port: ``/clock`` (genuine
replies, optionally tagged), ``/ingest`` (the JSON dialect, with the
agent's exactly-once rules and knobs to misbehave) and ``/ws`` (a hub the
test broadcasts on). Every uploaded event is checked against the fields
``core/src/page_ingest.rs`` accepts (plus the new ``app`` kind), as
strictly as its ``deny_unknown_fields`` decoder."""

from __future__ import annotations

import asyncio
import http
import json
import math
import re
import time

from websockets.asyncio.server import serve

from conftest import agent_reply
from skewscope_clock import time_key

HEX32 = re.compile(r"[0-9a-f]{32}")
MAX_MS = 18446744073709.0

# kind -> {field: type}; "ms" a time the agent's ns() takes, "sms" a signed
# one or null, "u32"/"u64" unsigned ints, "msg" a message.
SCHEMA = {
    "started": {"name": "text", "url": "text", "connections": "u32", "version": "text", "at_ms": "ms", "host": "otext"},
    "identity": {"run_id": "hex32", "clock_id": "text"},
    "app": {"module": "text", "runtime": "text"},
    "opened": {"conn": "u32", "at_ms": "ms"},
    "failed": {"conn": "u32", "at_ms": "ms", "error": "text"},
    "closed": {"conn": "u32", "at_ms": "ms", "reason": "text"},
    "receipt": {"conn": "u32", "message": "msg", "at_ms": "ms"},
    "exchange": {"t1_ms": "ms", "t2_ms": "ms", "t3_ms": "ms", "t4_ms": "ms"},
    "action": {
        "conn": "u32",
        "message": "msg",
        "act_at_ms": "ms",
        "offset_ms": "sms",
        "bound_ms": "oms",
        "target_ms": "ms",
        "done_ms": "ms",
        "late_ms": "ms",
    },
    "stopped": {"at_ms": "ms"},
    "clock_tags": {"keyed": "bool", "refused": "u64", "at_ms": "ms"},
}


def check_event(event) -> str | None:
    """Why the agent would refuse ``event``, or None."""
    if not isinstance(event, dict):
        return "not an object"
    kind = event.get("kind")
    fields = SCHEMA.get(kind)
    if fields is None:
        return f"unknown kind {kind!r}"
    extra = set(event) - set(fields) - {"kind"}
    if extra:
        return f"unknown fields {extra}"
    for name, kind_of in fields.items():
        if name not in event:
            if kind_of in ("sms", "oms", "otext"):
                continue
            return f"missing {name}"
        v = event[name]
        ok = {
            "text": lambda v: isinstance(v, str) and len(v.encode()) <= 1024,
            "otext": lambda v: isinstance(v, str) and len(v.encode()) <= 1024,
            "hex32": lambda v: isinstance(v, str) and HEX32.fullmatch(v) is not None,
            "u32": lambda v: type(v) is int and 0 <= v < 2**32,
            "u64": lambda v: type(v) is int and 0 <= v < 2**64,
            "bool": lambda v: type(v) is bool,
            "ms": lambda v: type(v) in (int, float) and math.isfinite(v) and 0 <= v < MAX_MS,
            "oms": lambda v: v is None or (type(v) in (int, float) and math.isfinite(v) and 0 <= v < MAX_MS),
            "sms": lambda v: v is None or (type(v) in (int, float) and math.isfinite(v) and abs(v) < MAX_MS / 2),
            "msg": check_message,
        }[kind_of](v)
        if not ok:
            return f"bad {name}: {v!r}"
    return None


def check_message(m) -> bool:
    if not isinstance(m, dict) or set(m) - {"text", "hex", "occurrence"}:
        return False
    if ("text" in m) == ("hex" in m):
        return False
    if "hex" in m and not (isinstance(m["hex"], str) and re.fullmatch(r"(?:[0-9a-fA-F]{2})*", m["hex"])):
        return False
    if "text" in m and not isinstance(m["text"], str):
        return False
    occ = m.get("occurrence", 0)
    return type(occ) is int and 0 <= occ < 2**32


class IngestRun:
    def __init__(self, run_id: str, secret: str):
        self.run_id = run_id
        self.secret = secret
        self.events: list[dict] = []
        self.duplicates = 0


class FakeIngest:
    """The agent's /ingest, in the JSON dialect: stores each run's events
    in order, trims resends, refuses gaps; and misbehaves on request."""

    def __init__(self):
        self.runs: dict[str, IngestRun] = {}
        self.hellos: list[dict] = []
        self.headers: list[dict] = []
        self.subprotocols: list = []
        self.batches = 0
        self.rejected: list[str] = []
        self.max_batch_bytes = 0
        # Knobs: each counts down per batch it applies to.
        self.drop_acks = 0  # store, then close without answering
        self.silent_acks = 0  # store, never answer, stay open
        self.busy = 0  # store nothing, answer busy
        self.ack_beyond = 0  # store, answer next_seq + 5
        self.refuse_connections = False
        self.connections = 0

    def run(self, run_id: str) -> IngestRun | None:
        return self.runs.get(run_id)

    async def handler(self, ws) -> None:
        self.connections += 1
        self.headers.append(dict(ws.request.headers))
        self.subprotocols.append(ws.subprotocol)
        if self.refuse_connections:
            await ws.close(1008, "refused")
            return
        run: IngestRun | None = None
        async for text in ws:
            if not isinstance(text, str):
                self.rejected.append("binary")
                await ws.close(1008, "malformed")
                return
            message = json.loads(text)
            if "hello" in message:
                hello = message["hello"]
                self.hellos.append(hello)
                if set(hello) != {"version", "run_id", "secret"} or hello["version"] != 1:
                    self.rejected.append("hello")
                    await ws.close(1008, "malformed")
                    return
                if not (HEX32.fullmatch(hello["run_id"]) and HEX32.fullmatch(hello["secret"])):
                    self.rejected.append("hello")
                    await ws.close(1008, "malformed")
                    return
                run = self.runs.get(hello["run_id"])
                if run is None:
                    run = self.runs[hello["run_id"]] = IngestRun(hello["run_id"], hello["secret"])
                elif run.secret != hello["secret"]:
                    self.rejected.append("secret")
                    await ws.close(1008, "wrong secret")
                    return
                await ws.send(json.dumps({"ack": {"next_seq": len(run.events)}}))
                continue
            batch = message["events"]
            self.batches += 1
            self.max_batch_bytes = max(self.max_batch_bytes, len(text.encode()))
            first, events = batch["first_seq"], batch["events"]
            for e in events:
                why = check_event(e)
                if why is not None:
                    self.rejected.append(f"event: {why}: {e}")
                    await ws.close(1008, "malformed")
                    return
            if run is None or first > len(run.events):
                self.rejected.append("gap")
                await ws.close(1008, "sequence gap")
                return
            if first == 0 and events and (events[0]["kind"] != "started" or events[1:2] and events[1]["kind"] != "identity"):
                self.rejected.append("wrong_run")
                await ws.close(1008, "wrong run")
                return
            if self.busy > 0:
                self.busy -= 1
                await ws.send(json.dumps({"busy": {"next_seq": len(run.events), "reason": "data budget full"}}))
                continue
            skip = len(run.events) - first
            run.duplicates += min(skip, len(events))
            run.events.extend(events[skip:])
            if self.drop_acks > 0:
                self.drop_acks -= 1
                ws.transport.abort()
                return
            if self.silent_acks > 0:
                self.silent_acks -= 1
                continue
            n = len(run.events)
            if self.ack_beyond > 0:
                self.ack_beyond -= 1
                n += 5
            await ws.send(json.dumps({"ack": {"next_seq": n}}))

    def lose(self, run_id: str, keep: int) -> None:
        """The agent's data directory replaced: the run has only ``keep`` events."""
        del self.runs[run_id].events[keep:]


class FakeHub:
    """The agent's /ws: every connection's URL is kept; broadcast() sends to all."""

    def __init__(self):
        self.clients: set = set()
        self.paths: list[str] = []

    async def handler(self, ws) -> None:
        self.paths.append(ws.request.path)
        self.clients.add(ws)
        try:
            await ws.wait_closed()
        finally:
            self.clients.discard(ws)

    async def broadcast(self, payload) -> int:
        n = 0
        for ws in list(self.clients):
            try:
                await ws.send(payload)
                n += 1
            except Exception:
                pass
        return n

    async def drop_all(self) -> None:
        for ws in list(self.clients):
            ws.transport.abort()


def _select_subprotocol(ws, offered):
    """``skewscope-ingest`` when offered (as the agent answers), else none."""
    return "skewscope-ingest" if "skewscope-ingest" in offered else None


class FakeAgent:
    """/clock, /ingest and /ws on one loopback port."""

    def __init__(self, token: str | None = None):
        self.token = token
        self.key = time_key(token) if token else None
        self.ingest = FakeIngest()
        self.hub = FakeHub()
        self.clock_requests = 0
        self.server = None
        self.port = None
        #: Called with each /clock request's websocket before it is answered
        #: (a test's hostile frames go here).
        self.before_reply = None
        #: When set, /ingest refuses an upgrade without this bearer token
        #: (HTTP 401), as an agent with --token-file does.
        self.ingest_token: str | None = None

    async def __aenter__(self):
        self.server = await serve(
            self._route,
            "127.0.0.1",
            0,
            select_subprotocol=_select_subprotocol,
            max_size=1 << 21,
            process_request=self._refuse_without_token,
        )
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self.server.close()
        try:
            async with asyncio.timeout(5):
                await self.server.wait_closed()
        except TimeoutError:
            pass

    def _refuse_without_token(self, connection, request):
        if (
            self.ingest_token is not None
            and request.path.startswith("/ingest")
            and request.headers.get("Authorization") != f"Bearer {self.ingest_token}"
        ):
            return connection.respond(http.HTTPStatus.UNAUTHORIZED, "a token is required\n")
        return None

    @property
    def clock_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/clock"

    @property
    def hub_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    async def _route(self, ws) -> None:
        path = ws.request.path.split("?")[0]
        if path == "/clock":
            await self._clock(ws)
        elif path == "/ingest":
            await self.ingest.handler(ws)
        elif path == "/ws":
            await self.hub.handler(ws)
        else:
            await ws.close(1008, "no such path")

    async def _clock(self, ws) -> None:
        async for text in ws:
            t2 = time.time_ns()
            self.clock_requests += 1
            if self.before_reply is not None:
                await self.before_reply(ws, text)
            await ws.send(json.dumps(agent_reply(text, t2, time.time_ns(), self.key)))
