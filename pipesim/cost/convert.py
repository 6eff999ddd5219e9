"""Cost models from numbers as people and runs give them: times a user typed, and action times a run measured.

`cost_from_times` serves the CLI's --f/--b/--w/--comm and the app's tables; `measured_stage_cost` the profile
phase (pipesim_executor.rank.profile) and the replay of a run (pipesim.analysis.overlay).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from numbers import Real

from pipesim.cost.model import CostModel
from pipesim.cost.stage import StageCost
from pipesim.limits import require_items


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
    for name, values in (("forward_ms", forward_ms), ("backward_ms", backward_ms), ("weight_ms", weight_ms),
                         ("comm_ms", comm_ms), ("activation_bytes", activation_bytes)):  # fmt: skip
        if values is not None or name == "forward_ms":  # the one list that must be given
            require_items(values, name, Real, "numbers (one for every stage, or one per stage)")
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
