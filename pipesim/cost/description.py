"""A model description (a decoder-only Transformer's sizes and the device's speed) turned into a cost model.

For planning before anything runs: FLOPs over an achieved rate for time, Korthikanti et al.'s activation
formula for memory. A profile run (pipesim_executor.rank.profile) measures the same quantities on real hardware instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from operator import attrgetter

from pipesim.cost.balance import Balance, balance, check_split_points
from pipesim.cost.model import CostModel, LinkCost, Provenance, StageCost
from pipesim.cost.shape import TransformerShape

DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp8": 1}


@dataclass(frozen=True)
class ModelDescription(TransformerShape):
    """A decoder-only Transformer on a device, priced by counting FLOPs. Its sizes are a `TransformerShape`.

    Matmul FLOPs: 2 per multiply-add. Per layer and token, forward is
    2*(4h^2 + 2h*ffn) for the projections plus 4*s*h for attention scores and
    values; backward is twice forward, half of it for weights (W) and half for
    inputs (I). Activation bytes per layer follow Korthikanti et al. (2022):
    s*b*h*(34 + 5*a*s/h) at 16 bits, scaled by the dtype's size.
    `device_tflops` is the achieved (not peak) rate.
    """

    microbatch_size: int = field(default=1, metadata={"cli": False})  # the planner searches it
    """Sequences per microbatch."""
    dtype: str = field(default="bf16", metadata={"choices": tuple(DTYPE_BYTES)})
    """Bytes per value of the activations and parameters: fp32, bf16, fp16 or fp8."""
    device_tflops: float = field(default=400.0, metadata={"flag": "tflops"})
    """The device's achieved (not peak) matmul rate, in TFLOP/s."""
    link_bandwidth_gbps: float = field(default=50.0, metadata={"flag": "bandwidth"})
    """Bandwidth between neighbouring stages, in GB/s."""
    link_latency_ms: float = field(default=0.01, metadata={"flag": "latency"})
    """Latency of one transfer between neighbouring stages, in ms."""

    def __post_init__(self) -> None:
        super().__post_init__()  # the shape's own checks
        size = self.microbatch_size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"microbatch_size must be a positive integer, got {self.microbatch_size!r}")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {self.dtype!r}; valid: {', '.join(DTYPE_BYTES)}")
        if not self.device_tflops > 0 or not self.link_bandwidth_gbps > 0 or self.link_latency_ms < 0:
            raise ValueError("device_tflops and link_bandwidth_gbps must be > 0, link_latency_ms >= 0")

    @classmethod
    def of_shape(cls, shape: TransformerShape, **device: object) -> ModelDescription:
        """The description of a Transformer of `shape` (the executor's built-in one, say), with `device`'s fields
        (microbatch_size, dtype, device_tflops, ...) over the defaults."""
        return cls(**{f.name: getattr(shape, f.name) for f in fields(TransformerShape)}, **device)

    def to_cost_model(self, num_stages: int, recompute: bool = False) -> CostModel:
        """The model cut into `num_stages` stages as the planner cuts it (`balance_units`: the units, embedding,
        blocks and head, shared out so that the slowest stage is as fast as it can be)."""
        split = balance_units(self.unit_costs(), num_stages, recompute).split_points
        return replace(self.split_cost_model(split, recompute), provenance=Provenance("model", self))

    def unit_costs(self) -> list[StageCost]:
        """Per unit (embedding, each block, the output head with the loss), its costs for one microbatch.

        The embedding is a lookup (no matmul FLOPs, nothing stashed but its input); the head computes the vocabulary
        projection and keeps fp32 logits for the loss. Summed over a split by `split_cost_model`.
        """
        h, s, b = self.hidden_size, self.seq_len, self.microbatch_size
        tokens = s * b
        dtype_bytes = DTYPE_BYTES[self.dtype]
        flops_per_ms = self.device_tflops * 1e12 / 1e3
        boundary = float(tokens * h * dtype_bytes)
        layer_params = 4 * h * h + 2 * h * self.ffn_size
        projections, attention, head = self._token_flops()
        layer_ms = tokens * (projections + attention) / flops_per_ms
        layer_act = tokens * h * (34 + 5 * self.num_heads * s / h) * dtype_bytes / 2
        head_ms = tokens * head / flops_per_ms
        head_act = float(tokens * self.vocab_size * 4)

        def unit(forward_ms: float, act: float, params: float) -> StageCost:
            return StageCost(
                forward_ms=forward_ms,
                backward_ms=2 * forward_ms,
                weight_ms=forward_ms,
                activation_bytes=act,
                weight_grad_bytes=act / 2,
                input_bytes=boundary,
                output_bytes=boundary,
                param_bytes=params * dtype_bytes,
            )

        embedding = unit(0.0, 0.0, h * self.vocab_size)
        block = unit(layer_ms, layer_act, layer_params)
        head = unit(head_ms, head_act, h * self.vocab_size)
        return [embedding, *([block] * self.num_layers), head]

    def _token_flops(self) -> tuple[int, int, int]:
        """Forward FLOPs per token: a block's projections, a block's attention (scores and values), the head."""
        h = self.hidden_size
        return 2 * (4 * h * h + 2 * h * self.ffn_size), 4 * self.seq_len * h, 2 * h * self.vocab_size

    def attention_fraction(self) -> float:
        """Attention's share of a whole sequence's forward FLOPs (`CostModel.attention_fraction`): what makes a later
        sequence chunk dearer, and where Seq1F1B's balanced cut falls (pipesim.cost.seq_chunks)."""
        projections, attention, head = self._token_flops()
        layers = self.num_layers
        return layers * attention / (layers * (projections + attention) + head)

    def split_cost_model(self, split_points: tuple[int, ...], recompute: bool = False) -> CostModel:
        """The cost model of this model cut at `split_points` (unit indices where a stage starts, the executor's
        `--split-points` convention over `num_units()` units)."""
        return stage_costs_from_units(self.unit_costs(), split_points, self, recompute=recompute)


