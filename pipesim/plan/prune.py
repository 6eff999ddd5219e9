"""Branch and bound over the plan's candidates: a candidate whose lower bound cannot reach what the plan reports is
never built, and the plan is the exhaustive search's all the same.

What a plan reports of its candidates (`pipesim.plan.report`): the best that fits, the runners-up after it (the
fastest others, fitting or not), the top K that `verify-plan` runs, and the Pareto front of step time against
memory over every built candidate. A candidate is pruned only when its bounds (`pipesim.plan.bounds`) show it can
be none of these:
* among the `keep` fastest that fit: its memory bound is over the cap, or `keep` candidates that fit are already
  faster than its step bound;
* among the `keep` fastest of all: `keep` candidates are already faster than its step bound;
* on the front: a candidate already built is faster than its step bound and needs no more than its memory bound.
Shapes are evaluated in the order of their best bound, so that fast candidates are found first and bound the rest;
a shape whose every candidate is pruned is never built.

Bounds are taken a hair low (`SAFETY`) and ties within the report's rounding (`report.time_key`, 1e-6 ms) are kept,
so that a bound equal to its candidate's step time in exact arithmetic never prunes a tie.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable

from pipesim.plan.bounds import Bound
from pipesim.plan.candidates import Candidate, shape_key
from pipesim.plan.evaluator import Evaluator
from pipesim.plan.inputs import PlanInputs
from pipesim.plan.offload import OffloadPolicy
from pipesim.units import format_bytes, format_ms

KEEP = 6  # the best and the five runners-up the plan's summary names
SAFETY = 1e-9  # relative: bounds are computed in another order of additions than the simulator's
ROUNDING_MS = 1e-6  # report.time_key's resolution


class Incumbents:
    """What the candidates built so far settle: the `keep` fastest step times, those of the fitting ones, and the
    staircase of (step time, memory) no later candidate can enter the front under."""

    def __init__(self, cap: float | None, keep: int) -> None:
        self.cap, self.keep = cap, keep
        self._fastest: list[float] = []  # negated: a max-heap of the keep smallest step times
        self._fastest_fitting: list[float] = []
        self._steps: list[float] = []  # the staircase: step times rising, memory falling
        self._memory: list[float] = []

    def copy(self) -> Incumbents:
        """What is known now, apart from what is learnt later: a task's arguments are pickled when the pool's
        thread sends them, not when it is submitted, and the staircase's two lists pickled between their two
        updates would not match."""
        other = Incumbents(self.cap, self.keep)
        other._fastest, other._fastest_fitting = self._fastest[:], self._fastest_fitting[:]
        other._steps, other._memory = self._steps[:], self._memory[:]
        return other

    def add(self, step_ms: float, memory_bytes: float, fits: bool) -> None:
        """Count a built candidate (its step time, its fullest device's memory, whether that fits the cap)."""
        _push(self._fastest, step_ms, self.keep)
        if fits:
            _push(self._fastest_fitting, step_ms, self.keep)
        at = bisect.bisect_right(self._steps, step_ms)
        if at and self._memory[at - 1] <= memory_bytes:
            return  # something as fast or faster needs no more memory: the staircase stands
        stop = at
        while stop < len(self._steps) and self._memory[stop] >= memory_bytes:
            stop += 1
        self._steps[at:stop], self._memory[at:stop] = [step_ms], [memory_bytes]

    def reason_to_prune(self, bound: Bound) -> str | None:
        """Why a candidate with `bound` cannot change the plan (module docstring), or None when it might."""
        step = bound.step_ms * (1 - SAFETY)
        memory = bound.memory_bytes * (1 - SAFETY)
        may_fit = self.cap is None or memory <= self.cap
        if may_fit and not _beyond(self._fastest_fitting, step, self.keep):
            return None
        if not _beyond(self._fastest, step, self.keep):
            return None
        at = bisect.bisect_left(self._steps, step - ROUNDING_MS)
        if not at or self._memory[at - 1] > memory:
            return None
        fit = "" if may_fit else f", over the cap of {format_bytes(self.cap or 0)}"
        return (
            f"at least {format_ms(bound.step_ms)} per step and {format_bytes(bound.memory_bytes)}{fit}: it can be "
            "neither the best, a runner-up nor on the front"
        )


def _push(heap: list[float], step: float, keep: int) -> None:
    if len(heap) < keep:
        heapq.heappush(heap, -step)
    elif step < -heap[0]:
        heapq.heapreplace(heap, -step)


def _beyond(heap: list[float], step: float, keep: int) -> bool:
    """Whether `keep` step times are known and the slowest of them is below `step` by more than the rounding."""
    return len(heap) >= keep and step > -heap[0] + ROUNDING_MS


def evaluate_pruned(
    evaluator: Evaluator,
    grid: list[Candidate],
    keep: int = KEEP,
    progress: Callable[[int, int], None] | None = None,
    workers: int = 1,
) -> list[Candidate]:
    """The grid evaluated in place, shape by shape in the order of their best closed-form bound (fast candidates
    found first bound the rest), each candidate simulated only when `Incumbents` cannot rule it out.

    A shape is built only when one of its candidates survives its closed-form bounds; then each candidate's
    memory is exact (its order's walk) and, as its siblings are simulated, their critical paths bound its step
    (`pipesim.plan.paths`): the shape's candidates are simulated lowest bound first, each re-checked first.
    `workers` > 1 evaluates that many shapes at once in processes, each against the incumbents known when it
    was sent: they only grow, so what a process prunes is pruned rightly, and the answer is the same."""
    incumbents = Incumbents(evaluator.inputs.memory_cap_bytes, keep)
    variants: list[tuple[int, Candidate]] = []
    if workers > 1 and len(grid) > 1 and _in_processes(evaluator, incumbents, workers, grid, progress, variants):
        return with_variants(grid, variants)
    shapes = _shapes_by_bound(grid, [evaluator.bound(c) for c in grid])
    done = len(grid) - sum(len(group) for group in shapes)
    for group in shapes:
        _, found = _evaluate_group(evaluator, group, incumbents)  # it counts what it builds in `incumbents`
        variants += found
        done += len(group)
        if progress is not None:
            progress(done, len(grid))
    return with_variants(grid, variants)


def with_variants(grid: list[Candidate], variants: list[tuple[int, Candidate]]) -> list[Candidate]:
    """The grid with each offloaded candidate right after its base (`variants`: base's place, candidate), in the
    policy's order of modes."""
    if not variants:
        return grid
    after: dict[int, list[Candidate]] = {}
    for place, v in sorted(variants, key=lambda pair: pair[0]):  # stable: each base's modes keep their order
        after.setdefault(place, []).append(v)
    return [c for place, base in enumerate(grid) for c in (base, *after.get(place, ()))]


def _shapes_by_bound(grid: list[Candidate], bounds: list[Bound | None]) -> list[list]:
    """The candidates that can be built, grouped by shape: each group lowest bound first, the groups in the order
    of their lowest bound (ties by place in the grid)."""
    by_shape: dict[tuple, list[tuple[float, int, Bound, Candidate]]] = {}
    for place, (c, bound) in enumerate(zip(grid, bounds, strict=True)):
        if bound is not None:
            by_shape.setdefault(shape_key(c), []).append((bound.step_ms, place, bound, c))
    return sorted((sorted(g, key=lambda entry: entry[:2]) for g in by_shape.values()), key=lambda g: g[0][:2])


def _bound_shares(grid: list[Candidate], count: int) -> list[list[tuple[int, Candidate]]]:
    """The grid cut into `count` shares of about equal size, the candidates of one depth, microbatch size and
    recomputation together: the cost models they share are cut once, in one process."""
    together: dict[tuple, list[tuple[int, Candidate]]] = {}
    for place, c in enumerate(grid):
        together.setdefault((c.ranks, c.microbatch_size, c.recompute), []).append((place, c))
    shares: list[list[tuple[int, Candidate]]] = [[] for _ in range(count)]
    for group in sorted(together.values(), key=len, reverse=True):  # largest first, each to the smallest share
        min(shares, key=len).extend(group)
    return shares


def _bound_task(
    inputs: PlanInputs, offload: OffloadPolicy, placed: list[tuple[int, Candidate]]
) -> tuple[list, tuple[dict, dict]]:
    """A process's share of the bounds: (place, bound, why it cannot be built) of each candidate, and the splits
    and cost models it cut (the parent's evaluator is seeded with them)."""
    evaluator = Evaluator(inputs, offload)
    bounds = [(place, evaluator.bound(c), c.error) for place, c in placed]
    return bounds, evaluator.found_for([c for _, c in placed])


def _evaluate_group(
    evaluator: Evaluator, group: list, incumbents: Incumbents
) -> tuple[list[tuple[float, float, bool]], list[tuple[int, Candidate]]]:
    """One shape's candidates evaluated or pruned in place against `incumbents` (which learn from each); the
    (step, memory, fits) of those built, for another process's incumbents, and the offloaded candidates built or
    refused (each with its base's place; those whose base's step and the offload memory bound rule them out are
    left out)."""
    built = []
    variants = []
    live: dict[int, tuple[float, Bound, Candidate]] = {}
    for _, place, bound, c in group:
        c.pruned = incumbents.reason_to_prune(bound)
        if c.pruned is None and evaluator.price(c):
            live[place] = (bound.step_ms, Bound(bound.step_ms, evaluator.memory_floor(c, bound)), c)
    while live:
        place = min(live, key=lambda p: (live[p][0], p))
        _, bound, c = live.pop(place)
        c.pruned = incumbents.reason_to_prune(bound)
        if c.pruned is not None:
            _forget_numbers(c)
            continue
        path = evaluator.simulate(c, want_path=bool(live))
        if not c.built:
            continue
        incumbents.add(c.step_ms, c.peak_memory_bytes, c.fits)
        built.append((c.step_ms, c.peak_memory_bytes, c.fits))
        for v in evaluator.offload_variants(c):  # no faster than `c` (added copies only delay) nor than its copy
            if incumbents.reason_to_prune(Bound(c.step_ms, bound.memory_bytes)) is not None:  # engine's work, and no
                continue  # smaller than the memory floor
            floor = evaluator.offload_step_floor(v)
            if floor > c.step_ms and incumbents.reason_to_prune(Bound(floor, bound.memory_bytes)) is not None:
                continue
            if not evaluator.price_offload(v):
                continue
            variants.append((place, v))
            if v.built:
                incumbents.add(v.step_ms, v.peak_memory_bytes, v.fits)
                built.append((v.step_ms, v.peak_memory_bytes, v.fits))
        if path is not None:
            for other, (_, old, sibling) in live.items():
                step = max(old.step_ms, path.length_ms(evaluator.priced_cost(sibling)))
                live[other] = (step, Bound(step, old.memory_bytes), sibling)
    evaluator.drop_shape(shape_key(group[0][3]))
    return built, variants


def _group_task(
    inputs: PlanInputs, offload: OffloadPolicy, group: list, incumbents: Incumbents, found: tuple[dict, dict]
) -> tuple[list, list, list]:
    """A process's unit of work: one shape, by a fresh evaluator given the splits and cost models the bounds cut
    (`Evaluator.found_for`); its candidates (with their places), what was built and the offloaded candidates."""
    built, variants = _evaluate_group(Evaluator(inputs, offload).seed(found), group, incumbents)
    return [(place, c) for _, place, _, c in group], built, variants


def _in_processes(
    evaluator: Evaluator,
    incumbents: Incumbents,
    workers: int,
    grid: list[Candidate],
    progress: Callable[[int, int], None] | None,
    variants: list[tuple[int, Candidate]],
) -> bool:
    """The bounds taken in `workers` processes (interleaved slices of the grid), then the shapes evaluated
    `workers` at a time, in bound order, each sent with a copy of the incumbents known then (a shape whose
    candidates are all ruled out by then is pruned here, never sent), the next sent as soon as any finishes: what
    a shape knows depends on which finished first, so the pruned set may differ from run to run, never the answer
    (taking results in the order sent made it repeatable, but left a process idle behind each long shape: 0.36 s
    of a 2 s plan); False when no pool starts."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    try:
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            inputs, offload = evaluator.inputs, evaluator.offload
            # two shares a process: the first ones' cost models come back while the last ones are cut
            shares = [pool.submit(_bound_task, inputs, offload, share) for share in _bound_shares(grid, 2 * workers)]
            bounds: list[Bound | None] = [None] * len(grid)
            for share in shares:
                found_bounds, found = share.result()
                evaluator.seed(found)
                for place, bound, error in found_bounds:
                    bounds[place], grid[place].error = bound, error
            shapes = _shapes_by_bound(grid, bounds)
            done = len(grid) - sum(len(group) for group in shapes)
            pending = iter(shapes)
            running: set = set()
            while True:
                while len(running) < workers:
                    group = next(pending, None)
                    if group is None:
                        break
                    reasons = [incumbents.reason_to_prune(bound) for _, _, bound, _ in group]
                    if all(reasons):
                        for (_, _, _, c), reason in zip(group, reasons, strict=True):
                            c.pruned = reason
                        done += len(group)
                        continue
                    found = evaluator.found_for([c for _, _, _, c in group])
                    running.add(pool.submit(_group_task, inputs, offload, group, incumbents.copy(), found))
                if not running:
                    break
                # whichever finishes first: waiting for the oldest left a process idle behind a long shape
                finished, running = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    placed, built, found_variants = future.result()
                    for place, c in placed:
                        grid[place] = c
                    variants += found_variants
                    for step, memory, fits in built:
                        incumbents.add(step, memory, fits)
                    done += len(placed)
                if progress is not None:
                    progress(done, len(grid))
    except (OSError, RuntimeError):  # no processes here: one process does it
        return False
    return True


def _forget_numbers(c: Candidate) -> None:
    """A pruned candidate carries no numbers (`price` set its memory and split before the bound ruled it out)."""
    c.split, c.imbalance, c.rank_memory, c.peak_memory_bytes, c.fits = (), None, [], None, False
