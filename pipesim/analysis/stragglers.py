"""Find the straggler in a measured run: which rank or link is slow, by how much, and what it cost the step.

Compute: each measured action's duration over what it should take (the cost model's price for its stage and kind
when the run has one, cost.json; else the median of its kind over every rank: stages of equal cost assumed), then,
per rank and kind, the median of those ratios over the other ranks' median of the same kind. A slow device shows
as every one of its actions (or every one of a kind) taking FACTOR times as long, whatever the load on the
machine does to all ranks alike. The interval is a bootstrap over the actions (5th to 95th percentile).

Links: on the schedule's dependency graph (`pipesim.semantics.dag`), each cross-rank edge whose consumer sat idle
before it started (it waited for that input) shows the transfer's latency: consumer start minus producer end. A
pair of ranks whose median latency exceeds the other pairs' (or, with two ranks, the cost model's transfer) by a
margin is slow, by the difference.

Cost: the run replayed on its schedule with its own median action times (`pipesim.analysis.overlay.replay_cost`)
and the slow link's delay, against the same replay with one straggler removed (`pipesim.cost.perturb`): the step
time it cost. A rank (link) is judged slow only when its interval lies clear of the noise margins below, so a run
without a straggler lists none.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

import numpy as np

from pipesim.analysis.overlay import replay_cost
from pipesim.cost.links import LinkCost
from pipesim.cost.model import CostModel
from pipesim.cost.perturb import Perturbation
from pipesim.ir import ActionKind, Schedule
from pipesim.records import Timeline
from pipesim.semantics.dag import dependencies

MIN_FACTOR = 1.08  # a rank (kind) this much slower than the others, at least, and
MIN_FACTOR_LOW = 1.04  # its interval's low end above this, is a straggler
MIN_DELAY_MS = 0.5  # a link this much slower, and
MIN_DELAY_LOW_MS = 0.25  # its interval's low end above this, is slow
RESAMPLES = 300
COMPUTE_KINDS = (ActionKind.FORWARD, ActionKind.BACKWARD, ActionKind.BACKWARD_INPUT, ActionKind.BACKWARD_WEIGHT)


@dataclass(frozen=True)
class RankEstimate:
    """A rank's compute speed against the others: `factor` (1: as fast), its interval, the kind it was read from
    (the kind with the strongest evidence), what it cost the step, and the verdict."""

    rank: int
    factor: float
    factor_low: float
    factor_high: float
    kind: str
    cost_ms: float = 0.0
    slow: bool = False

    def to_dict(self) -> dict:
        return {
            "rank": self.rank,
            "factor": self.factor,
            "factor_low": self.factor_low,
            "factor_high": self.factor_high,
            "cost_ms": self.cost_ms,
        }


@dataclass(frozen=True)
class LinkEstimate:
    """A pair of ranks' extra latency over the other pairs' (ms), its interval, its cost to the step, the verdict."""

    src: int
    dst: int
    delay_ms: float
    delay_low_ms: float
    delay_high_ms: float
    waits: int  # edges whose consumer waited: the evidence
    cost_ms: float = 0.0
    slow: bool = False

    def to_dict(self) -> dict:
        return {
            "src": self.src,
            "dst": self.dst,
            "delay_ms": self.delay_ms,
            "delay_low_ms": self.delay_low_ms,
            "delay_high_ms": self.delay_high_ms,
            "cost_ms": self.cost_ms,
        }


@dataclass(frozen=True)
class StragglerReport:
    """Every rank's and link's estimate; `to_dict` lists only those judged slow (the `--json` document)."""

    ranks: tuple[RankEstimate, ...]
    links: tuple[LinkEstimate, ...]
    basis: str  # what an action's duration was compared with: the cost model, or the other ranks' same kind
    step_ms: float | None = None  # the replayed step the costs are counted against
    notes: tuple[str, ...] = field(default=())

    @property
    def stragglers(self) -> list[RankEstimate]:
        return [r for r in self.ranks if r.slow]

    @property
    def slow_links(self) -> list[LinkEstimate]:
        return [link for link in self.links if link.slow]

    def to_dict(self) -> dict:
        return {"stragglers": [r.to_dict() for r in self.stragglers], "links": [k.to_dict() for k in self.slow_links]}

    def lines(self) -> list[str]:
        """The verdict in words, then every rank's and link's estimate."""
        out = []
        for r in self.stragglers:
            out.append(
                f"straggler: rank {r.rank} computes {r.factor:.3f}x slower ({r.factor_low:.3f} to {r.factor_high:.3f}, "
                f"read from its {r.kind} actions); it cost the step {r.cost_ms:.3f} ms"
            )
        for k in self.slow_links:
            out.append(
                f"slow link: ranks {k.src}-{k.dst} take {k.delay_ms:.3f} ms longer per transfer "
                f"({k.delay_low_ms:.3f} to {k.delay_high_ms:.3f}); it cost the step {k.cost_ms:.3f} ms"
            )
        if not out:
            out.append("no straggler: every rank and link is within the noise of the others")
        out.append(f"per rank (against {self.basis}):")
        out += [
            f"  rank {r.rank}: {r.factor:.3f}x [{r.factor_low:.3f}, {r.factor_high:.3f}] ({r.kind})" for r in self.ranks
        ]
        out += [
            f"  link {k.src}-{k.dst}: {k.delay_ms:+.3f} ms [{k.delay_low_ms:+.3f}, {k.delay_high_ms:+.3f}] "
            f"over {k.waits} waits"
            for k in self.links
        ]
        return out + list(self.notes)


def describe(found: dict) -> list[str]:
    """The `to_dict` document (analysis.json's "stragglers") in words: one line per straggler and slow link, or the
    line that says none was found."""
    lines = [
        f"rank {r['rank']} computes {r['factor']:.2f}x slower ({r['factor_low']:.2f} to {r['factor_high']:.2f}); "
        f"it cost the step {r['cost_ms']:.2f} ms"
        for r in found.get("stragglers", ())
    ]
    lines += [
        f"link {k['src']}-{k['dst']} takes {k['delay_ms']:.2f} ms longer per transfer ({k['delay_low_ms']:.2f} to "
        f"{k['delay_high_ms']:.2f}); it cost the step {k['cost_ms']:.2f} ms"
        for k in found.get("links", ())
    ]
    return lines or ["no straggler: every rank and link is within the noise of the others"]


def _median_ratio(rng: np.random.Generator, mine: np.ndarray, others: np.ndarray) -> tuple[float, float, float]:
    """median(mine) / median(others), and its bootstrap 5th and 95th percentiles."""
    point = float(np.median(mine) / np.median(others))
    a = rng.choice(mine, size=(RESAMPLES, mine.size))
    b = rng.choice(others, size=(RESAMPLES, others.size))
    boot = np.median(a, axis=1) / np.median(b, axis=1)
    return point, float(np.percentile(boot, 5)), float(np.percentile(boot, 95))


def _median_diff(rng: np.random.Generator, mine: np.ndarray, base: np.ndarray | float) -> tuple[float, float, float]:
    """median(mine) - median(base) (a fixed base: the cost model's), with its bootstrap interval."""
    a = np.median(rng.choice(mine, size=(RESAMPLES, mine.size)), axis=1)
    if isinstance(base, np.ndarray):
        point = float(np.median(mine) - np.median(base))
        boot = a - np.median(rng.choice(base, size=(RESAMPLES, base.size)), axis=1)
    else:
        point, boot = float(np.median(mine) - base), a - base
    return point, float(np.percentile(boot, 5)), float(np.percentile(boot, 95))


def rank_estimates(
    schedule: Schedule, measured: Timeline, cost: CostModel | None, rng: np.random.Generator
) -> tuple[list[RankEstimate], str]:
    """Per rank, its slowdown against the other ranks (see the module docstring), from the kind that says most."""
    durations: dict[ActionKind, list[float]] = {}
    for span in measured.spans:
        durations.setdefault(span.action.kind, []).append(span.end - span.start)
    typical = {kind: statistics.median(values) for kind, values in durations.items()}

    def expected(stage: int, kind: ActionKind) -> float:
        return cost.duration_ms(stage, kind) if cost is not None else typical[kind]

    ratios: dict[tuple[int, ActionKind], list[float]] = {}
    for span in measured.spans:
        kind = span.action.kind
        if kind not in COMPUTE_KINDS:
            continue
        price = expected(span.action.stage, kind)
        if price > 0:
            ratios.setdefault((span.rank, kind), []).append((span.end - span.start) / price)
    estimates = []
    for rank in range(schedule.num_ranks):
        best: tuple[float, float, float, str] | None = None
        for kind in COMPUTE_KINDS:
            mine = ratios.get((rank, kind))
            others = [v for r in range(schedule.num_ranks) if r != rank for v in ratios.get((r, kind), ())]
            if not mine or not others:
                continue
            factor, low, high = _median_ratio(rng, np.asarray(mine), np.asarray(others))
            if best is None or low > best[1]:
                best = (factor, low, high, kind.value)
        if best is not None:
            factor, low, high, kind_text = best
            slow = factor >= MIN_FACTOR and low > MIN_FACTOR_LOW
            estimates.append(RankEstimate(rank, factor, low, high, kind_text, slow=slow))
    basis = "the cost model's price per stage and kind" if cost is not None else "the other ranks' same-kind actions"
    return estimates, basis


def link_latencies(schedule: Schedule, measured: Timeline) -> dict[tuple[int, int], list[float]]:
    """Per pair of ranks (low, high), the latencies of the cross-rank edges whose consumer waited for its input."""
    deps = dependencies(schedule)
    spans = {(s.step, s.replica, s.action): s for s in measured.spans}
    keys = sorted({(s.step, s.replica) for s in measured.spans})
    gaps = []
    for step, replica in keys:
        for rank in range(deps.num_ranks):
            for i in range(deps.offsets[rank] + 1, deps.offsets[rank + 1]):
                a, b = spans.get((step, replica, deps.actions[i - 1])), spans.get((step, replica, deps.actions[i]))
                if a is not None and b is not None:
                    gaps.append(b.start - a.end)
    dispatch = statistics.median(gaps) if gaps else 0.0
    latencies: dict[tuple[int, int], list[float]] = {}
    for step, replica in keys:
        for i, producers in enumerate(deps.deps):
            consumer = spans.get((step, replica, deps.actions[i]))
            if consumer is None:
                continue
            rank = deps.ranks[i]
            first = i == deps.offsets[rank]
            previous = None if first else spans.get((step, replica, deps.actions[i - 1]))
            idle_from = 0.0 if previous is None else previous.end
            for d in producers:
                if d >= len(deps.actions):  # a RELOAD: the rank's own copy engine, not a link
                    continue
                producer = spans.get((step, replica, deps.actions[d]))
                if deps.ranks[d] == rank or producer is None:
                    continue
                # waited: idle before it longer than a dispatch gap, and its input the last thing it waited for
                if consumer.start - idle_from > dispatch + 0.1 and producer.end >= idle_from:
                    pair = (min(rank, deps.ranks[d]), max(rank, deps.ranks[d]))
                    latencies.setdefault(pair, []).append(consumer.start - producer.end)
    return latencies


def link_estimates(
    schedule: Schedule, measured: Timeline, cost: CostModel | None, rng: np.random.Generator
) -> list[LinkEstimate]:
    """Per pair of ranks with waits, its extra latency over the other pairs' (or the cost model's transfer)."""
    latencies = link_latencies(schedule, measured)
    estimates = []
    for pair, values in sorted(latencies.items()):
        others = [v for p, vs in latencies.items() if p != pair for v in vs]
        if others:
            base: np.ndarray | float = np.asarray(others)
        elif cost is not None:
            boundary = next(
                (b for b in range(schedule.num_stages - 1)
                 if {schedule.stage_to_rank[b], schedule.stage_to_rank[b + 1]} == set(pair)),
                0,
            )  # fmt: skip
            base = cost.transfer_ms(boundary, boundary + 1)
        else:
            continue  # one pair, no price: nothing to compare its latency with
        delay, low, high = _median_diff(rng, np.asarray(values), base)
        slow = delay >= MIN_DELAY_MS and low > MIN_DELAY_LOW_MS
        estimates.append(LinkEstimate(pair[0], pair[1], delay, low, high, len(values), slow=slow))
    return estimates


def find_stragglers(
    schedule: Schedule, measured: Timeline, cost: CostModel | None = None, *, seed: int = 0
) -> StragglerReport:
    """Which rank or link of a measured run (the executor's, or imported traces') is slow, by how much, and what it
    cost the step; `cost` (the run's cost.json), when given, prices each stage and kind, else stages of equal cost
    are assumed."""
    if not measured.spans:
        raise ValueError("the measured timeline has no actions: nothing to find a straggler in")
    rng = np.random.default_rng(seed)
    cut = None if cost is None else cost.for_pipeline(schedule.num_stages, schedule.num_ranks)
    if cut is not None:
        cut.check_fits(schedule)
    ranks, basis = rank_estimates(schedule, measured, cut, rng)
    links = link_estimates(schedule, measured, cut, rng)
    return _with_costs(schedule, measured, cut, StragglerReport(tuple(ranks), tuple(links), basis))


def _with_costs(
    schedule: Schedule, measured: Timeline, cost: CostModel | None, report: StragglerReport
) -> StragglerReport:
    """Each straggler's cost: the replayed step, less the same replay with that one straggler removed."""
    from pipesim.sim.steps import simulate_step

    slow_ranks, slow_links = report.stragglers, report.slow_links
    if not slow_ranks and not slow_links:
        return report
    replay = replay_cost(measured, cost if cost is not None else CostModel.uniform())
    slow_pairs = {(k.src, k.dst) for k in slow_links}
    plain = [v for p, vs in link_latencies(schedule, measured).items() if p not in slow_pairs for v in vs]
    replay = replace(replay, links=(LinkCost(latency_ms=max(statistics.median(plain), 0.0) if plain else 0.0),))
    delays = Perturbation((), tuple((k.src, k.dst, k.delay_ms) for k in slow_links))
    step = simulate_step(schedule, delays.apply(replay, schedule.stage_to_rank)).step_ms

    def without(perturbation: Perturbation) -> float:
        return step - simulate_step(schedule, perturbation.apply(replay, schedule.stage_to_rank)).step_ms

    ranks = tuple(
        replace(r, cost_ms=without(Perturbation(((r.rank, 1 / r.factor),), delays.link_delays))) if r.slow else r
        for r in report.ranks
    )
    links = tuple(
        replace(k, cost_ms=without(Perturbation((), tuple(d for d in delays.link_delays if d[:2] != (k.src, k.dst)))))
        if k.slow
        else k
        for k in report.links
    )
    return replace(report, ranks=ranks, links=links, step_ms=step)
