"""The planner: every schedule x pipeline depth x microbatch size x chunks x recompute x W share, costed.

Each candidate is evaluated exactly, with the simulator's own engine: the split comes from stage balancing
(`pipesim.balance`) over per-unit costs, the per-stage costs from `stage_costs_from_units`, the actions' times
from `simulate.sweep` over the schedule's dependencies (the very sweep `simulate` runs, without building a
Timeline) and the step time from `pipesim.sim.steps` (`step_tails`, `step_time_ms`: the one definition
`simulate`, `compare` and the executor's prediction use), the memory from `pipesim.memory` (static parts plus
the activation peak of each rank's action order).
What makes ten thousand candidates a second affordable is sharing, not approximation: a schedule's
dependencies and order arrays are built once per shape (name, ranks, microbatches, chunks) and reused by every
cost variant, and candidates that differ only in a choice their schedule ignores (a W share for a schedule
that never splits its backward) are not generated twice.

Data parallelism: `devices` are cut into `devices / ranks` replicas of a `ranks`-deep pipeline, each replica
taking its share of the global batch; each stage's gradients are all-reduced across the replicas over the link
after its last backward, as the executor does (`pipesim.sim.data_parallel`: bucketed, hidden behind the rank's
remaining backward where it can be). Ranks 0..ranks-1 of a replica are what `ranks` counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pipesim.cost.description import balance_units
from pipesim.cost.model import CostModel, DataParallelGroup, StageCost
from pipesim.ir import Schedule
from pipesim.plan.inputs import PlanInputs
from pipesim.schedules import build_schedule, options_for, schedule_info
from pipesim.semantics.dag import dependencies
from pipesim.sim.data_parallel import AFTER_BACKWARD, NOTHING, last_gradients, reduction_charge
from pipesim.sim.memory import OrderWalk, static_bytes
from pipesim.sim.simulate import action_durations, boundary_transfers, dispatch_gaps, hop_times, run_engine
from pipesim.sim.steps import step_tails, step_time_ms

V_SHAPES_CHUNKS = 2


@dataclass(frozen=True)
class PlanSpace:
    """What to search. `w_shares` None means the costs' own W share (used only by split-backward schedules)."""

    schedules: tuple[str, ...] = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv")
    microbatch_sizes: tuple[int, ...] = (1, 2, 4)
    chunks: tuple[int, ...] = (1, 2)
    recompute: tuple[bool, ...] = (False, True)
    w_shares: tuple[float | None, ...] = (None,)
    ranks: tuple[int, ...] | None = None  # pipeline depths; None: all devices in one pipeline

    def __post_init__(self) -> None:
        for name in self.schedules:
            schedule_info(name)  # unknown names list the valid ones
        if not self.schedules:
            raise ValueError("give at least one schedule to search")
        for label, values in (
            ("microbatch sizes", self.microbatch_sizes),
            ("chunks", self.chunks),
            ("ranks", self.ranks or (1,)),
        ):
            if not values or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in values):
                raise ValueError(f"{label} must be positive whole numbers, got {list(values)}")
        for share in self.w_shares:
            if share is not None and not 0 <= share <= 1:
                raise ValueError(f"a W share is the weight-gradient part of the backward, in 0..1; got {share}")


