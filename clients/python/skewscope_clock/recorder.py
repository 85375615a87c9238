"""What a named clock records of the app's own actions, and uploads.

One run per app name (``connect_clock(..., name="kiosk-1")``): the run's
start, this module and runtime (``app``: the actions are the app's own, not
a probe's), every time exchange kept, every hub connection opened and
closed, and for each message acted on its receipt and its action. Each is
kept on disk before anything else is done with it (:mod:`.spool`) and
uploaded to the agent's ``/ingest`` (:mod:`.upload`), exactly once.
"""

from __future__ import annotations

import asyncio
import logging
import platform
import socket
import ssl as ssl_module
from dataclasses import dataclass
from pathlib import Path
from typing import Awaitable, Callable

import websockets

from .appclock import AppClock, default_state_dir
from .hub import Received, payload_key
from .spool import AppDir, Run, valid_ms
from .upload import Uploader, ingest_url

__all__ = ["MODULE_VERSION", "Recorder", "UploadStatus", "runtime"]

log = logging.getLogger("skewscope_clock")

#: What the run's ``started`` and ``app`` events name this module.
MODULE_VERSION = "skewscope_clock.py 1"
#: Refused replies are written down at most this often (a flood of forged
#: replies must not become a flood of events).
CLOCK_TAGS_EVERY_S = 1.0


def runtime() -> str:
    """``CPython 3.11.7; websockets 13.1``."""
    version = getattr(websockets, "__version__", None) or getattr(getattr(websockets, "version", None), "version", "?")
    return f"{platform.python_implementation()} {platform.python_version()}; websockets {version}"


@dataclass(frozen=True)
class UploadStatus:
    """Where a named clock's upload stands."""

    #: The run (32 hex digits): the agent stores it as probe-RUNID.sklog.
    run_id: str
    #: Whether it goes on a run an earlier process started.
    resumed: bool
    #: Events written (the run's next sequence number).
    events: int
    #: Events the agent acknowledged (stored durably).
    acked: int
    #: What the upload is doing.
    state: str
    #: Answers of the agent refused (broken or hostile).
    refused: int
    #: Its "busy" answers.
    busy: int
    #: Why the run is no longer uploaded (the agent lost events), or None.
    error: str | None
    #: Events that could not be written (a full disk, or values the agent
    #: would refuse), and actions after close().
    unrecorded: int
    #: Earlier runs of this name still uploading.
    earlier_runs: int


