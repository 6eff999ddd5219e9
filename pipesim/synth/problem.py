"""What synthesis searches over: every action of one step, priced once, and the memory each rank may hold.

A `SynthesisProblem` is the user's question (ranks, microbatches, placement, costs, memory limit); `Instance`
is that question lowered to flat per-action lists the searches read: each action's duration, the transfer it
pays for a producer on another rank and each rank's dispatch gap, all taken from the simulator's own
`engine_inputs` on a schedule that holds every action, so a search prices an order exactly as `simulate` does;
each action's producers from `pipesim.semantics.lower.producer_ids`; and what each action stashes or frees from
`lower.stash_table`, read through `pipesim.sim.metrics.stash_sizes` (the one statement of the liveness rules:
F stashes, I frees all but the weight-gradient part, W frees the rest).

The memory limit is per rank: in bytes of stashed activations, or in microbatches' worth of them, where one
microbatch's worth on rank r is what one microbatch stashes across all of r's stages (the unit the named
schedules' memory is quoted in: ZB-H1 holds p, ZB-H2 2p-1). Static memory (parameters, gradients, optimizer
state) is the same whatever the order, so it is not part of the limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from pipesim.cost.model import CostModel
from pipesim.ir import Action, F, I, Schedule, W, make_schedule
from pipesim.limits import check_sizes
from pipesim.records import Timeline
from pipesim.schedules import PLACEMENTS, placement_chunks, placement_takes_chunks, stage_placement
from pipesim.semantics.dag import Dependencies, dependencies
from pipesim.semantics.lower import producer_ids, stash_table
from pipesim.sim.metrics import stash_sizes
from pipesim.sim.simulate import engine_inputs, sweep

SYNTH_NAME = "synthesized"
# Actions (3 x stages x microbatches) synthesis takes: list scheduling visits every rank per action placed, and
# 20,000 actions take seconds per policy; past that the search could not try enough orders in any sensible time.
# The Zero Bubble paper's largest published case (32 stages x 256 microbatches: 24,576 actions) fits.
MAX_SYNTH_ACTIONS = 25_000
# What synthesis minimises: "makespan", the step from the first action's start to the last action's end (each
# step ends with a synchronised optimizer step); "span", the longest time any rank takes from its first action's
# start to its last action's end: the step once consecutive steps overlap because the optimizer step is not
# synchronised across ranks (the Zero Bubble paper's Section 4 and its cost, Appendix G).
OBJECTIVES = ("makespan", "span")
# Relative slack on memory comparisons: a limit quoted in microbatches is a product of floats.
MEMORY_TOLERANCE = 1e-9


@dataclass(frozen=True)
class SynthesisProblem:
    """One synthesis question. Give exactly one memory limit: `memory_limit` (microbatches' worth of
    activations per rank) or `memory_limit_bytes` (stashed activation bytes per rank)."""

    num_ranks: int
    num_microbatches: int
    cost: CostModel
    placement: str = "linear"
    num_virtual_stages: int | None = None  # chunks per rank where the placement takes them (placement_chunks)
    memory_limit: float | None = None
    memory_limit_bytes: float | None = None
    objective: str = "makespan"  # one of OBJECTIVES

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {self.objective!r}; valid objectives: {', '.join(OBJECTIVES)}")
        for name in ("num_ranks", "num_microbatches"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
        if not isinstance(self.cost, CostModel):
            raise ValueError(f"cost must be a CostModel, got {type(self.cost).__name__}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"unknown placement {self.placement!r}; valid placements: {', '.join(PLACEMENTS)}")
        chunks = self.num_virtual_stages
        if chunks is not None:
            if not placement_takes_chunks(self.placement):
                raise ValueError(
                    f"num_virtual_stages applies to the interleaved placement only ({self.placement!r} holds "
                    f"{placement_chunks(self.placement)} stage(s) per rank)"
                )
            if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
                raise ValueError(f"num_virtual_stages must be a whole number >= 1, got {chunks!r}")
        limits = [v for v in (self.memory_limit, self.memory_limit_bytes) if v is not None]
        if len(limits) != 1:
            raise ValueError("give exactly one memory limit: memory_limit (microbatches) or memory_limit_bytes")
        value = limits[0]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"the memory limit must be a finite number > 0, got {value!r}")
        if self.cost.shared_cores is not None and self.cost.shared_cores < self.num_ranks:
            raise ValueError(
                f"the cost model shares {self.cost.shared_cores} cores among {self.num_ranks} ranks; synthesis "
                "assumes one device per rank: drop shared_cores from the cost model"
            )
        check_sizes(
            num_ranks=self.num_ranks,
            num_stages=self.num_stages,
            num_microbatches=self.num_microbatches,
            num_actions=3 * self.num_stages * self.num_microbatches,
        )
        actions = 3 * self.num_stages * self.num_microbatches
        if actions > MAX_SYNTH_ACTIONS:
            raise ValueError(
                f"{actions:,} actions (3 x {self.num_stages} stages x {self.num_microbatches} microbatches) is more "
                f"than synthesis takes (at most {MAX_SYNTH_ACTIONS:,}; pipesim/synth/problem.py)"
            )
        self.cost.check_fits(self.all_actions_schedule())

    @property
    def chunks(self) -> int:
        """Stages per rank."""
        return placement_chunks(self.placement, self.num_virtual_stages)

    @property
    def num_stages(self) -> int:
        return self.num_ranks * self.chunks

    @property
    def stage_to_rank(self) -> tuple[int, ...]:
        return stage_placement(self.placement, self.num_ranks, self.chunks)

    def all_actions_schedule(self) -> Schedule:
        """Every action once, one microbatch after another through the pipeline (F down, I and W back): the
        plainest valid order, which fits any memory limit of one microbatch's worth or more."""
        rows: list[list[Action]] = [[] for _ in range(self.num_ranks)]
        placement = self.stage_to_rank
        for mb in range(self.num_microbatches):
            for stage in range(self.num_stages):
                rows[placement[stage]].append(Action(stage, F, mb))
            for stage in reversed(range(self.num_stages)):
                rows[placement[stage]] += [Action(stage, I, mb), Action(stage, W, mb)]
        return make_schedule(SYNTH_NAME, self.num_ranks, self.num_microbatches, placement, rows)

    def describe(self) -> str:
        limit = (
            f"{self.memory_limit:g} microbatches"
            if self.memory_limit is not None
            else f"{self.memory_limit_bytes:,.0f} bytes"
        )
        chunks = f", {self.chunks} stages per rank" if self.chunks > 1 else ""
        objective = ", minimising the longest rank's span" if self.objective == "span" else ""
        return (
            f"{self.num_ranks} ranks, {self.num_microbatches} microbatches, {self.placement} placement{chunks}, "
            f"memory limit {limit} per rank{objective}"
        )


