"""Cost models: how long each action takes, how much it stashes, what a transfer costs.

The cost model is separate from the simulation engine. Its sources are plain
numbers (`CostModel.uniform`, `cost_from_times`), per-stage lists
(`CostModel.per_stage`), a model description (`ModelDescription.to_cost_model`),
measured action times (`measured_stage_cost`, used by the profile and the replay)
and the cost file that the executor's profile run writes (`pipesim.cost_file`).

Units: times in milliseconds, sizes in bytes, bandwidth in GB/s (10^9 bytes/s).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from pipesim.cost.collectives import CollectiveCost
from pipesim.cost.links import LinkCost
from pipesim.ir import ActionKind, CommKind, Schedule

if TYPE_CHECKING:  # a cost model remembers the description it came from; the description builds cost models
    from pipesim.cost.description import ModelDescription


@dataclass(frozen=True)
class StageCost:
    """Per-microbatch costs of one stage.

    `backward_ms` is the full backward B. `weight_ms` is the part of it that
    computes weight gradients (W); the input-gradient part is I = B - W.
    `activation_bytes` is what F stashes until the backward frees it;
    `weight_grad_bytes` is the part of it that only W still needs (freed by W
    when the backward is split). `input_bytes` is the stage input, the only
    thing stashed under recomputation. `output_bytes` crosses the boundary to
    the next stage (and the same size of gradient comes back).
    """

    forward_ms: float
    backward_ms: float
    weight_ms: float | None = None
    activation_bytes: float = 0.0
    weight_grad_bytes: float | None = None
    input_bytes: float = 0.0
    output_bytes: float = 0.0
    param_bytes: float = 0.0

    def __post_init__(self) -> None:
        for name in ("forward_ms", "backward_ms", "activation_bytes", "input_bytes", "output_bytes", "param_bytes"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.weight_ms is not None and not 0 <= self.weight_ms <= self.backward_ms:
            raise ValueError(
                f"weight_ms ({self.weight_ms}) must lie between 0 and backward_ms ({self.backward_ms}): "
                "W is the weight-gradient part of the full backward"
            )
        if self.weight_grad_bytes is not None and not 0 <= self.weight_grad_bytes <= self.activation_bytes:
            raise ValueError("weight_grad_bytes must lie between 0 and activation_bytes")

    @property
    def w_ms(self) -> float:
        """W time; without a measured split, half the backward (the usual estimate)."""
        return self.backward_ms / 2 if self.weight_ms is None else self.weight_ms

    @property
    def i_ms(self) -> float:
        return self.backward_ms - self.w_ms

    @property
    def w_bytes(self) -> float:
        """Bytes held from the end of I until W; half the activations unless measured."""
        return self.activation_bytes / 2 if self.weight_grad_bytes is None else self.weight_grad_bytes


@dataclass(frozen=True)
class CostModel:
    """Costs for every stage and boundary.

    A single entry in `stages` (or `links`) applies to every stage (boundary),
    so one uniform model fits schedules of any size. Otherwise there must be
    one entry per stage (and one link per boundary, num_stages - 1).
    `recompute` makes every backward pay its forward again while only stage
    inputs stay stashed. `step_overhead_ms` is the time each rank spends per
    step outside the schedule's actions (optimizer step, gradient zeroing; one
    value for every rank, or one per rank), which a profile run measures.
    `dispatch_ms` is the gap a rank's runtime leaves before each action it
    starts (Python dispatch, posting receives, timing marks; one value or one
    per rank, as for the overhead): small per action, but paid once per action
    on the critical path, so a step of hundreds of actions feels it.
    `shared_cores` is how many ranks can compute at full speed at once when the
    ranks share one machine's cores (CPU ranks: cores / threads per rank); None
    means one device per rank. With fewer than the ranks, the simulation shares
    them (pipesim.shared_cores) and the stage costs are full-speed times.
    `data_parallel` is how many replicas of the pipeline train together: after a stage's last backward its
    gradients (`param_bytes`) are all-reduced over that many ranks through `dp_link` (pipesim.collectives,
    pipesim.data_parallel); 1 means no data parallelism.
    `description` is the model description the costs were computed from, so
    that `for_stages` can re-cut it layer by layer. `meta` holds provenance
    only (what was measured, where); nothing reads it to compute.
    `overlap_factor` prices torch's overlapped forward-backward pairs (OVERLAP_F_B): a pair takes
    overlap_factor x (F + B), 1 meaning no overlap at all. `sharded` says the data-parallel replicas shard
    the parameters (FSDP). torch's REDUCE_GRAD, UNSHARD and RESHARD, where a schedule states them, are priced
    from the same group (`collectives`, derived: `pipesim.collectives`; zero without data parallelism), so
    one description of the group serves both.
    """

    stages: tuple[StageCost, ...]
    links: tuple[LinkCost, ...] = (LinkCost(),)
    recompute: bool = False
    source: str = "uniform"
    step_overhead_ms: tuple[float, ...] = ()
    dispatch_ms: tuple[float, ...] = ()
    shared_cores: int | None = None
    description: ModelDescription | None = None
    data_parallel: int = 1
    dp_link: LinkCost = field(default_factory=LinkCost)
    meta: dict = field(default_factory=dict, compare=False)
    overlap_factor: float = 1.0
    sharded: bool = False

    def __post_init__(self) -> None:
        if not (isinstance(self.overlap_factor, (int, float)) and 0 < self.overlap_factor <= 1):
            raise ValueError(
                f"overlap_factor must lie in (0, 1] (1: a pair takes F + B, no overlap), got {self.overlap_factor!r}"
            )
        if not self.stages:
            raise ValueError("a cost model needs at least one stage cost")
        if not self.links:
            raise ValueError("a cost model needs at least one link cost")
        if self.shared_cores is not None and (
            isinstance(self.shared_cores, bool) or not isinstance(self.shared_cores, int) or self.shared_cores < 1
        ):
            raise ValueError(f"shared_cores must be a positive integer or None, got {self.shared_cores!r}")
        if isinstance(self.data_parallel, bool) or not isinstance(self.data_parallel, int) or self.data_parallel < 1:
            raise ValueError(f"data_parallel must be a positive integer, got {self.data_parallel!r}")
        if not isinstance(self.sharded, bool):
            raise ValueError(f"sharded must be true or false, got {self.sharded!r}")
        for name in ("step_overhead_ms", "dispatch_ms"):
            values = getattr(self, name)
            if not all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for v in values):
                raise ValueError(f"{name} must hold finite numbers >= 0, got {list(values)}")

    def overhead_ms(self, num_ranks: int) -> tuple[float, ...]:
        """Per rank, the step's time outside the actions (zeros when none was measured)."""
        return _per_rank(self.step_overhead_ms, num_ranks, "step_overhead_ms")

    def dispatch_per_rank(self, num_ranks: int) -> tuple[float, ...]:
        """Per rank, the gap before each action (zeros when none was measured)."""
        return _per_rank(self.dispatch_ms, num_ranks, "dispatch_ms")

    # --- constructors ---------------------------------------------------
    @classmethod
    def uniform(
        cls,
        forward_ms: float = 1.0,
        backward_ms: float = 2.0,
        weight_ms: float | None = None,
        comm_ms: float = 0.0,
        activation_bytes: float = 1.0,
        recompute: bool = False,
    ) -> CostModel:
        """The same F/B/W times for every stage; `comm_ms` per cross-rank transfer.

        `activation_bytes` defaults to 1 so memory charts count stashed microbatches.
        """
        stage = StageCost(
            forward_ms=forward_ms,
            backward_ms=backward_ms,
            weight_ms=weight_ms,
            activation_bytes=activation_bytes,
            input_bytes=activation_bytes,
        )
        return cls(stages=(stage,), links=(LinkCost(latency_ms=comm_ms),), recompute=recompute, source="uniform")

    @classmethod
    def per_stage(
        cls,
        forward_ms: Sequence[float],
        backward_ms: Sequence[float],
        weight_ms: Sequence[float] | None = None,
        comm_ms: float | Sequence[float] = 0.0,
        activation_bytes: Sequence[float] | None = None,
        recompute: bool = False,
    ) -> CostModel:
        """Heterogeneous stages: one value per stage in each list."""
        count = len(forward_ms)
        lists = {"backward_ms": backward_ms, "weight_ms": weight_ms, "activation_bytes": activation_bytes}
        for name, values in lists.items():
            if values is not None and len(values) != count:
                raise ValueError(f"{name} has {len(values)} values but forward_ms has {count}: give one per stage")
        stages = tuple(
            StageCost(
                forward_ms=forward_ms[s],
                backward_ms=backward_ms[s],
                weight_ms=None if weight_ms is None else weight_ms[s],
                activation_bytes=1.0 if activation_bytes is None else activation_bytes[s],
                input_bytes=1.0 if activation_bytes is None else activation_bytes[s],
            )
            for s in range(count)
        )
        if isinstance(comm_ms, (int, float)):
            links: tuple[LinkCost, ...] = (LinkCost(latency_ms=float(comm_ms)),)
        else:
            links = tuple(LinkCost(latency_ms=c) for c in comm_ms)
        return cls(stages=stages, links=links, recompute=recompute, source="per-stage")

    def with_recompute(self, recompute: bool) -> CostModel:
        return replace(self, recompute=recompute)

    def for_stages(self, num_stages: int, base_stages: int) -> CostModel:
        """This model, read as the pipeline cut into `base_stages` stages, re-cut into `num_stages`.

        Comparing schedules means comparing one model on one set of ranks: when
        an interleaved or V schedule cuts each rank's share into v chunks, each
        chunk does 1/v of the compute and stashes 1/v of the activations, while
        what crosses a boundary (the hidden state) keeps its size. Stage s of
        the new cut is the (s mod v)-th piece of base stage s // v. A model
        description is re-cut exactly, layer by layer.
        """
        if num_stages == base_stages:
            return self
        if self.description is not None:
            recut = self.description.to_cost_model(num_stages, self.recompute)
            return replace(
                recut,
                step_overhead_ms=self.step_overhead_ms,
                dispatch_ms=self.dispatch_ms,
                shared_cores=self.shared_cores,
                data_parallel=self.data_parallel,
                dp_link=self.dp_link,
            )
        if num_stages % base_stages:
            raise ValueError(
                f"cannot cut a {base_stages}-stage cost model into {num_stages} stages: "
                f"give a multiple of {base_stages}, or one cost per stage"
            )
        if len(self.stages) not in (1, base_stages):
            raise ValueError(f"the cost model has {len(self.stages)} stages, expected 1 or {base_stages}")
        pieces = num_stages // base_stages
        stages = tuple(
            _piece(self.stages[s // pieces if len(self.stages) > 1 else 0], pieces)
            for s in range(num_stages if len(self.stages) > 1 else 1)
        )
        links = self.links
        if len(links) > 1:  # a boundary inside a base stage has no link of its own: use its neighbour's
            links = tuple(links[min(b // pieces, len(links) - 1)] for b in range(num_stages - 1))
        return replace(self, stages=stages, links=links, meta={**self.meta, "cut_into": num_stages})

    # --- queries used by the simulator ------------------------------------
    def check_fits(self, schedule: Schedule) -> None:
        """Raise ValueError when this model has the wrong number of stages or links."""
        if len(self.stages) not in (1, schedule.num_stages):
            raise ValueError(
                f"the cost model has {len(self.stages)} stages but schedule {schedule.name!r} has "
                f"{schedule.num_stages}: give one stage cost, or one per stage"
            )
        boundaries = max(schedule.num_stages - 1, 1)
        if len(self.links) not in (1, boundaries):
            raise ValueError(
                f"the cost model has {len(self.links)} links but the schedule has {boundaries} "
                "stage boundaries: give one link, or one per boundary"
            )

    def stage(self, stage: int) -> StageCost:
        return self.stages[0] if len(self.stages) == 1 else self.stages[stage]

    def link(self, boundary: int) -> LinkCost:
        """The link between stage `boundary` and stage `boundary + 1`."""
        return self.links[0] if len(self.links) == 1 else self.links[boundary]

    def duration_ms(self, stage: int, kind: ActionKind) -> float:
        cost = self.stage(stage)
        extra = cost.forward_ms if self.recompute else 0.0
        if kind is ActionKind.FORWARD:
            return cost.forward_ms
        if kind is ActionKind.BACKWARD:
            return cost.backward_ms + extra
        if kind is ActionKind.BACKWARD_INPUT:
            return cost.i_ms + extra
        return cost.w_ms

    @property
    def collectives(self) -> CollectiveCost:
        """The data-parallel group as torch's per-stage collectives see it."""
        return CollectiveCost(self.data_parallel, self.sharded, self.dp_link.latency_ms, self.dp_link.bandwidth_gbps)

    def collective_ms(self, stage: int, kind: CommKind) -> float:
        """Time of torch's per-stage collective `kind` (REDUCE_GRAD, UNSHARD, RESHARD) on `stage`."""
        return self.collectives.time_ms(kind, self.stage(stage).param_bytes)

    def transfer_ms(self, src_stage: int, dst_stage: int) -> float:
        """Time to move an activation (or its gradient) between two adjacent stages."""
        boundary = min(src_stage, dst_stage)
        return self.link(boundary).transfer_ms(self.stage(boundary).output_bytes)

    def stash_bytes(self, stage: int) -> float:
        """Bytes F of `stage` keeps until its backward; only the input under recompute."""
        cost = self.stage(stage)
        return cost.input_bytes if self.recompute else cost.activation_bytes


def _piece(stage: StageCost, pieces: int) -> StageCost:
    """One of `pieces` equal parts of a stage: compute, stash and parameters divide; boundary tensors do not."""
    return replace(
        stage,
        forward_ms=stage.forward_ms / pieces,
        backward_ms=stage.backward_ms / pieces,
        weight_ms=None if stage.weight_ms is None else stage.weight_ms / pieces,
        activation_bytes=stage.activation_bytes / pieces,
        weight_grad_bytes=None if stage.weight_grad_bytes is None else stage.weight_grad_bytes / pieces,
        param_bytes=stage.param_bytes / pieces,
    )


# --- converters -----------------------------------------------------------------------------------------------


def _per_stage(name: str, values: Sequence[float] | None, count: int) -> list[float] | None:
    if values is None:
        return None
    if len(values) not in (1, count):
        raise ValueError(f"{name} has {len(values)} values but another time has {count}: give 1 or {count}")
    return [float(v) for v in values] * (count if len(values) == 1 else 1)


def cost_from_times(
    forward_ms: Sequence[float],
    backward_ms: Sequence[float] | None = None,
    weight_ms: Sequence[float] | None = None,
    comm_ms: Sequence[float] = (0.0,),
    activation_bytes: Sequence[float] | None = None,
    recompute: bool = False,
) -> CostModel:
    """A cost model from times a user typed (the CLI's --f/--b/--w/--comm, the app's tables).

    Each list holds one value for every stage or one per stage; B defaults to 2F, W to half of B, one
    activation unit per microbatch. W above B is refused (W is the weight part of the full backward).
    """
    lists = {
        "forward_ms": forward_ms,
        "backward_ms": backward_ms,
        "weight_ms": weight_ms,
        "activation_bytes": activation_bytes,
    }
    count = max(len(v) for v in lists.values() if v is not None)
    if not forward_ms:
        raise ValueError("forward_ms needs at least one value")
    forward = _per_stage("forward_ms", forward_ms, count)
    backward = _per_stage("backward_ms", backward_ms, count) or [2 * f for f in forward]
    weight = _per_stage("weight_ms", weight_ms, count)
    activations = _per_stage("activation_bytes", activation_bytes, count)
    if weight is not None:
        for stage, (b, w) in enumerate(zip(backward, weight, strict=True)):
            if w > b:
                raise ValueError(
                    f"stage {stage}: weight_ms {w:g} exceeds backward_ms {b:g}; W is the weight-gradient "
                    "part of the full backward B, so 0 <= W <= B"
                )
    comm = [float(c) for c in comm_ms] or [0.0]
    if count == 1 and len(comm) == 1:
        return CostModel.uniform(
            forward[0],
            backward[0],
            None if weight is None else weight[0],
            comm[0],
            activation_bytes=1.0 if activations is None else activations[0],
            recompute=recompute,
        )
    return CostModel.per_stage(
        forward,
        backward,
        weight,
        comm[0] if len(comm) == 1 else comm,
        activation_bytes=activations,
        recompute=recompute,
    )


def measured_stage_cost(
    base: StageCost,
    *,
    forward_ms: float,
    backward_ms: float | None = None,
    input_ms: float | None = None,
    weight_ms: float | None = None,
    weight_share: float | None = None,
    recompute: bool = False,
) -> StageCost:
    """`base` with the times of actions as they ran: F, and either B or (I and W).

    Under recomputation a measured B or I includes a forward, which the cost model adds back itself
    (`CostModel.duration_ms`), so it is taken off here. Without a measured split, W is `weight_share`
    of B (the base's share when not given). The profile phase and the replay of a run both convert
    through here.
    """
    extra = forward_ms if recompute else 0.0
    if input_ms is not None and weight_ms is not None:
        weight = weight_ms
        backward = max(input_ms - extra, 0.0) + weight
    elif backward_ms is not None:
        backward = max(backward_ms - extra, 0.0)
        if weight_share is None:
            weight_share = base.w_ms / base.backward_ms if base.backward_ms else 0.5
        share = weight_share
        weight = backward * share
    else:
        raise ValueError("a measured backward needs B, or I and W")
    return replace(base, forward_ms=forward_ms, backward_ms=backward, weight_ms=min(weight, backward))


def _per_rank(values: tuple[float, ...], num_ranks: int, name: str) -> tuple[float, ...]:
    """One value for every rank, or one per rank; none means zero."""
    if not values:
        return (0.0,) * num_ranks
    if len(values) == 1:
        return (float(values[0]),) * num_ranks
    if len(values) != num_ranks:
        raise ValueError(f"{name} has {len(values)} values for {num_ranks} ranks: give 1 or {num_ranks}")
    return tuple(float(v) for v in values)
