"""Schedule synthesis: the fastest per-rank order under a memory limit, and a proof of how close it is.

    synthesize(SynthesisProblem(num_ranks, num_microbatches, cost, placement, memory_limit=...), time_limit_s)
        -> Synthesis (schedule, simulated timeline and metrics, lower bound, gap, optimal)

The search (module by module):

* `problem`: the question, lowered once to per-action prices the simulator would use and the liveness rules
  of `pipesim.semantics.lower`;
* `bounds`: a lower bound no order can beat (each rank's work with the ramp before and after it);
* `search`: every registered schedule of the same placement that fits, as a starting point; `greedy`: a family
  of list-scheduling policies; then local search on the best, within the time limit;
* `exact`: where the size allows, a mixed-integer program (HiGHS) started from the best order, which either
  improves it or proves it optimal, and raises the bound.

Whatever found it, the answer is checked like every other schedule: `validate`, no deadlock, the simulator's
step time (`simulate`, never a solver's objective) and the peak memory per rank read off the simulated timeline
(`compute_metrics`) within the limit. `optimal` is true only when proven: the step time meets the lower bound,
or the solver proved it. A planner or a page calls `synthesize` with its costs, ranks, microbatches,
placement, memory cap and time budget.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

from pipesim.ir import Schedule
from pipesim.records import Timeline
from pipesim.semantics.validate import validate
from pipesim.sim.metrics import Metrics, compute_metrics
from pipesim.sim.simulate import find_deadlock, simulate
from pipesim.synth.bounds import lower_bound
from pipesim.synth.exact import MAX_EXACT_PAIRS, free_pairs, solve_exact
from pipesim.synth.greedy import list_schedule, policies
from pipesim.synth.problem import Instance, SynthesisProblem
from pipesim.synth.search import TIME_TOLERANCE, Score, evaluate, improve, registry_orders

__all__ = ["Synthesis", "SynthesisProblem", "synthesize"]


@dataclass(frozen=True)
class Synthesis:
    """A synthesized schedule with its simulated step and how far it can be from the best order."""

    problem: SynthesisProblem
    schedule: Schedule
    timeline: Timeline
    metrics: Metrics
    lower_bound: float
    optimal: bool
    method: str  # what found the order: "exact", "local search", "list scheduling" or a registry name
    seconds: float
    limit_bytes: tuple[float, ...]  # per rank
    unit_bytes: tuple[float, ...]  # one microbatch's activations per rank
    tried: dict[str, float] = field(default_factory=dict)  # starting points and their step times

    @property
    def makespan(self) -> float:
        return self.metrics.makespan

    @property
    def gap(self) -> float:
        """(step - bound) / step: 0 is a proof of optimality."""
        if self.makespan <= 0:
            return 0.0
        return max(0.0, (self.makespan - self.lower_bound) / self.makespan)

    @property
    def peak_memory(self) -> list[float]:
        """Per rank, the peak stashed activation bytes on the simulated timeline."""
        return [r.peak_activation_bytes for r in self.metrics.ranks]

    def to_dict(self) -> dict[str, Any]:
        """The result fields of the synthesis document (beside the schedule itself)."""
        return {
            "makespan": self.makespan,
            "bubble_fraction": self.metrics.bubble_fraction,
            "lower_bound": self.lower_bound,
            "gap": self.gap,
            "optimal": self.optimal,
            "peak_memory": [
                {
                    "rank": r.rank,
                    "bytes": r.peak_activation_bytes,
                    "microbatches": r.peak_activation_bytes / unit if unit > 0 else 0.0,
                    "limit_bytes": limit,
                }
                for r, unit, limit in zip(self.metrics.ranks, self.unit_bytes, self.limit_bytes, strict=True)
            ],
            "method": self.method,
            "seconds": self.seconds,
            "problem": {
                "num_ranks": self.problem.num_ranks,
                "num_microbatches": self.problem.num_microbatches,
                "placement": self.problem.placement,
                "stages_per_rank": self.problem.chunks,
                "memory_limit": self.problem.memory_limit,
                "memory_limit_bytes": self.problem.memory_limit_bytes,
            },
            "starting_points": self.tried,
        }


def synthesize(
    problem: SynthesisProblem, time_limit_s: float = 10.0, *, exact: bool | None = None, seed: int = 0
) -> Synthesis:
    """The fastest order found within `time_limit_s` seconds (`exact`: None tries the solver where the size
    allows, False never, True whatever the size). ValueError when no order fits the memory limit."""
    if not (isinstance(time_limit_s, (int, float)) and time_limit_s > 0 and time_limit_s < float("inf")):
        raise ValueError(f"the time limit must be a finite number of seconds > 0, got {time_limit_s!r}")
    started = time.monotonic()
    deadline = started + time_limit_s
    inst = Instance(problem)
    inst.check_feasible()
    bound = lower_bound(inst)
    rng = random.Random(seed)

    def close_enough(score: Score) -> bool:
        return score.makespan <= bound * (1 + TIME_TOLERANCE) + 1e-12

    plain = list(inst.by_rank)  # the all-actions order: one microbatch at a time, fits any feasible limit
    best_score, best_orders, method = evaluate(inst, plain), plain, "one microbatch at a time"
    assert best_score is not None, "the plainest order must fit once check_feasible passed"
    tried: dict[str, float] = {method: best_score.makespan}
    candidates: list[tuple[Score, list[list[int]]]] = [(best_score, plain)]
    for name, orders in registry_orders(inst):
        score = evaluate(inst, orders)
        if score is not None:
            tried[name] = score.makespan
            candidates.append((score, orders))
            if score < best_score:
                best_score, best_orders, method = score, orders, name
    # list scheduling gets up to a third of the budget; local search and the solver the rest
    policy_deadline = started + time_limit_s / 3
    for policy in policies(inst):
        if close_enough(best_score) or time.monotonic() >= policy_deadline:
            break
        orders = list_schedule(inst, policy)
        score = None if orders is None else evaluate(inst, orders)
        if score is not None:
            candidates.append((score, orders))
            tried["list scheduling"] = min(score.makespan, tried.get("list scheduling", score.makespan))
            if score < best_score:
                best_score, best_orders, method = score, orders, "list scheduling"
    use_exact = exact if exact is not None else len(free_pairs(inst)[0]) <= MAX_EXACT_PAIRS
    # with the solver to come, local search only polishes (the solver improves or proves what it gets)
    search_deadline = min(deadline, time.monotonic() + time_limit_s / 10) if use_exact else deadline
    candidates.sort(key=lambda c: c[0])
    starts = candidates[:3]
    for k, (score, orders) in enumerate(starts):
        if close_enough(best_score):
            break
        share = (search_deadline - time.monotonic()) / (len(starts) - k)
        patience = 50 * len(inst.actions) if use_exact else None
        orders, score = improve(inst, orders, score, time.monotonic() + share, bound, rng, patience)
        if score < best_score:
            shorter = score.makespan < best_score.makespan * (1 - TIME_TOLERANCE)
            tie = method if method.startswith("local search") else f"local search (the step of {method})"
            best_score, best_orders, method = score, orders, "local search" if shorter else tie
    optimal = close_enough(best_score)
    if use_exact and not optimal and time.monotonic() < deadline:
        result = solve_exact(inst, best_orders, best_score.makespan, deadline - time.monotonic())
        bound = max(bound, min(result.bound, best_score.makespan))
        if result.orders is not None:
            score = evaluate(inst, result.orders)
            if score is not None and score.makespan < best_score.makespan * (1 - TIME_TOLERANCE):
                best_score, best_orders, method = score, result.orders, "exact"
            optimal = result.proven and score is not None and score.makespan <= best_score.makespan
        if optimal:
            bound = best_score.makespan
    schedule = inst.schedule(
        best_orders,
        placement=problem.placement,
        stages_per_rank=problem.chunks,
        memory_limit=problem.memory_limit,
        memory_limit_bytes=problem.memory_limit_bytes,
    )
    timeline, metrics = check(schedule, inst)
    optimal = optimal or metrics.makespan <= bound * (1 + TIME_TOLERANCE) + 1e-12
    return Synthesis(
        problem=problem,
        schedule=schedule,
        timeline=timeline,
        metrics=metrics,
        lower_bound=min(bound, metrics.makespan),
        optimal=optimal,
        method=method,
        seconds=time.monotonic() - started,
        limit_bytes=tuple(inst.limit),
        unit_bytes=tuple(inst.unit),
        tried=tried,
    )


def check(schedule: Schedule, inst: Instance) -> tuple[Timeline, Metrics]:
    """The answer checked like every other schedule: validated, deadlock-free, simulated, and its peak memory
    per rank (read off the simulated timeline) within the limit. AssertionError on any breach: a bug here."""
    validate(schedule)
    assert find_deadlock(schedule) is None, "a synthesized schedule deadlocks"
    timeline = simulate(schedule, inst.problem.cost)
    metrics = compute_metrics(timeline, inst.problem.cost)
    for rank in metrics.ranks:
        assert inst.fits(rank.peak_activation_bytes, rank.rank), (
            f"rank {rank.rank} peaks at {rank.peak_activation_bytes} bytes over its limit {inst.limit[rank.rank]}"
        )
    return timeline, metrics
