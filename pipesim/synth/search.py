"""Pricing an order, the registry's own schedules as starting points, and local search.

`evaluate` prices per-rank orders with the simulator's engine (`pipesim.sim.simulate.sweep` on the schedule's
dependency lists, with `Instance`'s durations, transfers and dispatch gaps): the problem's objective (the step
time from the first start, or the longest rank's span), and as a tie-breaker the sum of the ranks' finishing
times (an order that frees ranks earlier is a better place to search from). An order over the memory limit or
one that deadlocks has no price.

`registry_orders` turns every registered schedule of the same placement into an order over the same actions
(a full backward B becomes I then W at once: the same time, the same peak), so the search starts no worse than
any named schedule that fits the limit. `improve` moves one action at a time within its rank's order and keeps
every move that makes the step no longer.
"""

from __future__ import annotations

import random
import time
from typing import NamedTuple

from pipesim.ir import Action, B, I, W
from pipesim.schedules import build_schedule, schedule_info, schedule_names
from pipesim.synth.problem import Instance

# Relative slack below which two step times count as equal (sums of float durations).
TIME_TOLERANCE = 1e-9


class Score(NamedTuple):
    makespan: float  # the problem's objective: the step time, or the longest rank's span
    finish_sum: float


def evaluate(inst: Instance, orders: list[list[int]]) -> Score | None:
    """The step time of per-rank orders (and the tie-breaker), or None when over memory or deadlocked."""
    for rank, peak in enumerate(inst.peaks(orders)):
        if not inst.fits(peak, rank):
            return None
    deps, _, starts, ends, stuck = inst.timed(orders)
    if stuck:
        return None
    busy = [r for r in range(inst.num_ranks) if deps.offsets[r + 1] > deps.offsets[r]]
    finishes = [ends[deps.offsets[r + 1] - 1] for r in busy]
    if inst.problem.objective == "span":  # a rank runs its order one action after another: first to last
        return Score(max(ends[deps.offsets[r + 1] - 1] - starts[deps.offsets[r]] for r in busy), sum(finishes))
    return Score(max(ends) - min(starts), sum(finishes))


def registry_orders(inst: Instance) -> list[tuple[str, list[list[int]]]]:
    """(name, orders) of every registered schedule with this placement that builds at this size."""
    problem = inst.problem
    found = []
    for name in schedule_names():
        info = schedule_info(name)
        if info.placement != problem.placement:
            continue
        options = info.build_options(problem.chunks)
        try:
            schedule = build_schedule(name, problem.num_ranks, problem.num_microbatches, **options)
        except ValueError:
            continue  # a size the family does not build (dualpipev below 2p-1 microbatches)
        if schedule.num_stages != inst.num_stages or schedule.seq_chunks != 1 or schedule.pipelines != 1:
            continue  # another cut; actions on sequence chunks; two pipelines (DualPipe): not the problem's order
        rows = []
        for row in schedule.actions:
            split: list[Action] = []
            for action in row:
                if action.kind is B:
                    split += [Action(action.stage, I, action.microbatch), Action(action.stage, W, action.microbatch)]
                else:
                    split.append(action)
            rows.append([inst.index[a] for a in split])
        found.append((name, rows))
    return found


def _window(inst: Instance, order: list[int], k: int, own: dict[int, int]) -> tuple[int, int]:
    """Positions action order[k] may move to without passing a producer or consumer on its own rank."""
    i = order[k]
    low, high = 0, len(order) - 1
    for p in inst.producers[i]:
        if p in own:
            low = max(low, own[p] + 1)
    for c in inst.consumers[i]:
        if c in own:
            high = min(high, own[c] - 1)
    return low, high


def improve(
    inst: Instance,
    orders: list[list[int]],
    score: Score,
    deadline: float,
    target: float,
    rng: random.Random,
    patience: int | None = None,
) -> tuple[list[list[int]], Score]:
    """Local search until `deadline` (time.monotonic), the step time reaches `target` (a lower bound), or
    `patience` moves in a row found nothing better."""
    orders = [list(order) for order in orders]
    ranks = [r for r in range(inst.num_ranks) if len(orders[r]) > 1]
    if not ranks:
        return orders, score
    since_better = 0
    while score.makespan > target * (1 + TIME_TOLERANCE) + 1e-12:
        since_better += 1
        # every move: one evaluation of 25,000 actions takes longer than reading the clock many times over
        if time.monotonic() >= deadline or (patience is not None and since_better > patience):
            break
        rank = rng.choice(ranks)
        order = orders[rank]
        k = rng.randrange(len(order))
        own = {i: pos for pos, i in enumerate(order)}
        low, high = _window(inst, order, k, own)
        if low >= high:
            continue
        reach = max(2, len(order) // 6)
        new = min(high, max(low, k + rng.randint(-reach, reach)))
        if new == k:
            continue
        moved = order[:k] + order[k + 1 :]
        moved.insert(new, order[k])
        trial = orders[:rank] + [moved] + orders[rank + 1 :]
        result = evaluate(inst, trial)
        if result is not None and result <= score:
            since_better = 0 if result < score else since_better
            orders, score = trial, result
    return orders, score