class Recorder:
    """The run of a named clock, its files and its uploads."""

    def __init__(
        self,
        *,
        name: str,
        clock_url: str,
        state_dir: str | Path | None,
        token: str | bytes | None,
        ssl: ssl_module.SSLContext | None,
    ):
        self.name = name
        self.clock_url = clock_url
        self.ingest_url = ingest_url(clock_url)
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
        if isinstance(token, bytes):
            token = token.decode("utf-8", "replace")
        self._token = token
        self._ssl = ssl
        self.dir = AppDir(self.state_dir, name)  # RunBusy if another process has it
        try:
            self.clock = AppClock(self.state_dir)
        except BaseException:
            self.dir.release()
            raise
        self.run: Run | None = None
        self.resumed = False
        self.earlier: list[Run] = []
        self.uploaders: list[Uploader] = []
        self.closed = False
        self._unrecorded = 0
        self._raw_conn: int | None = None
        self._raw_seen: dict[bytes, int] = {}
        self._keyed = False
        self._refused_written = 0
        self._refused_now = 0
        self._tags_timer: asyncio.TimerHandle | None = None
        self._tags_last = 0.0

    # -- the run -------------------------------------------------------------

    def begin(self, *, keyed: bool, refused: int, exchanges, quiet: Callable[[], Awaitable[None]]) -> None:
        """Resumes this boot's unfinished run of the name, or starts a new
        one (earlier runs finished and uploaded in the background); writes
        its start and the exchanges kept so far; starts the uploads."""
        boot = self.clock.boot_id
        runs = self.dir.runs()
        live = None
        for run in runs:
            if run.halted is None and not run.stopped and run.boot_id == boot and run.ingest_url == self.ingest_url:
                live = run  # the newest such (runs are oldest first)
        for run in runs:
            if run is live:
                continue
            if run.halted is not None:
                log.warning("skewscope clock: run %s of %r is kept in %s, not uploaded: %s", run.run_id, self.name, run.path, run.halted)
                run.close()
                continue
            if not run.stopped:
                # Its process ended without stopping it (killed, or another boot).
                run.close_all(run.last_ms, "app restarted")
                run.stop(run.last_ms)
            if run.finished:
                run.remove()
            else:
                self.earlier.append(run)
        now = self.clock.ms()
        if live is not None:
            self.run = live
            self.resumed = True
            live.close_all(live.last_ms, "app restarted")
        else:
            self.run = Run.create(
                self.dir.path, name=self.name, boot_id=boot, clock_url=self.clock_url, ingest_url=self.ingest_url
            )
            self.run.emit(
                {
                    "kind": "started",
                    "name": self.name,
                    "host": socket.gethostname()[:255],
                    "url": self.clock_url,
                    "connections": 0,
                    "version": MODULE_VERSION,
                    "at_ms": now,
                }
            )
            self.run.emit({"kind": "identity", "run_id": self.run.run_id, "clock_id": self.clock.clock_id})
            self.run.emit({"kind": "app", "module": MODULE_VERSION, "runtime": runtime()[:1024]})
        self._keyed = keyed
        self._refused_now = self._refused_written = refused
        self.run.emit({"kind": "clock_tags", "keyed": keyed, "refused": refused, "at_ms": self.clock.ms()})
        for x in exchanges:
            self.exchange(x)
        for run in [self.run, *self.earlier]:
            uploader = Uploader(run, token=self._token, ssl=self._ssl, quiet=quiet)
            uploader.start()
            self.uploaders.append(uploader)

    def _emit(self, event: dict) -> int | None:
        if self.closed or self.run is None:
            self._unrecorded += 1
            return None
        return self.run.emit(event)

    def exchange(self, x) -> None:
        """One exchange kept: t1, t4 on the app clock; t2, t3 the agent's
        ns as ms (each correctly rounded)."""
        self._emit(
            {
                "kind": "exchange",
                "t1_ms": self.clock.ms(x.t1),
                "t2_ms": x.t2 / 1_000_000,
                "t3_ms": x.t3 / 1_000_000,
                "t4_ms": self.clock.ms(x.t4),
            }
        )

    def refused(self, count: int) -> None:
        """The clock refused another reply: written at most once a second."""
        self._refused_now = count
        if self._tags_timer is not None or self.closed or self.run is None:
            return
        loop = asyncio.get_running_loop()
        wait = max(0.0, self._tags_last + CLOCK_TAGS_EVERY_S - loop.time())
        self._tags_timer = loop.call_later(wait, self._write_tags)

    def _write_tags(self) -> None:
        self._tags_timer = None
        if self._refused_now == self._refused_written or self.run is None:
            return
        self._refused_written = self._refused_now
        self._tags_last = asyncio.get_running_loop().time()
        self._emit({"kind": "clock_tags", "keyed": self._keyed, "refused": self._refused_now, "at_ms": self.clock.ms()})

    # -- connections -----------------------------------------------------------

    def new_conn(self) -> int | None:
        if self.run is None or self.closed:
            return None
        return self.run.new_conn()

    def opened(self, conn: int) -> None:
        if self.run is not None and not self.closed:
            self.run.opened(conn, self.clock.ms())

    def closed_conn(self, conn: int, reason: str) -> None:
        if self.run is not None and not self.closed:
            self.run.closed(conn, self.clock.ms(), reason)

    # -- receipts and actions ----------------------------------------------------

    def receipt(self, message, call_mono: int, act_at_ms: float):
        """The receipt of ``message`` (a :class:`Received`, or the app's own
        str/bytes read now), written once; (conn, message JSON, read ms), or
        None when it cannot be recorded."""
        if self.run is None or self.closed or not valid_ms(act_at_ms):
            self._unrecorded += 1
            return None
        if isinstance(message, Received):
            if message._recorded:
                return message._recorded[0]
            payload, conn, occurrence, read_ms = message.text, message.conn, message.occurrence, message.read_ms
        elif isinstance(message, (str, bytes, bytearray, memoryview)):
            payload = message if isinstance(message, str) else bytes(message)
            if self._raw_conn is None:
                # One connection of the run for the app's own socket(s).
                self._raw_conn = self.run.new_conn()
            conn = self._raw_conn
            key = payload_key(payload)
            occurrence = self._raw_seen.get(key, 0)
            self._raw_seen[key] = occurrence + 1
            read_ms = self.clock.ms(call_mono)
        else:
            raise TypeError(f"message= takes a subscription's message, a str or bytes, not {type(message).__name__}")
        body = {"text": payload, "occurrence": occurrence} if isinstance(payload, str) else {"hex": bytes(payload).hex(), "occurrence": occurrence}
        if self._emit({"kind": "receipt", "conn": conn, "message": body, "at_ms": read_ms}) is None:
            return None
        record = (conn, body, read_ms)
        if isinstance(message, Received):
            message._recorded.append(record)
        return record

    def action(self, receipt, *, act_at_ms: float, estimate, target_mono: int, done_mono: int) -> None:
        """The action on a message, once its callback has run."""
        conn, body, read_ms = receipt
        target_ms = self.clock.ms(target_mono)
        if estimate is not None:
            offset_ms = (estimate.agent_minus_mono_ns - self.clock.epoch_offset_ns) / 1_000_000
            bound_ms = estimate.bound_ns / 1_000_000
        else:
            offset_ms = bound_ms = None
        self._emit(
            {
                "kind": "action",
                "conn": conn,
                "message": body,
                "act_at_ms": act_at_ms,
                "offset_ms": offset_ms,
                "bound_ms": bound_ms,
                "target_ms": target_ms,
                "done_ms": self.clock.ms(done_mono),
                "late_ms": max(0.0, read_ms - target_ms),
            }
        )

    # -- the end -------------------------------------------------------------------

    async def close(self, *, upload_timeout: float, timeout: Callable[[], float]) -> None:
        """Writes ``stopped`` (every connection closed before it), uploads
        what is left for at most ``upload_timeout`` s, ends the uploads
        (within ``timeout()`` s, what is left of the caller's time), removes
        what is finished, and lets go of the name. What was not
        acknowledged stays for the next start."""
        if self.closed:
            return
        try:
            if self._tags_timer is not None:
                self._tags_timer.cancel()
                self._tags_timer = None
                self._write_tags()
            run = self.run
            if run is not None:
                now = self.clock.ms()
                run.close_all(now, "clock closed")
                run.stop(now)
            self.closed = True
            if self.uploaders:
                drains = [asyncio.ensure_future(u.drain(upload_timeout)) for u in self.uploaders]
                try:
                    async with asyncio.timeout(upload_timeout):
                        await asyncio.gather(*drains, return_exceptions=True)
                except TimeoutError:
                    pass
                for d in drains:
                    d.cancel()
                stop_in = timeout()
                await asyncio.gather(*(u.stop(stop_in) for u in self.uploaders), return_exceptions=True)
            for r in [run, *self.earlier]:
                if r is None:
                    continue
                if r.finished:
                    r.remove()
                else:
                    r.close()
        finally:
            self.closed = True
            self.dir.release()

    def status(self) -> UploadStatus | None:
        run = self.run
        if run is None:
            return None
        live = next((u for u in self.uploaders if u.run is run), None)
        return UploadStatus(
            run_id=run.run_id,
            resumed=self.resumed,
            events=run.next_seq,
            acked=run.acked,
            state=live.state if live is not None else "not started",
            refused=live.refused if live is not None else 0,
            busy=live.busy if live is not None else 0,
            error=run.halted,
            unrecorded=self._unrecorded + run.unrecorded,
            earlier_runs=sum(1 for r in self.earlier if not r.finished and r.halted is None),
        )

    def release(self) -> None:
        """Lets go of the name without a run (a clock that never synced)."""
        self.closed = True
        self.dir.release()

