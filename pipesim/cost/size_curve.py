"""One quantity a profile measured at each microbatch size, read at any size without leaving physics: a time or a
byte count never shrinks as the microbatch grows and is never negative, a ratio is held at its nearest
measured value beyond the profiled sizes. The planner reads every unit's times and bytes through it
(`pipesim.cost.profile`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pipesim.cost.runtime import check_finite_non_negative


@dataclass(frozen=True)
class SizeCurve:
    """One quantity (a time in ms, or bytes) measured at each profiled microbatch size.

    A time or a byte count (`monotone`, the default) is read off its non-decreasing fit (`fitted`: the measured
    values pooled where noise made a larger microbatch cheaper), so that no size reads cheaper than a smaller one,
    beyond the profiled sizes included. A ratio (`monotone=False`: an in-situ factor) is read as measured and held
    at its nearest profiled value beyond them: extending a line of ratios has no physical meaning."""

    sizes: tuple[int, ...]
    values: tuple[float, ...]
    monotone: bool = True

    def __post_init__(self) -> None:
        if not self.sizes or len(self.sizes) != len(self.values):
            raise ValueError(f"a size curve needs one value per size, got sizes {self.sizes} and values {self.values}")
        whole = all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in self.sizes)
        if not whole or list(self.sizes) != sorted(set(self.sizes)):
            raise ValueError(f"microbatch sizes must be increasing whole numbers >= 1, got {list(self.sizes)}")
        for value in self.values:
            check_finite_non_negative("a measured value", value)

    @property
    def fitted(self) -> tuple[float, ...]:
        """The values `at` reads: for a monotone curve the least-squares non-decreasing fit of the measured values
        (pool adjacent violators: a profiled size measured cheaper than a smaller one takes their mean), else the
        values as measured."""
        return non_decreasing(self.values) if self.monotone else tuple(self.values)

    def at(self, size: int) -> float:
        """The value at `size`: the fit where profiled, else on the line through the two nearest profiled sizes
        (never below 0, non-decreasing for a monotone curve); one profiled size scales in proportion. A ratio is
        held flat beyond the profiled sizes."""
        sizes, values = self.sizes, self.fitted
        if size in sizes:
            return float(values[sizes.index(size)])
        if not self.monotone and not sizes[0] < size < sizes[-1]:
            return float(values[0] if size < sizes[0] else values[-1])
        if len(sizes) == 1:
            return float(values[0]) * size / sizes[0]
        right = next((i for i, s in enumerate(sizes) if s > size), len(sizes) - 1)
        right = max(right, 1)
        left = right - 1
        slope = (values[right] - values[left]) / (sizes[right] - sizes[left])
        return max(0.0, values[left] + slope * (size - sizes[left]))

    def affine(self) -> tuple[float, float]:
        """(a, b) of the least-squares line a + b x size; through the origin with one size."""
        n = len(self.sizes)
        if n == 1:
            return 0.0, self.values[0] / self.sizes[0]
        mean_x, mean_y = sum(self.sizes) / n, sum(self.values) / n
        sxx = sum((x - mean_x) ** 2 for x in self.sizes)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(self.sizes, self.values, strict=True)) / sxx
        return mean_y - slope * mean_x, slope

    def residual(self) -> float:
        """The affine fit's root-mean-square error relative to the mean value (0: a straight line)."""
        a, b = self.affine()
        mean = sum(self.values) / len(self.values)
        if mean <= 0:
            return 0.0
        squares = [(a + b * x - y) ** 2 for x, y in zip(self.sizes, self.values, strict=True)]
        return math.sqrt(sum(squares) / len(squares)) / mean


def non_decreasing(values: Sequence[float]) -> tuple[float, ...]:
    """The least-squares non-decreasing sequence closest to `values` (pool adjacent violators): a noisy measurement
    that made a larger size cheaper is averaged with its neighbour instead of bending the fit downwards."""
    blocks: list[list[float]] = []  # [sum, count] of each pooled run
    for value in values:
        blocks.append([float(value), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    return tuple(total / count for total, count in blocks for _ in range(int(count)))
