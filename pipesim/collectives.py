"""What torch's per-stage collectives cost: REDUCE_GRAD, UNSHARD and RESHARD (times in ms, sizes in bytes).

A stage's gradients are reduced across its data-parallel replicas once per step (REDUCE_GRAD); under FSDP its
parameters are sharded across them, gathered before it computes (UNSHARD) and dropped after (RESHARD). Each is
costed with the ring model (latency per ring step plus bytes over bandwidth), on the stage's `param_bytes`:

    all-reduce       2(d-1) steps, 2(d-1)/d x bytes   (REDUCE_GRAD, replicated parameters)
    reduce-scatter    (d-1) steps,  (d-1)/d x bytes   (REDUCE_GRAD, sharded parameters)
    all-gather        (d-1) steps,  (d-1)/d x bytes   (UNSHARD, sharded parameters)

Nothing is moved (zero time) with one replica, for UNSHARD when nothing is sharded, and for RESHARD always.
Transfers between pipeline stages (SEND/RECV) are the links' business (`pipesim.cost.LinkCost`), not this.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipesim.ir import CommKind


@dataclass(frozen=True)
class CollectiveCost:
    """The data-parallel group a pipeline stage's collectives run in.

    `data_parallel` replicas of every stage, joined by a ring of `latency_ms` per step and `bandwidth_gbps`
    (10^9 bytes/s); `sharded` is FSDP (parameters sharded across the replicas).
    """

    data_parallel: int = 1
    sharded: bool = False
    latency_ms: float = 0.0
    bandwidth_gbps: float = math.inf

    def __post_init__(self) -> None:
        if isinstance(self.data_parallel, bool) or not isinstance(self.data_parallel, int) or self.data_parallel < 1:
            raise ValueError(f"data_parallel must be a whole number >= 1, got {self.data_parallel!r}")
        if not (isinstance(self.latency_ms, (int, float)) and math.isfinite(self.latency_ms) and self.latency_ms >= 0):
            raise ValueError(f"collective latency_ms must be a finite number >= 0, got {self.latency_ms!r}")
        if not (isinstance(self.bandwidth_gbps, (int, float)) and self.bandwidth_gbps > 0):
            raise ValueError(f"collective bandwidth_gbps must be > 0, got {self.bandwidth_gbps!r}")

    def time_ms(self, kind: CommKind, param_bytes: float) -> float:
        """Time of one collective of `kind` over a stage holding `param_bytes` of parameters."""
        d = self.data_parallel
        if d == 1 or kind is CommKind.RESHARD:
            return 0.0
        if kind is CommKind.UNSHARD:
            return self._ring(d - 1, (d - 1) / d * param_bytes) if self.sharded else 0.0
        if kind is CommKind.REDUCE_GRAD:
            if self.sharded:
                return self._ring(d - 1, (d - 1) / d * param_bytes)
            return self._ring(2 * (d - 1), 2 * (d - 1) / d * param_bytes)
        return 0.0  # sends and receives: priced per stage boundary by the links

    def _ring(self, steps: int, num_bytes: float) -> float:
        moved = 0.0 if math.isinf(self.bandwidth_gbps) else num_bytes / (self.bandwidth_gbps * 1e9) * 1e3
        return steps * self.latency_ms + moved
