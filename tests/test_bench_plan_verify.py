"""bench/bench_plan_verify.py's comparison of two profiles' plans: how far apart their predictions are,
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
    # issue 46: within the combined intervals (the second's own +-5%): 1f1b 10% apart inside sqrt(~7.5^2 + 5^2)%
    second = {"candidates": [candidate("1f1b", 11.0, 10.45, 11.55), candidate("gpipe", 22.0, 20.9, 23.1)]}
    assert bench.profiles_agreement(first, second, 10) == 0.5  # gpipe: 10% apart, intervals of +-5% each


def test_a_report_is_reanalysed_from_its_saved_rounds_alone(bench, tmp_path):
    """`--reanalyse`: every figure again from the rows' saved step times, nothing run; the profiles' agreement as
    the report had it."""
    from pipesim.io.formats import write_json
    from pipesim_executor.host.verify_compare import VerifyRow, compare

    def verification(shift: float):
        rows = []
        for i, step in enumerate((10.0, 12.0, 15.0)):
            row = VerifyRow(f"c{i}", {"schedule": "1f1b"}, step, predicted_p05_ms=step * 0.95,
                            predicted_p95_ms=step * 1.05, has_predicted_interval=True)  # fmt: skip
            for r in range(3):
                row.add_round([step * shift * (1 + 0.01 * r) * (1 + 0.02 * k % 3) for k in range(10)], f"r{r}")
            rows.append(row)
        return compare(rows, 0.02, 3)

    first, second = verification(1.0), verification(1.03)
    figures = {"profile_agreement": 0.04, "profile_inside": 0.5, "profiles_agree": 1.0}
    saved = {"models": {"m": {"spec": "x:y", "figures": figures, "first": first.to_dict(), "second": second.to_dict()}}}
    write_json(saved, tmp_path / "report.json")
    report, markdown = bench.reanalyse(tmp_path / "report.json", bench.parse_args(["--reanalyse", "report.json"]))
    got = report["models"]["m"]["figures"]
    assert got == bench.figures(first, second, figures)
    assert got["candidates"] == 3 and got["profile_agreement"] == 0.04 and markdown[0] == "### m (x:y)"
    # issue 46's fields: the status, informative coverage, the agreement of the two verifications
    assert got["statuses"] == ["ok", "ok"] and got["status"] == 1.0 and got["informative"] == 3
    assert got["verify_agreement"] is not None and got["verify_recommendation"] == 1.0
    assert any(line.startswith("status: ok / ok (first / second verification)") for line in markdown)
    assert any("two verifications: each difference's 95% CI holds 0" in line for line in markdown)
    assert report["reanalysed_from"] == str(tmp_path / "report.json")
    # --replan: each candidate's prediction and interval from the new plan, matched by label; a missing one is named
    record = first.to_dict()
    names = [("1f1b", 4), ("gpipe", 4), ("zb-h1", 8)]
    for row, (schedule, microbatches) in zip(record["candidates"], names, strict=True):
        row["label"] = f"{schedule} P2 m{microbatches}x2"
    plan = {"candidates": [{"schedule": schedule, "ranks": 2, "microbatches": m, "microbatch_size": 2, "fits": True,
                            "step_ms": 20.0 + i, "step_ms_p05": 18.0, "step_ms_p95": 23.0 + i}
                           for i, (schedule, m) in enumerate(names)]}  # fmt: skip
    again = bench.replanned(record, plan)
    got = [(r["predicted_ms"], r["predicted_p05_ms"], r["predicted_p95_ms"]) for r in again["candidates"]]
    assert got == [(20.0, 18.0, 23.0), (21.0, 18.0, 24.0), (22.0, 18.0, 25.0)]
    with pytest.raises(SystemExit, match="--replan: the new plan has no candidate gpipe P2 m4x2"):
        bench.replanned(record, {"candidates": plan["candidates"][:1]})
