"""The server's wall clock in a Python app, over the skewscope agent's
``GET /clock`` WebSocket, and actions at a time in it.

A port of the page module ``clients/js/skewscope-clock.js`` to asyncio:
the same exchange (``{"id": N, "t1": T}`` out, t2 and t3 back), the same
clock model and schedule (``model.py``), the same tag check. Where the page
keeps milliseconds, this keeps nanoseconds (the agent's integer
``t2_ns``/``t3_ns``), as the Rust core does, and hands seconds to the app.

The model and the timers keep time on the steady clock of ``steady.py``
(``CLOCK_MONOTONIC_RAW`` on Linux, which NTP does not steer); everything
that leaves the module (estimates, exchanges, the run's stamps) is on
``time.monotonic_ns()``, which follows the wall clock's rate, converted at
that boundary with the two clocks' difference read then.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import inspect
import json
import math
import os
import re
import ssl as ssl_module
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from .hub import Received, Subscription, label_url
from .model import HORIZON_NS, ClockModel, Estimate, Schedule
from .recorder import Recorder, UploadStatus
from .spool import MAX_TEXT, RunBusy
from .steady import monotonic_minus_steady_ns, sleep_s, steady_ns
from .upload import _close_bounded

__all__ = [
    "ANSWER_WAIT_NS",
    "SPIN_S",
    "SPIN_GAP_NS",
    "CLOSE_TIMEOUT_S",
    "UPLOAD_TIMEOUT_S",
    "ClockError",
    "Exchange",
    "ClockEstimate",
    "Acted",
    "Action",
    "Clock",
    "connect_clock",
    "to_epoch_seconds",
    "time_key",
    "reply_tag",
    "check_reply",
    "parse_reply",
    "Received",
    "Subscription",
    "UploadStatus",
]

#: How long a reply may take before the exchange counts as lost, ns (300 ms):
#: a reply later than that proves little, and one request is out at a time.
ANSWER_WAIT_NS = 300_000_000
#: act_at sleeps until this long before its time, then reads the clock until
#: it has come: asyncio's timers are late by a millisecond or more.
SPIN_S = 0.004
#: Of that, the last part is read out; the rest is a precise thread sleep
#: (its wake is some 50-100 us late on a device): as the probe's actor does.
SPIN_TAIL_NS = 300_000
#: What the agent binds its token to for the time exchange's key.
KEY_LABEL = b"skewscope time exchange tag v2"
#: Bytes of the tag kept (128 bits).
TAG_LEN = 16
#: A page's clock that moves unlike the wall clock by more than this between
#: two exchanges means the device slept: what was learned is dropped.
JUMP_NS = 1_000_000_000
#: A suspend longer than this (the growth of CLOCK_BOOTTIME minus
#: CLOCK_MONOTONIC, where the platform has both) drops what was learned,
#: as the probe does: the monotonic clock stood still while the server's
#: went on, so the model would be off by the sleep until the next exchange.
SLEEP_SEEN_NS = 1_000_000
#: Two readings of an action's final wait further apart than this: the
#: process was not running in between (preempted, or woken late). An
#: action whose moment passed in such a gap ran late: ``Acted.missed``.
SPIN_GAP_NS = 20_000
#: How long close() gives the sockets to close before it cuts them, s.
CLOSE_TIMEOUT_S = 2.0
#: How long close() gives a named clock to upload what is left, s.
UPLOAD_TIMEOUT_S = 5.0
#: Times the agent's clock can have, ns: (0, 2^64).
_MAX_NS = 2**64
#: When an upload batch waits for an action due this soon, s.
QUIET_S = 0.02
#: The longest it waits for one, s.
QUIET_MAX_S = 0.05
#: Monotonic to wall, for the stamps of a clock without a name (a named
#: one keeps its boot's offset in its state directory).
_LOCAL_EPOCH_NS = time.time_ns() - time.monotonic_ns()

_DIGITS = re.compile(r"[0-9]{1,20}")
_HEX_TAG = re.compile(r"[0-9a-fA-F]{%d}" % (2 * TAG_LEN))

#: Seconds per unit, for times to act written in other units.
_UNIT_DIGITS = {"s": 0, "ms": 3, "us": 6, "ns": 9}


class ClockError(RuntimeError):
    """The clock cannot say the server's time: not synced, no reply in time,
    or every reply refused. Raised rather than guessed: an app acting on a
    clock it does not have would act at the wrong moment without knowing."""


def to_epoch_seconds(value, unit: str = "auto") -> float:
    """A time since the epoch in ``unit`` ("s", "ms", "us", "ns", or "auto")
    as float seconds.

    Why: servers write times to act as they already write times (FastAPI's
    ``time.time()`` in seconds, Go's ``UnixNano()``, JavaScript's
    milliseconds). "auto" reads the unit from the magnitude as the skewscope
    probe does: below 1e11 seconds, below 1e14 milliseconds, below 1e17
    microseconds, else nanoseconds (any date between 1973 and 5138). Ints
    and strings of digits are divided exactly (a nanosecond int would lose
    bits as a float first); a string holding a number is read too.
    """
    if unit != "auto" and unit not in _UNIT_DIGITS:
        raise ValueError(f"unknown unit: {unit!r} (s, ms, us, ns or auto)")
    exact = None
    if isinstance(value, bool):
        raise ValueError(f"not a time: {value!r}")
    if isinstance(value, int):
        exact = value
    elif isinstance(value, str) and re.fullmatch(r"[+-]?[0-9]+", value.strip()):
        exact = int(value.strip())
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"not a time: {value!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"not a time: {value!r}")
    if unit == "auto":
        a = abs(v)
        unit = "s" if a < 1e11 else "ms" if a < 1e14 else "us" if a < 1e17 else "ns"
    digits = _UNIT_DIGITS[unit]
    if exact is not None:
        return exact / 10**digits  # correctly rounded
    return v / 10.0**digits if digits else v


def time_key(token: str | bytes) -> bytes:
    """The time exchange's key from the agent's token (its ``--token-file``,
    trimmed), as the agent derives it: HMAC-SHA-256(token, label). Why a
    derived key: the token itself never keys anything on the wire."""
    raw = token.encode("utf-8") if isinstance(token, str) else bytes(token)
    return hmac.new(raw, KEY_LABEL, hashlib.sha256).digest()


def reply_tag(key: bytes, request_text: str, t2_ns: str, t3_ns: str) -> str:
    """The tag the agent puts on a reply (32 hex digits): HMAC-SHA-256 under
    ``key``, first 128 bits, of the request's exact text and both times'
    digits. It binds the reply to that very request and to both times."""
    msg = f"{request_text}\n{t2_ns}\n{t3_ns}".encode("utf-8")
    return hmac.new(key, msg, hashlib.sha256).digest()[:TAG_LEN].hex()


def check_reply(key: bytes, request_text: str, reply: Any):
    """A tagged reply's (t2, t3) in ns, from the tagged digit strings, when
    its tag is the one ``key`` gives the request's exact ``request_text``
    and those digits; None when untagged or it does not verify (altered on
    the path, or another token). The untagged fields are never read: anyone
    on the path could have rewritten them."""
    auth = reply.get("auth") if isinstance(reply, dict) else None
    if not isinstance(auth, dict):
        return None
    t2s, t3s, tag = auth.get("t2_ns"), auth.get("t3_ns"), auth.get("tag")
    if not (isinstance(t2s, str) and isinstance(t3s, str) and isinstance(tag, str)):
        return None
    if not (_DIGITS.fullmatch(t2s) and _DIGITS.fullmatch(t3s) and _HEX_TAG.fullmatch(tag)):
        return None
    mac = hmac.new(key, f"{request_text}\n{t2s}\n{t3s}".encode("utf-8"), hashlib.sha256).digest()
    if not hmac.compare_digest(mac[:TAG_LEN], bytes.fromhex(tag)):
        return None
    t2, t3 = int(t2s), int(t3s)
    if not (0 < t2 < _MAX_NS and 0 < t3 < _MAX_NS):
        return None
    return t2, t3


def _refuse_constant(name):
    raise ValueError(f"not JSON: {name}")


def parse_reply(data) -> dict | None:
    """A /clock frame as a JSON object, or None: a binary frame, text that
    is not JSON (NaN and Infinity included), nested past Python's limit,
    or any JSON value but an object (null, a number, an array, a string).
    Never raises: a frame is the peer's to choose."""
    if not isinstance(data, str):
        return None
    try:
        reply = json.loads(data, parse_constant=_refuse_constant)
    except (ValueError, RecursionError, MemoryError):
        return None
    return reply if isinstance(reply, dict) else None


