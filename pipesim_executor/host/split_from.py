"""`executor run --split-from FILE`: the run's model cut where the planner cuts it, the one default split policy.

Without it a run of the built-in Transformer takes the planner's cut of its description, and any other model its
layers' parameter counts balanced (`pipesim_executor.model_config.ModelConfig.stage_split`: nothing else is known
before it runs). Where times are known the planner's policy applies: `balance_units`, pipesim's one splitter
over each unit's weight (`pipesim.cost.description.unit_weight`). FILE is either

* a plan (`pipesim plan --json`): the split of its best candidate for this run's schedule, ranks and stages,
  the split `verify-plan` runs too (its candidates carry their split); or
* a unit profile (`executor profile`'s cost file): balanced over the profile's unit times at the run's
  microbatch size, as the planner balances them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipesim.cost.description import balance_units
from pipesim.cost.profile import UnitProfile
from pipesim.io.cost_file import load_cost_file
from pipesim.io.formats import read_json
from pipesim.plan.report import PLAN_FORMAT
from pipesim_executor.config import RunConfig, check_split_points


def split_from_file(path: Path, config: RunConfig, num_stages: int) -> tuple[int, ...]:
    """Where the run's stages start (unit indices), read off a plan or a unit profile; ValueError naming what
    does not fit (no candidate for this run, a stage-cost file, another model's unit count)."""
    data = read_json(path)
    if isinstance(data, dict) and data.get("format") == PLAN_FORMAT:
        split = _plan_split(data, config, num_stages, path)
    else:
        profile = load_cost_file(path)
        if not isinstance(profile, UnitProfile):
            raise ValueError(
                f"{path} holds stage costs, not a unit profile or a plan: --split-from takes `executor profile`'s "
                "cost file or `pipesim plan --json`'s plan"
            )
        recompute = config.training.recompute
        units = profile.unit_costs(config.microbatch_size, False, recompute)
        split = balance_units(units, num_stages, recompute).split_points
    units = config.model.num_units
    if len(split) + 1 != num_stages or (split and split[-1] >= units):
        raise ValueError(
            f"the split from {path} ({list(split)}) does not cut this run's {units} units into {num_stages} stages"
        )
    return tuple(check_split_points(split, units, num_stages))


def _plan_split(plan: dict[str, Any], config: RunConfig, num_stages: int, path: Path) -> tuple[int, ...]:
    """The best (fitting first, then fastest) built candidate of the plan that is this run."""
    pipeline = config.pipeline
    mine = [
        c
        for c in plan.get("candidates") or []
        if isinstance(c, dict)
        and c.get("error") is None
        and str(c.get("schedule", "")).lower() == pipeline.schedule.lower()
        and c.get("ranks") == pipeline.num_ranks
        and len(c.get("split") or []) + 1 == num_stages
    ]
    if not mine:
        raise ValueError(
            f"{path} has no built candidate for {pipeline.schedule} on {pipeline.num_ranks} ranks with {num_stages} "
            "stages: plan with this schedule and depth, or give --split-points"
        )
    best = min(mine, key=lambda c: (not c.get("fits", True), c.get("step_ms") or 0.0))
    return tuple(int(point) for point in best["split"])
