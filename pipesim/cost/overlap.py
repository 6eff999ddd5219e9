"""An overlapped forward-backward pair (DualPipe's F&B cell, Megatron's combined 1F1B), layer by layer.

An MoE stage's forward runs, per layer, attention, the dispatch all-to-all, the experts and the combine
all-to-all; its backward the same in reverse (the combine's gradient, the experts, the dispatch's gradient,
attention). Alone, a pass waits for each all-to-all it starts. In a pair, the two passes interleave layer by
layer on two resources of one rank, compute and the link: one pass's all-to-all runs while the other pass
computes. `pair_timeline` lays the two chains out, each segment as early as its own chain and its resource
allow, the forward first where both could start; the pair takes as long as that layout.

One all-to-all's time (`StageCost.a2a_ms`) is for one microbatch through the whole stage, dispatch or combine;
each pass runs two. With no all-to-all the pair is its compute, scaled by the cost model's `overlap_factor`
(what two passes sharing the device's compute gain, 1: nothing).

>>> pair_timeline(2.0, 0.5, 4.0, 0.5, layers=1).makespan  # F: 1 + .5 + 1 + .5; B: .5 + 2 + .5 + 2
6.0
"""

from __future__ import annotations

from typing import NamedTuple

COMPUTE, LINK = "compute", "link"


class Segment(NamedTuple):
    """One piece of a pair's layout: `part` 0 is the forward, 1 the backward; times from the pair's start."""

    part: int
    resource: str
    start: float
    end: float


class PairTimeline(NamedTuple):
    makespan: float
    segments: tuple[Segment, ...]

    def busy_ms(self, resource: str) -> float:
        return sum(s.end - s.start for s in self.segments if s.resource == resource)


def _chain(compute_ms: float, a2a_ms: float, layers: int, backward: bool) -> list[tuple[str, float]]:
    """A pass as (resource, time) segments in order: per layer two compute halves and two all-to-alls."""
    c, a = compute_ms / (2 * layers), a2a_ms / layers  # `a2a_ms`: one all-to-all through all the layers
    layer = (
        [(LINK, a), (COMPUTE, c), (LINK, a), (COMPUTE, c)]
        if backward
        else [(COMPUTE, c), (LINK, a), (COMPUTE, c), (LINK, a)]
    )
    return [seg for _ in range(layers) for seg in layer if seg[1] > 0]


def pair_timeline(
    forward_ms: float, forward_a2a_ms: float, backward_ms: float, backward_a2a_ms: float, layers: int = 1
) -> PairTimeline:
    """The layout of a forward (compute `forward_ms`, two all-to-alls of `forward_a2a_ms` each, a dispatch and a
    combine) overlapped with a backward, interleaved over `layers` MoE layers; list scheduling of two chains on
    two resources."""
    if layers < 1:
        raise ValueError(f"layers must be at least 1, got {layers}")
    chains = [_chain(forward_ms, forward_a2a_ms, layers, False), _chain(backward_ms, backward_a2a_ms, layers, True)]
    position = [0, 0]
    chain_free = [0.0, 0.0]
    resource_free = {COMPUTE: 0.0, LINK: 0.0}
    segments: list[Segment] = []
    while position[0] < len(chains[0]) or position[1] < len(chains[1]):
        best = None
        for part in (0, 1):  # the segment that can start first; the forward where they tie
            if position[part] < len(chains[part]):
                resource, _ = chains[part][position[part]]
                start = max(chain_free[part], resource_free[resource])
                if best is None or start < best[0]:
                    best = (start, part)
        start, part = best
        resource, time = chains[part][position[part]]
        end = start + time
        segments.append(Segment(part, resource, start, end))
        chain_free[part] = resource_free[resource] = end
        position[part] += 1
    return PairTimeline(max(chain_free), tuple(segments))
