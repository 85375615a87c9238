"""Uploads one run's events to the agent's ``/ingest``, in its JSON dialect
(``core/src/page_ingest.rs``), exactly once.

::

    app  : {"hello": {"version": 1, "run_id": "<32 hex>", "secret": "<32 hex>"}}
    agent: {"ack": {"next_seq": N}}
    app  : {"events": {"first_seq": N, "events": [...]}}       (<= 256 KiB)
    agent: {"ack": {"next_seq": M}}  or  {"busy": {"next_seq": M, "reason": "..."}}

The rules, and why:
- Events are sent from the last acknowledgement, one batch at a time, and
  dropped only once acknowledged: the agent acknowledges what it stored
  durably, so nothing acknowledged is ever lost, and a resend after a lost
  acknowledgement is trimmed by the agent, never stored twice.
- An acknowledgement beyond what was sent is a broken or hostile agent: it
  is refused (counted in ``refused``), everything is kept, and the upload
  reconnects later. One below an earlier acknowledgement means the agent
  lost events it had stored: said (``error``, and the log), and the run is
  not uploaded again: resending from 0 silently would hide the loss.
- A lost connection is opened again after 250 ms .. 10 s (doubling,
  jittered, back to 250 ms once the agent answered), for as long as the
  clock is open.
- The upload never delays an action: events are sent as they were written
  (no encoding on the way), and a batch waits while an action is due
  within a few ms (at most 50 ms).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import ssl as ssl_module
from typing import Awaitable, Callable

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from .spool import Run

__all__ = ["Uploader", "INGEST_VERSION", "MAX_BATCH_BYTES", "ingest_url"]

log = logging.getLogger("skewscope_clock")

INGEST_VERSION = 1
#: A batch's JSON is kept under this (the agent takes 1 MiB).
MAX_BATCH_BYTES = 256 * 1024
RETRY_MIN_S = 0.25
RETRY_MAX_S = 10.0
#: How long an acknowledgement may take before the connection is taken for
#: lost (the agent syncs a batch to disk before it answers).
ACK_WAIT_S = 30.0
#: How long to wait after "busy" (the agent's disk or data budget is full).
BUSY_WAIT_S = 1.0
#: How long opening the connection may take.
OPEN_TIMEOUT_S = 10.0
#: How long closing it may take before it is cut.
CLOSE_TIMEOUT_S = 1.0


def ingest_url(clock_url: str) -> str:
    """The agent's ``/ingest`` beside its ``/clock``: same scheme, host and
    port; the path replaced."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(clock_url)
    return urlunsplit((parts.scheme, parts.netloc, "/ingest", "", ""))


class _Refused(Exception):
    """The agent's answer cannot be taken: the connection is closed."""


def _refuse_constant(name):
    raise ValueError(f"not JSON: {name}")


def _next_seq(text) -> tuple[int, str | None]:
    """An answer's (next_seq, busy reason or None); raises _Refused for
    anything else."""
    if not isinstance(text, str):
        raise _Refused("a binary answer")
    try:
        reply = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        raise _Refused("an answer that is not JSON") from None
    if not isinstance(reply, dict) or len(reply) != 1:
        raise _Refused("an answer that is neither ack nor busy")
    (kind, body), = reply.items()
    if kind not in ("ack", "busy") or not isinstance(body, dict):
        raise _Refused("an answer that is neither ack nor busy")
    n = body.get("next_seq")
    if type(n) is not int or not 0 <= n < 2**64:
        raise _Refused("an answer without a valid next_seq")
    reason = None
    if kind == "busy":
        r = body.get("reason")
        reason = r if isinstance(r, str) else "busy"
    return n, reason