_FORWARD, _BACKWARD, _W_MS, _W_BYTES = (attrgetter(name) for name in ("forward_ms", "backward_ms", "w_ms", "w_bytes"))
_ACTIVATION, _OUTPUT_STASH, _PARAMS = (attrgetter(n) for n in ("activation_bytes", "output_stash_bytes", "param_bytes"))


def stage_costs_from_units(
    units: list[StageCost],
    split_points: tuple[int, ...],
    description: ModelDescription | None = None,
    *,
    recompute: bool = False,
    link: LinkCost | None = None,
) -> CostModel:
    """Sum per-unit costs into per-stage costs: compute, stash and parameters add up; boundary tensors are the
    first unit's input and the last unit's output. A unit that keeps its own output for its backward (a ReLU's
    result) and the next unit of the same stage, which keeps its input, hold one tensor: counted once."""
    bounds = [0, *check_split_points(split_points, len(units), len(split_points) + 1), len(units)]
    stages = []
    for start, stop in zip(bounds, bounds[1:], strict=False):
        part = units[start:stop]
        # sum(map(attrgetter)) adds in the same order as a generator, in C: the planner cuts 10^3 models a plan
        shared = sum(map(_OUTPUT_STASH, part[:-1]))
        activation = max(0.0, sum(map(_ACTIVATION, part)) - shared)
        stages.append(
            StageCost(
                forward_ms=sum(map(_FORWARD, part)),
                backward_ms=sum(map(_BACKWARD, part)),
                weight_ms=sum(map(_W_MS, part)),
                activation_bytes=activation,
                weight_grad_bytes=min(sum(map(_W_BYTES, part)), activation),
                input_bytes=part[0].input_bytes,
                output_bytes=part[-1].output_bytes,
                output_stash_bytes=part[-1].output_stash_bytes,
                param_bytes=sum(map(_PARAMS, part)),
            )
        )
    if link is None:
        link = (
            LinkCost()
            if description is None
            else LinkCost(description.link_latency_ms, description.link_bandwidth_gbps)
        )
    source = "model" if description is not None else "units"
    # what makes a later sequence chunk dearer (Seq1F1B): the model's own attention share, not the flat default
    attention = 0.0 if description is None else description.attention_fraction()
    return CostModel(
        stages=tuple(stages),
        links=(link,),
        recompute=recompute,
        provenance=Provenance(source),
        attention_fraction=attention,
    )


# The split policy: how a model is cut into stages, stated once. Every cut of a model into stages (the planner, a
# description's default cut, `pipesim balance`, `executor run --split-from`, a run without --split-points) weighs a
# unit by `unit_weight` and balances with `pipesim.cost.balance.balance`, the one splitter.


def unit_weight(forward_ms, backward_ms, recompute: bool = False):  # floats or numpy arrays alike
    """What a unit weighs when a model is cut into stages: its F + B, and with recomputation its F again (the
    backward runs the forward once more). The planner's cut is the one that makes the heaviest stage lightest."""
    return forward_ms * 2 + backward_ms if recompute else forward_ms + backward_ms


def balance_units(units: Sequence[StageCost], num_stages: int, recompute: bool = False) -> Balance:
    """The split of a model's units into `num_stages` contiguous stages that makes the slowest stage's weight
    (`unit_weight`) as small as it can be: `pipesim.cost.balance`, the one splitter, over the units' compute
    times. The planner and a description's default cut (`ModelDescription.to_cost_model`) both use it."""
    return balance([unit_weight(u.forward_ms, u.backward_ms, recompute) for u in units], num_stages)


def shape_split(
    shape: TransformerShape, num_stages: int, microbatch_size: int = 1, recompute: bool = False
) -> tuple[int, ...]:
    """The planner's cut of a Transformer of `shape`: its description's units balanced (`balance_units`), at the
    description's default device rate (a rate scales every unit alike). A run of the executor's built-in
    Transformer without `--split-points` is cut here, so it runs the split the plan priced.

    >>> shape_split(TransformerShape(num_layers=4, hidden_size=64, ffn_size=256, num_heads=4, seq_len=16,
    ...                              vocab_size=100), 2)
    (3,)
    """
    units = ModelDescription.of_shape(shape, microbatch_size=microbatch_size).unit_costs()
    return balance_units(units, num_stages, recompute).split_points


def parameter_split(param_counts: Sequence[float], num_stages: int) -> tuple[int, ...]:
    """The cut of a model pipesim has no times for before it runs (the executor's CNN, a custom factory): its
    layers' parameter counts balanced, the one size known of every layer. A unit profile of the model
    (`executor run --split-from`) gives it the planner's cut instead."""
    return balance([float(count) for count in param_counts], num_stages).split_points
