"""`plan`'s synthesized candidates and its recommended schedule as a CSV.

    python -m pipesim plan ... --schedules zb-h1,zb-h2,synthesized --synth-budget 20 --csv best.csv

`synthesized` in --schedules adds one synthesized order per shape of the space (`pipesim.plan.synthesized`),
found within --synth-budget seconds in all; --csv writes the recommended candidate's schedule in torch's
compute_only CSV, which `python -m executor run --schedule-file best.csv` runs (whatever its family).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from pipesim.flags import UsageError, float_flag
from pipesim.io.atomic import is_standard_output
from pipesim.io.formats import check_output, schedule_to_csv, write_file
from pipesim.programs import programs

if TYPE_CHECKING:  # the planner and the synthesizer are imported by the command that runs them
    from pipesim.ir import Schedule
    from pipesim.plan.candidates import Candidate, PlanSpace
    from pipesim.plan.inputs import PlanInputs

SYNTHESIZED = "synthesized"  # pipesim.plan.synthesized.SYNTHESIZED, without importing the synthesizer to parse
DEFAULT_BUDGET_S = 10.0  # pipesim.plan.synthesized.DEFAULT_BUDGET_S (a test holds them equal)
MAX_BUDGET_S = 3600.0


def add_synth_args(plan: argparse.ArgumentParser) -> None:
    plan.add_argument(
        "--synth-budget",
        type=float_flag(minimum=1e-3, maximum=MAX_BUDGET_S),
        metavar="SECONDS",
        help=f"with {SYNTHESIZED} in --schedules: seconds for synthesis in all, shared by the shapes of the space "
        f"(default {DEFAULT_BUDGET_S:g}, at most {MAX_BUDGET_S:g})",
    )
    plan.add_argument(
        "--csv",
        type=Path,
        metavar="OUT",
        help="write the recommended candidate's schedule in torch's compute_only CSV (- for standard output; "
        f"{programs().executor} run --schedule-file OUT runs it)",
    )


def take_synthesized(args: argparse.Namespace) -> bool:
    """Whether --schedules asked for synthesized orders; `args.schedules` keeps the registry's families to search
    (`pipesim.plan.synthesized.plan_families`). Checks --csv and --synth-budget before any work."""
    from pipesim.plan.synthesized import plan_families

    if args.csv is not None:
        check_output(args.csv)
    args.schedules, asked = plan_families(args.schedules)
    if not asked and args.synth_budget is not None:
        raise UsageError(f"--synth-budget applies with {SYNTHESIZED} in --schedules")
    if args.synth_budget is None:
        args.synth_budget = DEFAULT_BUDGET_S
    return asked


def add_synthesized(
    inputs: PlanInputs, space: PlanSpace, candidates: list[Candidate], budget_s: float
) -> dict[int, Schedule]:
    """The synthesized candidates appended to `candidates`; their schedules by id(candidate)."""
    from pipesim.plan.synthesized import synthesized_candidates

    made = synthesized_candidates(inputs, space, budget_s)
    candidates += [s.candidate for s in made]
    return {id(s.candidate): s.schedule for s in made if s.schedule is not None}


def write_recommended_csv(
    path: Path, best: Candidate | None, inputs: PlanInputs, synthesized: dict[int, Schedule]
) -> list[str]:
    """The recommended candidate's schedule written to `path`; the lines to print."""
    if best is None:
        return [f"no candidate fits: {path} not written"]
    schedule = synthesized.get(id(best))
    if schedule is None:
        from pipesim.plan.evaluator import Evaluator

        schedule, _ = Evaluator(inputs).materialise(best)
    write_file(schedule_to_csv(schedule, "compute_only"), path)
    return [] if is_standard_output(path) else [f"wrote {path} (the schedule of {best.label})"]
