"""What one stage costs per microbatch: its F/B/W times and the bytes it stashes, sends and holds.

The first of a cost model's concerns (`pipesim.cost.model.CostModel.stages`); a stage split into equal pieces
(`piece`) is how a model cut into one stage per rank is cut finer for schedules holding several chunks per rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from pipesim.limits import require

_PLAIN = (float, int, type(None))


_NUMBERS = (float, int)  # exact types: a bool is no number of ms or bytes
_CHECKED = ("forward_ms", "backward_ms", "activation_bytes", "input_bytes", "output_bytes", "param_bytes", "a2a_ms")


@dataclass(frozen=True)
class StageCost:
    """Per-microbatch costs of one stage.

    `backward_ms` is the full backward B. `weight_ms` is the part of it that
    computes weight gradients (W); the input-gradient part is I = B - W.
    `activation_bytes` is what F stashes until the backward frees it;
    `weight_grad_bytes` is the part of it that only W still needs (freed by W
    when the backward is split). `input_bytes` is the stage input, the only
    thing stashed under recomputation. `output_bytes` crosses the boundary to
    the next stage (and the same size of gradient comes back). `param_bytes` is
    the stage's parameters, which is also the size of the gradients its
    data-parallel replicas reduce. `output_stash_bytes` is the part of
    `activation_bytes` that is the piece's own output (a ReLU saves its
    result): summing pieces into one stage counts it once, as the next
    piece's input (`stage_costs_from_units`).
    """

    forward_ms: float
    backward_ms: float
    weight_ms: float | None = None
    activation_bytes: float = 0.0
    weight_grad_bytes: float | None = None
    input_bytes: float = 0.0
    output_bytes: float = 0.0
    param_bytes: float = 0.0
    output_stash_bytes: float = 0.0
    # An MoE stage's expert-parallel all-to-all: one (dispatch or combine) of one microbatch through the whole
    # stage; a forward and a backward each run two, beside `forward_ms` / `backward_ms` of compute. Alone a pass
    # waits for them; overlapped with another pass they hide under its compute (`pipesim.cost.overlap`).
    a2a_ms: float = 0.0
    moe_layers: int = 1  # how finely an overlapped pair interleaves: once per MoE layer

    def __post_init__(self) -> None:
        if isinstance(self.moe_layers, bool) or not isinstance(self.moe_layers, int) or self.moe_layers < 1:
            raise ValueError(f"moe_layers must be a whole number >= 1, got {self.moe_layers!r}")
        values = (
            self.forward_ms,
            self.backward_ms,
            self.activation_bytes,
            self.input_bytes,
            self.output_bytes,
            self.param_bytes,
            self.a2a_ms,
        )
        # one test of the common case (plain numbers, none negative, their sum finite: no NaN, no inf), the
        # field named only when it fails: a plan builds 10^4 stage costs
        if not (all(type(v) in _NUMBERS for v in values) and min(values) >= 0 and math.isfinite(sum(values))):
            for name, value in zip(_CHECKED, values, strict=True):
                if isinstance(value, bool) or not (
                    isinstance(value, (int, float)) and math.isfinite(value) and value >= 0
                ):
                    raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if type(self.weight_ms) not in _PLAIN:  # the check only off the common case: 10^5 stages are built in a plan
            require(self.weight_ms, "weight_ms", (int, float, type(None)), "a number of ms or None (half of B)")
        if self.weight_ms is not None and not 0 <= self.weight_ms <= self.backward_ms:
            raise ValueError(
                f"weight_ms ({self.weight_ms}) must lie between 0 and backward_ms ({self.backward_ms}): "
                "W is the weight-gradient part of the full backward"
            )
        if self.weight_grad_bytes is not None and not 0 <= self.weight_grad_bytes <= self.activation_bytes:
            raise ValueError("weight_grad_bytes must lie between 0 and activation_bytes")
        if not 0 <= self.output_stash_bytes <= self.activation_bytes:
            raise ValueError("output_stash_bytes must lie between 0 and activation_bytes")

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


def piece(stage: StageCost, pieces: int) -> StageCost:
    """One of `pieces` equal parts of a stage: compute, stash and parameters divide; boundary tensors do not."""
    return replace(
        stage,
        forward_ms=stage.forward_ms / pieces,
        backward_ms=stage.backward_ms / pieces,
        weight_ms=None if stage.weight_ms is None else stage.weight_ms / pieces,
        activation_bytes=stage.activation_bytes / pieces,
        output_stash_bytes=min(stage.output_stash_bytes, stage.activation_bytes / pieces),
        weight_grad_bytes=None if stage.weight_grad_bytes is None else stage.weight_grad_bytes / pieces,
        a2a_ms=stage.a2a_ms / pieces,
        moe_layers=max(1, stage.moe_layers // pieces),
        param_bytes=stage.param_bytes / pieces,
    )
