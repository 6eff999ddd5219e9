"""A link between two ranks: fixed latency plus bytes over bandwidth (ms, bytes, GB/s = 10^9 bytes/s).

The bottom of `pipesim.cost`: transfers between stages and the collectives of a data-parallel group are both
priced on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipesim.limits import MAX_TIME_MS, MIN_BANDWIDTH_GBPS, require


@dataclass(frozen=True)
class LinkCost:
    """A boundary between consecutive stages: fixed latency plus bytes over bandwidth."""

    latency_ms: float = 0.0
    bandwidth_gbps: float = math.inf

    def __post_init__(self) -> None:
        require(self.latency_ms, "latency_ms", (int, float), "a number of ms")
        require(self.bandwidth_gbps, "bandwidth_gbps", (int, float), "a number of GB/s")
        if not 0 <= self.latency_ms <= MAX_TIME_MS:  # bounded, so the prices built on it stay finite
            raise ValueError(f"latency_ms must be a number from 0 to {MAX_TIME_MS:g}, got {self.latency_ms!r}")
        if not self.bandwidth_gbps >= MIN_BANDWIDTH_GBPS:
            raise ValueError(f"bandwidth_gbps must be at least {MIN_BANDWIDTH_GBPS:g}, got {self.bandwidth_gbps!r}")

    def transfer_ms(self, num_bytes: float) -> float:
        if math.isinf(self.bandwidth_gbps):
            return self.latency_ms
        return self.latency_ms + num_bytes / (self.bandwidth_gbps * 1e9) * 1e3
