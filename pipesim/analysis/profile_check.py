"""A unit profile checked against itself: its own in-situ steps, predicted the way the planner predicts a candidate.

During `executor profile` the ranks run real steps of the runtime (the in-situ steps: one schedule of each class,
plain and recomputing, at every size, at the cut the planner picks). Each is timed as a run times its steps, from the
earliest rank's start to the latest rank's end (pipesim_executor.rank.unit_fit records them, every launch's). Here
each of those configurations is planned from the finished profile (`pipesim.api.plan_candidates`, the very path of
`pipesim plan --cost`) and its prediction set beside the median of its measured steps.

The planner's side, `check_profile`, is pipesim.plan.in_situ_check; this module holds what reads and says it.
`executor profile` runs the check when the profile is done and keeps it in the cost file (`provenance.check`,
pipesim_executor.host.unit_profile.checked_profile); `pipesim plan --cost` reads it back (`recorded_check`) and says
it beside the plan (and in the plan JSON's `calibration.check`).

This is not a held-out test: the in-situ steps also set the profile's in-situ factors. It shows what the factors do
not absorb: the step's time outside the actions (gaps, hops, the start and the tail), the jitter penalty, and the
cost of a cut. When the profile cannot predict its own steps, it cannot predict a plan's. Pure Python over the
planner: no torch.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

MIN_STEPS = 3  # fewer measured steps than this: no median worth checking against (pipesim.plan.in_situ_check)
# far above what `executor profile` runs in situ (at most 16 ranks, 32 microbatches of at most the largest profiled
# size): a row beyond them is not the executor's, and is not planned
MAX_CHECKED_RANKS = 64
MAX_CHECKED_MICROBATCHES = 256


@dataclass(frozen=True)
class CheckedStep:
    """One in-situ configuration: what it measured (the median of its steps) and what the profile predicts."""

    schedule: str
    microbatch_size: int
    microbatches: int
    recompute: bool
    split_points: tuple[int, ...]
    steps: int
    measured_ms: float
    predicted_ms: float
    predicted_p05_ms: float | None
    predicted_p95_ms: float | None

    @property
    def error(self) -> float:
        """(predicted - measured) / measured."""
        return self.predicted_ms / self.measured_ms - 1

    @property
    def inside(self) -> bool | None:
        """Whether the measured median lies inside the predicted 90% interval (None: no interval)."""
        if self.predicted_p05_ms is None or self.predicted_p95_ms is None:
            return None
        return self.predicted_p05_ms <= self.measured_ms <= self.predicted_p95_ms


def _whole(value: Any, largest: int) -> bool:
    """A whole number (not a bool) from 1 to `largest`."""
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= largest


def in_situ_step_rows(provenance: Any) -> list[dict[str, Any]]:
    """The in-situ steps a profile's provenance holds (`in_situ.measured_steps`), only the well-formed ones, of at
    most MAX_CHECKED_RANKS ranks and MAX_CHECKED_MICROBATCHES microbatches (what planning them costs stays small)."""
    in_situ = provenance.get("in_situ") if isinstance(provenance, dict) else None
    rows = in_situ.get("measured_steps") if isinstance(in_situ, dict) else None
    return [
        row
        for row in (rows if isinstance(rows, list) else [])
        if isinstance(row, dict)
        and isinstance(row.get("schedule"), str)
        and isinstance(row.get("step_ms"), list)
        and isinstance(row.get("split_points"), list)
        and _whole(row.get("microbatch_size"), MAX_CHECKED_MICROBATCHES)
        and _whole(row.get("microbatches"), MAX_CHECKED_MICROBATCHES)
        and _whole(row.get("ranks"), MAX_CHECKED_RANKS)
        and _whole(row.get("chunks", 1), 8)
    ]


def check_summary(checked: list[CheckedStep]) -> dict[str, Any] | None:
    """The check in figures: how many configurations, the median and largest |error|, the bias (the geometric mean
    of predicted / measured, less 1) and how many medians fell inside their 90% interval; each row kept."""
    if not checked:
        return None
    errors = [abs(c.error) for c in checked]
    inside = [c.inside for c in checked if c.inside is not None]
    bias = math.exp(statistics.fmean(math.log(c.predicted_ms / c.measured_ms) for c in checked)) - 1
    return {
        "configurations": len(checked),
        "median_error": statistics.median(errors),
        "largest_error": max(errors),
        "bias": bias,
        "inside": sum(inside) if inside else None,
        "with_interval": len(inside),
        "rows": [{**asdict(c), "split_points": list(c.split_points), "error": c.error} for c in checked],
    }


SUMMARY_FIGURES = ("median_error", "largest_error", "bias")


def recorded_check(provenance: Any) -> dict[str, Any] | None:
    """The check a cost file's provenance holds (`check`, as `check_summary` wrote it), without its rows; None when
    there is none or it is not what `check_summary` writes (a hand-edited file: no figure read from it)."""
    check = provenance.get("check") if isinstance(provenance, dict) else None
    if not isinstance(check, dict):
        return None
    count = check.get("configurations")
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return None
    figures = {name: check.get(name) for name in SUMMARY_FIGURES}
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in figures.values()):
        return None
    inside, with_interval = check.get("inside"), check.get("with_interval")
    counted = all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= count for v in (inside, with_interval))
    return {
        "configurations": count,
        **{name: float(v) for name, v in figures.items()},
        "inside": inside if counted and inside <= with_interval else None,
        "with_interval": with_interval if counted and inside <= with_interval else 0,
    }


def check_line(summary: dict[str, Any] | None) -> list[str]:
    """The check in words, for the profile's summary ('' when there was nothing to check)."""
    if not summary:
        return []
    inside = (
        f"; {summary['inside']} of {summary['with_interval']} inside their 90% interval"
        if summary.get("with_interval")
        else ""
    )
    return [
        f"check    the profile predicts its own {summary['configurations']} in-situ configurations (median steps, "
        f"timed as a run times them) within {summary['median_error']:.1%} (median), {summary['largest_error']:.1%} "
        f"at most, {summary['bias']:+.1%} on average{inside}"
    ]
