"""Cost models: how long each action takes, how much it stashes, what a transfer costs, what a step adds.

The cost model is separate from the simulation engine. A `CostModel` holds four concerns, each its own value:

* the stage costs: `stages` (`pipesim.cost.stage.StageCost`), `links` between consecutive stages, `recompute`
  and `overlap_factor` (what an action, a transfer and an overlapped pair take);
* the per-rank runtime: `runtime` (`pipesim.cost.runtime.RankRuntime`: the dispatch gap, the step's overhead
  after each rank's last action, the cores ranks share);
* the data-parallel group: `dp_group` (`pipesim.cost.collectives.DataParallelGroup`: replicas, link, sharded,
  bucket size);
* provenance: `provenance` (`Provenance`: where the costs came from, the model description they were computed
  from, free-form meta).

Its sources are plain numbers (`CostModel.uniform`, `pipesim.cost.convert.cost_from_times`), per-stage lists
(`CostModel.per_stage`), a model description (`ModelDescription.to_cost_model`), measured action times
(`pipesim.cost.convert.measured_stage_cost`) and the cost file the executor's profile run writes
(`pipesim.io.cost_file`). Re-making a model changes only what it means to (`dataclasses.replace`).

Units: times in milliseconds, sizes in bytes, bandwidth in GB/s (10^9 bytes/s).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from pipesim.cost.collectives import DataParallelGroup
from pipesim.cost.links import LinkCost
from pipesim.cost.runtime import RankRuntime
from pipesim.cost.stage import StageCost, piece
from pipesim.ir import ActionKind, CommKind, Schedule
from pipesim.limits import require_items

if TYPE_CHECKING:  # laid out only where a schedule overlaps a pair: a plain `simulate` starts without it
    from pipesim.cost.overlap import PairTimeline


class StageRecutter(Protocol):
    """What a cost model keeps of the description it came from: a way to cut the model into any number of stages
    (`ModelDescription` is one). A protocol, not the class, because the description builds cost models: naming it
    here would make each module import the other."""

    def to_cost_model(self, num_stages: int, recompute: bool = False) -> CostModel: ...


__all__ = ["CostModel", "DataParallelGroup", "LinkCost", "Provenance", "RankRuntime", "StageCost"]


@dataclass(frozen=True)
class Provenance:
    """Where a cost model's numbers came from: `source` (uniform, per-stage, model, profile, replay, ...), the
    model `description` they were computed from (so that `CostModel.for_stages` can re-cut it layer by layer),
    and `meta`: what was measured, where; nothing reads meta to compute."""

    source: str = "uniform"
    description: StageRecutter | None = None
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.source, str):
            raise ValueError(f"a cost model's source must be a string, got {self.source!r}")
        if not isinstance(self.meta, dict):
            raise ValueError(f"a cost model's meta must be a dict, got {self.meta!r}")


@dataclass(frozen=True)
class CostModel:
    """Costs for every stage and boundary, each rank's runtime, the data-parallel group, and their provenance.

    A single entry in `stages` (or `links`) applies to every stage (boundary), so one uniform model fits
    schedules of any size. Otherwise there must be one entry per stage (and one link per boundary,
    num_stages - 1). `recompute` makes every backward pay its forward again while only stage inputs stay
    stashed. `overlap_factor` prices torch's overlapped forward-backward pairs (OVERLAP_F_B): a pair takes
    overlap_factor x (F + B), 1 meaning no overlap at all.
    """

    stages: tuple[StageCost, ...]
    links: tuple[LinkCost, ...] = (LinkCost(),)
    recompute: bool = False
    overlap_factor: float = 1.0
    runtime: RankRuntime = RankRuntime()
    dp_group: DataParallelGroup = DataParallelGroup()
    provenance: Provenance = field(default_factory=Provenance)
    # The link between a rank and its host's memory (PCIe, C2C): what an OFFLOAD or RELOAD of a stage's saved
    # activations costs. Free by default: a schedule without memory moves never reads it.
    host_link: LinkCost = LinkCost()
    # Attention's share of a whole sequence's compute: how much dearer a later sequence chunk is than an earlier
    # one under causal attention (`pipesim.cost.seq_chunks`). 0: every chunk of an even cut costs the same.
    attention_fraction: float = 0.0

    def __post_init__(self) -> None:
        if not (
            isinstance(self.overlap_factor, (int, float))
            and not isinstance(self.overlap_factor, bool)
            and 0 < self.overlap_factor <= 1
        ):
            raise ValueError(
                f"overlap_factor must lie in (0, 1] (1: a pair takes F + B, no overlap), got {self.overlap_factor!r}"
            )
        if not (
            isinstance(self.attention_fraction, (int, float))
            and not isinstance(self.attention_fraction, bool)
            and 0 <= self.attention_fraction <= 1
        ):
            raise ValueError(f"attention_fraction must lie in [0, 1], got {self.attention_fraction!r}")
        require_items(self.stages, "stages", StageCost, "StageCost")
        require_items(self.links, "links", LinkCost, "LinkCost")
        if not self.stages:
            raise ValueError("a cost model needs at least one stage cost (stages is empty)")
        if not self.links:
            raise ValueError("a cost model needs at least one link cost")
        if not isinstance(self.recompute, bool):
            raise ValueError(f"recompute must be true or false, got {self.recompute!r}")
        for name, kind in (
            ("runtime", RankRuntime),
            ("dp_group", DataParallelGroup),
            ("provenance", Provenance),
            ("host_link", LinkCost),
        ):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(f"a cost model's {name} must be a {kind.__name__}, got {getattr(self, name)!r}")

    # --- each concern read through the model (shorthands every caller may use) ----------------------------
    @property
    def step_overhead_ms(self) -> tuple[float, ...]:
        return self.runtime.step_overhead_ms

    @property
    def dispatch_ms(self) -> tuple[float, ...]:
        return self.runtime.dispatch_ms

    @property
    def shared_cores(self) -> int | None:
        return self.runtime.shared_cores

    @property
    def data_parallel(self) -> int:
        """The number of replicas of the pipeline (1: no data parallelism)."""
        return self.dp_group.replicas

    @property
    def dp_link(self) -> LinkCost:
        return self.dp_group.link

    @property
    def sharded(self) -> bool:
        return self.dp_group.sharded

    @property
    def source(self) -> str:
        return self.provenance.source

    @property
    def description(self) -> StageRecutter | None:
        return self.provenance.description

    @property
    def meta(self) -> dict:
        return self.provenance.meta

    def overhead_ms(self, num_ranks: int) -> tuple[float, ...]:
        """Per rank, the step's time outside the actions (zeros when none was measured)."""
        return self.runtime.overhead_ms(num_ranks)

    def dispatch_per_rank(self, num_ranks: int) -> tuple[float, ...]:
        """Per rank, the gap before each action (zeros when none was measured)."""
        return self.runtime.dispatch_per_rank(num_ranks)

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
        return cls(stages=(stage,), links=(LinkCost(latency_ms=comm_ms),), recompute=recompute)

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
        return cls(stages=stages, links=links, recompute=recompute, provenance=Provenance("per-stage"))

    def with_recompute(self, recompute: bool) -> CostModel:
        return replace(self, recompute=recompute)

    def for_stages(self, num_stages: int, base_stages: int) -> CostModel:
        """This model, read as the pipeline cut into `base_stages` stages, re-cut into `num_stages`.

        Comparing schedules means comparing one model on one set of ranks: when an interleaved or V schedule
        cuts each rank's share into v chunks, each chunk does 1/v of the compute and stashes 1/v of the
        activations, while what crosses a boundary (the hidden state) keeps its size. Stage s of the new cut
        is the (s mod v)-th piece of base stage s // v. A model description is re-cut exactly, layer by layer.
        Only the stages and links change (and meta notes the cut): every other field is kept as it is.
        """
        if num_stages == base_stages:
            return self
        provenance = replace(self.provenance, meta={**self.meta, "cut_into": num_stages})
        if self.description is not None:
            recut = self.description.to_cost_model(num_stages, self.recompute)
            return replace(self, stages=recut.stages, links=recut.links, provenance=provenance)
        if num_stages % base_stages:
            raise ValueError(
                f"cannot cut a {base_stages}-stage cost model into {num_stages} stages: "
                f"give a multiple of {base_stages}, or one cost per stage"
            )
        if len(self.stages) not in (1, base_stages):
            raise ValueError(f"the cost model has {len(self.stages)} stages, expected 1 or {base_stages}")
        pieces = num_stages // base_stages
        stages = tuple(
            piece(self.stages[s // pieces if len(self.stages) > 1 else 0], pieces)
            for s in range(num_stages if len(self.stages) > 1 else 1)
        )
        links = self.links
        if len(links) > 1:  # a boundary inside a base stage has no link of its own: use its neighbour's
            links = tuple(links[min(b // pieces, len(links) - 1)] for b in range(num_stages - 1))
        return replace(self, stages=stages, links=links, provenance=provenance)

    def for_pipeline(self, num_stages: int, num_ranks: int) -> CostModel:
        """The one meaning of costs given per rank, for `simulate`, `compare` and the app alike.

        One stage cost, or one per rank, describes the model cut into one stage per rank: a schedule that
        holds several chunks per rank (interleaved, V shapes) runs the same model cut finer (`for_stages`),
        each chunk taking its share of the time, the stash and the parameters. One cost per stage is used as
        given; a model description is re-cut exactly for the schedule's stages. A schedule whose stages do not
        divide evenly over its ranks (only a hand-written one) takes the costs per stage, as given.
        """
        if len(self.stages) == num_stages:
            return self
        if self.description is not None:
            return self.for_stages(num_stages, len(self.stages))
        if num_stages == num_ranks or num_stages % num_ranks or len(self.stages) not in (1, num_ranks):
            return self  # no even cut: check_fits says what does not fit
        return self.for_stages(num_stages, num_ranks)

    # --- queries used by the simulator ------------------------------------
    def for_schedule(self, schedule: Schedule) -> CostModel:
        """The costs of one action of `schedule`: per-rank costs cut per chunk (`for_pipeline`), and a microbatch's
        bytes split over its sequence chunks (`for_seq_chunks`)."""
        if len(self.stages) == schedule.num_stages > 1:  # one cost per stage: as given
            return self.for_seq_chunks(schedule.seq_chunks)
        if schedule.pipelines > 1:  # each chain runs the whole model: one stage cost per chain's stage, repeated
            chain = self.for_pipeline(schedule.pipeline_stages, schedule.num_ranks)
            return chain.for_chains(schedule.pipelines).for_seq_chunks(schedule.seq_chunks)
        return self.for_pipeline(schedule.num_stages, schedule.num_ranks).for_seq_chunks(schedule.seq_chunks)

    def for_chains(self, pipelines: int) -> CostModel:
        """The costs of a model cut into a chain of stages, for `pipelines` copies of that chain side by
        side (DualPipe: stage s of the second direction holds the layers of stage s of the first, a copy of its
        weights). The boundary between two chains carries nothing; it takes the first chain's first link."""
        if pipelines == 1 or (len(self.stages) == 1 and len(self.links) == 1):
            return self
        stages = self.stages if len(self.stages) == 1 else self.stages * pipelines
        links = self.links
        if len(links) > 1:
            links = (tuple(links) + (links[0],)) * (pipelines - 1) + tuple(links)
        return replace(self, stages=stages, links=links)

    def for_seq_chunks(self, seq_chunks: int) -> CostModel:
        """Each stage's bytes per sequence chunk of an even cut: what it stashes and sends divide by the chunks,
        its parameters do not. Times stay per microbatch: the engine gives each chunk its share of them
        (`pipesim.cost.seq_chunks`, attention making later chunks dearer)."""
        if seq_chunks == 1:
            return self

        def split(stage: StageCost) -> StageCost:
            return replace(
                stage,
                activation_bytes=stage.activation_bytes / seq_chunks,
                weight_grad_bytes=None if stage.weight_grad_bytes is None else stage.weight_grad_bytes / seq_chunks,
                input_bytes=stage.input_bytes / seq_chunks,
                output_bytes=stage.output_bytes / seq_chunks,
                output_stash_bytes=stage.output_stash_bytes / seq_chunks,
            )

        provenance = replace(self.provenance, meta={**self.meta, "seq_chunks": seq_chunks})
        return replace(self, stages=tuple(map(split, self.stages)), provenance=provenance)

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
        """An action alone on its rank: its compute and, on an MoE stage, the two all-to-alls it waits for (the
        weight-gradient part W moves no tokens)."""
        compute = self.compute_ms(stage, kind)
        a2a = self.stage(stage).a2a_ms
        return compute + 2 * a2a if a2a and kind is not ActionKind.BACKWARD_WEIGHT else compute

    def compute_ms(self, stage: int, kind: ActionKind) -> float:
        """The compute of an action of `kind` on `stage` (recomputation's forward included in its backward)."""
        stages = self.stages  # `stage`, inlined: the planner's bounds ask 10^5 times a plan
        cost = stages[0] if len(stages) == 1 else stages[stage]
        extra = cost.forward_ms if self.recompute else 0.0
        if kind is ActionKind.FORWARD:
            return cost.forward_ms
        if kind is ActionKind.BACKWARD:
            return cost.backward_ms + extra
        if kind is ActionKind.BACKWARD_INPUT:
            return cost.i_ms + extra
        return cost.w_ms

    def compute_table(self, kind: ActionKind, num_stages: int) -> list[float]:
        """`compute_ms(s, kind)` of stages 0 .. num_stages - 1, the same numbers in one pass (the planner's bounds
        read 10^5 a plan)."""
        stages = self.stages * num_stages if len(self.stages) == 1 else self.stages[:num_stages]
        if kind is ActionKind.FORWARD:
            return [cost.forward_ms for cost in stages]
        if kind is ActionKind.BACKWARD_WEIGHT:
            return [cost.w_ms for cost in stages]
        pay = kind is ActionKind.BACKWARD  # else the input-gradient part I
        if self.recompute:
            return [(cost.backward_ms if pay else cost.i_ms) + cost.forward_ms for cost in stages]
        return [(cost.backward_ms if pay else cost.i_ms) + 0.0 for cost in stages]

    def transfer_table(self, num_stages: int) -> list[float]:
        """`transfer_ms(b, b + 1)` across each boundary b of `num_stages` stages, the same numbers in one pass."""
        links, stages = self.links, self.stages
        one_link, one_stage = len(links) == 1, len(stages) == 1
        return [
            (links[0] if one_link else links[b]).transfer_ms((stages[0] if one_stage else stages[b]).output_bytes)
            for b in range(num_stages - 1)
        ]

    def a2a_ms(self, stage: int, kind: ActionKind) -> float:
        """The all-to-all time an action of `kind` on `stage` runs on the link: a dispatch and a combine (none for
        W, none for a dense stage)."""
        return 0.0 if kind is ActionKind.BACKWARD_WEIGHT else 2 * self.stage(stage).a2a_ms

    def pair_ms(self, members: tuple[tuple[int, ActionKind], ...]) -> PairTimeline:
        """An overlapped forward-backward pair (each member as (stage, kind)), laid out layer by layer with each
        part's all-to-alls under the other's compute (`pipesim.cost.overlap`); compute scaled by
        `overlap_factor`. A group of other than two members runs its members back to back."""
        from pipesim.cost.overlap import PairTimeline, pair_timeline

        factor = self.overlap_factor
        if len(members) != 2:
            total = sum(factor * self.compute_ms(s, k) + self.a2a_ms(s, k) for s, k in members)
            return PairTimeline(total, ())
        (fs, fk), (bs, bk) = members
        layers = max(self.stage(fs).moe_layers, self.stage(bs).moe_layers)
        return pair_timeline(
            factor * self.compute_ms(fs, fk),
            self.a2a_ms(fs, fk) / 2,
            factor * self.compute_ms(bs, bk),
            self.a2a_ms(bs, bk) / 2,
            layers,
        )

    def collective_ms(self, stage: int, kind: CommKind) -> float:
        """Time of torch's per-stage collective `kind` (REDUCE_GRAD, UNSHARD, RESHARD) on `stage`, priced by the
        one data-parallel group."""
        return self.dp_group.collective_ms(kind, self.stage(stage).param_bytes)

    def grad_allreduce_ms(self, stage: int) -> float:
        """The all-reduce of `stage`'s gradients across the replicas (`DataParallelGroup.grad_allreduce_ms`)."""
        return self.dp_group.grad_allreduce_ms(self.stage(stage).param_bytes)

    def transfer_ms(self, src_stage: int, dst_stage: int) -> float:
        """Time to move an activation (or its gradient) between two adjacent stages."""
        boundary = min(src_stage, dst_stage)
        return self.link(boundary).transfer_ms(self.stage(boundary).output_bytes)

    def copy_ms(self, stage: int) -> float:
        """Time to move `stage`'s saved activations of one microbatch to or from host memory (OFFLOAD, RELOAD)."""
        return self.host_link.transfer_ms(self.stash_bytes(stage))

    def stash_bytes(self, stage: int) -> float:
        """Bytes F of `stage` keeps until its backward; only the input under recompute."""
        cost = self.stage(stage)
        return cost.input_bytes if self.recompute else cost.activation_bytes
