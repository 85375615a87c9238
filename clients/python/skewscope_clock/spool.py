"""An app's runs on disk: every event persisted before anything else is done
with it, kept until the agent has acknowledged it, across reconnects, kills
and restarts. No asyncio here: plain files, tested on their own.

Layout, under the state directory::

    apps/NAMEKEY/lock                    flock(2) held by the process running NAME
    apps/NAMEKEY/RUNID/meta.json         run id, secret, acked, connections, ...
    apps/NAMEKEY/RUNID/events-FIRSTSEQ   "SEQ JSON\\n" per event, append-only

Why this shape: an event is one ``write(2)`` of one line to a file opened
with ``O_APPEND``, so a process killed with SIGKILL leaves at most a torn
last line, which was never sent (an event is sent only after its write
returned) and is cut off at the next start. The metadata is small and
replaced atomically (write, rename). The events go to segments of about
256 KiB, each named by its first sequence number; a segment whose every
event the agent acknowledged is deleted (one unlink: nothing is ever
rewritten, so this never holds up the event loop), so the files stay small
however long the app runs; what the agent has not acknowledged stays until
it has.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import os
import re
import secrets
import shutil
import time
from collections import deque
from pathlib import Path
from typing import Callable

__all__ = ["MAX_TEXT", "MAX_EVENT_BYTES", "SEGMENT_BYTES", "Run", "AppDir", "RunBusy", "valid_ms", "encode_event"]

#: The agent's longest text field (names, URLs, reasons), bytes.
MAX_TEXT = 1024
#: The largest event kept: the agent takes messages up to 1 MiB, and an
#: event too large for any batch would stall the run's upload for good.
MAX_EVENT_BYTES = (1 << 20) - 4096
#: The agent's largest time in ms (u64 nanoseconds).
_MAX_MS = 18446744073709.0
#: A new segment of the events is started past this size.
SEGMENT_BYTES = 256 * 1024
_SEGMENT = re.compile(r"events-([0-9]{20})")

_HEX32 = re.compile(r"[0-9a-f]{32}")
_TEXT_FIELDS = ("name", "url", "version", "module", "runtime", "run_id", "clock_id", "reason", "error")
_TIME_FIELDS = ("at_ms", "t4_ms", "done_ms", "target_ms")


class RunBusy(RuntimeError):
    """Another process runs the app of this name on this state directory."""


def _finite(x) -> bool:
    """A finite int or float (not a bool), never raising: math.isfinite
    overflows on a huge int."""
    if isinstance(x, bool):
        return False
    if isinstance(x, int):
        return abs(x) < 2**64
    return isinstance(x, float) and math.isfinite(x)


def valid_ms(x) -> bool:
    """A time the agent takes: finite, not negative, within u64 ns."""
    return _finite(x) and 0 <= x < _MAX_MS


def encode_event(event: dict) -> bytes | None:
    """The event as the agent's JSON dialect takes it (UTF-8), or None when
    the agent would refuse it: a time out of range or not finite, a text
    field over 1,024 bytes, a message that is not valid Unicode, an event
    over the largest message. Refused here, never sent: one event the agent
    refuses would refuse its batch, and every batch after it."""
    for field in _TIME_FIELDS + ("t1_ms", "t2_ms", "t3_ms", "act_at_ms", "late_ms"):
        if field in event and not valid_ms(event[field]):
            return None
    for field in ("offset_ms", "bound_ms"):
        v = event.get(field)
        if v is not None and not (_finite(v) and abs(v) < _MAX_MS / 2):
            return None
    if event.get("bound_ms") is not None and event["bound_ms"] < 0:
        return None
    for field in _TEXT_FIELDS:
        v = event.get(field)
        if v is not None and (not isinstance(v, str) or len(v.encode("utf-8", "surrogatepass")) > MAX_TEXT):
            return None
    try:
        data = json.dumps(event, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (ValueError, TypeError, UnicodeEncodeError):
        return None
    return data if len(data) <= MAX_EVENT_BYTES else None


def _event_time(event: dict) -> float:
    times = [event[f] for f in _TIME_FIELDS if valid_ms(event.get(f))]
    return max(times) if times else 0.0


def name_key(name: str) -> str:
    """A directory name for an app name: readable, and unique by its hash."""
    readable = re.sub(r"[^A-Za-z0-9._-]", "_", name)[:40]
    return f"{readable}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:16]}"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        data = text.encode("utf-8")
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)
    os.replace(tmp, path)


class Run:
    """One run's spool. Sequence numbers are the run's record numbers at the
    agent: event ``seq`` is the agent's record ``seq``."""

    def __init__(self, path: Path, meta: dict):
        self.path = path
        self.run_id: str = meta["run_id"]
        self.secret: str = meta["secret"]
        self.name: str = meta["name"]
        self.boot_id: str = meta["boot_id"]
        self.clock_url: str = meta["clock_url"]
        self.ingest_url: str = meta["ingest_url"]
        self.next_seq: int = meta["next_seq"]
        self.acked: int = meta["acked"]
        self.next_conn: int = meta["next_conn"]
        self.open: set[int] = {c for c in meta["open"] if type(c) is int and c >= 0}
        self.stopped: bool = meta["stopped"]
        #: Why the upload of this run stopped for good (the agent lost
        #: events it had acknowledged), or None.
        self.halted: str | None = meta["halted"]
        self.last_ms: float = meta["last_ms"]
        #: The events not yet acknowledged: (seq, JSON bytes).
        self.pending: deque[tuple[int, bytes]] = deque()
        #: Called after every event kept (the uploader's wake-up).
        self.listeners: list[Callable[[], None]] = []
        #: Events that could not be kept (refused by encode_event, or a
        #: failed write: a full disk).
        self.unrecorded = 0
        self._fd: int | None = None
        self._size = 0
        #: The first sequence number of each segment on disk, in order.
        self._segments: list[int] = []
        #: When the run was made (wall ns): runs are listed in this order.
        self.created_ns: int = meta.get("created_ns", 0) if type(meta.get("created_ns", 0)) is int else 0

    # -- making and finding runs ------------------------------------------------

    @classmethod
    def create(cls, parent: Path, *, name: str, boot_id: str, clock_url: str, ingest_url: str) -> "Run":
        run_id = secrets.token_hex(16)
        meta = {
            "run_id": run_id,
            # 128 random bits that bind the run at the agent: only a hello
            # carrying them may upload it. Kept here (0600), sent nowhere else.
            "secret": secrets.token_hex(16),
            "name": name,
            "boot_id": boot_id,
            "clock_url": clock_url,
            "ingest_url": ingest_url,
            "next_seq": 0,
            "acked": 0,
            "next_conn": 0,
            "open": [],
            "stopped": False,
            "halted": None,
            "last_ms": 0.0,
            "created_ns": time.time_ns(),
        }
        path = parent / run_id
        path.mkdir(mode=0o700, parents=True)
        run = cls(path, meta)
        run.save()
        run._open_events()
        return run

    @classmethod
    def load(cls, path: Path) -> "Run | None":
        """The run kept in ``path``, its events read back (a torn last line
        cut off); None if its metadata is missing or damaged."""
        try:
            meta = json.loads((path / "meta.json").read_text(encoding="utf-8"))
            if not (isinstance(meta, dict) and _HEX32.fullmatch(meta.get("run_id", "")) and _HEX32.fullmatch(meta.get("secret", ""))):
                return None
            for field, kind in (
                ("name", str), ("boot_id", str), ("clock_url", str), ("ingest_url", str), ("next_seq", int),
                ("acked", int), ("next_conn", int), ("open", list), ("stopped", bool), ("last_ms", (int, float)),
            ):
                if not isinstance(meta.get(field), kind):
                    return None
            if meta.get("halted") is not None and not isinstance(meta["halted"], str):
                return None
        except (OSError, ValueError):
            return None
        run = cls(path, meta)
        run._read_events()
        run._open_events()
        run.save()  # what the events said (open connections, last time) is in it now
        return run

    def _segment(self, first: int) -> Path:
        return self.path / f"events-{first:020d}"

    def _read_events(self) -> None:
        firsts = sorted(int(m.group(1)) for p in self.path.iterdir() if (m := _SEGMENT.fullmatch(p.name)))
        expected = None
        for i, first in enumerate(firsts):
            path = self._segment(first)
            data = path.read_bytes()
            good = pos = 0
            while pos < len(data):
                end = data.find(b"\n", pos)
                if end < 0:
                    break  # torn: the process died in its write; never sent
                line = data[pos:end]
                try:
                    seq_text, text = line.split(b" ", 1)
                    seq = int(seq_text)
                    event = json.loads(text)
                    if not isinstance(event, dict) or (expected is not None and seq != expected) or seq < first:
                        raise ValueError("out of sequence")
                except ValueError:
                    break
                expected = seq + 1
                pos = good = end + 1
                self._replay(seq, event, text)
            self._segments.append(first)
            if good < len(data):
                with open(path, "r+b") as f:
                    f.truncate(good)
                if i < len(firsts) - 1:
                    # Only the last segment can end torn: later ones would
                    # leave a gap. Kept on disk, not uploaded.
                    self.halted = self.halted or f"{path} is damaged at byte {good}"
                    break
        if self.pending and self.pending[0][0] > self.acked:
            # Events between the last ack and the first kept are gone (the
            # files were damaged): the agent would refuse the gap forever.
            self.halted = self.halted or f"events {self.acked} to {self.pending[0][0] - 1} are missing from {self.path}"

    def _replay(self, seq: int, event: dict, text: bytes) -> None:
        """One event read back: its effect on the run's state (the metadata
        may be older than the events: written after them, or not at all
        when the process was killed in between)."""
        self.next_seq = max(self.next_seq, seq + 1)
        kind = event.get("kind")
        conn = event.get("conn")
        if type(conn) is int and conn >= 0:
            self.next_conn = max(self.next_conn, conn + 1)
            if kind == "opened":
                self.open.add(conn)
            elif kind == "closed":
                self.open.discard(conn)
        if kind == "stopped":
            self.stopped = True
        self.last_ms = max(self.last_ms, _event_time(event))
        if seq >= self.acked:
            self.pending.append((seq, text))

    def _open_events(self) -> None:
        """Opens the last segment to append to (a new one if there is none)."""
        if not self._segments:
            self._segments.append(self.next_seq)
        self._fd = os.open(self._segment(self._segments[-1]), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._size = os.fstat(self._fd).st_size

    # -- state -------------------------------------------------------------------

    def save(self) -> None:
        """Writes the metadata (atomically)."""
        _write_atomic(
            self.path / "meta.json",
            json.dumps(
                {
                    "run_id": self.run_id,
                    "secret": self.secret,
                    "name": self.name,
                    "boot_id": self.boot_id,
                    "clock_url": self.clock_url,
                    "ingest_url": self.ingest_url,
                    "next_seq": self.next_seq,
                    "acked": self.acked,
                    "next_conn": self.next_conn,
                    "open": sorted(self.open),
                    "stopped": self.stopped,
                    "halted": self.halted,
                    "last_ms": self.last_ms,
                    "created_ns": self.created_ns,
                }
            ),
        )

    @property
    def finished(self) -> bool:
        """Stopped, and every event acknowledged: nothing left to do."""
        return self.stopped and self.acked >= self.next_seq

    def emit(self, event: dict) -> int | None:
        """Gives ``event`` the run's next sequence number and appends it to
        the events file (one write); its sequence number, or None when it
        could not be kept (counted in ``unrecorded``)."""
        data = encode_event(event)
        if data is None or self._fd is None or self.stopped or self.halted is not None:
            self.unrecorded += 1
            return None
        seq = self.next_seq
        line = b"%d %s\n" % (seq, data)
        if self._size >= SEGMENT_BYTES:
            os.close(self._fd)
            self._fd = None
            self._segments.append(seq)
            try:
                self._open_events()
            except OSError:
                self._segments.pop()
                self._open_events()
        try:
            written = 0
            while written < len(line):  # more than one write only on a full disk
                n = os.write(self._fd, line[written:])
                if n <= 0:
                    raise OSError(errno.ENOSPC, "short write")
                written += n
        except OSError:
            # Cut back to the last whole line: never a torn line mid-file.
            try:
                os.ftruncate(self._fd, self._size)
            except OSError:
                pass
            self.unrecorded += 1
            return None
        self._size += len(line)
        self.next_seq = seq + 1
        self.pending.append((seq, data))
        kind = event.get("kind")
        self.last_ms = max(self.last_ms, _event_time(event))
        if kind == "stopped":
            self.stopped = True
            self.save()
        for wake in self.listeners:
            wake()
        return seq

    def new_conn(self) -> int:
        """A new connection index, kept before it is used anywhere."""
        conn = self.next_conn
        self.next_conn += 1
        self.save()
        return conn

    def opened(self, conn: int, at_ms: float) -> int | None:
        seq = self.emit({"kind": "opened", "conn": conn, "at_ms": at_ms})
        if seq is not None:
            self.open.add(conn)
            self.save()
        return seq

    def closed(self, conn: int, at_ms: float, reason: str) -> int | None:
        if conn not in self.open:
            return None
        reason = _cut(reason)
        seq = self.emit({"kind": "closed", "conn": conn, "at_ms": at_ms, "reason": reason})
        self.open.discard(conn)
        self.save()
        return seq

    def close_all(self, at_ms: float, reason: str) -> None:
        """Every connection still open written closed (a run resumed after
        its process ended, or one being stopped)."""
        for conn in sorted(self.open):
            self.closed(conn, at_ms, reason)

    def stop(self, at_ms: float) -> None:
        if not self.stopped:
            self.emit({"kind": "stopped", "at_ms": at_ms})

    def batch(self, max_bytes: int) -> tuple[int, list[bytes]]:
        """The events from the last ack on, as many as fit ``max_bytes`` of
        JSON (always at least one): (first_seq, events)."""
        out: list[bytes] = []
        size = 0
        for seq, data in self.pending:
            if out and size + len(data) + 1 > max_bytes:
                break
            out.append(data)
            size += len(data) + 1
        return self.acked, out

    def ack(self, next_seq: int) -> None:
        """The agent has every event before ``next_seq``: they are dropped,
        and the segments they fill deleted (the caller checked it is within
        what was sent). The metadata, saved first, holds what they did to
        the run's state."""
        if next_seq <= self.acked:
            return
        while self.pending and self.pending[0][0] < next_seq:
            self.pending.popleft()
        self.acked = next_seq
        self.save()
        # A segment is done when the next one starts at or before the ack.
        while len(self._segments) > 1 and self._segments[1] <= next_seq:
            self._segment(self._segments.pop(0)).unlink(missing_ok=True)
        if not self.pending and self._fd is not None and self._size > 0:
            # All acknowledged: the next event starts a fresh segment.
            os.close(self._fd)
            self._fd = None
            old = self._segments.pop()
            self._segment(old).unlink(missing_ok=True)
            self._open_events()

    def halt(self, reason: str) -> None:
        """Stops uploading this run for good, kept on disk with the reason."""
        self.halted = reason
        self.save()

    def close(self) -> None:
        """Closes the events file (the run stays on disk)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def remove(self) -> None:
        """Deletes the run's files (once it is finished)."""
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)


def _cut(text: str) -> str:
    """A reason cut to the agent's longest text, on a character boundary."""
    data = text.encode("utf-8", "replace")
    if len(data) <= MAX_TEXT:
        return text
    return data[:MAX_TEXT].decode("utf-8", "ignore")


class AppDir:
    """The runs of one app name under a state directory, held by this
    process (an exclusive lock, released by the kernel if the process dies)."""

    def __init__(self, state_dir: Path, name: str):
        self.path = Path(state_dir) / "apps" / name_key(name)
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._lock_fd = os.open(self.path / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = None
            raise RunBusy(f"another process runs the app {name!r} with the state directory {state_dir}") from None

    def runs(self) -> list[Run]:
        """Every run kept, oldest first; damaged ones are removed."""
        found = []
        for entry in self.path.iterdir():
            if not (entry.is_dir() and _HEX32.fullmatch(entry.name)):
                continue
            run = Run.load(entry)
            if run is None:
                shutil.rmtree(entry, ignore_errors=True)
                continue
            found.append(run)
        found.sort(key=lambda r: r.created_ns)
        return found

    def release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
