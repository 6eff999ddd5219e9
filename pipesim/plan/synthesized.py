"""Synthesized orders as planner candidates: `plan --schedules ...,synthesized`.

A synthesized order is not a registry family: it is built from a candidate's own costs (`pipesim.synth`), so
the planner makes it here, after the families' search. For each shape the space allows (pipeline depth,
microbatch size, recomputation, W share), the candidate is priced exactly like a linear split-backward family's
(the same split, cost model, dispatch gaps and data-parallel group: `Evaluator.cost_model` of the registry's
linear split-backward layout), `synthesize` searches the fastest order whose activations fit what the memory
cap leaves beside the rank's static bytes (without a cap: 2p microbatches' worth, ZB-2p's memory), and the
planner's own evaluator costs the result (`Evaluator.adopt`, then `simulate`): its step, memory and bubble are
the planner's numbers, comparable with every other candidate's. The budget (seconds) is shared evenly by the
shapes; each answer keeps its schedule, for the CSV a recommended plan writes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pipesim.cost.model import CostModel
from pipesim.io.formats import schedule_to_dict
from pipesim.ir import Schedule
from pipesim.plan.candidates import Candidate, PlanSpace, candidate_grid, shape_key
from pipesim.plan.evaluator import Evaluator
from pipesim.plan.inputs import PlanInputs
from pipesim.plan.layout import family_layout
from pipesim.schedules import schedule_info, schedule_names
from pipesim.sim.memory import placement_static_bytes

# the name `--schedules`, the Plan page and the plan's candidates give synthesized orders: the synthesizer's
# schedule name (pipesim.synth.problem.SYNTH_NAME; a test holds them equal), here without importing the
# synthesizer, which a plan without synthesized orders never loads
SYNTHESIZED = "synthesized"
DEFAULT_BUDGET_S = 10.0
MAX_BUDGET_S = 3600.0


@dataclass
class SynthesizedCandidate:
    """A synthesized candidate and its order (None where it could not be made: `candidate.error` says why)."""

    candidate: Candidate
    schedule: Schedule | None


def check_budget(budget_s: float) -> float:
    """The synthesis budget in seconds, or ValueError naming the valid range."""
    if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) or not 0 < budget_s <= MAX_BUDGET_S:
        raise ValueError(f"the synthesis budget must be a number of seconds in (0, {MAX_BUDGET_S:g}], got {budget_s!r}")
    return float(budget_s)


def plan_families(names: tuple[str, ...]) -> tuple[tuple[str, ...], bool]:
    """(the registry families to search, whether synthesized orders were asked for) of a schedule list that may
    name SYNTHESIZED. Synthesized orders alone still search one family, the linear split-backward one whose
    shapes they are made for (and a named schedule to compare them with)."""
    families = tuple(n for n in names if n.lower() != SYNTHESIZED)
    asked = len(families) < len(names)
    return (families or (linear_split_family(),) if asked else families), asked


def linear_split_family() -> str:
    """A registered family whose layout a synthesized order shares: one stage per rank, split backward."""
    for name in schedule_names():
        info = schedule_info(name)
        if info.placement == "linear" and info.split_backward:
            return info.name
    raise ValueError("no registered family has a linear placement with a split backward")


def synthesized_candidates(inputs: PlanInputs, space: PlanSpace, budget_s: float) -> list[SynthesizedCandidate]:
    """One synthesized candidate per shape of the space, each found within its share of `budget_s` seconds."""
    budget_s = check_budget(budget_s)
    family = linear_split_family()
    blanks = candidate_grid(inputs, replace(space, schedules=(family,)))
    shapes = [replace(c, schedule=SYNTHESIZED, virtual_stages=1) for c in blanks]
    evaluator = Evaluator(inputs)
    share = budget_s / max(len(shapes), 1)
    return [_synthesize_one(evaluator, c, family, share) for c in shapes]


def _synthesize_one(evaluator: Evaluator, c: Candidate, family: str, time_limit_s: float) -> SynthesizedCandidate:
    if c.error is not None:
        return SynthesizedCandidate(c, None)
    layout = family_layout(family, c.ranks, 1)
    split = evaluator.split(c.microbatch_size, layout.num_stages, c.recompute)
    if isinstance(split, Exception):
        c.error = str(split)
        return SynthesizedCandidate(c, None)
    cost = evaluator.cost_model(c, split.split_points, layout)
    cap = evaluator.inputs.memory_cap_bytes
    limits: dict[str, float] = {"memory_limit": 2.0 * c.ranks}
    if cap is not None:
        statics = placement_static_bytes(layout.stage_to_rank, c.ranks, cost, evaluator.inputs.optimizer)
        limits = {"memory_limit_bytes": cap - max(sum(s) for s in statics)}
        if limits["memory_limit_bytes"] <= 0:
            c.error = "the memory cap leaves no room for activations beside the parameters and optimizer state"
            return SynthesizedCandidate(c, None)
    from pipesim.synth import SynthesisProblem, synthesize

    try:
        problem = SynthesisProblem(c.ranks, c.microbatches, cost, "linear", **limits)
        result = synthesize(problem, time_limit_s)
    except ValueError as error:  # no order fits the room, ranks sharing cores, a size synthesis does not take
        c.error = f"synthesis: {error}"
        return SynthesizedCandidate(c, None)
    evaluator.adopt(c, result.schedule)
    evaluator.simulate(c, want_path=False)
    evaluator.drop_shape(shape_key(c))
    if c.error is not None:
        return SynthesizedCandidate(c, None)
    c.schedule_document = schedule_to_dict(result.schedule)
    return SynthesizedCandidate(c, result.schedule)


def materialise(inputs: PlanInputs, candidate: Candidate, schedule: Schedule) -> tuple[Schedule, CostModel]:
    """A synthesized candidate's schedule and cost model (`Evaluator.materialise` builds a family's by name)."""
    return schedule, Evaluator(inputs).cost_model(candidate, candidate.split, schedule)
