"""The planner's half of a unit profile's check against its own in-situ steps (pipesim.analysis.profile_check
holds the records, the summary and the words): every in-situ configuration the profile ran, planned exactly as
`pipesim plan --cost` plans a candidate (`evaluate_all`, then `attach_intervals`) and set beside its measured steps.
"""

from __future__ import annotations

import statistics
from typing import Any

from pipesim.analysis.profile_check import MIN_STEPS, CheckedStep, check_summary, disturbance, in_situ_step_rows
from pipesim.cost.profile import UnitProfile
from pipesim.plan.inputs import PlanInputs
from pipesim.plan.intervals import attach_intervals
from pipesim.plan.search import PlanSpace, evaluate_all
from pipesim.schedules import schedule_names


def step_times(row: dict[str, Any]) -> list[float]:
    """A configuration's measured step times, only the positive numbers."""
    return [float(t) for t in row["step_ms"] if isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0]


def check_profile(profile: UnitProfile) -> list[CheckedStep]:
    """Every in-situ configuration of `profile` that ran at least MIN_STEPS steps, measured against the planner's
    prediction of the same schedule, size, microbatches, recomputation and cut; one the planner cuts elsewhere (or
    cannot build) is left out."""
    known = set(schedule_names())  # an unknown name would make the planner refuse its whole group
    rows = [
        row
        for row in in_situ_step_rows(profile.provenance)
        if row["schedule"] in known and len(step_times(row)) >= MIN_STEPS
    ]
    groups: dict[tuple[int, int, int, str], list[dict[str, Any]]] = {}
    for row in rows:
        optimizer = row.get("optimizer")
        optimizer = (
            optimizer
            if isinstance(optimizer, str) and optimizer in profile.optimizers
            else next(iter(profile.optimizers))
        )
        groups.setdefault((row["ranks"], row["microbatch_size"], row["microbatches"], optimizer), []).append(row)
    checked = []
    for (ranks, size, microbatches, optimizer), group in sorted(groups.items()):
        try:  # a schedule the registry does not know, or a size the profile did not measure: nothing to check
            inputs = PlanInputs.from_profile(
                profile, devices=ranks, global_batch=size * microbatches, optimizer=optimizer
            )
            space = PlanSpace(
                schedules=tuple(sorted({row["schedule"] for row in group})),
                microbatch_sizes=(size,),
                chunks=tuple(sorted({row.get("chunks", 1) for row in group} | {1})),
            )
            candidates = attach_intervals(inputs, evaluate_all(inputs, space, prune=False))
        except ValueError:
            continue
        for row in group:
            found = [
                c
                for c in candidates
                if c.schedule == row["schedule"]
                and c.recompute == bool(row.get("recompute"))
                and c.virtual_stages == row.get("chunks", 1)
                and list(c.split) == row["split_points"]
                and c.step_ms is not None
                and c.error is None
            ]
            if not found:
                continue
            c, times = found[0], step_times(row)
            checked.append(
                CheckedStep(
                    schedule=row["schedule"],
                    microbatch_size=size,
                    microbatches=microbatches,
                    recompute=bool(row.get("recompute")),
                    split_points=tuple(row["split_points"]),
                    steps=len(times),
                    measured_ms=statistics.median(times),
                    predicted_ms=float(c.step_ms),
                    predicted_p05_ms=c.step_ms_p05,
                    predicted_p95_ms=c.step_ms_p95,
                )
            )
    return checked


def profile_disturbance(profile: UnitProfile) -> dict[str, Any] | None:
    """Whether `profile` was disturbed (pipesim.analysis.profile_check.disturbance), decided afresh from its
    in-situ steps and the planner, never from the mark its file carries (a file edited by hand, or written by
    another version, cannot vouch for itself); the load it recorded only names the cause. None: nothing to check."""
    provenance = profile.provenance if isinstance(profile.provenance, dict) else {}
    return disturbance(check_summary(check_profile(profile)), provenance.get("machine_load"))


def accepted_disturbance(profile: UnitProfile, args: Any) -> dict[str, Any] | None:
    """`pipesim plan --cost`'s rule: the profile's verdict (`profile_disturbance`), a disturbed one refused in one
    line unless `args.accept_disturbed_profile`; the verdict with `accepted` for the plan's mark (None: nothing
    to check). `args.cost` names the file."""
    verdict = profile_disturbance(profile)
    if verdict is not None and verdict["disturbed"] and not args.accept_disturbed_profile:
        raise ValueError(
            f"the profile {args.cost} is {verdict['line']}, or pass --accept-disturbed-profile to plan from it "
            "anyway (the plan is marked)"
        )
    return None if verdict is None else {**verdict, "accepted": bool(verdict["disturbed"])}
