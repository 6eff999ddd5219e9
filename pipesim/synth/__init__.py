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
from pipesim.semantics.lower import comm_plan, needed_message
from pipesim.semantics.validate import validate
from pipesim.sim.metrics import Metrics, compute_metrics
from pipesim.sim.simulate import find_deadlock, simulate
from pipesim.synth.bounds import lower_bound
from pipesim.synth.exact import MAX_EXACT_PAIRS, free_pairs, same_rank_pairs, solve_exact
from pipesim.synth.greedy import list_schedule, policies
from pipesim.synth.problem import Instance, SynthesisProblem, longest_rank_span
from pipesim.synth.search import TIME_TOLERANCE, Score, evaluate, improve, registry_orders
from pipesim.synth.warmup import warmup_orders

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
    def objective_ms(self) -> float:
        """What was minimised: the step time ("makespan"), or the longest rank's span ("span")."""
        return longest_rank_span(self.timeline) if self.problem.objective == "span" else self.makespan

    @property
    def gap(self) -> float:
        """(objective - bound) / objective: 0 is a proof of optimality."""
        value = self.objective_ms
        if value <= 0:
            return 0.0
        return max(0.0, (value - self.lower_bound) / value)

    @property
    def peak_memory(self) -> list[float]:
        """Per rank, the peak stashed activation bytes on the simulated timeline."""
        return [r.peak_activation_bytes for r in self.metrics.ranks]

    def to_dict(self) -> dict[str, Any]:
        """The result fields of the synthesis document (beside the schedule itself)."""
        return {
            "makespan": self.makespan,
            "objective": self.problem.objective,
            "objective_ms": self.objective_ms,
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


class _Best:
    """The best order so far, what found it, and every starting point's step time."""

    def __init__(self, inst: Instance, bound: float) -> None:
        self.inst, self.bound = inst, bound
        plain = list(inst.by_rank)  # the all-actions order: one microbatch at a time, fits any feasible limit
        score = evaluate(inst, plain)
        assert score is not None, "the plainest order must fit once check_feasible passed"
        self.score, self.orders, self.method = score, plain, "one microbatch at a time"
        self.tried: dict[str, float] = {self.method: score.makespan}
        self.candidates: list[tuple[Score, list[list[int]]]] = [(score, plain)]

    @property
    def reached_bound(self) -> bool:
        return self.score.makespan <= self.bound * (1 + TIME_TOLERANCE) + 1e-12

    def offer(self, orders: list[list[int]], score: Score | None, method: str) -> None:
        if score is None:
            return
        self.candidates.append((score, orders))
        self.tried[method] = min(score.makespan, self.tried.get(method, score.makespan))
        if score < self.score:
            self.score, self.orders, self.method = score, orders, method

    def polish(self, orders: list[list[int]], score: Score, deadline: float, rng, patience: int | None) -> None:
        """Local search from one order; a better step is "local search", a tie keeps the step's origin."""
        orders, score = improve(self.inst, orders, score, deadline, self.bound, rng, patience)
        if score < self.score:
            shorter = score.makespan < self.score.makespan * (1 - TIME_TOLERANCE)
            tie = self.method if self.method.startswith("local search") else f"local search (the step of {self.method})"
            self.score, self.orders, self.method = score, orders, "local search" if shorter else tie


def synthesize(
    problem: SynthesisProblem, time_limit_s: float = 10.0, *, exact: bool | None = None, seed: int = 0
) -> Synthesis:
    """The fastest order found within `time_limit_s` seconds (`exact`: None tries the solver where the size
    allows, False never, True up to 25 times that size). ValueError when no order fits the memory limit.

    Time: list scheduling up to a third of the budget; with the solver, a short polish, the solver up to 60%
    of what is left, local search for the rest; without it, local search from the three best starts."""
    if not (isinstance(time_limit_s, (int, float)) and time_limit_s > 0 and time_limit_s < float("inf")):
        raise ValueError(f"the time limit must be a finite number of seconds > 0, got {time_limit_s!r}")
    started = time.monotonic()
    deadline = started + time_limit_s
    inst = Instance(problem)
    inst.check_feasible()
    best = _Best(inst, lower_bound(inst))
    rng = random.Random(seed)
    for name, orders in registry_orders(inst):
        best.offer(orders, evaluate(inst, orders), name)
    for name, orders in warmup_orders(inst, deadline):
        best.offer(orders, evaluate(inst, orders), name)
    for policy in policies(inst):
        if best.reached_bound or time.monotonic() >= started + time_limit_s / 3:
            break
        orders = list_schedule(inst, policy, deadline)
        best.offer(orders, None if orders is None else evaluate(inst, orders), "list scheduling")
    # counted first: listing the pairs is quadratic in a rank's actions
    listable = same_rank_pairs(inst) <= 25 * MAX_EXACT_PAIRS
    if exact is None:
        exact = listable and len(free_pairs(inst)[0]) <= MAX_EXACT_PAIRS
    use_exact = exact and listable and problem.objective == "makespan"  # the model's objective is the step
    # with the solver to come, local search first only polishes (the solver improves or proves what it gets)
    search_deadline = min(deadline, time.monotonic() + time_limit_s / 10) if use_exact else deadline
    starts = sorted(best.candidates, key=lambda c: c[0])[:3]
    for k, (score, orders) in enumerate(starts):
        if best.reached_bound:
            break
        share = (search_deadline - time.monotonic()) / (len(starts) - k)
        best.polish(orders, score, time.monotonic() + share, rng, 50 * len(inst.actions) if use_exact else None)
    optimal = best.reached_bound
    if use_exact and not optimal and time.monotonic() < deadline:
        result = solve_exact(inst, best.orders, best.score.makespan, 0.6 * (deadline - time.monotonic()))
        best.bound = max(best.bound, min(result.bound, best.score.makespan))
        if result.orders is not None:
            score = evaluate(inst, result.orders)
            if score is not None and score.makespan < best.score.makespan * (1 - TIME_TOLERANCE):
                best.score, best.orders, best.method = score, result.orders, "exact"
            optimal = (
                result.proven and score is not None and score.makespan <= best.score.makespan * (1 + TIME_TOLERANCE)
            )
        if optimal:
            best.bound = best.score.makespan
        elif time.monotonic() < deadline:
            best.polish(best.orders, best.score, deadline, rng, None)
    schedule = inst.schedule(
        best.orders,
        placement=problem.placement,
        stages_per_rank=problem.chunks,
        memory_limit=problem.memory_limit,
        memory_limit_bytes=problem.memory_limit_bytes,
    )
    timeline, metrics = check(schedule, inst)
    value = longest_rank_span(timeline) if problem.objective == "span" else metrics.makespan
    return Synthesis(
        problem=problem,
        schedule=schedule,
        timeline=timeline,
        metrics=metrics,
        lower_bound=min(best.bound, value),
        optimal=optimal or value <= best.bound * (1 + TIME_TOLERANCE) + 1e-12,
        method=best.method,
        seconds=time.monotonic() - started,
        limit_bytes=tuple(inst.limit),
        unit_bytes=tuple(inst.unit),
        tried=best.tried,
    )


def check(schedule: Schedule, inst: Instance) -> tuple[Timeline, Metrics]:
    """The answer checked like every other schedule: validated, deadlock-free, simulated, and its peak memory
    per rank (read off the simulated timeline) within the limit. AssertionError on any breach: a bug here."""
    validate(schedule)
    assert find_deadlock(schedule) is None, "a synthesized schedule deadlocks"
    # the comms lowering: every message a consumer needs is produced and sent on its link in the producer's
    # order, which the executor receives in; with no cycle above, no rank waits on a message never sent
    plan = comm_plan(schedule)
    for row in schedule.actions:
        for action in row:
            needed = needed_message(action, schedule.num_stages)
            assert needed is None or needed in plan.producer, f"{action} needs {needed}, which nothing sends"
    timeline = simulate(schedule, inst.problem.cost)
    metrics = compute_metrics(timeline, inst.problem.cost)
    for rank in metrics.ranks:
        assert inst.fits(rank.peak_activation_bytes, rank.rank), (
            f"rank {rank.rank} peaks at {rank.peak_activation_bytes} bytes over its limit {inst.limit[rank.rank]}"
        )
    return timeline, metrics
