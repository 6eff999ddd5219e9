"""bench/bench_plan_verify.py's comparison of two profiles' plans (issue 29): how far apart their predictions are,
and how many of the second's fall inside the first's 90% interval. Pure: plans written by hand."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench_plan_verify.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_plan_verify", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def candidate(schedule: str, step: float, low: float | None = None, high: float | None = None) -> dict:
    return {"schedule": schedule, "ranks": 2, "microbatches": 4, "microbatch_size": 4, "recompute": False,
            "fits": True, "error": None, "step_ms": step, "step_ms_p05": low, "step_ms_p95": high}  # fmt: skip


def test_two_profiles_are_compared_candidate_by_candidate(bench):
    first = {"candidates": [candidate("1f1b", 10.0, 9.0, 11.5), candidate("gpipe", 20.0, 19.0, 21.0)]}
    second = {"candidates": [candidate("1f1b", 11.0), candidate("gpipe", 22.0)]}
    assert bench.profile_agreement(first, second, 10) == pytest.approx(0.10)  # both 10% apart
    assert bench.profile_inside(first, second, 10) == 0.5  # 11 inside [9, 11.5]; 22 outside [19, 21]
    assert bench.profile_inside({"candidates": [candidate("1f1b", 10.0)]}, second, 10) is None  # no interval
