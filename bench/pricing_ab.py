"""Issue 29, third pass: the same unit profile priced the old way and the new, against the same verification.

Usage:
    .venv/bin/python bench/pricing_ab.py PLAN.json VERIFY.json

Old: each action at its in-situ median over the profile's price (the provenance's `median_ratio` of every in-situ
row, the median over the stages as the factor was taken), the link at its ping-pong latency. New: the profile as
written (each action at its in-situ mean, the link's latency raised by the in-situ hop). Between them, the means
with the ping-pong's link. Each candidate's point is the planner's sampled median (`pipesim.sim.jitter`), compared
with the verification's measured median. Needs a profile written since the in-situ rows keep `median_ratio`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from diagnose_verify import candidate_of, plan_inputs  # noqa: E402

from pipesim.cost.profile import SizeCurve, UnitProfile  # noqa: E402
from pipesim.io.formats import read_json  # noqa: E402
from pipesim.plan.evaluator import Evaluator  # noqa: E402
from pipesim.plan.inputs import PlanInputs  # noqa: E402
from pipesim.plan.intervals import IntervalOptions, candidate_spread  # noqa: E402
from pipesim.sim.jitter import step_interval  # noqa: E402


def median_priced(profile: UnitProfile) -> UnitProfile:
    """The profile with every in-situ factor taken from the medians (`median_ratio`) and the ping-pong's link."""
    rows = profile.provenance["in_situ"]["ratios"]
    if not rows or "median_ratio" not in rows[0]:
        raise SystemExit("this profile's in-situ rows keep no median_ratio: profile again with this code")
    in_situ = {}
    for name, terms in profile.in_situ.items():
        scale = {}
        for kind, curve in terms.scale.items():
            values = []
            for size in profile.microbatch_sizes:
                ratios = [r["median_ratio"] for r in rows if (r["class"], r["kind"], r["size"]) == (name, kind, size)]
                values.append(statistics.median(ratios) if ratios else curve.at(size))
            scale[kind] = SizeCurve(profile.microbatch_sizes, tuple(values), monotone=False)
        in_situ[name] = replace(terms, scale=scale)
    return replace(profile, in_situ=in_situ, link=ping_pong(profile).link)


def ping_pong(profile: UnitProfile) -> UnitProfile:
    """The profile with its link at the ping-pong's latency (before the in-situ hop raised it)."""
    hop = profile.provenance.get("in_run_hop") or {}
    return replace(
        profile, link=replace(profile.link, latency_ms=hop.get("ping_pong_latency_ms", profile.link.latency_ms))
    )


def point_ms(inputs: PlanInputs, fields: dict) -> float:
    """The planner's sampled point of one verified candidate under `inputs`."""
    evaluator, candidate = Evaluator(inputs), candidate_of(fields)
    evaluator.price(candidate)
    schedule, cost = evaluator.materialise(candidate)
    spread = candidate_spread(inputs, candidate, schedule.uses_split_backward, IntervalOptions())
    if spread is None:  # nothing to draw from: the deterministic step, as the plan has it
        evaluator.simulate(candidate, want_path=False)
        return float(candidate.step_ms)
    return step_interval(schedule, cost, spread).step_ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", type=Path)
    parser.add_argument("verify", type=Path)
    args = parser.parse_args(argv)
    plan, verify = read_json(args.plan), read_json(args.verify)
    new = plan_inputs(plan, args.plan.parent)
    recorded = plan["inputs"]
    common = dict(
        devices=recorded["devices"],
        global_batch=recorded["global_batch"],
        memory_cap_bytes=recorded.get("memory_cap_bytes"),
        optimizer=recorded["optimizer"],
    )
    variants = {
        "old": PlanInputs.from_profile(median_priced(new.profile), **common),
        "means, ping-pong link": PlanInputs.from_profile(ping_pong(new.profile), **common),
        "new": new,
    }
    errors: dict[str, list[float]] = {name: [] for name in variants}
    for row in verify["candidates"]:
        if row.get("error") or not row.get("measured_ms"):
            continue
        cells = []
        for name, inputs in variants.items():
            point = point_ms(inputs, row["candidate"])
            error = (point - row["measured_ms"]) / row["measured_ms"]
            errors[name].append(error)
            cells.append(f"{name} {point:7.2f} ({error:+.1%})")
        print(f"{row['label']:<28} measured {row['measured_ms']:7.2f}  " + "  ".join(cells))
    for name, values in errors.items():
        absolute = [abs(v) for v in values]
        print(f"{name}: median |error| {statistics.median(absolute):.1%}, largest {max(absolute):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