def _is_time_ns(v) -> bool:
    """An agent time: an int (not a bool) in (0, 2^64) ns."""
    return type(v) is int and 0 < v < _MAX_NS


@dataclass(frozen=True)
class Exchange:
    """One exchange kept: t1 and t4 on this host's ``time.monotonic_ns()``,
    t2 and t3 on the server's wall clock, ns. What an app that records its
    sync writes down. (The model is fed the same exchange on the steady
    clock, where NTP's slews do not bend it.)"""

    t1: int
    t2: int
    t3: int
    t4: int


@dataclass(frozen=True)
class ClockEstimate:
    """The server's clock at one monotonic moment: server = monotonic +
    offset, true to within ± bound. Seconds, and the exact ns beside them."""

    offset: float
    bound: float
    drift_ppm: float
    offset_ns: int
    bound_ns: int


@dataclass(frozen=True)
class Acted:
    """What an action at a time did, in the server's clock (seconds since the
    epoch): the ``target`` asked, the ``actual`` moment it ran, and how
    ``late`` (actual − target: a few µs, one reading of the clock, when on
    time; a time already past when it was asked runs at once, late by that
    much).

    ``missed``: it did not run at its moment but after it. Either the time
    had passed when it was asked (its message came late: it ran at once),
    or its moment passed while the process was not running (the final wait
    found the clock already past it, or two of its readings were more than
    ``SPIN_GAP_NS`` apart across it: a busy host woke it late). An action
    not missed ran at the first reading of the clock at or after its
    moment. Report an action as late when ``missed`` is true, whatever
    ``late`` says."""

    target: float
    actual: float
    late: float
    missed: bool = False