@dataclass
class Candidate:
    """One point of the space and what it costs; `error` says why it could not be built (then no numbers).

    `step_ms` is the step time as a training loop runs it (`pipesim.sim.steps.step_time_ms`: the actions, the
    unhidden gradient all-reduce, the overhead); the plan JSON also writes it as `makespan_ms`, its name before
    issue 19, for one version (deprecated: read `step_ms`).
    """

    schedule: str
    ranks: int
    microbatches: int
    virtual_stages: int
    recompute: bool
    microbatch_size: int
    w_share: float | None
    data_parallel: int = 1
    split: tuple[int, ...] = ()
    step_ms: float | None = None
    throughput: float | None = None
    peak_memory_bytes: float | None = None
    fits: bool = False
    bubble_fraction: float | None = None
    imbalance: float | None = None
    error: str | None = None
    rank_memory: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule,
            "ranks": self.ranks,
            "microbatches": self.microbatches,
            "virtual_stages": self.virtual_stages,
            "recompute": self.recompute,
            "split": list(self.split),
            "step_ms": self.step_ms,
            "makespan_ms": self.step_ms,  # deprecated (issue 19): the same value under its old name, for one version
            "throughput": self.throughput,
            "peak_memory_bytes": self.peak_memory_bytes,
            "fits": self.fits,
            "microbatch_size": self.microbatch_size,
            "w_share": self.w_share,
            "data_parallel": self.data_parallel,
            "bubble_fraction": self.bubble_fraction,
            "imbalance": self.imbalance,
            "error": self.error,
            "rank_memory_bytes": list(self.rank_memory),  # per rank of a replica: what verify-plan compares
        }

    @property
    def label(self) -> str:
        chunks = f" v{self.virtual_stages}" if self.virtual_stages > 1 else ""
        extra = " recompute" if self.recompute else ""
        share = "" if self.w_share is None else f" W {self.w_share:g}"
        dp = f" x{self.data_parallel} DP" if self.data_parallel > 1 else ""
        return f"{self.schedule} P{self.ranks}{dp}{chunks} m{self.microbatches}x{self.microbatch_size}{extra}{share}"


def candidate_grid(inputs: PlanInputs, space: PlanSpace) -> list[Candidate]:
    """Every point of the space, each choice a schedule ignores collapsed (one candidate, not copies)."""
    grid = []
    for ranks in space.ranks or (inputs.devices,):
        for name in space.schedules:
            info = schedule_info(name)
            chunk_choices = space.chunks if info.takes_chunks else (None,)
            shares = space.w_shares if info.split_backward else (None,)
            for mbs in space.microbatch_sizes:
                for chunks in chunk_choices:
                    for recompute in space.recompute:
                        for share in shares:
                            grid.append(_blank(inputs, info.name, ranks, mbs, chunks, recompute, share))
    return grid


