"""Offline, from a finished `bench_plan_verify.py` run: would scaling each model's predictions by its profile's own
check have moved them closer to the same verifications?

The check (pipesim.analysis.profile_check) sets each in-situ configuration's measured steps (every launch's)
beside the plan's prediction of it; the correction tried here multiplies every prediction and its interval by the
geometric mean of measured / predicted over those configurations. Nothing runs. Prints each model's check and the
coverage and errors without and with the correction (docs/benchmarks.md, issue 29's sixth session: not adopted).

usage: python bench/check_closure.py BENCH_OUT/<timestamp> REPORT.json   (REPORT: bench_plan_verify.py --json)
"""

from __future__ import annotations

import glob
import json
import math
import statistics
import sys


def in_situ_steps(profile_dir: str) -> dict[tuple, list[float]]:
    """(schedule, size, recompute, cut) -> every launch's step times, from the launches' cost files (or the one)."""
    files = sorted(glob.glob(profile_dir + "/launch*-cost.json")) or [profile_dir + "/cost.json"]
    rows: dict[tuple, list[float]] = {}
    for name in files:
        in_situ = json.load(open(name))["provenance"]["in_situ"]
        cuts: dict[tuple, set[int]] = {}
        for r in in_situ["ratios"]:
            cuts.setdefault((r["schedule"], r["recompute"], r["size"]), set()).add(r["stop"])
        for *key, steps in in_situ.get("step_ms", []):  # the first form of the rows (3dc2541)
            size, schedule, _chunks, recompute, _split = key
            cut = tuple(sorted(cuts[(schedule, recompute, size)])[:-1])
            rows.setdefault((schedule, size, bool(recompute), cut), []).extend(steps)
        for r in in_situ.get("measured_steps", []):
            key = (r["schedule"], r["microbatch_size"], bool(r["recompute"]), tuple(r["split_points"]))
            rows.setdefault(key, []).extend(r["step_ms"])
    return rows


def ratios_of(run: str, model: str) -> list[float]:
    """Measured / predicted for every in-situ configuration the first profile's plan holds."""
    plan = json.load(open(f"{run}/plan-{model}.json"))["candidates"]
    out = []
    for (schedule, size, recompute, cut), steps in in_situ_steps(f"{run}/profile-{model}-1").items():
        predicted = [
            c["step_ms"]
            for c in plan
            if c.get("step_ms")
            and (c["schedule"], c["microbatch_size"], bool(c["recompute"]), tuple(c["split"]))
            == (schedule, size, recompute, cut)
        ]
        if predicted and steps:
            out.append(statistics.median(steps) / predicted[0])
    return out


def main(run: str, report_path: str) -> None:
    report = json.load(open(report_path))
    total = before = after = 0
    for model, record in report["models"].items():
        ratios = ratios_of(run, model)
        scale = math.exp(statistics.fmean(math.log(r) for r in ratios)) if ratios else 1.0
        errors = [abs(1 / r - 1) for r in ratios]
        if errors:
            print(f"{model:12s} check: median |error| {statistics.median(errors):.1%}, largest {max(errors):.1%}, "
                  f"mean {1 / scale - 1:+.1%} over {len(ratios)} configurations")  # fmt: skip
        rows = [c for c in record["first"]["candidates"] if c.get("measured_ms")]
        for factor, label in ((1.0, "as planned"), (scale, f"x{scale:.3f}")):
            err = [abs(factor * c["predicted_ms"] / c["measured_ms"] - 1) for c in rows]
            inside = sum(
                factor * c["predicted_p05_ms"] <= c["measured_ms"] <= factor * c["predicted_p95_ms"] for c in rows
            )
            print(f"{'':12s} {label:10s}: coverage {inside}/{len(rows)}, median |error| {statistics.median(err):.1%}, "
                  f"largest {max(err):.1%}")  # fmt: skip
            if factor == 1.0:
                before += inside
            else:
                after += inside
        total += len(rows)
    print(f"overall coverage {before}/{total} as planned, {after}/{total} corrected")


if __name__ == "__main__":
    main(*sys.argv[1:3])
