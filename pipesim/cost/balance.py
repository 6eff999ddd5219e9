"""Stage balancing: cut L layers into S contiguous stages so that the slowest stage is as fast as possible.

The classic linear partition problem, solved exactly in O(L + 64 S log L) time and O(L) memory. The optimum is
one of the contiguous sums `prefix[j] - prefix[i]` (computed with exactly that subtraction, so comparisons are
exact in floating point), and whether a bottleneck `limit` is feasible is a greedy test (packing layers greedily
into a stage never hurts the stages after it), monotone in `limit`. So the optimum is the smallest double for
which the greedy test passes: a binary search over the doubles themselves (their bit patterns order like their
values, at most 64 halvings), never listing the L^2 sums. Each test finds every stage's end by bisection over
the prefix sums with the same subtraction as the sums, so the result equals the exhaustive search over the sums
bit for bit (tests/test_bounds.py checks it against brute force and against that search).

The split is returned as split points, the unit indices where each stage after the first starts: the convention
of the executor's `--split-points` (pipesim_executor.config.check_split_points). Among the optimal splits the greedy one
(every stage as full as the bottleneck allows, the last stages taking the rest) is returned, so the result is
deterministic.

With several chunks per rank (interleaved, V shapes) the S stages are ranks x chunks; each is balanced alone,
which is what the slowest stage, the quantity schedules are costed with, depends on.
"""

from __future__ import annotations

import math
import struct
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from pipesim.limits import check_sizes


@dataclass(frozen=True)
class Balance:
    """A split of `len(costs)` layers into stages: its split points, per-stage costs and the slowest one."""

    split_points: tuple[int, ...]
    stage_costs: tuple[float, ...]

    @property
    def bottleneck(self) -> float:
        return max(self.stage_costs)

    @property
    def imbalance(self) -> float:
        """Slowest stage over the mean stage (1.0: perfectly balanced)."""
        mean = sum(self.stage_costs) / len(self.stage_costs)
        return self.bottleneck / mean if mean > 0 else 1.0


def _check(costs: Sequence[float], num_stages: int) -> list[float]:
    if not isinstance(num_stages, int) or isinstance(num_stages, bool) or num_stages < 1:
        raise ValueError(f"the number of stages must be a positive integer, got {num_stages!r}")
    check_sizes(num_layers=len(costs), num_stages=num_stages)  # before a float is made of them
    try:
        values = [float(c) for c in costs]
    except (TypeError, ValueError):
        raise ValueError("layer costs must be numbers (ms)") from None
    if not values:
        raise ValueError("give at least one layer cost")
    bad = next((v for v in values if not (v >= 0 and v < math.inf)), None)
    if bad is not None:
        raise ValueError(f"layer costs must be finite numbers >= 0, got {bad!r}")
    if num_stages > len(values):
        raise ValueError(
            f"{num_stages} stages need at least {num_stages} layers; there are {len(values)}: "
            "every stage holds at least one layer"
        )
    return values


def stage_costs(costs: Sequence[float], split_points: Sequence[int]) -> tuple[float, ...]:
    """Per stage, the sum of its layers' costs."""
    bounds = [0, *split_points, len(costs)]
    return tuple(float(sum(costs[a:b])) for a, b in zip(bounds, bounds[1:], strict=False))


def _greedy(prefix: list[float], num_stages: int, limit: float) -> tuple[int, ...] | None:
    """Split points that keep every stage at most `limit` with each stage holding >= 1 layer, or None.

    Each stage takes as many layers as fit under `limit` while leaving one layer for each stage still to come.
    `prefix[e] - prefix[start]` grows with `e` (prefix sums of costs >= 0, and rounding is monotone), so the
    furthest end that fits is found by bisection, comparing exactly the subtraction the candidates are made of.
    """
    count = len(prefix) - 1
    points = []
    start = 0
    for remaining in range(num_stages - 1, 0, -1):
        base = prefix[start]
        # the furthest end in (start, count - remaining] with prefix[end] - base <= limit, else start
        end = bisect_right(prefix, limit, start + 1, count - remaining + 1, key=lambda p, base=base: p - base) - 1
        if end <= start:
            return None
        points.append(end)
        start = end
    if prefix[count] - prefix[start] > limit:
        return None
    return tuple(points)


def _slowest(prefix: list[float], points: tuple[int, ...]) -> float:
    """The slowest stage of a split, each stage's sum the same subtraction `_greedy` compares."""
    bounds = [0, *points, len(prefix) - 1]
    return max(prefix[b] - prefix[a] for a, b in zip(bounds, bounds[1:], strict=False))


def _bits(value: float) -> int:
    """A double >= 0 as its bit pattern, an integer that orders like the value."""
    return struct.unpack("<q", struct.pack("<d", value))[0]


def _double(bits: int) -> float:
    return struct.unpack("<d", struct.pack("<q", bits))[0]


def balance(costs: Sequence[float], num_stages: int) -> Balance:
    """The split of layers with `costs` into `num_stages` contiguous stages minimising the slowest stage.

    At most `pipesim.limits.MAX_LAYERS` layers and `MAX_STAGES` stages (checked before any work)."""
    values = _check(costs, num_stages)
    prefix = [0.0, *accumulate(values)]
    if not math.isfinite(prefix[-1]):
        raise ValueError("the layer costs add up past the largest number a float holds: give them in larger units")
    count = len(values)
    # A lower bound that is itself a sum: a stage holding layer k costs at least prefix[k+1] - prefix[k]. When it
    # is feasible it is the optimum; else the optimum lies in (low, the whole model], which is feasible.
    low = max(prefix[k + 1] - prefix[k] for k in range(count))
    points = _greedy(prefix, num_stages, low)
    if points is None:
        # Invariant: _double(lo) infeasible, _double(hi) feasible. The answer is the smallest feasible double,
        # which is a sum: feasibility changes only where the limit crosses one.
        lo, hi = _bits(low), _bits(prefix[count] - prefix[0])
        while hi - lo > 1:
            mid = (lo + hi) // 2
            found = _greedy(prefix, num_stages, _double(mid))
            if found is None:
                lo = mid
            else:  # the split found is feasible at its own slowest stage, a sum at most `mid`: hi drops to it
                hi = _bits(_slowest(prefix, found))
        points = _greedy(prefix, num_stages, _double(hi))
        assert points is not None, "the whole model in one stage always fits"
    return Balance(points, stage_costs(values, points))


def format_split_points(points: Sequence[int]) -> str:
    """The text `executor run --split-points` takes: comma-separated unit indices."""
    return ",".join(str(p) for p in points)


def check_split_points(split_points: Sequence[int], num_layers: int, num_stages: int) -> tuple[int, ...]:
    """The one check of explicit stage boundaries (layer indices where a stage starts), with the splitter that
    makes them: for the executor's launcher and the ranks that cut the model (pipesim_executor.config delegates here),
    and for a model description cut at a plan's split (pipesim.cost.description)."""
    points = tuple(int(p) for p in split_points)
    if len(points) != num_stages - 1:
        raise ValueError(
            f"split_points {list(points)} give {len(points) + 1} stages but the schedule has {num_stages}: "
            f"give {num_stages - 1} layer indices"
        )
    previous = 0
    for point in points:
        if not previous < point < num_layers:
            raise ValueError(
                f"split_points {list(points)} must increase strictly and lie in 1..{num_layers - 1} "
                f"(the model has {num_layers} layers); every stage needs at least one layer"
            )
        previous = point
    return points
