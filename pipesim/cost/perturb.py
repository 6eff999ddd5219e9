"""Stragglers and uneven devices as a change of costs: a slow rank, a slow link.

A `Perturbation` is the one rule of what "rank R is FACTOR times slower" and "the link between ranks A and B takes
MS longer" mean, written as a change of a `CostModel`: every stage rank R holds has its F/B/W times (so also its
recomputed forward and its share of an overlapped pair) multiplied by FACTOR, and every stage boundary whose two
stages sit on ranks A and B has MS added to its latency. The simulator, `compare`'s sensitivities, the planner and
the executor's prediction all simulate the perturbed cost model, so they price a straggler the same way, and a
slow rank gives exactly the step that per-stage costs scaled on that rank's stages give (it *is* that cost model).

Apply it last, to the cost model already cut for the schedule (`CostModel.for_pipeline`): the perturbed model has
one cost per stage and one link per boundary, so nothing re-cuts it afterwards.

The text forms (`R:FACTOR`, `A-B:MS`) are parsed here too, strictly, so the CLI, the executor's `--inject` and the
API read them alike.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from pipesim.cost.links import LinkCost
from pipesim.cost.model import CostModel
from pipesim.cost.stage import StageCost
from pipesim.limits import MAX_TIME_MS, require_items

MAX_FACTOR = 1000.0  # a slowdown beyond this is a dead device, not a straggler
KIND_LETTERS = "FBIW"  # F forward; B the whole backward (I and W); I its input part; W its weight part
_PARTS = {"F": "F", "B": "IW", "I": "I", "W": "W"}  # the parts of a stage's work each letter slows


@dataclass(frozen=True)
class Perturbation:
    """Per-rank compute slowdowns and per-link extra latencies.

    `slow_ranks`: (rank, factor) pairs, factor > 0 (1 changes nothing; below 1 a faster rank). `slow_actions`:
    (rank, kinds, factor), only those kinds (letters of FBIW) slower. `link_delays`: (rank a, rank b, ms) with
    a < b, ms >= 0, added to every transfer between the two ranks, either direction. A rank (a link) named twice
    multiplies (adds) its entries.
    """

    slow_ranks: tuple[tuple[int, float], ...] = ()
    link_delays: tuple[tuple[int, int, float], ...] = ()
    slow_actions: tuple[tuple[int, str, float], ...] = ()  # (rank, kinds, factor): only those kinds are slow

    def __post_init__(self) -> None:
        require_items(self.slow_ranks, "slow_ranks", (tuple, list), "(rank, factor) pairs")
        require_items(self.link_delays, "link_delays", (tuple, list), "(rank a, rank b, ms) triples")
        require_items(self.slow_actions, "slow_actions", (tuple, list), "(rank, kinds, factor) triples")
        for rank, kinds, _factor in self.slow_actions:
            if not (isinstance(kinds, str) and kinds and set(kinds) <= set(KIND_LETTERS)):
                raise ValueError(f"rank {rank}'s slow kinds must be letters of {KIND_LETTERS}, got {kinds!r}")
        for entry in (*self.slow_ranks, *((r, f) for r, _, f in self.slow_actions)):
            rank, factor = entry
            if not (isinstance(rank, int) and rank >= 0):
                raise ValueError(f"a slow rank must be a rank number >= 0, got {rank!r}")
            if not (isinstance(factor, (int, float)) and math.isfinite(factor) and 0 < factor <= MAX_FACTOR):
                raise ValueError(
                    f"rank {rank}'s slowdown factor must be a number in (0, {MAX_FACTOR:g}], got {factor!r}"
                )
        for entry in self.link_delays:
            a, b, ms = entry
            if not (isinstance(a, int) and isinstance(b, int) and 0 <= a < b):
                raise ValueError(f"a delayed link joins two different ranks A < B, got {a!r}-{b!r}")
            if not (isinstance(ms, (int, float)) and math.isfinite(ms) and 0 <= ms <= MAX_TIME_MS):
                raise ValueError(f"link {a}-{b}'s delay must be a number of ms in [0, {MAX_TIME_MS:g}], got {ms!r}")

    def __bool__(self) -> bool:
        return bool(self.slow_ranks or self.link_delays or self.slow_actions)

    def kind_factors(self, rank: int) -> dict[str, float]:
        """Rank `rank`'s scale of each part of the work: F (forward), I and W (the backward's two parts)."""
        scale = {"F": 1.0, "I": 1.0, "W": 1.0}
        entries = [(r, KIND_LETTERS, f) for r, f in self.slow_ranks] + list(self.slow_actions)
        for slow, kinds, factor in entries:
            if slow == rank:
                for part in set().union(*(_PARTS[letter] for letter in kinds)):
                    scale[part] *= factor
        return scale

    def link_extra_ms(self) -> dict[frozenset[int], float]:
        """Per pair of ranks, the latency added to each transfer between them."""
        extra: dict[frozenset[int], float] = {}
        for a, b, ms in self.link_delays:
            key = frozenset((a, b))
            extra[key] = extra.get(key, 0.0) + ms
        return extra

    def check_ranks(self, num_ranks: int) -> None:
        """ValueError naming the first rank that the pipeline does not have."""
        named = [r for r, _ in self.slow_ranks] + [r for a, b, _ in self.link_delays for r in (a, b)]
        named += [r for r, _, _ in self.slow_actions]
        for rank in named:
            if rank >= num_ranks:
                raise ValueError(f"rank {rank} is not in a pipeline of {num_ranks} ranks: give 0 to {num_ranks - 1}")

    def folded(self, num_ranks: int) -> Perturbation:
        """Device numbers taken as pipeline positions (device d is rank d mod num_ranks of its replica): how the
        planner reads a straggler among its devices for candidates of every depth. A link folded onto one rank
        carries no transfer and is dropped."""
        slow = tuple((r % num_ranks, f) for r, f in self.slow_ranks)
        actions = tuple((r % num_ranks, k, f) for r, k, f in self.slow_actions)
        links = tuple(
            (min(a % num_ranks, b % num_ranks), max(a % num_ranks, b % num_ranks), ms)
            for a, b, ms in self.link_delays
            if a % num_ranks != b % num_ranks
        )
        return Perturbation(slow, links, actions)

    def apply(self, cost: CostModel, stage_to_rank: Sequence[int]) -> CostModel:
        """The cost model with this perturbation priced in, for a schedule whose stage s sits on
        `stage_to_rank[s]` (`cost` already cut for it). Without entries, `cost` itself."""
        if not self:
            return cost
        num_stages = len(stage_to_rank)
        num_ranks = max(stage_to_rank) + 1
        self.check_ranks(num_ranks)
        scales = [self.kind_factors(rank) for rank in range(num_ranks)]
        if len(cost.stages) not in (1, num_stages):
            raise ValueError(f"the cost model has {len(cost.stages)} stages for {num_stages}: cut it first")
        stages = tuple(scaled(cost.stage(s), scales[stage_to_rank[s]]) for s in range(num_stages))
        extra = self.link_extra_ms()
        links: tuple[LinkCost, ...] = cost.links
        if extra and num_stages > 1:
            links = tuple(
                _delayed(cost.link(b), extra.get(frozenset((stage_to_rank[b], stage_to_rank[b + 1])), 0.0))
                for b in range(num_stages - 1)
            )
        meta = {**cost.meta, "perturbation": self.to_dict()}
        return replace(cost, stages=stages, links=links, provenance=replace(cost.provenance, meta=meta))

    def describe(self) -> str:
        """In words, for a run's page and summary: "rank 1 1.5x slower; link 2-3 +3 ms"."""
        parts = [f"rank {r} {f:g}x slower" for r, f in self.slow_ranks]
        parts += [f"rank {r} {f:g}x slower in {k}" for r, k, f in self.slow_actions]
        parts += [f"link {a}-{b} +{ms:g} ms per transfer" for a, b, ms in self.link_delays]
        return "; ".join(parts) or "nothing"

    def to_dict(self) -> dict:
        """The JSON form (config.json, measured.json meta, the CLI's JSON)."""
        doc = {
            "slow_ranks": [{"rank": r, "factor": f} for r, f in self.slow_ranks],
            "link_delays": [{"src": a, "dst": b, "ms": ms} for a, b, ms in self.link_delays],
        }
        if self.slow_actions:
            doc["slow_actions"] = [{"rank": r, "kinds": k, "factor": f} for r, k, f in self.slow_actions]
        return doc

    @classmethod
    def from_dict(cls, data: object) -> Perturbation:
        """Back from `to_dict`; ValueError on anything else."""
        if not isinstance(data, dict):
            raise ValueError(f"a perturbation is an object with slow_ranks and link_delays, got {type(data).__name__}")
        try:
            slow = tuple((int(e["rank"]), float(e["factor"])) for e in data.get("slow_ranks", ()))
            links = tuple((int(e["src"]), int(e["dst"]), float(e["ms"])) for e in data.get("link_delays", ()))
            actions = tuple((int(e["rank"]), str(e["kinds"]), float(e["factor"])) for e in data.get("slow_actions", ()))
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"a perturbation's entries need rank/factor and src/dst/ms: {error}") from None
        return cls(slow, links, actions)

    @classmethod
    def parse(cls, slow_ranks: Iterable[str] = (), link_delays: Iterable[str] = ()) -> Perturbation:
        """From the text forms `R:FACTOR[:KINDS]` and `A-B:MS` (ValueError naming the bad text and what is valid)."""
        return cls.of(tuple(parse_slow_rank(t) for t in slow_ranks), tuple(parse_link_delay(t) for t in link_delays))

    @classmethod
    def of(cls, slow: Iterable[tuple], links: Iterable[tuple[int, int, float]]) -> Perturbation:
        """From parsed entries: (rank, factor) slow in everything, (rank, factor, kinds) in those kinds only."""
        slow = tuple(slow)
        whole = tuple(e for e in slow if len(e) == 2)
        parts = tuple((e[0], e[2], e[1]) for e in slow if len(e) == 3)
        return cls(whole, tuple(links), parts)