class Uploader:
    """Uploads ``run`` until it is finished (stopped, every event
    acknowledged), halted, or :meth:`stop` is called."""

    def __init__(
        self,
        run: Run,
        *,
        token: str | None = None,
        ssl: ssl_module.SSLContext | None = None,
        quiet: Callable[[], Awaitable[None]] | None = None,
    ):
        self.run = run
        self.url = run.ingest_url
        self._token = token
        self._ssl = ssl
        self._quiet = quiet
        #: What it is doing, for a person.
        self.state = "not started"
        #: Answers refused: not an answer, or an acknowledgement beyond
        #: what was sent (a broken or hostile agent).
        self.refused = 0
        #: Upgrades the agent refused for the token (HTTP 401 or 403): said
        #: once in the log, every time in ``state``.
        self.token_refusals = 0
        #: "busy" answers (the agent's disk or budget full).
        self.busy = 0
        #: Connections opened.
        self.connections = 0
        #: Why the run is no longer uploaded (the agent lost events), or None.
        self.error: str | None = run.halted
        self._kick = asyncio.Event()
        self._done = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task | None = None
        self._ws = None
        run.listeners.append(self._kick.set)

    @property
    def idle(self) -> bool:
        """Nothing left to send now: every event acknowledged, or halted."""
        return self.run.halted is not None or self.run.acked >= self.run.next_seq

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._main())

    async def drain(self, timeout: float) -> bool:
        """Waits (at most ``timeout`` s) until every event so far is
        acknowledged; whether it is."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.idle and self._task is not None and not self._task.done():
            left = deadline - loop.time()
            if left <= 0:
                break
            self._done.clear()
            try:
                async with asyncio.timeout(min(left, 0.1)):
                    await self._done.wait()
            except TimeoutError:
                pass
        return self.run.acked >= self.run.next_seq

    async def stop(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Ends the upload: its task, and its connection (cut if it does
        not close within ``timeout``)."""
        self._stopping = True
        self._kick.set()
        task = self._task
        if task is not None and not task.done():
            task.cancel()
        ws = self._ws
        if ws is not None:
            await _close_bounded(ws, timeout)
        if task is not None:
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.gather(task, return_exceptions=True)
            except TimeoutError:
                pass

    # -- inside ------------------------------------------------------------------

    async def _main(self) -> None:
        delay = RETRY_MIN_S
        try:
            while not self._stopping and self.run.halted is None and not self.run.finished:
                answered = False
                try:
                    answered = await self._session()
                except _Refused as e:
                    self.refused += 1
                    self.state = f"refused the agent's answer ({e}); reconnecting"
                    log.warning("skewscope clock: upload of run %s: %s", self.run.run_id, self.state)
                except (OSError, ConnectionClosed, InvalidHandshake, InvalidURI, TimeoutError, ValueError) as e:
                    self.state = f"lost ({type(e).__name__}: {e}); reconnecting"
                    status = getattr(getattr(e, "response", None), "status_code", None)
                    if status in (401, 403):
                        # A missing or wrong token never heals by retrying:
                        # said once, plainly, with what to give.
                        self.token_refusals += 1
                        self.state = (
                            f"the agent refused the upload (HTTP {status}): give connect_clock "
                            "token= (the agent's --token-file); retrying"
                        )
                        if self.token_refusals == 1:
                            log.warning("skewscope clock: upload of run %s: %s", self.run.run_id, self.state)
                if self._stopping or self.run.halted is not None or self.run.finished:
                    break
                if answered:
                    delay = RETRY_MIN_S
                wait = delay * (0.75 + random.random() / 2)
                delay = min(RETRY_MAX_S, delay * 2)
                self._kick.clear()
                try:
                    # A stop ends the wait; new events do not (the back-off holds).
                    async with asyncio.timeout(wait):
                        while not self._stopping:
                            await self._kick.wait()
                            self._kick.clear()
                except TimeoutError:
                    pass
        finally:
            if self.run.finished:
                self.state = "every event stored"
            self._done.set()

    async def _session(self) -> bool:
        """One connection: hello, then batches until stopped or finished.
        Whether the agent answered at all."""
        run = self.run
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else None
        tls = {"ssl": self._ssl} if self._ssl is not None and self.url.startswith("wss:") else {}
        self.state = "connecting"
        ws = await connect(
            self.url,
            subprotocols=["skewscope-ingest"],
            additional_headers=headers,
            open_timeout=OPEN_TIMEOUT_S,
            close_timeout=CLOSE_TIMEOUT_S,
            compression=None,
            max_size=1 << 16,
            **tls,
        )
        self._ws = ws
        self.connections += 1
        answered = False
        try:
            await ws.send(json.dumps({"hello": {"version": INGEST_VERSION, "run_id": run.run_id, "secret": run.secret}}))
            n, busy = await self._answer(ws)
            answered = True
            # The agent may have more than the last ack kept here (an ack
            # lost, or not saved before a kill), never more than was written.
            self._take(n, limit=run.next_seq)
            self._done.set()
            if busy is not None:
                await self._busy(busy)
            while not self._stopping and run.halted is None:
                if run.acked >= run.next_seq:
                    if run.stopped:
                        return answered
                    self.state = "every event stored; waiting for more"
                    self._kick.clear()
                    if run.acked >= run.next_seq:
                        await self._kick.wait()
                    continue
                if self._quiet is not None:
                    await self._quiet()
                # The events and the message around them within the limit
                # (one event larger than that goes alone).
                first, events = run.batch(MAX_BATCH_BYTES - 64)
                if not events:
                    continue
                self.state = "sending"
                frame = b'{"events":{"first_seq":%d,"events":[%s]}}' % (first, b",".join(events))
                await ws.send(frame.decode("utf-8"))
                n, busy = await self._answer(ws)
                progressed = n > run.acked
                self._take(n, limit=first + len(events))
                self._done.set()
                if busy is not None:
                    await self._busy(busy)
                elif not progressed and run.halted is None:
                    # Acknowledged nothing new and not busy: do not hammer it.
                    await asyncio.sleep(BUSY_WAIT_S)
            return answered
        finally:
            self._ws = None
            await _close_bounded(ws, CLOSE_TIMEOUT_S)

    async def _answer(self, ws) -> tuple[int, str | None]:
        try:
            async with asyncio.timeout(ACK_WAIT_S):
                text = await ws.recv()
        except TimeoutError:
            raise TimeoutError(f"no answer within {ACK_WAIT_S} s") from None
        return _next_seq(text)

    def _take(self, n: int, *, limit: int) -> None:
        run = self.run
        if n > limit:
            raise _Refused(f"it acknowledged up to {n}, beyond the {limit} events sent")
        if n < run.acked:
            self.error = (
                f"the agent lost events {n} to {run.acked - 1} of run {run.run_id} it had acknowledged "
                "(its data directory was replaced or damaged); this run is no longer uploaded, "
                f"its files are kept in {run.path}"
            )
            self.state = "halted: " + self.error
            log.error("skewscope clock: %s", self.error)
            run.halt(self.error)
            return
        run.ack(n)

    async def _busy(self, reason: str) -> None:
        self.busy += 1
        self.state = f"agent busy ({reason}); waiting"
        await asyncio.sleep(BUSY_WAIT_S)


async def _close_bounded(ws, timeout: float) -> None:
    """Closes a websocket; cuts the connection if the close handshake does
    not end within ``timeout`` (a peer that floods, or never answers)."""
    try:
        async with asyncio.timeout(timeout):
            await ws.close()
    except (TimeoutError, Exception):
        pass
    transport = getattr(ws, "transport", None)
    if transport is not None and not transport.is_closing():
        transport.abort()
