"""A link between two ranks: fixed latency plus bytes over bandwidth (ms, bytes, GB/s = 10^9 bytes/s).

The bottom of `pipesim.cost`: transfers between stages and the collectives of a data-parallel group are both
priced on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class LinkCost:
    """A boundary between consecutive stages: fixed latency plus bytes over bandwidth."""

    latency_ms: float = 0.0
    bandwidth_gbps: float = math.inf

    def __post_init__(self) -> None:
        if not (math.isfinite(self.latency_ms) and self.latency_ms >= 0):
            raise ValueError(f"latency_ms must be a finite number >= 0, got {self.latency_ms!r}")
        if not self.bandwidth_gbps > 0:
            raise ValueError(f"bandwidth_gbps must be > 0, got {self.bandwidth_gbps!r}")

    def transfer_ms(self, num_bytes: float) -> float:
        if math.isinf(self.bandwidth_gbps):
            return self.latency_ms
        return self.latency_ms + num_bytes / (self.bandwidth_gbps * 1e9) * 1e3
