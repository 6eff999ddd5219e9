"""Starting orders built the way the Zero Bubble paper's heuristic builds them (its Section 3.1), linear placement.

Microbatch by microbatch, in simulated time:

* warm-up: every stage runs the first forward; then, from the last stage back, each stage adds as many forwards
  as fit the memory limit and end before the first backward-input I reaches it from the stage after (or, one
  variant, start before it arrives); stage r always holds fewer extra forwards than stage r - 1;
* steady state: each stage runs one forward and then one I per microbatch (forwards down the stages, I back
  up), a weight-gradient W first wherever one ends before the awaited input arrives, where the memory limit
  needs one freed, and (one variant) where a wait shorter than a W would otherwise grow the largest idle time
  of all stages; a stage already two forwards ahead of the next skips its forward (another variant) when the
  next stage will not need it before it could run;
* cool-down: every W left, in microbatch order.

Each of the 2 x 2 x 2 variants gives one order, priced afterwards by the simulator (`search.evaluate`) like any
other start; a variant that cannot keep its rules within the memory limit gives none. Written from the paper's
description; this is not its code.
"""

from __future__ import annotations

import itertools
import time

from pipesim.ir import Action, ActionKind, F, I, W
from pipesim.synth.problem import Instance

NAME = "zero-bubble heuristic"


class _RulesBroken(Exception):
    """A variant's rules asked for an action before its input was placed: it gives no order here."""


