"""The run's files: every event on disk before anything else, a torn last
line (a kill mid-write) cut off, what the agent acknowledged compacted away,
the run's state recovered from the events when its metadata is older, and
one process per app name."""

import json
import math
import subprocess
import sys

import pytest

from skewscope_clock.appclock import AppClock
from skewscope_clock.spool import SEGMENT_BYTES, AppDir, Run, RunBusy, encode_event


def make_run(tmp_path, name="kiosk-1"):
    d = AppDir(tmp_path, name)
    run = Run.create(d.path, name=name, boot_id="boot-a", clock_url="ws://h:1/clock", ingest_url="ws://h:1/ingest")
    return d, run


def segments(run):
    return sorted(run.path.glob("events-*"))


def lines(run):
    return b"".join(p.read_bytes() for p in segments(run)).splitlines()


def test_every_event_is_on_disk_when_emit_returns(tmp_path):
    d, run = make_run(tmp_path)
    assert run.emit({"kind": "opened", "conn": 0, "at_ms": 1.5}) == 0
    on_disk = lines(run)
    assert on_disk == [b'0 {"kind":"opened","conn":0,"at_ms":1.5}']
    assert run.emit({"kind": "stopped", "at_ms": 2.0}) == 1
    assert run.stopped and json.loads((run.path / "meta.json").read_text())["stopped"]
    # Nothing after the end of the run.
    assert run.emit({"kind": "stopped", "at_ms": 3.0}) is None and len(lines(run)) == 2
    meta = json.loads((run.path / "meta.json").read_text())
    # The secret is kept with the run, readable by its owner only.
    assert len(meta["secret"]) == 32 and (run.path / "meta.json").stat().st_mode & 0o077 == 0
    d.release()


def test_a_torn_last_line_is_cut_and_the_run_resumes_from_the_events(tmp_path):
    d, run = make_run(tmp_path)
    run.new_conn()
    run.opened(0, 10.0)
    run.emit({"kind": "receipt", "conn": 0, "message": {"text": "go", "occurrence": 0}, "at_ms": 11.0})
    run.opened(1, 12.0)
    run.close()
    # The metadata as it was before the events (a kill between the event's
    # write and the metadata's), and a line torn by a kill mid-write.
    meta = json.loads((run.path / "meta.json").read_text())
    meta.update(next_seq=0, open=[], next_conn=0, last_ms=0.0)
    (run.path / "meta.json").write_text(json.dumps(meta))
    with open(segments(run)[-1], "ab") as f:
        f.write(b'3 {"kind":"closed","conn":0,"at')
    again = Run.load(run.path)
    assert again.next_seq == 3 and [s for s, _ in again.pending] == [0, 1, 2]
    assert again.open == {0, 1} and again.next_conn == 2 and again.last_ms == 12.0
    assert lines(again)[-1].startswith(b"2 ")  # the torn line is gone
    # The next event gets the next number, after the cut.
    assert again.emit({"kind": "stopped", "at_ms": 13.0}) == 3
    assert [int(l.split(b" ")[0]) for l in lines(again)] == [0, 1, 2, 3]
    d.release()


def test_acknowledged_segments_are_deleted_and_the_state_kept(tmp_path):
    d, run = make_run(tmp_path)
    big = "x" * 10_000
    for i in range(100):
        run.emit({"kind": "receipt", "conn": 0, "message": {"text": f"{i} {big}", "occurrence": 0}, "at_ms": i})
    firsts = [int(p.name.split("-")[1]) for p in segments(run)]
    assert len(firsts) >= 3 and firsts[0] == 0
    assert all(p.stat().st_size <= SEGMENT_BYTES + 11_000 for p in segments(run))
    run.ack(60)
    # Only segments holding events from 60 on are left; none was rewritten.
    left = [int(p.name.split("-")[1]) for p in segments(run)]
    assert left == [f for f in firsts if f > 60 or f == max(x for x in firsts if x <= 60)]
    assert [int(l.split(b" ")[0]) for l in lines(run)][-1] == 99
    run.close()
    again = Run.load(run.path)
    assert [s for s, _ in again.pending] == list(range(60, 100)) and again.acked == 60
    again.ack(100)
    assert lines(again) == [] and len(segments(again)) == 1  # a fresh, empty one
    again.close()
    third = Run.load(run.path)
    assert third.next_seq == third.acked == 100 and not third.pending
    assert third.last_ms == 99
    assert third.emit({"kind": "stopped", "at_ms": 100.0}) == 100
    assert segments(third)[-1].name == f"events-{100:020d}"
    d.release()


