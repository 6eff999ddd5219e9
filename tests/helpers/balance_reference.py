"""The exhaustive stage balancing pipesim used before issue 20 (every contiguous sum a candidate: layers^2 time and
memory), kept as the reference the linear `pipesim.cost.balance` must equal bit for bit."""

from __future__ import annotations

from itertools import accumulate


def _greedy(prefix: list[float], num_stages: int, limit: float) -> tuple[int, ...] | None:
    count = len(prefix) - 1
    points = []
    start = 0
    for remaining in range(num_stages - 1, 0, -1):
        end, last = start, count - remaining
        while end < last and prefix[end + 1] - prefix[start] <= limit:
            end += 1
        if end <= start:
            return None
        points.append(end)
        start = end
    if prefix[count] - prefix[start] > limit:
        return None
    return tuple(points)


def exhaustive_balance(costs: list[float], num_stages: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """(split points, stage costs): a binary search over every contiguous sum with the greedy test."""
    values = [float(c) for c in costs]
    prefix = [0.0, *accumulate(values)]
    n = len(values)
    candidates = sorted({prefix[j] - prefix[i] for i in range(n) for j in range(i + 1, n + 1)})
    lo, hi = 0, len(candidates) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if _greedy(prefix, num_stages, candidates[mid]) is not None:
            hi = mid
        else:
            lo = mid + 1
    points = _greedy(prefix, num_stages, candidates[lo])
    assert points is not None
    bounds = [0, *points, n]
    return points, tuple(float(sum(values[a:b])) for a, b in zip(bounds, bounds[1:], strict=False))