class Action:
    """A pending :meth:`Clock.act_at`: cancel it, or await it for its
    :class:`Acted`. Why a handle: an app that gets a newer message for the
    same moment must be able to call off the old one."""

    def __init__(self, target: float, future: asyncio.Future):
        self.target = target
        self._future = future

    def cancel(self) -> bool:
        """Calls it off if it has not run; whether it was pending."""
        return self._future.cancel()

    def done(self) -> bool:
        """Whether it ran (or was cancelled)."""
        return self._future.done()

    def result(self) -> Acted:
        """Its :class:`Acted`, once done."""
        return self._future.result()

    def __await__(self):
        return self._future.__await__()


class Clock:
    """The server's clock over a WebSocket to the agent's ``/clock``.

    Use :func:`connect_clock` to get one that has synced. It exchanges on
    the schedule the native probe keeps (bursts of pairs until the bound
    stops improving, then a pair every ``every`` seconds, sooner while the
    drift is loosely known) and keeps the same clock model as the probe and
    the report, so ``now()`` is the server's wall time to within
    ``bound()`` on any link, not only a quiet LAN.

    With ``token`` (the agent's, as in its ``--token-file``) only replies
    tagged under it are used: anyone who can rewrite packets on the path
    could otherwise move this clock while every bound still looks right.
    Others are refused and counted (``refused``), never used.

    With ``name`` the app reports its own actions: a run is kept in
    ``state_dir`` and uploaded to the agent's ``/ingest`` (see
    :func:`connect_clock`).
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | bytes | None = None,
        every: float = 1.0,
        on_exchange: Callable[[Exchange], Any] | None = None,
        ssl: ssl_module.SSLContext | None = None,
        name: str | None = None,
        state_dir: str | os.PathLike | None = None,
    ):
        if not every > 0:
            raise ValueError("every must be a positive number of seconds")
        if token is not None and not token:
            raise ValueError("an empty token: the agent never has one (give None for no token)")
        if name is not None:
            if not isinstance(name, str) or not name:
                raise ValueError("name must be a non-empty str (what the report lists the app as)")
            if len(name.encode("utf-8", "surrogatepass")) > MAX_TEXT or len(url.encode("utf-8", "surrogatepass")) > MAX_TEXT:
                raise ValueError(f"name and url must each be at most {MAX_TEXT} bytes (the agent's limit)")
        self.url = url
        self.every = every
        self.name = name
        self._state_dir = state_dir
        self._token = token
        self._ssl = ssl
        self._key = time_key(token) if token is not None else None
        #: Replies whose tag did not verify (or that had none), with a token.
        self.refused = 0
        #: Frames ignored: not a JSON object, another request's id (a reply
        #: past its window), times missing, out of range or impossible.
        #: Never used, never raised.
        self.ignored = 0
        #: Exchanges kept since the start.
        self.exchanges = 0
        #: Times the monotonic clock jumped against the wall clock (the host
        #: slept): each dropped what was learned.
        self.jumps = 0
        self.on_exchange = on_exchange
        self.model = ClockModel(ns_per_unit=1)
        self.schedule = Schedule(steady_ns(), every * 1e9)
        self.closed = False
        self._ws = None
        self._task: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None
        self._synced: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._next_id = 1
        self._last_seen: tuple[int, int] | None = None
        #: The time suspended (see _suspended_ns) when the model was last
        #: fed or reset; None where the platform cannot tell.
        self._suspended_base: int | None = _suspended_ns()
        self._actions: set[asyncio.Task] = set()
        #: Pending actions' targets (server seconds): the upload waits for them.
        self._due: dict[asyncio.Task, float] = {}
        self._subscriptions: set[Subscription] = set()
        self._local_conn = 0
        self._app: Recorder | None = None
        #: Exchanges kept before the run was begun (written at its start).
        self._early: list[Exchange] = []

    # -- the clock -----------------------------------------------------------

    @property
    def error(self) -> BaseException | None:
        """Why the exchanges stopped, if they stopped other than by close():
        the clock then goes on from what it learned, its bound growing."""
        return self._error

    @property
    def authenticated(self) -> bool:
        """Whether replies must carry the token's tag."""
        return self._key is not None

    def estimate(self, at_mono: int | None = None) -> ClockEstimate | None:
        """The server's clock at monotonic time ``at_mono`` (ns of
        ``time.monotonic_ns()``; default now), or None before any exchange:
        its ``offset`` is the server's clock minus ``time.monotonic_ns()``.
        Why a monotonic time: it never steps, so a moment planned on it
        lands on the server's time even if this host's wall clock is set.
        (The model keeps time on the steady clock, which NTP does not
        steer; the two are tied here with their difference now.)"""
        mono_minus_steady = monotonic_minus_steady_ns()
        steady = steady_ns() if at_mono is None else at_mono - mono_minus_steady
        e = self.model.at(steady)
        if e is None:
            return None
        offset_ns = e.agent_minus_mono_ns - mono_minus_steady
        return ClockEstimate(
            offset=offset_ns / 1e9,
            bound=e.bound_ns / 1e9,
            drift_ppm=e.drift_ppb / 1e3,
            offset_ns=offset_ns,
            bound_ns=e.bound_ns,
        )

    def now(self) -> float:
        """The server's wall time now, seconds since the epoch (as
        ``time.time()`` on the server). Raises :class:`ClockError` before
        the first exchange, and after the device slept until the next one:
        there is no honest answer then."""
        self._check_slept()
        mono = steady_ns()
        e = self.model.at(mono)
        if e is None:
            raise ClockError("skewscope clock: not synced yet")
        return (mono + e.agent_minus_mono_ns) / 1e9

    def bound(self) -> float:
        """How far ``now()`` can be from the server's clock, ± seconds
        (``math.inf`` before the first exchange)."""
        self._check_slept()
        e = self.model.at(steady_ns())
        return math.inf if e is None else e.bound_ns / 1e9

    def act_at(
        self,
        at,
        callback: Callable[[Acted], Any],
        *,
        unit: str = "auto",
        spin: float = SPIN_S,
        message: Received | str | bytes | None = None,
    ) -> Action:
        """Runs ``callback(acted)`` when the server's clock reaches ``at``
        (seconds since the epoch; or ms/us/ns, read as
        :func:`to_epoch_seconds` reads them; a time that is not a finite
        number raises ValueError).

        Why this way: asyncio sleeps to ``spin`` (4 ms; a finite number of
        seconds ≥ 0, else ValueError) before the moment, as its timers fire
        a millisecond or more late on a busy host; then the moment is mapped
        onto the steady clock with the exchanges that came during the
        wait, checked against the estimate at it, and the thread sleeps
        precisely to 300 µs before it and reads the steady clock until it
        has come (holding the event loop those few ms; no model read after
        the moment, which would make the action late by it): never early by
        the server's clock as this clock reads it, late by a read. A time already
        past runs at once (before this returns), and ``acted.late`` says by
        how much (``acted.missed``: it did not run at its moment). A
        coroutine the callback returns is scheduled. Returns an
        :class:`Action`: await it, or cancel it.

        ``message``: what the action is on, for a clock with a ``name``:
        a message of :meth:`subscribe` (read when it was stamped), or the
        text (str) or bytes the app read from its own socket (read now).
        Its receipt is written now, its action once the callback has run
        (after it: the record never delays the action). Without a name it
        changes nothing.
        """
        target = to_epoch_seconds(at, unit)
        if not (isinstance(spin, (int, float)) and math.isfinite(spin) and spin >= 0):
            raise ValueError(f"skewscope clock: not a spin (seconds, finite, >= 0): {spin!r}")
        loop = asyncio.get_running_loop()
        self._check_slept()
        mono = steady_ns()
        e = self.model.at(mono)
        if e is None:
            raise ClockError("skewscope clock: not synced yet")
        now = (mono + e.agent_minus_mono_ns) / 1e9
        target_ns = math.ceil(Fraction(target) * 10**9)
        record = None
        if message is not None and self._app is not None:
            record = self._app.receipt(message, mono + monotonic_minus_steady_ns(), target * 1e3)
        if now > target:
            future = loop.create_future()
            acted = Acted(target, now, now - target, missed=True)
            done = steady_ns()
            self._run_callback(callback, acted)
            future.set_result(acted)
            if record is not None:
                self._record_action(record, target, e, target_ns - e.agent_minus_mono_ns, done)
            return Action(target, future)
        plan = (e, target_ns - e.agent_minus_mono_ns)
        task = loop.create_task(self._act(target, callback, spin, record, plan))
        self._actions.add(task)
        self._due[task] = target
        task.add_done_callback(self._action_done)
        return Action(target, task)

    def hurry(self) -> bool:
        """Asks for a burst now (an action is near and the bound is wider
        than its time to spare); whether one starts. At most one a second."""
        if not self.schedule.hurry(steady_ns()):
            return False
        if self._wake is not None:
            self._wake.set()
        return True

    def subscribe(
        self,
        url: str,
        *,
        ssl: ssl_module.SSLContext | None = None,
        additional_headers: Any = None,
        subprotocols: list[str] | None = None,
        max_size: int | None = 1 << 20,
    ) -> Subscription:
        """The broadcasts of the hub at ``url`` (``ws://server:8080/ws``),
        each message stamped when it was read: use it with ``async with``
        and ``async for``; each is a :class:`Received` (``.text``,
        ``.read_ms``, ...), to hand to :meth:`act_at` as ``message=``.

        It reconnects after a lost connection (250 ms .. 10 s, jittered)
        until it is closed. With a ``name``, each connection is written
        opened and closed in the run, and its URL gets ``probe=app.RUNID.CONN``
        (the agent's hub labels the connection with it: the report finds it
        so). ``ssl`` defaults to the clock's; ``additional_headers``,
        ``subprotocols`` and ``max_size`` are websockets' ``connect()``'s.
        """
        sub = Subscription(
            self,
            url,
            ssl=ssl if ssl is not None else self._ssl,
            additional_headers=additional_headers,
            subprotocols=subprotocols,
            max_size=max_size,
        )
        self._subscriptions.add(sub)
        return sub

    @property
    def run_id(self) -> str | None:
        """The run a named clock records (32 hex digits), once started."""
        app = self._app
        return app.run.run_id if app is not None and app.run is not None else None

    def upload_status(self) -> UploadStatus | None:
        """Where a named clock's upload stands (None without a name, or
        before start)."""
        return self._app.status() if self._app is not None else None

    def app_ms(self) -> float:
        """The app clock now, ms: what the run's events (and each
        :class:`Received`'s ``read_ms``) are stamped on."""
        return self._app_ms(time.monotonic_ns())

    # -- the connection --------------------------------------------------------

    async def start(self, timeout: float = 5.0) -> "Clock":
        """Opens the socket and starts exchanging in a background task;
        returns once one exchange was kept. Raises :class:`ClockError` when
        none is within ``timeout`` seconds (saying so when replies came but
        were refused: the wrong token, or someone altering them). With a
        ``name``, also begins (or resumes) the run and its upload."""
        self._wake = asyncio.Event()
        self._synced = asyncio.Event()
        if self.name is not None:
            try:
                self._app = Recorder(
                    name=self.name, clock_url=self.url, state_dir=self._state_dir, token=self._token, ssl=self._ssl
                )
            except RunBusy as e:
                self.closed = True
                raise ClockError(f"skewscope clock: {e}") from e
            except OSError as e:
                self.closed = True
                raise ClockError(f"skewscope clock: cannot keep the run of {self.name!r}: {e}") from e
        try:
            tls = {} if self._ssl is None else {"ssl": self._ssl}
            self._ws = await connect(
                self.url,
                open_timeout=timeout,
                close_timeout=CLOSE_TIMEOUT_S,
                compression=None,
                max_size=1 << 16,
                **tls,
            )
        except Exception as e:
            await self.close()
            raise ClockError(f"skewscope clock: cannot reach {self.url}: {e}") from e
        self._task = asyncio.get_running_loop().create_task(self._run())
        synced = asyncio.ensure_future(self._synced.wait())
        try:
            await asyncio.wait({synced, self._task}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            synced.cancel()
        if self._synced.is_set():
            if self._app is not None:
                early, self._early = self._early, []
                self._app.begin(keyed=self.authenticated, refused=self.refused, exchanges=early, quiet=self._quiet)
            return self
        error = self._error
        if self._task.done() and not self._task.cancelled() and self._task.exception() is not None:
            error = self._task.exception()
        await self.close()
        if self.refused > 0:
            raise ClockError(
                f"skewscope clock: no reply from {self.url} could be used in {timeout} s: "
                f"all {self.refused} replies were refused, their tag did not verify under the token "
                "(the agent has another token, or someone on the path altered them)"
            ) from error
        if error is not None:
            raise ClockError(f"skewscope clock: {self.url} closed before one exchange: {error}") from error
        raise ClockError(f"skewscope clock: no reply from {self.url} within {timeout} s")

    async def close(self, timeout: float = CLOSE_TIMEOUT_S, *, upload_timeout: float = UPLOAD_TIMEOUT_S) -> None:
        """Closes the socket and stops exchanging (pending actions still run,
        on what was learned, but are no longer recorded), and closes the
        subscriptions. It returns within ``timeout`` s: a socket whose close
        handshake has not ended by then is cut, so a peer that floods it or
        never answers cannot hold it up.

        With a ``name``: writes ``stopped``, then uploads what is left for
        at most ``upload_timeout`` s more, and lets go of the run; what the
        agent did not acknowledge stays in the state directory and is
        uploaded by the next start of the same name."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout

        def left() -> float:
            return max(0.0, deadline - loop.time())

        self.closed = True
        if self._wake is not None:
            self._wake.set()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
        ws, self._ws = self._ws, None
        if ws is not None:
            await _close_bounded(ws, left())
        if task is not None:
            try:
                async with asyncio.timeout(left()):
                    await asyncio.gather(task, return_exceptions=True)
            except TimeoutError:
                pass
        subs = list(self._subscriptions)
        if subs:
            await asyncio.gather(*(sub.close(left()) for sub in subs), return_exceptions=True)
        app = self._app
        if app is not None and not app.closed:
            if app.run is None:
                app.release()
            else:
                await app.close(upload_timeout=upload_timeout, timeout=left)

    async def __aenter__(self) -> "Clock":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    # -- inside --------------------------------------------------------------

    def _app_ms(self, mono: int) -> float:
        app = self._app
        if app is not None:
            return app.clock.ms(mono)
        return (mono + _LOCAL_EPOCH_NS) / 1_000_000

    def _hub_connection(self, url: str) -> tuple[int, str]:
        """A new connection's number and URL (labelled for a named run)."""
        app = self._app
        conn = app.new_conn() if app is not None else None
        if conn is None:
            conn = self._local_conn
            self._local_conn += 1
            return conn, url
        return conn, label_url(url, f"app.{app.run.run_id}.{conn}")

    def _record_opened(self, conn: int) -> None:
        if self._app is not None:
            self._app.opened(conn)

    def _record_closed(self, conn: int, reason: str) -> None:
        if self._app is not None:
            self._app.closed_conn(conn, reason)

    def _action_done(self, task: asyncio.Task) -> None:
        self._actions.discard(task)
        self._due.pop(task, None)

    async def _quiet(self) -> None:
        """Waits while an action is due within QUIET_S (at most QUIET_MAX_S):
        an upload batch then never competes with it for the loop."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + QUIET_MAX_S
        while self._due:
            try:
                left = min(self._due.values()) - self.now()
            except ClockError:
                return
            if not 0 <= left <= QUIET_S:
                return
            wait = min(left + 0.001, deadline - loop.time())
            if wait <= 0:
                return
            await asyncio.sleep(wait)

    async def _run(self) -> None:
        try:
            while not self.closed:
                await self._wait_due()
                if self.closed:
                    break
                self._answered(await self._exchange_once())
        except ConnectionClosed as e:
            self._error = e
        except Exception as e:  # an on_exchange that raised: said by start(), kept in .error
            self._error = e
            raise
        finally:
            self.closed = True

    async def _wait_due(self) -> None:
        """Waits for the schedule's next request, or a hurry."""
        while not self.closed:
            self._wake.clear()
            delay = (self.schedule.next_request_at() - steady_ns()) / 1e9
            if delay <= 0:
                return
            try:
                async with asyncio.timeout(delay):
                    await self._wake.wait()
            except TimeoutError:
                pass

    async def _exchange_once(self) -> Exchange | None:
        """One request, and its reply within the answer window (None: lost).

        Every frame is refused unless it is a well-formed, in-range reply
        to this very request (and, with a token, verified) before any other
        field of it is read; a refused one is counted and the exchange
        waits on for the real reply. Nothing a peer sends raises here."""
        ws = self._ws
        request_id = self._next_id
        self._next_id += 1
        t1 = steady_ns()
        text = json.dumps({"id": request_id, "t1": t1})
        await ws.send(text)
        deadline = t1 + ANSWER_WAIT_NS
        while True:
            left = (deadline - steady_ns()) / 1e9
            if left <= 0:
                return None
            try:
                async with asyncio.timeout(left):
                    data = await ws.recv()
            except TimeoutError:
                return None
            t4 = steady_ns()
            reply = parse_reply(data)
            if reply is None:
                self.ignored += 1
                continue
            rid = reply.get("id")
            if type(rid) is not int or rid != request_id:
                self.ignored += 1  # a reply to an earlier request, past its window
                continue
            if self._key is not None:
                checked = check_reply(self._key, text, reply)
                if checked is None:
                    # Never used; the exchange waits on for the real reply.
                    self.refused += 1
                    if self._app is not None:
                        self._app.refused(self.refused)
                    continue
                t2, t3 = checked
            else:
                t2, t3 = reply.get("t2_ns"), reply.get("t3_ns")
                if not (_is_time_ns(t2) and _is_time_ns(t3)):
                    self.ignored += 1
                    continue
            # Impossible times (the reply before the request, the server's
            # times reversed, a turnaround longer than the round trip) would
            # be refused by the model: refused here, so a genuine reply after
            # them still counts.
            if t3 < t2 or (t2 - t1) < (t3 - t4):
                self.ignored += 1
                continue
            return Exchange(t1, t2, t3, t4)

    def _answered(self, exchange: Exchange | None) -> None:
        """One exchange done (None: no reply in time): into the model, then the next."""
        now = steady_ns()
        self._check_jump(now)
        self._check_slept()
        if exchange is not None:
            if self.model.add(exchange.t1, exchange.t2, exchange.t3, exchange.t4):
                self._suspended_base = _suspended_ns()
                self.model.forget_before(now - HORIZON_NS)
                self.exchanges += 1
                self._synced.set()
                # Out of the module on the monotonic clock (t4 was just now).
                d = monotonic_minus_steady_ns()
                exchange = Exchange(exchange.t1 + d, exchange.t2, exchange.t3, exchange.t4 + d)
                app = self._app
                if app is not None and app.run is not None:
                    app.exchange(exchange)
                elif app is not None:
                    self._early.append(exchange)
                if self.on_exchange is not None:
                    self.on_exchange(exchange)
            else:
                self.ignored += 1
        self.schedule.done(now, self.model.at(now))

    def _check_jump(self, mono: int) -> None:
        """A steady clock that moved unlike the wall clock (the host slept)
        drops what was learned: the drift model does not span a sleep."""
        wall = time.time_ns()
        if self._last_seen is not None:
            mono_moved = mono - self._last_seen[0]
            wall_moved = wall - self._last_seen[1]
            if abs(mono_moved - wall_moved) > JUMP_NS:
                self.model = ClockModel(ns_per_unit=1)
                self.schedule = Schedule(mono, self.every * 1e9)
                self.jumps += 1
                self._suspended_base = _suspended_ns()  # one drop a sleep
        self._last_seen = (mono, wall)

    def _check_slept(self) -> None:
        """A suspend since the model was last fed (or reset) drops what was
        learned, at once, however short past SLEEP_SEEN_NS: an answer from
        it would be off by the sleep (the wall-clock check above sees only
        sleeps over JUMP_NS, and only at the next exchange)."""
        suspended = _suspended_ns()
        if suspended is None or self._suspended_base is None:
            return
        if suspended > self._suspended_base + SLEEP_SEEN_NS:
            mono = steady_ns()
            self.model = ClockModel(ns_per_unit=1)
            self.schedule = Schedule(mono, self.every * 1e9)
            self.jumps += 1
            self._suspended_base = suspended
            self._last_seen = None
            if self._wake is not None:
                self._wake.set()  # the next exchange now, not at its turn

    def _run_callback(self, callback, acted: Acted) -> Acted:
        result = callback(acted)
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._actions.add(task)
            task.add_done_callback(self._actions.discard)
        return acted

    def _moment(self, target_ns: int, used, planned: int):
        """The moment the server's clock reaches ``target_ns``, on the
        steady clock, from the estimate at that moment (the model's
        offset moves with time): ``(estimate, moment)``. By the estimate
        returned, which is the model's at the moment returned, the server's
        clock is at or past the target there, and, as it only grows with
        the steady clock, at every later reading: never early. Without an
        estimate at the plan (the model was reset), the estimate at this
        reading plans it; without any, the plan stands."""
        mono = planned
        e = self.model.at(mono)
        if e is None:
            mono = steady_ns()
            e = self.model.at(mono)
            if e is None:
                return used, planned
        # A fixed point of moment = target - offset(moment): two steps reach
        # it (the offset moves by ppm). A floored offset may swing by 1 ns
        # between two neighbours and leave the search a ns early, so it ends
        # by stepping later until the estimate there (kept with its moment)
        # says the moment has come.
        for _ in range(4):
            candidate = target_ns - e.agent_minus_mono_ns
            if candidate == mono:
                break
            e2 = self.model.at(candidate)
            if e2 is None:
                break
            mono, e = candidate, e2
        while mono + e.agent_minus_mono_ns < target_ns:
            mono += target_ns - (mono + e.agent_minus_mono_ns)
            e2 = self.model.at(mono)
            if e2 is None:
                break
            e = e2
        return e, mono

    @staticmethod
    def _read_out(moment: int) -> tuple[int, int | None]:
        """Waits for ``moment`` on the steady clock: precise thread sleeps
        to SPIN_TAIL_NS before it (each asked short, as the sleeping clock
        is the monotonic one, and looked at again), then readings of the
        steady clock alone until it has come (no model: a model read takes
        tens of microseconds, and after the moment it would make the action
        late by them). Returns the reading that reached it and the last one
        known to be before it (None: it had passed already)."""
        rest = moment - steady_ns() - SPIN_TAIL_NS
        while rest > 0:
            time.sleep(sleep_s(rest))
            rest = moment - steady_ns() - SPIN_TAIL_NS
            if rest < SPIN_TAIL_NS:
                break  # what is left, read out: a sleep's wake costs more
        before = None
        m = steady_ns()
        while m < moment:
            before = m
            m = steady_ns()
        return m, before

    async def _act(self, target: float, callback, spin: float, record, plan) -> Acted:
        target_ns = math.ceil(Fraction(target) * 10**9)
        used, planned = plan
        while True:
            try:
                left = target - self.now()
            except ClockError:
                if self.closed:
                    raise
                await asyncio.sleep(0.01)  # the model was reset (a jump); until the next reply
                continue
            if left > spin:
                # Asked short: asyncio's timers run on the monotonic clock.
                await asyncio.sleep(sleep_s(int((left - spin) * 1e9)))
                continue
            # The model changes only on this event loop, which this holds
            # from here to the callback: so the moment is planned and checked
            # now, and the read-out below only reads the steady clock (a
            # model read after the moment would make every action late by
            # the tens of microseconds it takes).
            used, planned = self._moment(target_ns, used, planned)
            far = planned - steady_ns() - int(spin * 1e9)
            if far <= SPIN_TAIL_NS:
                break
            # The model puts the moment further than the wait left (it moved
            # since the coarse wait's reading): wait again, the loop free.
            await asyncio.sleep(sleep_s(far))
        # Sleep the thread to SPIN_TAIL_NS before (a precise sleep, unlike
        # the loop's timers), and read the clock for the rest: a busy read of
        # several ms is soon preempted on a busy host, and holds a core other
        # processes need; a sleep's wake is not. Both hold the event loop.
        # Never early, by its own reading.
        m, before = self._read_out(planned)
        # The server's clock at that reading, from the estimate the moment
        # was planned on (the drift over the read-out is below a ns).
        now = (m + used.agent_minus_mono_ns) / 1e9
        missed = before is None or m - before > SPIN_GAP_NS
        done = steady_ns()
        acted = self._run_callback(callback, Acted(target, now, now - target, missed=missed))
        if record is not None:
            self._record_action(record, target, used, planned, done)
        return acted

    def _record_action(self, record, target: float, estimate: Estimate, target_steady: int, done_steady: int) -> None:
        """Writes an action planned and done on the steady clock, in the
        run's clock (monotonic): its moments and its offset moved by the two
        clocks' difference now, a few µs after the callback (a slew of
        1/12 moves it by well under a ns in that time)."""
        if self._app is None:
            return
        d = monotonic_minus_steady_ns()
        on_mono = Estimate(estimate.agent_minus_mono_ns - d, estimate.bound_ns, estimate.drift_ppb, estimate.drift_bound_ppb)
        self._app.action(record, act_at_ms=target * 1e3, estimate=on_mono, target_mono=target_steady + d, done_mono=done_steady + d)


def _suspended_ns() -> int | None:
    """How long this host has been suspended since boot, ns: CLOCK_BOOTTIME
    minus CLOCK_MONOTONIC (the first counts a suspend, the second does
    not); None where the platform lacks CLOCK_BOOTTIME (not Linux)."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    if boottime is None:
        return None
    return time.clock_gettime_ns(boottime) - time.monotonic_ns()


async def connect_clock(
    url: str,
    *,
    token: str | bytes | None = None,
    every: float = 1.0,
    timeout: float = 5.0,
    on_exchange: Callable[[Exchange], Any] | None = None,
    ssl: ssl_module.SSLContext | None = None,
    name: str | None = None,
    state_dir: str | os.PathLike | None = None,
) -> Clock:
    """A :class:`Clock` on ``url`` (``ws://server:port/clock``, or
    ``wss://`` for an agent with ``--tls-cert``), returned once one exchange
    was kept; raises :class:`ClockError` if none is within ``timeout``
    seconds. ``token``: the agent's, to use only replies it tagged;
    ``every``: seconds between steady pairs of exchanges; ``ssl``: for
    ``wss://``, the context that trusts the agent's certificate (a site's own
    CA: ``ssl.create_default_context(cafile=...)``; the system's roots when
    not given).

    ``name`` (what the report lists the app as, a device): the app reports
    its own actions. A run is kept in ``state_dir`` (default
    ``$SKEWSCOPE_STATE_DIR``, else ``$XDG_STATE_HOME/skewscope-clock``, else
    ``~/.local/state/skewscope-clock``): the run's start, the exchanges,
    the connections of :meth:`Clock.subscribe`, and the receipt and action
    of every message acted on with ``message=``. Each event is written
    before anything else is done with it and uploaded to the agent's
    ``/ingest`` (the clock URL's host and port) exactly once, across
    reconnects, kills and restarts: a later start with the same name on the
    same boot resumes the run. One process per name and state directory
    (another gets :class:`ClockError`). Without ``name`` nothing is
    written or uploaded."""
    return await Clock(
        url, token=token, every=every, on_exchange=on_exchange, ssl=ssl, name=name, state_dir=state_dir
    ).start(timeout)
