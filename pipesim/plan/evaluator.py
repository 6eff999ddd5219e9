"""The planner's evaluator: one candidate costed exactly, sharing schedules, dependencies, order walks, unit costs
and splits between the candidates of a plan (`pipesim.plan.search` holds the whole method).

Three steps, so that a search can stop after any of them (`pipesim.plan.prune`): `bound` (closed forms, nothing
built), `price` (the shape's schedule built: its split and exact memory) and `simulate` (the step time from the
simulator's own sweep, and the critical path that bounds the shape's other cost variants).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, replace
from typing import Any

from pipesim.cost.description import balance_units
from pipesim.cost.model import CostModel, StageCost
from pipesim.cost.seq_chunks import chunk_shares
from pipesim.ir import Schedule
from pipesim.plan.bounds import Bound, candidate_bound, offload_memory_bound_bytes
from pipesim.plan.candidates import Candidate, shape_key
from pipesim.plan.inputs import PlanInputs
from pipesim.plan.layout import Layout, family_layout
from pipesim.plan.offload import OffloadPolicy, copy_floor_ms, offloaded, price_offloaded, variant
from pipesim.plan.paths import CriticalPath, critical_path
from pipesim.schedules import ScheduleInfo, build_schedule, check_shape, options_for, schedule_info
from pipesim.semantics.dag import Dependencies, dependencies
from pipesim.semantics.lower import crossing_stages
from pipesim.sim.data_parallel import AFTER_BACKWARD, NOTHING, last_gradients, reduction_charge
from pipesim.sim.memory import OrderWalk, static_bytes
from pipesim.sim.replay import duration_slots, replay, slot_durations
from pipesim.sim.simulate import action_durations, boundary_transfers, chunk_durations, dispatch_gaps, run_engine
from pipesim.sim.steps import step_tails, step_time_ms


@dataclass
class Shape:
    """What candidates of one (schedule, ranks, microbatches, chunks) share: the schedule, its order walk, and,
    once a candidate is simulated, its dependencies and each action's crossing boundary."""

    schedule: Schedule
    walk: OrderWalk
    layout: Layout
    deps: Dependencies | None = None
    crossing: list[int] | None = None
    adopted: bool = False  # made elsewhere (a synthesized order: pipesim.plan.synthesized), not by a family
    slots: list[int] | None = None  # per action, its (kind, stage) place in a duration table (`duration_slots`)
    runs: list[tuple[int, int, int]] | None = None  # the order its first sweep ran in, for `replay`


def _sequence_chunks(info: ScheduleInfo) -> tuple[int, str] | None:
    """The sequence chunks and cut a family's builder uses when the planner names none (its defaults), or None for
    a family of whole microbatches: what `shape` builds, known before building."""
    if "seq_chunks" not in info.options:
        return None
    defaults = inspect.signature(info.builder).parameters
    return defaults["seq_chunks"].default, defaults["seq_cut"].default


