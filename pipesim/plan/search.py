"""The planner: every schedule x pipeline depth x microbatch size x chunks x recompute x W share, costed.

Each candidate is evaluated exactly, with the simulator's own engine: the split comes from stage balancing
(`pipesim.cost.balance`) over per-unit costs, the per-stage costs from `stage_costs_from_units`, the actions' times
from `simulate.sweep` over the schedule's dependencies (the very sweep `simulate` runs, without building a
Timeline) and the step time from `pipesim.sim.steps` (`step_tails`, `step_time_ms`: the one definition
`simulate`, `compare` and the executor's prediction use), the memory from `pipesim.sim.memory` (static parts plus
the activation peak of each rank's action order).
What makes ten thousand candidates a second affordable is sharing and pruning, not approximation (`prune`: a
candidate whose lower bound shows it cannot change the plan's answer is never built, `pipesim.plan.prune`): a
schedule's dependencies and order arrays are built once per shape (name, ranks, microbatches, chunks) and reused by
every cost variant, and candidates that differ only in a choice their schedule ignores (a W share for a schedule
that never splits its backward) are not generated twice.

Data parallelism: `devices` are cut into `devices / ranks` replicas of a `ranks`-deep pipeline, each replica
taking its share of the global batch; each stage's gradients are all-reduced across the replicas over the link
after its last backward, as the executor does (`pipesim.sim.data_parallel`: bucketed, hidden behind the rank's
remaining backward where it can be). Ranks 0..ranks-1 of a replica are what `ranks` counts.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from pipesim._perf import paused_gc
from pipesim.plan.candidates import Candidate, PlanSpace, candidate_grid, shape_key
from pipesim.plan.evaluator import Evaluator
from pipesim.plan.inputs import PlanInputs
from pipesim.plan.offload import OffloadPolicy
from pipesim.plan.pool import in_pool, usable_cores
from pipesim.plan.prune import KEEP, evaluate_pruned, with_variants

__all__ = ["Candidate", "Evaluator", "PlanInputs", "PlanSpace", "candidate_grid", "evaluate_all", "shape_key"]


@paused_gc()  # a plan allocates 10^6 actions, tuples and floats in no cycle: the collector's rescans cost 25% of it
def evaluate_all(
    inputs: PlanInputs,
    space: PlanSpace,
    progress: Callable[[int, int], None] | None = None,
    workers: int = 1,
    prune: bool = True,
    keep: int = KEEP,
) -> list[Candidate]:
    """Every candidate of the space, in grid order: evaluated, pruned (`prune`: its lower bound shows it can be
    neither the best, one of the `keep` fastest, fitting or not, nor on the front: `pipesim.plan.prune`; it
    carries why and no numbers) or carrying why it cannot be built. The best, the `keep` fastest and the front are
    the exhaustive search's (`prune=False`).

    Candidates are evaluated shape by shape, and a shape's schedule is dropped after its last candidate (the
    2,232-candidate space once held 2.0 GB of schedules at once). `progress(done, total)` is called as
    shapes finish (the Plan page's progress bar). `workers` > 1 spreads the shapes over that many processes (each
    shape's work is independent: the same numbers come back); a pool that cannot start falls back to this one.
    A pruned search spreads its shapes the same way, each process pruning by what was built before it started.
    """
    inputs.check_sizes(space.microbatch_sizes, space.extrapolate)
    grid = candidate_grid(inputs, space)
    offload = OffloadPolicy.of(space.offload, inputs)
    evaluator = Evaluator(inputs, offload)
    workers = min(workers, usable_cores())  # more processes than cores only share them (the CLI says so)
    if prune:
        return evaluate_pruned(evaluator, grid, keep, progress, workers)
    by_shape: dict[tuple, list[tuple[int, Candidate]]] = {}
    for place, candidate in enumerate(grid):
        by_shape.setdefault(shape_key(candidate), []).append((place, candidate))
    # the largest shapes first, so that a pool's last tasks are small ones
    groups = sorted(by_shape.values(), key=lambda g: -(g[0][1].ranks * g[0][1].microbatches * g[0][1].virtual_stages))
    if workers > 1 and len(groups) > 1:
        # the pool counts the items its tasks return: offloaded candidates come on top of the grid's
        counted = None if progress is None else lambda done, total: progress(min(done, total), total)
        pooled = in_pool(partial(_evaluate_shapes, inputs, offload), groups, workers, counted, len(grid))
        if pooled is not None:
            variants = []
            for place, candidate, is_variant in pooled:
                if is_variant:
                    variants.append((place, candidate))
                else:
                    grid[place] = candidate
            return with_variants(grid, variants)
    done, variants = 0, []
    for group in groups:
        variants += evaluator.evaluate_shape(group)
        done += len(group)
        if progress is not None:
            progress(done, len(grid))
    return with_variants(grid, variants)


def _evaluate_shapes(
    inputs: PlanInputs, offload: OffloadPolicy, groups: list[list[tuple[int, Candidate]]]
) -> list[tuple[int, Candidate, bool]]:
    """A pool's unit of work: the groups evaluated by one evaluator, with their places in the grid, and the
    offloaded candidates they stand for (marked True, with their base's place)."""
    evaluator = Evaluator(inputs, offload)
    variants = [pair for group in groups for pair in evaluator.evaluate_shape(group)]
    return [(*pair, False) for group in groups for pair in group] + [(*pair, True) for pair in variants]
