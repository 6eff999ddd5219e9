"""The planner's space: what to search (`PlanSpace`), one point of it and what it costs (`Candidate`), and the grid
of every point, each choice a schedule ignores collapsed (`candidate_grid`). `pipesim.plan.search` evaluates it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pipesim.limits import require_items
from pipesim.plan.inputs import PlanInputs
from pipesim.schedules import ScheduleInfo, planned_schedule_names, schedule_info
from pipesim.sim.offload import OFFLOAD_MODES

OFFLOAD_CHOICES = ("auto", *OFFLOAD_MODES)  # what `PlanSpace.offload` and `plan --offload` take


@dataclass(frozen=True)
class PlanSpace:
    """What to search. `w_shares` None means the costs' own W share (used only by split-backward schedules)."""

    schedules: tuple[str, ...] = field(default_factory=planned_schedule_names)  # the registry's `planned`
    microbatch_sizes: tuple[int, ...] = (1, 2, 4)
    chunks: tuple[int, ...] = (1, 2)
    recompute: tuple[bool, ...] = (False, True)
    w_shares: tuple[float | None, ...] = (None,)
    ranks: tuple[int, ...] | None = None  # pipeline depths; None: all devices in one pipeline
    extrapolate: bool = False  # sizes outside a profile's: refused, or (True) planned and marked extrapolated
    # Activation offload (`pipesim.plan.offload`): "auto" tries it on a candidate over the memory cap where the
    # host link is priced; "selective" or "full" on every candidate; "none" never.
    offload: str = "auto"

    def __post_init__(self) -> None:
        require_items(self.schedules, "schedules", str, "schedule names")
        for name, values in (("microbatch_sizes", self.microbatch_sizes), ("chunks", self.chunks)):
            require_items(values, name, int, "whole numbers")
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
        if self.offload not in OFFLOAD_CHOICES:
            raise ValueError(f"unknown offload choice {self.offload!r}; valid: {', '.join(OFFLOAD_CHOICES)}")
        for share in self.w_shares:
            if share is not None and not 0 <= share <= 1:
                raise ValueError(f"a W share is the weight-gradient part of the backward, in 0..1; got {share}")


@dataclass
class Candidate:
    """One point of the space and what it costs; `error` says why it could not be built (then no numbers).

    `step_ms` is the step time as a training loop runs it (`pipesim.sim.steps.step_time_ms`: the actions, the
    unhidden gradient all-reduce, the overhead); the plan JSON also writes it as `makespan_ms`, its older name,
    for one version (deprecated: read `step_ms`).
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
    pruned: str | None = None  # why it was never built: its lower bound cannot reach the plan (pipesim.plan.prune)
    # a synthesized order's own schedule as pipesim's schedule JSON (`formats.schedule_to_dict`): its family name
    # cannot rebuild it, so the plan carries it for `verify-plan` and the executor (None for a registry family)
    schedule_document: dict[str, Any] | None = None
    extrapolated: bool = False  # a microbatch size outside the profiled ones (pipesim.plan.intervals)
    step_ms_p05: float | None = None  # the 90% interval of the sampled steps (pipesim.plan.intervals); None: none
    step_ms_p95: float | None = None
    step_ms_deterministic: float | None = None  # the step of the actions' medians, where step_ms is sampled
    # the schedule with its activations offloaded (`pipesim.sim.offload.with_offload`'s mode; "none": kept on the
    # device) and, offloaded, the most bytes a rank holds in host memory at once
    offload: str = "none"
    peak_host_bytes: float | None = None

    @property
    def built(self) -> bool:
        """Whether it was built and costed (neither refused nor pruned): it has a step time and a memory."""
        return self.error is None and self.pruned is None and self.step_ms is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schedule": self.schedule,
            "ranks": self.ranks,
            "microbatches": self.microbatches,
            "virtual_stages": self.virtual_stages,
            "recompute": self.recompute,
            "split": list(self.split),
            "step_ms": self.step_ms,
            "makespan_ms": self.step_ms,  # deprecated: the same value under its old name, for one version
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
            "extrapolated": self.extrapolated,
            "step_ms_p05": self.step_ms_p05,
            "step_ms_p95": self.step_ms_p95,
            "step_ms_deterministic": self.step_ms_deterministic,
            "pruned": self.pruned,
            "offload": self.offload,
            "peak_host_bytes": self.peak_host_bytes,
            **({} if self.schedule_document is None else {"schedule_document": self.schedule_document}),
        }

    @property
    def label(self) -> str:
        chunks = f" v{self.virtual_stages}" if self.virtual_stages > 1 else ""
        extra = " recompute" if self.recompute else ""
        share = "" if self.w_share is None else f" W {self.w_share:g}"
        dp = f" x{self.data_parallel} DP" if self.data_parallel > 1 else ""
        outside = " extrapolated" if self.extrapolated else ""
        moved = "" if self.offload == "none" else f" offload {self.offload}"
        return (
            f"{self.schedule} P{self.ranks}{dp}{chunks} m{self.microbatches}x{self.microbatch_size}{extra}{share}"
            + moved
            + outside
        )


def candidate_grid(inputs: PlanInputs, space: PlanSpace) -> list[Candidate]:
    """Every point of the space, each choice a schedule ignores collapsed (one candidate, not copies)."""
    grid = []
    for ranks in space.ranks or (inputs.devices,):
        for name in space.schedules:
            info = schedule_info(name)
            chunk_choices = _chunk_choices(space.chunks, info.min_chunks) if info.takes_chunks else (None,)
            shares = space.w_shares if info.split_backward else (None,)
            for mbs in space.microbatch_sizes:
                for chunks in chunk_choices:
                    for recompute in space.recompute:
                        for share in shares:
                            grid.append(_blank(inputs, info, ranks, mbs, chunks, recompute, share))
    return grid


def _chunk_choices(chunks: tuple[int, ...], fewest: int) -> tuple[int, ...]:
    """The chunk counts a family is tried with: those it takes (a default space's 1 is not interleaved-1f1b's);
    all of them when it takes none, so that the plan says why they cannot be built."""
    return tuple(c for c in chunks if c >= fewest) or chunks


def _blank(
    inputs: PlanInputs,
    info: ScheduleInfo,
    ranks: int,
    mbs: int,
    chunks: int | None,
    recompute: bool,
    share: float | None,
) -> Candidate:
    fixed = info.chunks_per_rank()
    dp = inputs.devices // ranks if ranks <= inputs.devices else 0
    replica_batch = inputs.global_batch // dp if dp else 0
    candidate = Candidate(info.name, ranks, max(replica_batch // mbs, 1), chunks or fixed, recompute, mbs, share, dp)
    candidate.extrapolated = inputs.extrapolates(mbs)
    if info.unplanned_because:
        candidate.error = info.unplanned_because
    elif ranks > inputs.devices or inputs.devices % ranks:
        candidate.error = f"{ranks} ranks do not divide {inputs.devices} devices into pipelines"
    elif inputs.global_batch % (dp * mbs):
        candidate.error = (
            f"global batch {inputs.global_batch} does not split into {dp} replica(s) x microbatches of {mbs}"
        )
    return candidate


def shape_key(candidate: Candidate) -> tuple[str, int, int, int]:
    """What a candidate's schedule is built from (name, ranks, microbatches, chunks): candidates sharing it share the
    schedule, its dependencies and its order walk."""
    return (candidate.schedule, candidate.ranks, candidate.microbatches, candidate.virtual_stages)