class _Builder:
    """One variant's run: per-rank orders, each rank's clock, stash level and idle time so far."""

    def __init__(self, inst: Instance, late_warmup: bool, skip_ahead: bool, fill_short_waits: bool) -> None:
        self.inst = inst
        self.late_warmup, self.skip_ahead, self.fill_short_waits = late_warmup, skip_ahead, fill_short_waits
        p = inst.num_ranks
        self.count = {F: [0] * p, I: [0] * p, W: [0] * p}
        self.free = [0.0] * p
        self.level = [0.0] * p
        self.idle = [0.0] * p
        self.most_idle = 0.0
        self.end: dict[int, float] = {}
        self.orders: list[list[int]] = [[] for _ in range(p)]

    def id(self, rank: int, kind: ActionKind, microbatch: int) -> int:
        return self.inst.index[Action(rank, kind, microbatch)]

    def arrival(self, rank: int, kind: ActionKind, microbatch: int) -> float:
        """When the input of (rank, kind, microbatch) from another rank is in (0 without one)."""
        inst = self.inst
        i = self.id(rank, kind, microbatch)
        if kind is F and rank > 0:
            return self.end[self.id(rank - 1, F, microbatch)] + inst.hop[i]
        if kind is I and rank < inst.num_ranks - 1:
            return self.end[self.id(rank + 1, I, microbatch)] + inst.hop[i]
        return 0.0

    def put(self, rank: int, kind: ActionKind) -> None:
        inst = self.inst
        microbatch = self.count[kind][rank]
        upstream = rank - 1 if kind is F else rank + 1 if kind is I else -1
        if 0 <= upstream < inst.num_ranks and self.count[kind][upstream] <= microbatch:
            raise _RulesBroken
        i = self.id(rank, kind, microbatch)
        ready = self.free[rank] + inst.gap[rank]
        start = max(ready, self.arrival(rank, kind, microbatch))
        if self.orders[rank]:
            self.idle[rank] += start - ready
            self.most_idle = max(self.most_idle, self.idle[rank])
        self.free[rank] = self.end[i] = start + inst.duration[i]
        self.level[rank] += inst.delta[i]
        self.orders[rank].append(i)
        self.count[kind][rank] += 1

    def pending_w(self, rank: int) -> bool:
        return self.count[W][rank] < self.count[I][rank]

    def fill_before(self, rank: int, arrival: float) -> None:
        """W passes that end before `arrival`; then one more into a shorter wait, by the variant's rule."""
        inst = self.inst
        while self.pending_w(rank):
            w = self.id(rank, W, self.count[W][rank])
            if self.free[rank] + inst.gap[rank] + inst.duration[w] > arrival:
                break
            self.put(rank, W)
        wait = arrival - self.free[rank] - self.inst.gap[rank]
        if self.pending_w(rank) and wait > 0:
            if wait > self.most_idle - self.idle[rank] or self.fill_short_waits:
                self.put(rank, W)

    def make_room(self, rank: int, microbatch: int) -> bool:
        """W passes until the forward of `microbatch` fits the memory limit; False when none is left to free."""
        forward = self.id(rank, F, microbatch)
        while not self.inst.fits(self.level[rank] + self.inst.delta[forward], rank):
            if not self.pending_w(rank):
                return False
            self.put(rank, W)
        return True

    def warmup(self) -> None:
        inst, p, m = self.inst, self.inst.num_ranks, self.inst.num_microbatches
        for rank in range(p):
            self.put(rank, F)
        extra = [0] * p
        first_i = self.free[p - 1] + inst.gap[p - 1] + inst.duration[self.id(p - 1, I, 0)]
        for rank in range(p - 2, -1, -1):
            level, clock = self.level[rank], self.free[rank]
            arrival = first_i + inst.hop[self.id(rank, I, 0)]
            while self.count[F][rank] + extra[rank] < m:
                forward = self.id(rank, F, self.count[F][rank] + extra[rank])
                if not inst.fits(level + inst.delta[forward], rank):
                    break
                took = inst.gap[rank] + inst.duration[forward]
                if (clock + took > arrival) if not self.late_warmup else (clock >= arrival):
                    break
                level += inst.delta[forward]
                clock += took
                extra[rank] += 1
            first_i = max(clock + inst.gap[rank], arrival) + inst.duration[self.id(rank, I, 0)]
        for rank in range(1, p):  # stage r holds fewer forwards than stage r - 1 (or both hold them all)
            above = self.count[F][rank - 1] + extra[rank - 1]
            most = above - self.count[F][rank] - (0 if above == m else 1)
            extra[rank] = max(0, min(extra[rank], most))
        for rank in range(p):
            for _ in range(extra[rank]):
                self.put(rank, F)
        for rank in range(p - 1, -1, -1):
            self.put(rank, I)

    def skips_forward(self, rank: int) -> bool:
        """The skip-ahead variant: a stage two forwards ahead of the next leaves its forward for later when the
        next stage will not need it before it could run."""
        inst, nxt = self.inst, rank + 1
        f_next = self.id(nxt, F, self.count[F][nxt])
        i_next = self.id(nxt, I, min(self.count[I][nxt], inst.num_microbatches - 1))
        needed = self.free[nxt] + inst.duration[f_next] + inst.duration[i_next] + inst.hop[f_next]
        if self.free[rank] >= needed:
            return True
        forward = self.id(rank, F, self.count[F][rank])
        level, freeing, k = self.level[rank] + inst.delta[forward], 0.0, 0
        while not inst.fits(level, rank) and self.count[W][rank] + k < self.count[I][rank]:
            w = self.id(rank, W, self.count[W][rank] + k)
            freeing += inst.duration[w]
            level += inst.delta[w]
            k += 1
        if self.free[rank] + inst.duration[forward] + freeing <= needed:
            return False
        return needed - self.free[rank] <= self.most_idle - self.idle[rank]

    def steady(self, microbatch: int) -> bool:
        p, m = self.inst.num_ranks, self.inst.num_microbatches
        want = [self.count[F][r] < m for r in range(p)]
        if self.skip_ahead:
            for rank in range(p - 1):
                if want[rank] and self.count[F][rank] >= self.count[F][rank + 1] + 2 and self.skips_forward(rank):
                    want[rank] = False
        for rank in range(p - 2, -1, -1):  # a stage runs a forward only when the next one does
            want[rank] = want[rank] and want[rank + 1]
        for rank in range(p):
            n = self.count[F][rank]
            if not want[rank] or (rank > 0 and self.count[F][rank - 1] <= n):
                continue
            if not self.make_room(rank, n):
                return False
            if rank > 0:
                self.fill_before(rank, self.arrival(rank, F, n))
            self.put(rank, F)
        for rank in range(p - 1, -1, -1):
            if self.count[F][rank] <= microbatch:
                return False  # its forward never ran: this variant's rules do not hold here
            if rank < p - 1:
                self.fill_before(rank, self.arrival(rank, I, microbatch))
            if rank == 0 and self.count[F][0] == m:
                while self.pending_w(0):
                    self.put(0, W)
            self.put(rank, I)
        return True

    def run(self, deadline: float) -> list[list[int]] | None:
        try:
            self.warmup()
            for microbatch in range(1, self.inst.num_microbatches):
                if time.monotonic() >= deadline or not self.steady(microbatch):
                    return None
        except _RulesBroken:
            return None
        for rank in range(self.inst.num_ranks):
            while self.count[W][rank] < self.inst.num_microbatches:
                self.put(rank, W)
        return self.orders


def warmup_orders(inst: Instance, deadline: float) -> list[tuple[str, list[list[int]]]]:
    """(name, orders) of every variant that keeps its rules within the memory limit (linear placement only:
    the rules speak of one stage per rank)."""
    if inst.problem.placement != "linear" or inst.num_ranks < 2:
        return []
    found = []
    for late_warmup, skip_ahead, fill_short_waits in itertools.product((False, True), repeat=3):
        orders = _Builder(inst, late_warmup, skip_ahead, fill_short_waits).run(deadline)
        if orders is not None:
            found.append((NAME, orders))
    return found