def longest_rank_span(timeline: Timeline) -> float:
    """The longest time any rank takes from the start of its first action to the end of its last: the
    "span" objective (the Zero Bubble paper's cost)."""
    first: dict[int, float] = {}
    last: dict[int, float] = {}
    for span in timeline.spans:
        first[span.rank] = min(first.get(span.rank, span.start), span.start)
        last[span.rank] = max(last.get(span.rank, span.end), span.end)
    return max((last[r] - first[r] for r in first), default=0.0)


class Instance:
    """A problem lowered to flat lists, indexed by action id (the ids of the all-actions schedule).

    `producers[i]`: ids of what action i needs; `hop[i]`: the transfer i pays for a producer on another rank;
    `duration[i]`; `gap[r]`: rank r's dispatch gap before each action; `delta[i]`: bytes i adds to its rank's
    stash (F at its start, I and W at their end); `limit[r]`: rank r's limit in bytes; `unit[r]`: one
    microbatch's worth of activations on rank r.
    """

    def __init__(self, problem: SynthesisProblem) -> None:
        self.problem = problem
        base = problem.all_actions_schedule()
        deps = dependencies(base)
        inputs = engine_inputs(base, problem.cost, deps)
        self.actions: list[Action] = list(deps.actions)
        self.index: dict[Action, int] = dict(deps.index)
        self.rank: list[int] = list(deps.ranks)
        self.num_ranks = problem.num_ranks
        self.num_stages = problem.num_stages
        self.num_microbatches = problem.num_microbatches
        self.stage_to_rank = problem.stage_to_rank
        self.duration: list[float] = list(inputs.durations)
        self.hop: list[float] = list(inputs.hops)
        per_rank_gap = problem.cost.dispatch_per_rank(problem.num_ranks)
        self.gap: list[float] = [float(g) for g in per_rank_gap]
        self.producers: list[tuple[int, ...]] = list(deps.deps)
        sizes = stash_sizes(problem.cost, range(problem.num_stages))
        table = stash_table(sizes)
        self.delta: list[float] = [table[a.stage][a.kind][1] for a in self.actions]
        self.unit: list[float] = [0.0] * problem.num_ranks
        for stage, rank in enumerate(problem.stage_to_rank):
            self.unit[rank] += sizes[stage].stash
        if problem.memory_limit_bytes is not None:
            self.limit = [float(problem.memory_limit_bytes)] * problem.num_ranks
        else:
            self.limit = [float(problem.memory_limit) * u for u in self.unit]
        self.by_rank: list[list[int]] = [[] for _ in range(problem.num_ranks)]
        for i, rank in enumerate(self.rank):
            self.by_rank[rank].append(i)
        self.consumers: list[list[int]] = [[] for _ in self.actions]
        for i, producers in enumerate(self.producers):
            for p in producers:
                self.consumers[p].append(i)

    def fits(self, level: float, rank: int) -> bool:
        """Whether a stash level (bytes) is within rank's limit."""
        return level <= self.limit[rank] * (1 + MEMORY_TOLERANCE) + 1e-12

    def check_feasible(self) -> None:
        """ValueError when no order fits: one microbatch's worth must fit on every rank (the plainest order
        needs exactly that, and every order needs it: a microbatch's forwards on a rank all run before its
        first backward there)."""
        for rank, (unit, limit) in enumerate(zip(self.unit, self.limit, strict=True)):
            if not self.fits(unit, rank) and self.problem.memory_limit is not None:
                raise ValueError(
                    f"the memory limit ({self.problem.memory_limit:g} microbatches) is below one microbatch's "
                    "activations: no order fits; give at least 1"
                )
            if not self.fits(unit, rank):
                raise ValueError(
                    f"the memory limit ({limit:,.6g} bytes on rank {rank}) is below one microbatch's activations "
                    f"there ({unit:,.6g} bytes): no order fits; give at least 1 microbatch's worth ({unit:,.6g} bytes)"
                )

    @cached_property
    def rank_work(self) -> list[float]:
        """Per rank, its actions' durations and dispatch gaps: time it is busy whatever the order."""
        work = [0.0] * self.num_ranks
        for i, rank in enumerate(self.rank):
            work[rank] += self.duration[i] + self.gap[rank]
        return work

    def schedule(self, orders: list[list[int]], **params: object) -> Schedule:
        """The Schedule of per-rank orders of action ids."""
        rows = [[self.actions[i] for i in order] for order in orders]
        return make_schedule(SYNTH_NAME, self.num_ranks, self.num_microbatches, self.stage_to_rank, rows, **params)

    def orders_of(self, schedule: Schedule) -> list[list[int]]:
        """Per rank, the action ids of a schedule over the same actions (a registry schedule, say)."""
        return [[self.index[a] for a in row] for row in schedule.actions]

    def peaks(self, orders: list[list[int]]) -> list[float]:
        """Per rank, the highest stash level walking its order (the walk `pipesim.sim.memory` does)."""
        peaks = []
        for order in orders:
            level = peak = 0.0
            for i in order:
                level += self.delta[i]
                if level > peak:
                    peak = level
            peaks.append(peak)
        return peaks

    def dependencies_of(self, orders: list[list[int]]) -> tuple[Dependencies, list[int]]:
        """The simulator's dependency lists for per-rank orders, and the action id at each position."""
        flat = [i for order in orders for i in order]
        actions = [self.actions[i] for i in flat]
        offsets = [0]
        for order in orders:
            offsets.append(offsets[-1] + len(order))
        ranks = [self.rank[i] for i in flat]
        deps = producer_ids(actions, self.num_stages, self.num_microbatches)
        return Dependencies(actions, ranks, offsets, deps), flat

    def timed(self, orders: list[list[int]]) -> tuple[Dependencies, list[int], list[float], list[float], bool]:
        """Per-rank orders simulated by the engine's sweep: (dependencies, action id at each position, starts,
        ends, whether it deadlocked). The search scores orders by it, the exact solver starts from it."""
        deps, flat = self.dependencies_of(orders)
        starts, ends, stuck = sweep(
            deps,
            [self.duration[i] for i in flat],
            [self.hop[i] for i in flat],
            [self.gap[self.rank[i]] for i in flat],
        )
        return deps, flat, starts, ends, stuck
