"""Issue 30, second pass: the straggler bench's statistics (bench/stragglers_stats.py): the intervals contain what
they estimate, run-to-run drift widens them, a case stops once they are tight, the ranking's tau, and the real-compute
pairs' verdict (within 5% or inside the injected median's CI), summary and table."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "stragglers_stats", Path(__file__).resolve().parent.parent / "bench" / "stragglers_stats.py"
)
stats = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(stats)


def _steps(median: float, spread: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [median * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def test_the_growth_interval_holds_the_true_growth_a_shared_drift_cancels_and_pairs_that_disagree_widen_it():
    a = [_steps(100, 0.01, 10, 1), _steps(100, 0.01, 10, 2)]
    b = [_steps(110, 0.01, 10, 3), _steps(110, 0.01, 10, 4)]
    low, high = stats.ratio_ci(b, a)
    assert low <= 0.10 <= high and high - low < 0.03
    slower_a = [_steps(100, 0.01, 10, 1), _steps(108, 0.01, 10, 2)]  # the machine slowed for the second pair
    slower_b = [_steps(110, 0.01, 10, 3), _steps(118.8, 0.01, 10, 4)]
    low2, high2 = stats.ratio_ci(slower_b, slower_a)
    assert low2 <= 0.10 <= high2 and high2 - low2 < 0.04
    disagree_b = [_steps(110, 0.01, 10, 3), _steps(102, 0.01, 10, 4)]  # the second pair measured 2%, not 10%
    low3, high3 = stats.ratio_ci(disagree_b, a)
    assert high3 - low3 > high - low


def test_a_case_row_and_when_it_is_tight():
    a_runs = [{"steps_ms": _steps(100, 0.002, 10, s), "predicted_ms": 99.0} for s in (1, 2)]
    b_runs = [{"steps_ms": _steps(150, 0.002, 10, s), "predicted_ms": 148.5} for s in (3, 4)]
    row = stats.case_row(a_runs, b_runs)
    assert row["pairs"] == 2 and row["step_error"] == pytest.approx(-0.01, abs=0.003)
    assert row["predicted_growth"] == pytest.approx(0.5) and row["measured_growth"] == pytest.approx(0.5, abs=0.01)
    low, high = row["step_error_ci"]
    assert low <= row["step_error"] <= high
    assert stats.tight(row, 0.01) and not stats.tight(row, 0.0)


def test_kendall_tau_counts_ties_as_neither():
    assert stats.kendall_tau([1, 2, 3], [10, 20, 30]) == 1.0
    assert stats.kendall_tau([1, 2, 3], [30, 20, 10]) == -1.0
    assert stats.kendall_tau([1, 2, 3], [10, 10, 30]) == pytest.approx(2 / 3)


def test_a_real_compute_row_passes_within_5_percent_or_inside_the_ci_and_fails_otherwise():
    steps = [_steps(100, 0.02, 20, 5)]
    row = stats.real_row(steps, {"close": 103.0, "wide": 110.0, "far": 130.0})
    low, high = row["measured_ci"]
    assert low < row["measured_ms"] < high and row["steps"] == 20
    assert row["close"]["within_5pct"] and row["close"]["passes"]
    assert row["far"]["error"] == pytest.approx(130.0 / row["measured_ms"] - 1)
    assert not row["far"]["inside_ci"] and not row["far"]["passes"]
    assert not row["wide"]["within_5pct"] and not row["wide"]["passes"]  # 10% off, outside a +-1% interval
    noisy = stats.real_row([_steps(100, 0.3, 6, 6)], {"wide": 110.0})  # a few noisy steps: the CI holds 110
    assert noisy["wide"]["inside_ci"] and noisy["wide"]["passes"] and not noisy["wide"]["within_5pct"]
    el, eh = row["far"]["error_ci"]
    assert el <= row["far"]["error"] <= eh
    verdict = stats.real_verdict([row, noisy], ["wide"])
    assert verdict == {"wide": {"passes": 1, "of": 2, "all": False}}


def test_the_real_compute_table_has_a_verdict_cell_per_prediction():
    row = stats.real_row([_steps(100, 0.02, 20, 5)], {"own": 103.0, "paired": 130.0})
    row.update(case="m-r1x1.3", pair=0, load=1.0, uniform_ms=80.0, measured_growth=0.25)
    for name in ("own", "paired"):
        row[name]["growth"] = 0.3
    lines = stats.real_table([row], ["own", "paired"]).splitlines()
    assert len(lines) == 3 and lines[0].count("|") == lines[1].count("|") == lines[2].count("|")
    assert "| 5% |" in lines[2] and lines[2].endswith("| no |")


def test_the_real_compute_summary_takes_medians_per_case_and_counts_the_passes():
    rows = []
    for case, pair, predicted in (("a", 0, 103.0), ("a", 1, 130.0), ("a", 2, 98.0), ("b", 0, 100.0)):
        row = stats.real_row([_steps(100, 0.02, 20, 5)], {"own": predicted})
        row.update(case=case, pair=pair, load=2.0, measured_growth=0.2)
        row["own"]["growth"] = 0.25
        rows.append(row)
    a, b = stats.real_summary(rows, ["own"])
    assert (a["case"], a["pairs"], b["pairs"]) == ("a", 3, 1)
    assert a["own"]["passes"] == 2 and b["own"]["passes"] == 1
    assert a["own"]["median_error"] == pytest.approx(rows[0]["own"]["error"])
    assert a["own"]["median_abs_error"] == pytest.approx(abs(rows[0]["own"]["error"]))
    assert "| 2/3 |" in stats.real_summary_table([a, b], ["own"])


def test_a_real_pair_scores_each_prediction_of_the_injected_half_and_its_growth():
    spec = importlib.util.spec_from_file_location(
        "stragglers_real", Path(__file__).resolve().parent.parent / "bench" / "stragglers_real.py"
    )
    real = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(real)
    out = {
        "uniform_steps_ms": _steps(100, 0.01, 20, 7),
        "injected_steps_ms": _steps(130, 0.01, 20, 8),
        "own_uniform_ms": 80.0,  # a profile 20% low: the growth right, the level not
        "own_ms": 104.0,
        "paired_uniform_ms": 98.0,
        "paired_ms": 127.4,
        "anchored_uniform_ms": 100.0,
        "anchored_ms": 130.0,
    }
    row = real.pair_figures(out)
    assert row["measured_growth"] == pytest.approx(0.3, abs=0.02)
    low, high = row["measured_growth_ci"]
    assert low <= row["measured_growth"] <= high
    assert all(row[name]["growth"] == pytest.approx(0.3) for name in real.PREDICTIONS)
    assert not row["own"]["passes"] and row["paired"]["passes"] and row["anchored"]["passes"]


def test_the_real_compute_headline_is_the_profiles_own_prediction():
    """Issue 46: the headline was the anchored figure (half measurement, 31/32), not the profile's own (26/32)."""
    verdict = {name: {"passes": p, "of": 32, "all": p == 32} for name, p in (("own", 26), ("paired", 22),
                                                                             ("anchored", 31))}  # fmt: skip
    line = stats.real_headline(verdict)
    assert line.startswith("real compute: the profile's own prediction passes 26/32 pairs")
    assert line.index("26/32") < line.index("anchored 31/32") and "half measurement" in line