def test_events_the_agent_would_refuse_are_never_kept():
    good = {"kind": "stopped", "at_ms": 1.0}
    assert encode_event(good) is not None
    for bad in (
        {"kind": "stopped", "at_ms": math.nan},
        {"kind": "stopped", "at_ms": math.inf},
        {"kind": "stopped", "at_ms": -1.0},
        {"kind": "stopped", "at_ms": 1e300},
        {"kind": "stopped", "at_ms": 10**400},
        {"kind": "closed", "conn": 0, "at_ms": 1.0, "reason": "x" * 1025},
        {"kind": "receipt", "conn": 0, "message": {"text": "\ud800", "occurrence": 0}, "at_ms": 1.0},
        {"kind": "receipt", "conn": 0, "message": {"text": "x" * (1 << 20), "occurrence": 0}, "at_ms": 1.0},
        {"kind": "action", "conn": 0, "message": {"text": "a"}, "act_at_ms": 1, "offset_ms": math.nan,
         "bound_ms": 1, "target_ms": 1, "done_ms": 1, "late_ms": 0},
    ):
        assert encode_event(bad) is None, bad


def test_a_refused_event_is_counted_not_written(tmp_path):
    d, run = make_run(tmp_path)
    assert run.emit({"kind": "stopped", "at_ms": -5.0}) is None
    assert run.unrecorded == 1 and run.next_seq == 0 and lines(run) == []
    d.release()


def test_a_halted_run_is_kept_and_says_why(tmp_path):
    d, run = make_run(tmp_path)
    run.emit({"kind": "stopped", "at_ms": 1.0})
    run.halt("the agent lost events 0 to 0")
    run.close()
    again = Run.load(run.path)
    assert again.halted == "the agent lost events 0 to 0" and len(again.pending) == 1
    d.release()


def test_one_process_per_name_and_state_dir(tmp_path):
    first = AppDir(tmp_path, "kiosk-1")
    with pytest.raises(RunBusy, match="another process"):
        AppDir(tmp_path, "kiosk-1")
    other = AppDir(tmp_path, "kiosk-2")  # another name is another app
    # Another process is refused too (the lock is the kernel's, per file).
    probe = (
        "import sys; sys.path.insert(0, sys.argv[2]);"
        "from skewscope_clock.spool import AppDir, RunBusy\n"
        "try:\n  AppDir(sys.argv[1], 'kiosk-1'); print('got it')\n"
        "except RunBusy: print('busy')"
    )
    package = str(__import__("pathlib").Path(__file__).resolve().parents[1])
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path), package], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "busy", out.stderr
    first.release()
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path), package], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "got it", out.stderr
    other.release()


def test_the_app_clock_is_one_per_boot(tmp_path):
    a = AppClock(tmp_path)
    b = AppClock(tmp_path)  # another process of the same boot reads it back
    assert a.epoch_offset_ns == b.epoch_offset_ns
    assert a.clock_id == f"app-{a.boot_id}"
    # It reads as a wall time (ms since the epoch), on the monotonic clock.
    import time

    assert abs(a.ms() - time.time() * 1e3) < 1000
    # Correctly rounded: not `epoch_offset_ns / 1e6`, which rounds the
    # offset to a double first and misses by an ulp for a quarter of them.
    from fractions import Fraction

    assert a.ms(0) == float(Fraction(a.epoch_offset_ns, 1_000_000))
