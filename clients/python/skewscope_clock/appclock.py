"""The app clock: the clock an app's uploaded events are stamped on.

It is ``time.monotonic_ns()`` shifted by one offset to the epoch, measured
once per boot and kept in the state directory, so every run of every app on
one boot stamps on one clock that never steps (setting the host's wall clock
does not move it), and it reads as a wall time. Milliseconds, as the agent's
JSON dialect of ``/ingest`` takes them.

Why per boot and not per process: the report joins each run's stamps with
the run's own time exchanges, so one offset per run would do; but a run
resumed by another process (after a crash or a restart of the app) must go
on on the very clock it started on, and the monotonic clock is only shared
within one boot.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from pathlib import Path

__all__ = ["boot_id", "AppClock", "default_state_dir"]

_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
_BOOT_ID = re.compile(r"[0-9A-Za-z-]{1,64}")
_random_boot_id: str | None = None


def boot_id() -> str:
    """The kernel's boot id; where it cannot be read, a random id made once
    per process (every start is then a new boot: nothing is resumed)."""
    global _random_boot_id
    try:
        with open(_BOOT_ID_PATH, encoding="ascii") as f:
            text = f.read().strip()
        if _BOOT_ID.fullmatch(text):
            return text
    except (OSError, ValueError):
        pass
    if _random_boot_id is None:
        _random_boot_id = f"random-{uuid.uuid4()}"
    return _random_boot_id


def default_state_dir() -> Path:
    """``$SKEWSCOPE_STATE_DIR``, else ``$XDG_STATE_HOME/skewscope-clock``,
    else ``~/.local/state/skewscope-clock``."""
    env = os.environ.get("SKEWSCOPE_STATE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg:
        return Path(xdg) / "skewscope-clock"
    return Path.home() / ".local" / "state" / "skewscope-clock"


def _measure_epoch_offset_ns() -> int:
    """``time.time_ns() - time.monotonic_ns()``, from the tightest of a few
    bracketed reads (a preemption between two reads would shift it)."""
    best = None
    for _ in range(7):
        m1 = time.monotonic_ns()
        wall = time.time_ns()
        m2 = time.monotonic_ns()
        if best is None or m2 - m1 < best[0]:
            best = (m2 - m1, wall - (m1 + m2) // 2)
    return best[1]


class AppClock:
    """The app clock of this boot: ``(time.monotonic_ns() + epoch_offset_ns)
    / 1_000_000`` ms. Its offset is read from ``STATE/clock-BOOTID.json`` when an
    earlier process of this boot wrote it, else measured and written (the
    first writer wins: two processes starting together agree)."""

    def __init__(self, state_dir: Path):
        self.boot_id = boot_id()
        #: Names the clock in the run's identity, as a probe's boot id does.
        self.clock_id = f"app-{self.boot_id}"
        self.epoch_offset_ns = self._load_or_measure(Path(state_dir))

    def _load_or_measure(self, state_dir: Path) -> int:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = state_dir / f"clock-{self.boot_id}.json"
        existing = self._read(path)
        if existing is not None:
            return existing
        offset = _measure_epoch_offset_ns()
        tmp = state_dir / f".clock-{self.boot_id}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
        tmp.write_text(json.dumps({"boot_id": self.boot_id, "epoch_offset_ns": offset}), encoding="utf-8")
        try:
            os.link(tmp, path)  # fails if another process wrote it first
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
        kept = self._read(path)
        if kept is None:  # a damaged file: ours replaces it
            tmp.write_text(json.dumps({"boot_id": self.boot_id, "epoch_offset_ns": offset}), encoding="utf-8")
            os.replace(tmp, path)
            kept = offset
        # Earlier boots' offsets are never used again.
        for old in state_dir.glob("clock-*.json"):
            if old != path:
                old.unlink(missing_ok=True)
        return kept

    def _read(self, path: Path) -> int | None:
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(saved, dict):
            return None
        offset = saved.get("epoch_offset_ns")
        if saved.get("boot_id") != self.boot_id or type(offset) is not int or abs(offset) >= 2**63:
            return None
        return offset

    def ns(self, mono_ns: int | None = None) -> int:
        """The app clock in ns at monotonic ``mono_ns`` (default now)."""
        return (time.monotonic_ns() if mono_ns is None else mono_ns) + self.epoch_offset_ns

    def ms(self, mono_ns: int | None = None) -> float:
        """The app clock in ms at monotonic ``mono_ns`` (default now),
        correctly rounded to a double."""
        return self.ns(mono_ns) / 1_000_000
