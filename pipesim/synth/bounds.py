"""A lower bound on the step time of any order: the busiest rank's work plus the ramp it cannot avoid.

Every action i has a head (the earliest it can start, from the longest chain of producers before it, ignoring
that ranks run one action at a time) and a tail (the longest chain that must still run after it ends). One rank
must run all its actions one after another, each within its head and tail; the best such order *with
preemption* (Jackson's preemptive schedule: at every moment run the released action with the longest tail) is
a relaxation of every real order, so its length bounds the step from below. It holds the simple bounds
(the longest chain; a rank's work plus its earliest start) and is often tight: when F = I = W with no
transfer time, ZB-H1 and ZB-H2 meet it.

Step times are measured from the first action's start (`pipesim.sim.metrics.makespan`): the first action of
the rank holding stage 0 always starts at its dispatch gap, so the bound subtracts that gap.
"""

from __future__ import annotations

import heapq
import math

from pipesim.ir import Action, F, I
from pipesim.synth.problem import Instance


def heads_and_tails(inst: Instance) -> tuple[list[float], list[float]]:
    """Per action, (earliest start, least time that must follow its end) over the dependency graph."""
    n = len(inst.actions)
    order = topological(inst)
    head = [0.0] * n
    for i in order:
        rank = inst.rank[i]
        start = inst.gap[rank]
        for p in inst.producers[i]:
            after = head[p] + inst.duration[p] + (inst.gap[rank] if inst.rank[p] == rank else inst.hop[i])
            if after > start:
                start = after
        head[i] = start
    tail = [0.0] * n
    for i in reversed(order):
        rank = inst.rank[i]
        longest = 0.0
        for c in inst.consumers[i]:
            through = (inst.gap[rank] if inst.rank[c] == rank else inst.hop[c]) + inst.duration[c] + tail[c]
            if through > longest:
                longest = through
        tail[i] = longest
    return head, tail


def topological(inst: Instance) -> list[int]:
    """Action ids with every producer before its consumers (Kahn's sort; the bound's heads and tails and the
    exact model's reachability walk it)."""
    remaining = [len(p) for p in inst.producers]
    ready = [i for i, count in enumerate(remaining) if count == 0]
    order = []
    while ready:
        i = ready.pop()
        order.append(i)
        for c in inst.consumers[i]:
            remaining[c] -= 1
            if remaining[c] == 0:
                ready.append(c)
    assert len(order) == len(inst.actions), "the dependency graph of all actions has a cycle"
    return order


def preemptive_bound(jobs: list[tuple[float, float, float]]) -> float:
    """Jackson's preemptive schedule of (release, processing, tail) jobs on one machine: the least possible
    max(completion + tail) when jobs may be interrupted; a lower bound for the same jobs without interruption."""
    jobs = sorted(jobs)
    heap: list[tuple[float, float, int]] = []  # (-tail, remaining processing, job)
    remaining = [p for _, p, _ in jobs]
    now, k, best = 0.0, 0, 0.0
    while k < len(jobs) or heap:
        if not heap and now < jobs[k][0]:
            now = jobs[k][0]
        while k < len(jobs) and jobs[k][0] <= now:
            heapq.heappush(heap, (-jobs[k][2], remaining[k], k))
            k += 1
        neg_tail, left, job = heapq.heappop(heap)
        next_release = jobs[k][0] if k < len(jobs) else float("inf")
        run = min(left, next_release - now)
        now += run
        if run < left:  # interrupted by a release: the longest tail is chosen again
            heapq.heappush(heap, (neg_tail, left - run, job))
        else:
            best = max(best, now - neg_tail)
    return best


def span_bounds(inst: Instance, head: list[float]) -> list[float]:
    """Per rank, the least time from its first action's start to its last action's end: its work, plus (linear
    placement) the wait the memory limit forces before its first backward.

    Until the first I on rank r starts, r can run only forwards, and at most k = limit / one microbatch's stash
    of them; that I cannot start before its own forward's chain down the pipeline and back has run (the
    Zero Bubble paper's Appendix B). So r waits at least chain - k x (its forward with its dispatch gap)."""
    spans = []
    for rank, ids in enumerate(inst.by_rank):
        gap = inst.gap[rank]
        work = sum(gap + inst.duration[i] for i in ids) - gap  # the first action's gap comes before its start
        wait = 0.0
        if inst.problem.placement == "linear" and inst.unit[rank] > 0:
            forward = inst.index[Action(rank, F, 0)]
            chain = head[inst.index[Action(rank, I, 0)]] - head[forward]
            held = min(inst.num_microbatches, math.floor(inst.limit[rank] * (1 + 1e-9) / inst.unit[rank]))
            wait = max(0.0, chain - held * (inst.duration[forward] + gap))
        spans.append(work + wait)
    return spans


def lower_bound(inst: Instance) -> float:
    """The problem's objective can be no lower. "makespan": the highest per-rank preemptive bound, and each
    rank's earliest start plus its least span, measured from the first action's start; "span": the highest
    least span."""
    head, tail = heads_and_tails(inst)
    spans = span_bounds(inst, head)
    if inst.problem.objective == "span":
        return max(spans, default=0.0)
    best = 0.0
    for rank, ids in enumerate(inst.by_rank):
        gap = inst.gap[rank]
        # each action holds its rank for the dispatch gap before it and its duration
        jobs = [(head[i] - gap, gap + inst.duration[i], tail[i]) for i in ids]
        best = max(best, preemptive_bound(jobs), min((head[i] for i in ids), default=0.0) + spans[rank])
    origin = inst.gap[inst.stage_to_rank[0]]
    return max(0.0, best - origin)
