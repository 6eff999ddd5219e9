"""The critical path of a simulated step, kept as counts, to bound the step of the same schedule under other costs.

A step's actions obey, whatever the costs, the sweep's inequalities (`pipesim.sim.simulate.sweep`): an action
starts after its rank's previous action plus the dispatch gap, and after each input plus its transfer when the
input comes from another rank; an overlapped group starts when every member's inputs are in. A chain of such
edges back from a rank's last action is a path whose length (durations, gaps and transfers along it, plus that
rank's overhead, and the gradient reductions that end the step where they do) is at most the step time under any
cost model of the same schedule; the chain the sweep found
tight (the critical path) gives the best such bound near the costs it was found under. It is kept as counts per
(stage, kind), per stage boundary and per rank, so its length under another cost model takes a few dozen
multiplications, not a sweep. Not for ranks that share cores (`sweep_shared` is not a longest path).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from pipesim.cost.model import CostModel
from pipesim.ir import CommKind
from pipesim.semantics.dag import Dependencies


@dataclass(frozen=True)
class CriticalPath:
    """Counts along a chain of the sweep's edges ending at the last action of `rank`."""

    actions: Counter  # (stage, kind, in an overlapped group) -> how many of its actions the path runs
    transfers: Counter  # stage boundary b (between b and b+1) -> transfers the path waits for
    gaps: Counter  # rank -> dispatch gaps the path pays
    reductions: Counter  # stage -> its gradient all-reduces the path ends with (run one after another on `rank`)
    rank: int
    num_ranks: int
    num_stages: int

    def length_ms(self, cost: CostModel) -> float:
        """The path's length under `cost` plus its last rank's overhead: a lower bound of the step time."""
        factor = cost.overlap_factor
        # a member of an overlapped pair counts its compute alone: its all-to-alls may hide under the other part
        total = sum(
            n * (factor * cost.compute_ms(stage, kind) if joined else cost.duration_ms(stage, kind))
            for (stage, kind, joined), n in self.actions.items()
        )
        total += sum(n * cost.transfer_ms(b, b + 1) for b, n in self.transfers.items() if b < self.num_stages - 1)
        dispatch = cost.dispatch_per_rank(self.num_ranks)
        total += sum(n * dispatch[r] for r, n in self.gaps.items())
        total += sum(n * cost.collective_ms(stage, CommKind.REDUCE_GRAD) for stage, n in self.reductions.items())
        return total + cost.overhead_ms(self.num_ranks)[self.rank]


def critical_path(
    deps: Dependencies,
    crossing: list[int],
    times: tuple[list[float], list[float]],
    inputs: tuple[list[float], list[float], list[float]],
    step: tuple[list[float], tuple[float, ...], list[list[tuple[int, float, float]]]],
    num_stages: int,
) -> CriticalPath:
    """Walk back from what ended the step, each time along the edge that set the action's start (`times`: the
    sweep's starts and ends; `inputs`: its durations, transfers and gaps; `step`: each rank's finish, tail and
    reduction windows, `pipesim.sim.steps.step_tails`). The step ends on the rank whose finish plus tail is the
    latest: at its last action, or, when its reductions outlast it, at the backward that started their chain."""
    starts, ends = times
    _, hops, gaps = inputs
    finish, tails, windows = step
    ranks, offsets, dep_lists = deps.ranks, deps.offsets, deps.deps
    joined = deps.joined or {}
    grouped = {m for first, others in joined.items() for m in (first, *others)}
    last_rank = max(range(len(finish)), key=lambda r: finish[r] + tails[r])
    actions: Counter = Counter()
    transfers: Counter = Counter()
    paid: Counter = Counter()
    reductions: Counter = Counter()
    i = offsets[last_rank + 1] - 1
    row = windows[last_rank] if windows else []
    if row and row[-1][2] > finish[last_rank]:
        first = max(k for k, (position, start, _) in enumerate(row) if start <= ends[position])
        i = row[first][0]
        reductions.update(stage_of for stage_of in _stages(deps, row[first:]))
    blocking = None if joined else deps.blocking
    if blocking is not None:
        i = _walk_blocking(deps, blocking, crossing, times, inputs, i, (actions, transfers, paid))
    while i >= 0:
        rank = ranks[i]
        stage, kind, _ = deps.actions[i]
        actions[(stage, kind, i in grouped)] += 1
        previous = i - 1 if i > offsets[rank] else -1
        best, step, edge = (ends[previous] if previous >= 0 else 0.0) + gaps[i], previous, ("gap", rank)
        members = (i, *joined.get(i, ()))
        for member in members:
            for d in dep_lists[member]:
                if member != i and d in members:
                    continue
                crosses = ranks[d] != rank
                arrival = ends[d] + (hops[member] if crosses else 0.0)
                if arrival > best:
                    best, step, edge = arrival, d, ("hop", crossing[member]) if crosses else ("none", 0)
        if edge[0] == "gap":
            paid[edge[1]] += 1
        elif edge[0] == "hop":
            transfers[edge[1]] += 1
        assert (  # the exact case first: the edge that set the start
            best <= starts[i] or best <= starts[i] + 1e-9 * max(1.0, abs(starts[i])) or not math.isfinite(best)
        ), "not a sweep edge"
        i = step
    return CriticalPath(actions, transfers, paid, reductions, last_rank, deps.num_ranks, num_stages)


def _walk_blocking(
    deps: Dependencies,
    blocking: list[int],
    crossing: list[int],
    times: tuple[list[float], list[float]],
    inputs: tuple[list[float], list[float], list[float]],
    i: int,
    counts: tuple[Counter, Counter, Counter],
) -> int:
    """`critical_path`'s walk where no action is in an overlapped group, reading one producer per action
    (`Dependencies.blocking`): a producer earlier on the action's own rank ended no later than the rank's previous
    action, so it never sets the start strictly later and the walk takes the same edges. Returns -1 (done)."""
    starts, ends = times
    _, hops, gaps = inputs
    actions, transfers, paid = counts
    ranks, offsets, kinds = deps.ranks, deps.offsets, deps.actions
    while i >= 0:
        rank = ranks[i]
        stage, kind, _ = kinds[i]
        actions[(stage, kind, False)] += 1
        previous = i - 1 if i > offsets[rank] else -1
        best, step = (ends[previous] if previous >= 0 else 0.0) + gaps[i], previous
        d = blocking[i]
        crosses = False
        if d >= 0:
            crosses = ranks[d] != rank
            arrival = ends[d] + (hops[i] if crosses else 0.0)
            if arrival > best:
                best, step = arrival, d
            else:
                crosses = False
        if step == previous:
            paid[rank] += 1
        elif crosses:
            transfers[crossing[i]] += 1
        assert (  # the exact case first: the edge that set the start
            best <= starts[i] or best <= starts[i] + 1e-9 * max(1.0, abs(starts[i])) or not math.isfinite(best)
        ), "not a sweep edge"
        i = step
    return i


def _stages(deps: Dependencies, windows: list[tuple[int, float, float]]) -> list[int]:
    """The stages whose reductions `windows` are (each window is at its stage's last backward)."""
    return [deps.actions[position][0] for position, _, _ in windows]