def _blank(
    inputs: PlanInputs, name: str, ranks: int, mbs: int, chunks: int | None, recompute: bool, share: float | None
) -> Candidate:
    fixed = V_SHAPES_CHUNKS if name in ("zbv", "dualpipev") else 1
    dp = inputs.devices // ranks if ranks <= inputs.devices else 0
    replica_batch = inputs.global_batch // dp if dp else 0
    candidate = Candidate(name, ranks, max(replica_batch // mbs, 1), chunks or fixed, recompute, mbs, share, dp)
    if ranks > inputs.devices or inputs.devices % ranks:
        candidate.error = f"{ranks} ranks do not divide {inputs.devices} devices into pipelines"
    elif inputs.global_batch % (dp * mbs):
        candidate.error = (
            f"global batch {inputs.global_batch} does not split into {dp} replica(s) x microbatches of {mbs}"
        )
    return candidate


class Evaluator:
    """Evaluates candidates, sharing schedules, dependencies, order walks, unit costs and splits between them.

    Its caches live as long as the evaluator (one plan), never at module level.
    """

    def __init__(self, inputs: PlanInputs) -> None:
        self.inputs = inputs
        self._shapes: dict[tuple, Any] = {}
        self._units: dict[tuple, tuple[StageCost, ...]] = {}
        self._splits: dict[tuple, Any] = {}
        self._last_gradients: dict[tuple, list[list[tuple[int, int]]]] = {}

    def shape(self, name: str, ranks: int, microbatches: int, chunks: int) -> tuple:
        key = (name, ranks, microbatches, chunks)
        if key not in self._shapes:
            try:
                schedule = build_schedule(name, ranks, microbatches, **options_for(name, num_virtual_stages=chunks))
                self._shapes[key] = (schedule, dependencies(schedule), OrderWalk(schedule))
            except ValueError as error:
                self._shapes[key] = error
        return self._shapes[key]

    def units(
        self, mbs: int, share: float | None, split: bool = False, recompute: bool = False
    ) -> tuple[StageCost, ...]:
        key = (mbs, share, split, recompute)
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

    def cost_model(self, c: Candidate, split_points: tuple[int, ...], schedule: Schedule) -> CostModel:
        """The cost model of a candidate cut at `split_points`: its stages (`PlanInputs.cut`: the units' costs for
        the schedule's kind of backward and recomputation; with a profile, its stage prices for the schedule's
        class), the link, each rank's runtime (dispatch gap, tail and optimizer step on its parameters, shared
        cores: `PlanInputs.rank_runtime`), and the data-parallel group of its replicas (over the same link)."""
        split = schedule.uses_split_backward
        units = self.units(c.microbatch_size, c.w_share, split, c.recompute)
        cost = self.inputs.cut(
            units,
            split_points,
            microbatch_size=c.microbatch_size,
            split=split,
            recompute=c.recompute,
            chunked=schedule.num_stages > schedule.num_ranks,
            w_share=c.w_share,
        )
        runtime = self.inputs.rank_runtime(schedule, cost.stages, c.data_parallel)
        cost = replace(cost, runtime=runtime, dp_group=DataParallelGroup(c.data_parallel, self.inputs.link))
        # a straggler among the devices, at its place in this candidate's pipeline (pipesim.cost.perturb)
        return self.inputs.perturbation.folded(schedule.num_ranks).apply(cost, schedule.stage_to_rank)

    def materialise(self, c: Candidate) -> tuple[Schedule, CostModel]:
        """The schedule and cost model an evaluated candidate stands for (to draw it, export it, simulate it:
        `pipesim.sim.steps.simulate_step` gives its `step_ms`)."""
        if c.error is not None or c.step_ms is None:
            raise ValueError(f"{c.label} was not built: {c.error or 'not evaluated'}")
        schedule = self.shape(c.schedule, c.ranks, c.microbatches, c.virtual_stages)[0]
        return schedule, self.cost_model(c, c.split, schedule)

    def last_gradients(self, key: tuple, deps: Any) -> list[list[tuple[int, int]]]:
        """Per shape, each rank's last backward per stage (where its all-reduce starts), found once."""
        if key not in self._last_gradients:
            self._last_gradients[key] = last_gradients(deps.ranks, deps.actions, deps.num_ranks)
        return self._last_gradients[key]

    def evaluate_shape(self, group: list[tuple[int, Candidate]]) -> None:
        """The candidates of one shape (with their places in the grid), evaluated; the shape's schedule, dependencies,
        order walk and last gradients dropped afterwards (`materialise` builds them again when asked)."""
        for _, candidate in group:
            self.evaluate(candidate)
        key = shape_key(group[0][1])
        self._shapes.pop(key, None)
        self._last_gradients.pop(key, None)

    def evaluate(self, c: Candidate) -> Candidate:
        if c.error is not None:
            return c
        shape_key = (c.schedule, c.ranks, c.microbatches, c.virtual_stages)
        shape = self.shape(*shape_key)
        if isinstance(shape, Exception):
            c.error = str(shape)
            return c
        schedule, deps, walk = shape
        c.virtual_stages = schedule.num_stages // schedule.num_ranks
        split = self.split(c.microbatch_size, schedule.num_stages, c.recompute)
        if isinstance(split, Exception):
            c.error = str(split)
            return c
        c.split, c.imbalance = split.split_points, split.imbalance
        cost = self.cost_model(c, split.split_points, schedule)
        durations = action_durations(deps, cost, schedule.num_stages)
        hops = hop_times(deps, boundary_transfers(schedule, cost))
        starts, ends, stuck = run_engine(deps, durations, hops, dispatch_gaps(deps, cost), cost.shared_cores)
        if stuck:
            c.error = "the schedule deadlocks"
            return c
        offsets = deps.offsets
        finish = [ends[offsets[r + 1] - 1] if offsets[r + 1] > offsets[r] else 0.0 for r in range(schedule.num_ranks)]
        pipeline_ms = max(finish)
        statics = static_bytes(schedule, cost, self.inputs.optimizer)
        memory = [sum(s) + peak for s, peak in zip(statics, walk.peaks(cost), strict=True)]
        charge = reduction_charge(schedule, cost)  # the one decision: the planner's compute-only schedules
        assert charge in (NOTHING, AFTER_BACKWARD), f"the planner cannot charge {charge}"
        last = self.last_gradients(shape_key, deps) if charge == AFTER_BACKWARD else None
        tails, _ = step_tails(finish, ends, last, cost, charge)
        c.step_ms = step_time_ms(finish, tails)
        c.throughput = self.inputs.global_batch / c.step_ms * 1e3  # > 0: PlanInputs refuses a model of no time
        c.rank_memory = memory
        c.peak_memory_bytes = max(memory)
        cap = self.inputs.memory_cap_bytes
        c.fits = cap is None or c.peak_memory_bytes <= cap
        c.bubble_fraction = 1 - sum(durations) / (schedule.num_ranks * pipeline_ms) if pipeline_ms > 0 else 0.0
        return c


def shape_key(candidate: Candidate) -> tuple[str, int, int, int]:
    """What a candidate's schedule is built from (name, ranks, microbatches, chunks): candidates sharing it share the
    schedule, its dependencies and its order walk."""
    return (candidate.schedule, candidate.ranks, candidate.microbatches, candidate.virtual_stages)


def evaluate_all(
    inputs: PlanInputs,
    space: PlanSpace,
    progress: Callable[[int, int], None] | None = None,
    workers: int = 1,
) -> list[Candidate]:
    """Every candidate of the space, evaluated (those that cannot be built carry their reason), in grid order.

    Candidates are evaluated shape by shape, and a shape's schedule is dropped after its last candidate (the
    2,232-candidate space of issue 21 held 2.0 GB of schedules at once). `progress(done, total)` is called as
    shapes finish (the Plan page's progress bar). `workers` > 1 spreads the shapes over that many processes (each
    shape's work is independent: the same numbers come back); a pool that cannot start falls back to this one.
    """
    grid = candidate_grid(inputs, space)
    by_shape: dict[tuple, list[tuple[int, Candidate]]] = {}
    for place, candidate in enumerate(grid):
        by_shape.setdefault(shape_key(candidate), []).append((place, candidate))
    # the largest shapes first, so that a pool's last tasks are small ones
    groups = sorted(by_shape.values(), key=lambda g: -(g[0][1].ranks * g[0][1].microbatches * g[0][1].virtual_stages))
    if workers > 1 and len(groups) > 1:
        pooled = _evaluate_in_pool(inputs, groups, workers, progress, len(grid))
        if pooled is not None:
            for place, candidate in pooled:
                grid[place] = candidate
            return grid
    evaluator, done = Evaluator(inputs), 0
    for group in groups:
        evaluator.evaluate_shape(group)
        done += len(group)
        if progress is not None:
            progress(done, len(grid))
    return grid


def _evaluate_shapes(inputs: PlanInputs, groups: list[list[tuple[int, Candidate]]]) -> list[tuple[int, Candidate]]:
    """A pool's unit of work: the groups evaluated by one evaluator, with their places in the grid."""
    evaluator = Evaluator(inputs)
    for group in groups:
        evaluator.evaluate_shape(group)
    return [pair for group in groups for pair in group]


def _evaluate_in_pool(
    inputs: PlanInputs,
    groups: list[list[tuple[int, Candidate]]],
    workers: int,
    progress: Callable[[int, int], None] | None,
    total: int,
) -> list[tuple[int, Candidate]] | None:
    """The groups evaluated by `workers` processes (forked where the platform can), or None when no pool starts."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    tasks = workers * 4
    chunks = [groups[i::tasks] for i in range(tasks)]  # interleaved: each task gets large shapes and small ones
    evaluated: list[tuple[int, Candidate]] = []
    try:
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            futures = [pool.submit(_evaluate_shapes, inputs, chunk) for chunk in chunks if chunk]
            for future in as_completed(futures):
                evaluated += future.result()
                if progress is not None:
                    progress(len(evaluated), total)
    except (OSError, RuntimeError):  # no processes here (a sandbox, a full process table): one process does it
        return None
    return evaluated
