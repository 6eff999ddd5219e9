"""Per-rank orders built by list scheduling: time runs forward and each free rank picks its next action.

A `Policy` says how a rank picks among what it can start:

* a backward-input I whose gradient has arrived goes first (it unblocks the rank before), unless the rank is
  still in its warm-up: while its stash stays within `warmup[r]` microbatches' worth, a forward goes first
  (the warm-up of 1F1B is p-1-r forwards, ZB-H2's twice that);
* a forward F starts only within the memory limit, and a forward that brings a new microbatch onto the rank
  (its first stage there) only when the rank can also hold that microbatch's later stages and those of every
  microbatch already on it: a reservation that keeps interleaved and V placements from filling the memory
  with early chunks and deadlocking;
* a weight-gradient W fills time the rank would otherwise wait: with `w_policy` "fit" only when it ends
  before the next known input arrives, with "eager" whenever nothing else can start now; every W left runs
  at the end.

Which rank acts next is the one whose chosen action starts first, as in an event simulation. A family of
policies (`policies`) spans warm-ups from 1F1B's to the memory limit; each gives one candidate order, priced
afterwards by the simulator. Orders are returned as per-rank lists of action ids of an `Instance`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

from pipesim.ir import Action, F, I, W
from pipesim.synth.problem import Instance

_EPS = 1e-12


@dataclass(frozen=True)
class Policy:
    """How ranks choose (see the module docstring). `warmup[r]` is in microbatches' worth of rank r."""

    warmup: tuple[float, ...]
    w_policy: str = "fit"  # "fit" or "eager"
    w_lag: tuple[int, ...] | None = None  # rank r runs W right after an I once more than w_lag[r] are pending

    def __post_init__(self) -> None:
        assert self.w_policy in ("fit", "eager"), self.w_policy


def policies(inst: Instance) -> Iterator[Policy]:
    """Warm-ups from 1F1B's (p-1-r forwards) past ZB-H2's (2(p-1-r)) up to the memory limit, each with both W
    rules, first with W free to fill gaps, then also run right after an I once k*r are pending (ZB-H1's k = 1,
    ZB-H2's 2); the most promising first, so a short time budget still tries them."""
    p = inst.num_ranks
    capacity = [limit / unit if unit > 0 else math.inf for limit, unit in zip(inst.limit, inst.unit, strict=True)]
    seen = set()
    shapes = [(1.0, 1.0), (2.0, 1.0), (1.0, 0.0), (2.0, 0.0), (1.5, 1.0), (1.0, 2.0), (3.0, 1.0), (0.5, 1.0)]
    shapes += [(a, b) for a in (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0) for b in (0.0, 1.0, 2.0, 3.0)]
    shapes.append((0.0, math.inf))  # fill the memory
    lags: list[tuple[int, ...] | None] = [None, *(tuple(k * r for r in range(p)) for k in (1, 2, 0, 3))]
    for w_lag in lags:
        for slope, offset in shapes:
            warmup = tuple(min(capacity[r], max(1.0, slope * (p - 1 - r) + offset)) for r in range(p))
            for w_policy in ("fit", "eager"):
                if (warmup, w_policy, w_lag) not in seen:
                    seen.add((warmup, w_policy, w_lag))
                    yield Policy(warmup, w_policy, w_lag)


