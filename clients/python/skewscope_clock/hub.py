"""A subscription to a broadcast hub, each message stamped when it was read.

Why a subscription of the clock's own and not the app's socket: the
moment a message was read is what tells a late message from a late timer,
and it must be taken when the frame is read, not when the app gets round
to it. A background task reads the socket, stamps each message on the app
clock at once, counts how often its connection carried the same payload,
and queues it for the app. It reconnects after a lost connection (250 ms
.. 10 s, jittered); each connection gets its own number from the run, and
on the agent's hub its label ``probe=app.RUNID.CONN`` (the hub writes it in
its log: that is how the report finds which of its connections it was).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import ssl as ssl_module
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

if TYPE_CHECKING:
    from .client import Clock

__all__ = ["Received", "Subscription", "label_url", "payload_key"]

RETRY_MIN_S = 0.25
RETRY_MAX_S = 10.0
#: How long opening a connection may take.
OPEN_TIMEOUT_S = 10.0
#: How long closing one may take before it is cut.
CLOSE_TIMEOUT_S = 1.0


def payload_key(payload: str | bytes) -> bytes:
    """What identifies a payload on a connection: a 64-bit hash of its
    bytes (text as UTF-8, as the agent hashes it). 8 bytes a message seen,
    as the native probe keeps."""
    data = payload.encode("utf-8", "surrogatepass") if isinstance(payload, str) else bytes(payload)
    return hashlib.blake2b(data, digest_size=8).digest()


def label_url(url: str, label: str) -> str:
    """``url`` with the query parameter ``probe=label`` (replacing one)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "probe"]
    query.append(("probe", label))
    return urlunsplit((parts.scheme, parts.netloc, parts.path or "/", urlencode(query), parts.fragment))


@dataclass(frozen=True)
class Received:
    """A message read from a subscription.

    ``text``: the payload (str for a text message, bytes for a binary one);
    ``read_ms``: when it was read, on the app clock (ms; the time the run's
    uploaded events are stamped on); ``read_mono_ns``: the same moment on
    ``time.monotonic_ns()``; ``conn``: the connection it came on (the run's
    numbering); ``occurrence``: how many times that connection carried the
    same payload before (0 the first time). Hand it to
    :meth:`Clock.act_at` as ``message=``.
    """

    text: str | bytes
    read_ms: float
    read_mono_ns: int
    conn: int
    occurrence: int
    _recorded: list = field(default_factory=list, repr=False, compare=False)

    @property
    def binary(self) -> bool:
        return isinstance(self.text, bytes)


class Subscription:
    """The hub's broadcasts, each stamped when it was read. Use as::

        async with clock.subscribe("ws://server:8080/ws") as hub:
            async for message in hub:
                ...

    The connection is opened on entering (and reopened after it is lost,
    for as long as the subscription is open); iterating ends once it is
    closed (leaving the ``async with``, :meth:`close`, or the clock's
    ``close()``).
    """

    def __init__(
        self,
        clock: "Clock",
        url: str,
        *,
        ssl: ssl_module.SSLContext | None = None,
        additional_headers: Any = None,
        subprotocols: list[str] | None = None,
        max_size: int | None = 1 << 20,
        queue_size: int = 4096,
    ):
        self.url = url
        self._clock = clock
        self._ssl = ssl
        self._headers = additional_headers
        self._subprotocols = subprotocols
        self._max_size = max_size
        self._queue: asyncio.Queue = asyncio.Queue(maxsize=queue_size)
        self._task: asyncio.Task | None = None
        self._ws = None
        self.closed = False
        #: The connection open now (its number), or None.
        self.conn: int | None = None
        #: Connections opened so far.
        self.connections = 0
        #: Messages read.
        self.messages = 0
        #: Why the last connection ended (or failed to open).
        self.last_error: str | None = None
        self._end = object()

    # -- use -----------------------------------------------------------------

    def start(self) -> "Subscription":
        """Starts reading (entering ``async with`` does it)."""
        if self._task is None and not self.closed:
            self._task = asyncio.get_running_loop().create_task(self._main())
        return self

    async def __aenter__(self) -> "Subscription":
        return self.start()

    async def __aexit__(self, *exc) -> None:
        await self.close()

    def __aiter__(self):
        self.start()
        return self

    async def __anext__(self) -> Received:
        if self.closed and self._queue.empty():
            raise StopAsyncIteration
        item = await self._queue.get()
        if item is self._end:
            self._queue.put_nowait(self._end)  # for any other reader
            raise StopAsyncIteration
        return item

    async def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None:
        """Closes the connection (written closed in the run) and ends the
        iteration."""
        if self.closed:
            return
        self.closed = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()
        ws = self._ws
        if ws is not None:
            from .upload import _close_bounded

            await _close_bounded(ws, timeout)
        if task is not None:
            try:
                async with asyncio.timeout(timeout):
                    await asyncio.gather(task, return_exceptions=True)
            except TimeoutError:
                pass
        self._ended("subscription closed by the app" if not self._clock.closed else "clock closed")
        self._clock._subscriptions.discard(self)
        try:
            self._queue.put_nowait(self._end)
        except asyncio.QueueFull:
            self._queue.get_nowait()
            self._queue.put_nowait(self._end)

    # -- inside --------------------------------------------------------------

    def _ended(self, reason: str) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            self._clock._record_closed(conn, reason)

    async def _main(self) -> None:
        delay = RETRY_MIN_S
        tls = {"ssl": self._ssl} if self._ssl is not None and self.url.startswith("wss:") else {}
        while not self.closed:
            conn, url = self._clock._hub_connection(self.url)
            try:
                ws = await connect(
                    url,
                    additional_headers=self._headers,
                    subprotocols=self._subprotocols,
                    open_timeout=OPEN_TIMEOUT_S,
                    close_timeout=CLOSE_TIMEOUT_S,
                    max_size=self._max_size,
                    **tls,
                )
            except (OSError, InvalidHandshake, InvalidURI, TimeoutError, ValueError) as e:
                self.last_error = f"cannot connect: {type(e).__name__}: {e}"
            else:
                self._ws = ws
                self.conn = conn
                self.connections += 1
                delay = RETRY_MIN_S
                self._clock._record_opened(conn)
                reason = "closed"
                try:
                    await self._read(ws, conn)
                except ConnectionClosed as e:
                    code = e.rcvd.code if e.rcvd is not None else 1006
                    reason = f"closed ({code})"
                    self.last_error = reason
                finally:
                    self._ws = None
                if self.closed:
                    return
                self._ended(reason)
            if self.closed:
                return
            await asyncio.sleep(delay * (0.75 + random.random() / 2))
            delay = min(RETRY_MAX_S, delay * 2)

    async def _read(self, ws, conn: int) -> None:
        seen: dict[bytes, int] = {}
        app_ms = self._clock._app_ms
        while True:
            data = await ws.recv()
            mono = time.monotonic_ns()
            key = payload_key(data)
            occurrence = seen.get(key, 0)
            seen[key] = occurrence + 1
            self.messages += 1
            await self._queue.put(Received(data, app_ms(mono), mono, conn, occurrence))
