"""The clock model's shared vectors (clients/clock-vectors/vectors.json),
written by the Rust model: this port must give the same bits, as the page
module's clients/js/test/vectors.test.mjs checks for JavaScript."""

import json
import math
from pathlib import Path

import pytest

from skewscope_clock import ClockModel, estimate_of

VECTORS = Path(__file__).resolve().parents[2] / "clock-vectors" / "vectors.json"


def _cases():
    if not VECTORS.exists():
        pytest.fail(f"the shared vectors are missing: {VECTORS}")
    return json.loads(VECTORS.read_text(encoding="utf-8"))["cases"]


def same_bits(got, want) -> bool:
    """JavaScript's Object.is on numbers: NaN is NaN, and -0 is not +0."""
    if isinstance(got, float) and math.isnan(got):
        return isinstance(want, float) and math.isnan(want)
    return got == want and math.copysign(1.0, got) == math.copysign(1.0, want)


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["name"])
def test_shared_vectors(case):
    model = ClockModel(ns_per_unit=1)
    asked = 0
    for op in case["ops"]:
        kind = op["op"]
        if kind == "add":
            t1, t2, t3, t4 = op["x"]
            assert model.add(t1, t2, t3, t4) == op["valid"], json.dumps(op)
        elif kind == "forget_before":
            model.forget_before(op["t"])
        elif kind == "at":
            asked += 1
            got = model.interval(op["t"])
            want = op["answer"]
            where = f"at {op['t']}"
            if want is None:
                assert got is None, f"no answer {where}"
                continue
            assert got is not None, f"an answer {where}"
            e = estimate_of(got)
            assert got.base_ns == want["base"], where
            assert same_bits(got.extent.lo, float(want["lo"])), f"{where}: lo {got.extent.lo!r} vs {want['lo']!r}"
            assert same_bits(got.extent.hi, float(want["hi"])), f"{where}: hi {got.extent.hi!r} vs {want['hi']!r}"
            assert same_bits(got.extent.drift_lo, float(want["drift_lo"])), f"{where}: drift_lo"
            assert same_bits(got.extent.drift_hi, float(want["drift_hi"])), f"{where}: drift_hi"
            assert e.agent_minus_mono_ns == want["agent_minus_mono"], where
            assert e.bound_ns == want["bound"], where
        else:
            pytest.fail(f"unknown op {kind}")
    assert model.breaks == case["breaks"]
    assert asked > 0