class _State:
    """One list-scheduling run: what has run, where each rank stands."""

    def __init__(self, inst: Instance) -> None:
        self.inst = inst
        n = len(inst.actions)
        self.end = [-1.0] * n
        self.clock = [0.0] * inst.num_ranks
        self.level = [0.0] * inst.num_ranks
        self.reserved = [0.0] * inst.num_ranks  # bytes held back for in-flight microbatches' later stages
        self.orders: list[list[int]] = [[] for _ in range(inst.num_ranks)]
        s, m = inst.num_stages, inst.num_microbatches
        self.ids = {kind: [[inst.index[Action(stage, kind, mb)] for mb in range(m)] for stage in range(s)]
                    for kind in (F, I, W)}  # fmt: skip
        self.next_f = [0] * s
        self.next_i = [0] * s
        self.pending_w: list[list[int]] = [[] for _ in range(inst.num_ranks)]
        stages_of = [[] for _ in range(inst.num_ranks)]
        for stage, rank in enumerate(inst.stage_to_rank):
            stages_of[rank].append(stage)
        self.stages_of = stages_of
        self.stash = [inst.delta[self.ids[F][stage][0]] for stage in range(s)]
        # bytes a microbatch still needs on rank r after its forward on `stage` (its later stages there)
        self.rest = [
            sum(self.stash[t] for t in stages_of[inst.stage_to_rank[stage]] if t > stage) for stage in range(s)
        ]
        self.first_stage = [min(stages) for stages in stages_of]
        self.after_i = [False] * inst.num_ranks  # whether the rank's last action was an I
        self.done = 0

    def arrival(self, i: int) -> float:
        """When action i's inputs are all in (-1 when a producer has not run yet)."""
        inst, rank, latest = self.inst, self.inst.rank[i], 0.0
        for p in inst.producers[i]:
            end = self.end[p]
            if end < 0:
                return -1.0
            if inst.rank[p] != rank:
                end += inst.hop[i]
            if end > latest:
                latest = end
        return latest

    def forward_allowed(self, rank: int, stage: int) -> bool:
        inst = self.inst
        if stage == self.first_stage[rank]:  # a new microbatch on this rank: room for all of it, and the rest
            need = self.level[rank] + self.reserved[rank] + self.stash[stage] + self.rest[stage]
        else:  # its room was reserved when the microbatch arrived
            need = self.level[rank] + self.stash[stage]
        return inst.fits(need, rank)

    def run(self, i: int, start: float) -> None:
        inst = self.inst
        rank, action = inst.rank[i], inst.actions[i]
        self.end[i] = start + inst.duration[i]
        self.clock[rank] = self.end[i]
        self.orders[rank].append(i)
        self.level[rank] += inst.delta[i]
        stage, kind = action.stage, action.kind
        self.after_i[rank] = kind is I
        if kind is F:
            self.next_f[stage] += 1
            if stage == self.first_stage[rank]:
                self.reserved[rank] += self.rest[stage]
            else:
                self.reserved[rank] -= self.stash[stage]
        elif kind is I:
            self.next_i[stage] += 1
            self.pending_w[rank].append(self.ids[W][stage][action.microbatch])
        else:
            self.pending_w[rank].remove(i)
        self.done += 1


def _choose(state: _State, rank: int, policy: Policy) -> tuple[int, float] | None:
    """(action id, start) the policy runs next on `rank`, or None when nothing can be decided yet."""
    inst = state.inst
    m = inst.num_microbatches
    ready_at = state.clock[rank] + inst.gap[rank]
    pending = state.pending_w[rank]
    if policy.w_lag is not None and state.after_i[rank] and len(pending) > policy.w_lag[rank]:
        return pending[0], ready_at  # the W that lags this I by w_lag microbatches, as ZB-H1 and ZB-H2 do
    forwards, backwards = [], []
    for stage in state.stages_of[rank]:
        k = state.next_f[stage]
        if k < m:
            i = state.ids[F][stage][k]
            arrival = state.arrival(i)
            if arrival >= 0 and state.forward_allowed(rank, stage):
                forwards.append((max(ready_at, arrival), -stage, i))
        k = state.next_i[stage]
        if k < m:
            i = state.ids[I][stage][k]
            arrival = state.arrival(i)
            if arrival >= 0:
                backwards.append((max(ready_at, arrival), k, -stage, i))
    forwards.sort()
    backwards.sort()
    now = ready_at + _EPS
    f_now = forwards[0] if forwards and forwards[0][0] <= now else None
    b_now = backwards[0] if backwards and backwards[0][0] <= now else None
    if f_now and b_now:
        warm = policy.warmup[rank] * inst.unit[rank]
        if inst.fits(state.level[rank] + state.stash[-f_now[1]], rank) and (
            state.level[rank] + state.stash[-f_now[1]] <= warm * (1 + 1e-9) + 1e-12
        ):
            return f_now[2], ready_at
        return b_now[-1], ready_at
    if b_now:
        return b_now[-1], ready_at
    if f_now:
        return f_now[2], ready_at
    upcoming = min([c[0] for c in forwards] + [c[0] for c in backwards], default=math.inf)
    if pending:
        w = pending[0]
        if policy.w_policy == "eager" or ready_at + inst.duration[w] <= upcoming + _EPS or upcoming == math.inf:
            return w, ready_at
    if upcoming < math.inf:
        best = min([(c[0], 0, c[-1]) for c in backwards] + [(c[0], 1, c[2]) for c in forwards])
        return best[2], best[0]
    return None


def list_schedule(inst: Instance, policy: Policy, deadline: float = math.inf) -> list[list[int]] | None:
    """Per-rank orders by `policy`; None when the ranks got stuck (no order within the memory limit found) or
    `deadline` (time.monotonic) passed first."""
    state = _State(inst)
    total = len(inst.actions)
    while state.done < total:
        if state.done % 256 == 255 and time.monotonic() > deadline:
            return None
        best: tuple[float, int, int] | None = None
        for rank in range(inst.num_ranks):
            choice = _choose(state, rank, policy)
            if choice is not None and (best is None or choice[1] < best[0]):
                best = (choice[1], rank, choice[0])
        if best is None:
            return None
        state.run(best[2], best[0])
    return state.orders