class Evaluator:
    """Evaluates candidates, sharing schedules, dependencies, order walks, unit costs and splits between them.

    Its caches live as long as the evaluator (one plan), never at module level.
    """

    def __init__(self, inputs: PlanInputs, offload: OffloadPolicy | None = None) -> None:
        self.inputs = inputs
        # which candidates are also tried offloaded (pipesim.plan.offload); None: none
        self.offload = OffloadPolicy() if offload is None else offload
        self._shapes: dict[tuple, Any] = {}
        self._units: dict[tuple, tuple[StageCost, ...]] = {}
        self._splits: dict[tuple, Any] = {}
        self._last_gradients: dict[tuple, list[list[tuple[int, int]]]] = {}
        self._priced: dict[int, tuple[CostModel, list[float]]] = {}  # id(candidate) -> its cost model and memory
        self._bounds: dict[tuple, float] = {}  # families sharing a layout share their costs' bounds
        self._costs: dict[tuple, CostModel] = {}  # (layout, sizes, split points) -> its cost model
        self._cuts: dict[tuple, CostModel] = {}  # (sizes, kind of backward, split points) -> its stages summed
        # per shape (shape_key): the builder's refusal or None, and the forwards its family holds at once per rank;
        # per family and depth: its layout (a plan asks 10^4 times: the registry's lookups add up)
        self._refusals: dict[tuple, str | None] = {}
        self._stashed: dict[tuple, tuple[int, ...] | None] = {}
        self._layouts: dict[tuple, Layout] = {}

    def shape(self, name: str, ranks: int, microbatches: int, chunks: int) -> Shape | ValueError:
        """A shape's schedule and order walk (its dependencies come when a candidate of it is timed), or the
        builder's refusal."""
        key = (name, ranks, microbatches, chunks)
        if key not in self._shapes:
            try:
                schedule = build_schedule(name, ranks, microbatches, **options_for(name, num_virtual_stages=chunks))
                self._shapes[key] = Shape(schedule, OrderWalk(schedule), Layout.of(schedule))
            except ValueError as error:
                self._shapes[key] = error
        return self._shapes[key]

    def adopt(self, c: Candidate, schedule: Schedule) -> None:
        """Take a schedule made elsewhere (a synthesized order) as the shape of `c`: `price` and `simulate` then
        cost it like a family's, until `drop_shape`."""
        self._shapes[shape_key(c)] = Shape(schedule, OrderWalk(schedule), Layout.of(schedule), adopted=True)

    def units(
        self, mbs: int, share: float | None, split: bool = False, recompute: bool = False
    ) -> tuple[StageCost, ...]:
        key = (*self.inputs.units_key(mbs, split, recompute), share)
        if key not in self._units:
            units = self.inputs.units_for(mbs, split, recompute)
            if share is not None:
                units = tuple(replace(u, weight_ms=u.backward_ms * share) for u in units)
            self._units[key] = units
        return self._units[key]

    def split(self, mbs: int, num_stages: int, recompute: bool):
        key = (mbs, num_stages, recompute)
        if key not in self._splits:
            try:
                self._splits[key] = balance_units(self.units(mbs, None, recompute=recompute), num_stages, recompute)
            except ValueError as error:
                self._splits[key] = error
        return self._splits[key]

    def cost_model(self, c: Candidate, split_points: tuple[int, ...], schedule: Schedule | Layout) -> CostModel:
        """The cost model of a candidate cut at `split_points`: its stages (`PlanInputs.cut`: the units' costs for
        the schedule's kind of backward and recomputation; with a profile, its stage prices for the schedule's
        class), the link, each rank's runtime (dispatch gap, tail and optimizer step on its parameters, shared
        cores: `PlanInputs.rank_runtime`), and the data-parallel group of its replicas (over the same link). The
        schedule's `Layout` is all it reads: a candidate is priced the same before its schedule is built, and the
        candidates of a layout that share their sizes share one cost model (cached: 1,902 cuts for 848 models in
        a 2,232-candidate plan)."""
        if not isinstance(schedule, Layout):
            return self._cost_model(c, split_points, schedule)
        key = (schedule, c.microbatch_size, c.w_share, c.recompute, c.data_parallel, split_points)
        if key not in self._costs:
            self._costs[key] = self._cost_model(c, split_points, schedule)
        return self._costs[key]

    def _cost_model(self, c: Candidate, split_points: tuple[int, ...], schedule: Schedule | Layout) -> CostModel:
        split, chunked = schedule.uses_split_backward, schedule.num_stages > schedule.num_ranks
        # layouts of one cut share its stages (420 cuts for 848 models); a profile prices a stage by the schedule's
        # class (split backward, chunked) too
        key = (c.microbatch_size, c.w_share, c.recompute, split_points)
        if self.inputs.profile is not None:
            key += (split, chunked)
        if key not in self._cuts:
            units = self.units(c.microbatch_size, c.w_share, split, c.recompute)
            self._cuts[key] = self.inputs.cut(
                units,
                split_points,
                microbatch_size=c.microbatch_size,
                split=split,
                recompute=c.recompute,
                chunked=chunked,
                w_share=c.w_share,
            )
        cost = self._cuts[key].for_chains(schedule.pipelines)  # each chain (DualPipe's directions) the whole cut
        runtime = self.inputs.rank_runtime(schedule, cost.stages, c.data_parallel)
        cost = replace(cost, runtime=runtime, dp_group=self.inputs.replica_group(c.data_parallel))
        # a straggler among the devices, at its place in this candidate's pipeline (pipesim.cost.perturb); the
        # bounds price a candidate through this same function, so pruning sees the straggler too
        return self.inputs.perturbation.folded(schedule.num_ranks).apply(cost, schedule.stage_to_rank)

    def found_for(self, candidates: list[Candidate]) -> tuple[dict, dict]:
        """The splits and cost models `bound` already cut for `candidates`: what a process evaluating their shape
        with a fresh evaluator would cut again (`seed` hands them over; about 1 ms a shape saved)."""
        splits, costs = {}, {}
        for c in candidates:
            layout = self.layout(c)
            key = (c.microbatch_size, layout.pipeline_stages, c.recompute)
            split = self._splits.get(key)
            if split is None or isinstance(split, Exception):
                continue
            splits[key] = split
            cost_key = (layout, c.microbatch_size, c.w_share, c.recompute, c.data_parallel, split.split_points)
            if cost_key in self._costs:
                costs[cost_key] = self._costs[cost_key]
        return splits, costs

    def seed(self, found: tuple[dict, dict]) -> Evaluator:
        """This evaluator, given the splits and cost models another one found (`found_for`): the same values it
        would compute, so nothing it answers changes."""
        splits, costs = found
        self._splits.update(splits)
        self._costs.update(costs)
        return self

    def last_gradients(self, key: tuple, deps: Any) -> list[list[tuple[int, int]]]:
        """Per shape, each rank's last backward per stage (where its all-reduce starts), found once."""
        if key not in self._last_gradients:
            self._last_gradients[key] = last_gradients(deps.ranks, deps.actions, deps.num_ranks)
        return self._last_gradients[key]

    def materialise(self, c: Candidate) -> tuple[Schedule, CostModel]:
        """The schedule and cost model an evaluated candidate stands for (to draw it, export it, simulate it:
        `pipesim.sim.steps.simulate_step` gives its `step_ms`)."""
        if c.error is not None or c.step_ms is None:
            raise ValueError(f"{c.label} was not built: {c.error or c.pruned or 'not evaluated'}")
        schedule = self._built(c).schedule
        cost = self.cost_model(c, c.split, schedule)
        if c.offload != "none":
            return offloaded(schedule, cost.for_seq_chunks(schedule.seq_chunks), c, self.inputs.host_link)
        return schedule, cost

    def offload_variants(self, c: Candidate) -> list[Candidate]:
        """The offloaded candidates a built `c` stands for under the plan's policy, unpriced (`price_offload`)."""
        return [variant(c, mode) for mode in self.offload.modes] if c.built and self.offload.wants(c) else []

    def offload_step_floor(self, v: Candidate) -> float:
        """A lower bound of an offloaded candidate's step from its copies alone (`copy_floor_ms`), its shape held."""
        shape = self._built(v)
        cost = self.cost_model(v, v.split, shape.layout).for_seq_chunks(shape.schedule.seq_chunks)
        return copy_floor_ms(shape.schedule, cost, v, self.inputs.host_link)

    def price_offload(self, v: Candidate) -> bool:
        """Cost an offloaded candidate (`offload_variants`) while its shape is held: one simulated step. False
        where its mode moves nothing here (then it is its base again, and no candidate of its own)."""
        shape = self._built(v)
        cost = self.cost_model(v, v.split, shape.layout).for_seq_chunks(shape.schedule.seq_chunks)
        return price_offloaded(v, shape.schedule, cost, self.inputs)

    def evaluate_shape(self, group: list[tuple[int, Candidate]]) -> list[tuple[int, Candidate]]:
        """The candidates of one shape (with their places in the grid), evaluated, then the shape dropped; returns
        the offloaded candidates they stand for (the policy's), each with its base's place."""
        variants = []
        for place, candidate in group:
            self.evaluate(candidate)
            for v in self.offload_variants(candidate):
                if self.price_offload(v):
                    variants.append((place, v))
        self.drop_shape(shape_key(group[0][1]))
        return variants

    def drop_shape(self, key: tuple) -> None:
        """Forget a shape's schedule, dependencies, order walk and last gradients (`materialise` builds them again
        when asked): a plan holds one shape at a time."""
        self._shapes.pop(key, None)
        self._last_gradients.pop(key, None)
        self._priced.clear()

    def bound(self, c: Candidate) -> Bound | None:
        """A candidate's lower bounds (`pipesim.plan.bounds`) without building its schedule, or None with `c.error`
        set where it cannot be built (the build's own reasons: the family's size rules, a split that does not
        exist)."""
        if c.error is not None:
            return None
        shape = shape_key(c)
        if shape not in self._refusals:
            try:
                check_shape(
                    c.schedule, c.ranks, c.microbatches, **options_for(c.schedule, num_virtual_stages=c.virtual_stages)
                )
                self._refusals[shape] = None
            except ValueError as error:
                self._refusals[shape] = str(error)
        if self._refusals[shape] is not None:
            c.error = self._refusals[shape]
            return None
        layout = self.layout(c)
        split = self.split(c.microbatch_size, layout.pipeline_stages, c.recompute)
        if isinstance(split, Exception):
            c.error = str(split)
            return None
        info = schedule_info(c.schedule)
        if shape not in self._stashed:
            stashed = info.stashed
            self._stashed[shape] = (
                None if stashed is None else tuple(stashed(c.ranks, c.microbatches, c.virtual_stages))
            )
        held = self._stashed[shape]
        sequence = _sequence_chunks(info)
        costs = (layout, c.microbatch_size, c.w_share, c.recompute, c.data_parallel, split.split_points, sequence)
        step_key, memory_key = (*costs, c.microbatches), (*costs, held)
        if step_key not in self._bounds or memory_key not in self._bounds:
            cost = self.cost_model(c, split.split_points, layout)
            pieces: tuple[float, ...] = (1.0,)
            if sequence is not None:  # a microbatch runs as chunks, each its share (what `simulate` prices)
                cost = cost.for_seq_chunks(sequence[0])
                pieces = chunk_shares(sequence[0], cost.attention_fraction, sequence[1]).compute
            bound = candidate_bound(layout, cost, c.microbatches, self.inputs.optimizer, held, pieces)
            memory = bound.memory_bytes
            if self.offload.modes:  # an offloaded variant may need less: what no offload can move
                memory = min(memory, offload_memory_bound_bytes(layout, cost, self.inputs.optimizer))
            self._bounds[step_key], self._bounds[memory_key] = bound.step_ms, memory
        return Bound(self._bounds[step_key], self._bounds[memory_key])

    def layout(self, c: Candidate) -> Layout:
        """The layout of a candidate's family at its depth and chunks (`family_layout`), found once."""
        key = (c.schedule, c.ranks, c.virtual_stages)
        if key not in self._layouts:
            self._layouts[key] = family_layout(*key)
        return self._layouts[key]

    def memory_floor(self, c: Candidate, bound: Bound) -> float:
        """What a priced candidate's memory bound becomes: its exact memory, or, where the policy would try it
        offloaded, the closed form below both (`bound`'s)."""
        assert c.peak_memory_bytes is not None
        if self.offload.modes and (not self.offload.over_cap_only or not c.fits):
            return min(c.peak_memory_bytes, bound.memory_bytes)
        return c.peak_memory_bytes

    def _built(self, c: Candidate) -> Shape:
        shape = self.shape(*shape_key(c))
        if isinstance(shape, Exception):
            raise shape
        return shape

    def price(self, c: Candidate) -> bool:
        """Build the candidate's shape and set what needs no simulation: its split, chunks and memory (each rank's
        static bytes plus the activation peak of its order). False, with `c.error` set, where it cannot be
        built."""
        if c.error is not None:
            return False
        shape = self.shape(*shape_key(c))
        if isinstance(shape, Exception):
            c.error = str(shape)
            return False
        schedule = shape.schedule
        assert shape.adopted or shape.layout == family_layout(
            c.schedule, c.ranks, schedule.num_stages // schedule.num_ranks
        ), f"{c.schedule}'s registry entry does not describe its schedule's layout"
        c.virtual_stages = schedule.num_stages // schedule.num_ranks
        split = self.split(c.microbatch_size, schedule.pipeline_stages, c.recompute)
        if isinstance(split, Exception):
            c.error = str(split)
            return False
        c.split, c.imbalance = split.split_points, split.imbalance
        cost = self.cost_model(c, split.split_points, shape.layout).for_seq_chunks(schedule.seq_chunks)
        statics = static_bytes(schedule, cost, self.inputs.optimizer)
        c.rank_memory = [sum(s) + peak for s, peak in zip(statics, shape.walk.peaks(cost), strict=True)]
        c.peak_memory_bytes = max(c.rank_memory)
        cap = self.inputs.memory_cap_bytes
        c.fits = cap is None or c.peak_memory_bytes <= cap
        self._priced[id(c)] = (cost, c.rank_memory)
        return True

    def evaluate(self, c: Candidate) -> Candidate:
        """Price the candidate (`price`) and simulate its step: its step time, throughput and bubble."""
        self.simulate(c)
        return c

    def simulate(self, c: Candidate, want_path: bool = True) -> CriticalPath | None:
        """`evaluate`, returning the critical path of its step (None where it was not simulated or its ranks share
        cores, whose sweep is not a longest path): `CriticalPath.length_ms` of it under another candidate's cost
        model of the same shape is a lower bound of that candidate's step. `want_path` False skips it."""
        if id(c) not in self._priced and not self.price(c):
            return None
        cost, _ = self._priced.pop(id(c))
        shape = self._built(c)
        schedule, deps = shape.schedule, self.dependencies(shape)
        transfer = boundary_transfers(schedule, cost)
        hops = list(map(transfer.__getitem__, shape.crossing))
        gaps = dispatch_gaps(deps, cost)
        shared = cost.shared_cores is not None and cost.shared_cores < deps.num_ranks
        chunked = schedule.seq_chunks > 1  # each sequence chunk its share of the time: no per-stage slots
        if deps.joined or deps.blocking is None or chunked:  # the general engine, and nothing of it to reuse
            durations = action_durations(deps, cost, schedule.num_stages)
            if chunked:
                durations = chunk_durations(deps, durations, schedule, cost)
            starts, ends, stuck = run_engine(deps, durations, hops, gaps, cost.shared_cores)
        else:  # a shape's later cost models walk the order its first sweep found (`replay`: the same numbers)
            if shape.slots is None:
                shape.slots = duration_slots(deps, schedule.num_stages)
            durations = slot_durations(shape.slots, cost, schedule.num_stages)
            if shape.runs is not None and not shared:
                (starts, ends), stuck = replay(deps, shape.runs, durations, hops, gaps), []
            else:
                runs: list[tuple[int, int, int]] = []
                starts, ends, stuck = run_engine(deps, durations, hops, gaps, cost.shared_cores, runs=runs)
                if not shared and not stuck:
                    shape.runs = runs
        if stuck:
            c.error = "the schedule deadlocks"
            return None
        offsets = deps.offsets
        finish = [ends[offsets[r + 1] - 1] if offsets[r + 1] > offsets[r] else 0.0 for r in range(schedule.num_ranks)]
        pipeline_ms = max(finish)
        charge = reduction_charge(schedule, cost)  # the one decision: the planner's compute-only schedules
        assert charge in (NOTHING, AFTER_BACKWARD), f"the planner cannot charge {charge}"
        last = self.last_gradients(shape_key(c), deps) if charge == AFTER_BACKWARD else None
        tails, windows = step_tails(finish, ends, last, cost, charge)
        c.step_ms = step_time_ms(finish, tails)
        c.throughput = self.inputs.global_batch / c.step_ms * 1e3  # > 0: PlanInputs refuses a model of no time
        c.bubble_fraction = 1 - sum(durations) / (schedule.num_ranks * pipeline_ms) if pipeline_ms > 0 else 0.0
        if not want_path or chunked or (cost.shared_cores is not None and cost.shared_cores < deps.num_ranks):
            return None  # (a path's length prices whole microbatches: none for sequence chunks)
        return critical_path(
            deps, shape.crossing, (starts, ends), (durations, hops, gaps), (finish, tails, windows), schedule.num_stages
        )

    def dependencies(self, shape: Shape) -> Dependencies:
        """A shape's dependencies and the stage boundary each action hears across, built on first use."""
        if shape.deps is None:
            shape.deps = dependencies(shape.schedule)
            shape.crossing = crossing_stages(shape.deps.actions)
        return shape.deps

    def priced_cost(self, c: Candidate) -> CostModel:
        """The cost model `price` cut for a candidate not simulated yet."""
        return self._priced[id(c)][0]