def scaled(stage: StageCost, scale: dict[str, float]) -> StageCost:
    """A stage's forward, input-gradient and weight-gradient times scaled (`kind_factors`; bytes unchanged)."""
    f, i, w = scale["F"], scale["I"], scale["W"]
    if f == i == w == 1.0:
        return stage
    if i == w:  # the whole backward alike: a measured split, or none, stays as it is
        weight = None if stage.weight_ms is None else stage.weight_ms * w
        return replace(stage, forward_ms=stage.forward_ms * f, backward_ms=stage.backward_ms * i, weight_ms=weight)
    return replace(
        stage, forward_ms=stage.forward_ms * f, backward_ms=stage.i_ms * i + stage.w_ms * w, weight_ms=stage.w_ms * w
    )


def _delayed(link: LinkCost, extra_ms: float) -> LinkCost:
    return link if extra_ms == 0 else replace(link, latency_ms=min(link.latency_ms + extra_ms, MAX_TIME_MS))


def _number(text: str, what: str, valid: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"{what} must be {valid}, got {text!r}")
    return value


def _rank(text: str, what: str) -> int:
    if not text.strip().isdigit():
        raise ValueError(f"{what} must be a rank number >= 0, got {text!r}")
    return int(text)


def parse_slow_rank(text: str) -> tuple:
    """`R:FACTOR`, e.g. `2:1.5` (rank 2 computes 1.5x slower): (rank, factor); `R:FACTOR:KINDS`, e.g. `2:1.5:W`
    (only its W, letters of FBIW): (rank, factor, kinds)."""
    rank_text, sep, factor_text = str(text).partition(":")
    if not sep:
        raise ValueError(f"a slow rank is R:FACTOR or R:FACTOR:KINDS (e.g. 2:1.5, 2:1.5:W), got {text!r}")
    factor_text, colon, kinds = factor_text.partition(":")
    if colon and not (kinds and set(kinds) <= set(KIND_LETTERS)):
        raise ValueError(f"the kinds of {text!r} must be letters of {KIND_LETTERS} (e.g. W, FB), got {kinds!r}")
    rank = _rank(rank_text, f"the rank of {text!r}")
    factor = _number(factor_text, f"the factor of {text!r}", f"a finite number in (0, {MAX_FACTOR:g}]")
    if not 0 < factor <= MAX_FACTOR:
        raise ValueError(f"the factor of {text!r} must be a finite number in (0, {MAX_FACTOR:g}], got {factor_text!r}")
    return (rank, factor, kinds) if colon else (rank, factor)


def parse_link_delay(text: str) -> tuple[int, int, float]:
    """`A-B:MS`, e.g. `1-2:5` (every transfer between ranks 1 and 2 takes 5 ms longer); stored with A < B."""
    pair, sep, ms_text = str(text).partition(":")
    a_text, dash, b_text = pair.partition("-")
    if not sep or not dash:
        raise ValueError(f"a link delay is A-B:MS (e.g. 1-2:5), got {text!r}")
    a, b = _rank(a_text, f"rank A of {text!r}"), _rank(b_text, f"rank B of {text!r}")
    if a == b:
        raise ValueError(f"a link joins two different ranks, got {text!r}")
    ms = _number(ms_text, f"the delay of {text!r}", f"a finite number of ms in [0, {MAX_TIME_MS:g}]")
    if not 0 <= ms <= MAX_TIME_MS:
        raise ValueError(
            f"the delay of {text!r} must be a finite number of ms in [0, {MAX_TIME_MS:g}], got {ms_text!r}"
        )
    return min(a, b), max(a, b), ms
