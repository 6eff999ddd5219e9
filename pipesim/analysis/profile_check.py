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

from pipesim.analysis.machine_share import MAX_QUIET_OTHER_SHARE, contended, load_words, other_share
from pipesim.analysis.stats import CONFIDENCE, MAX_INFORMATIVE_HALF_WIDTH, informative, t_quantile

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

    @property
    def informative(self) -> bool | None:
        """Whether the predicted interval is narrow enough to count a hit (pipesim.analysis.stats)."""
        return informative(self.predicted_ms, self.predicted_p05_ms, self.predicted_p95_ms)


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
    of predicted / measured, less 1) and how many medians fell inside their 90% interval, counting informative
    intervals only (`with_interval`; `not_informative`: those wider than MAX_INFORMATIVE_HALF_WIDTH); each row
    kept."""
    if not checked:
        return None
    errors = [abs(c.error) for c in checked]
    inside = [c.inside for c in checked if c.inside is not None and c.informative]
    bias = math.exp(statistics.fmean(math.log(c.predicted_ms / c.measured_ms) for c in checked)) - 1
    return {
        "configurations": len(checked),
        "median_error": statistics.median(errors),
        "largest_error": max(errors),
        "bias": bias,
        "inside": sum(inside) if inside else None,
        "with_interval": len(inside),
        "not_informative": sum(c.informative is False for c in checked),
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
    wide = check.get("not_informative")
    wide_ok = isinstance(wide, int) and not isinstance(wide, bool) and 0 <= wide <= count
    return {
        "configurations": count,
        **{name: float(v) for name, v in figures.items()},
        "inside": inside if counted and inside <= with_interval else None,
        "with_interval": with_interval if counted and inside <= with_interval else 0,
        "not_informative": wide if wide_ok else 0,
    }


def check_line(summary: dict[str, Any] | None) -> list[str]:
    """The check in words, for the profile's summary ('' when there was nothing to check)."""
    if not summary:
        return []
    inside = (
        f"; {summary['inside'] or 0} of {summary['with_interval']} inside their informative 90% interval"
        if summary.get("with_interval")
        else ""
    )
    wide = summary.get("not_informative")
    if isinstance(wide, int) and not isinstance(wide, bool) and wide > 0:
        inside += f"; {wide} interval{'s' if wide > 1 else ''} not informative (wider than " + (
            f"+-{MAX_INFORMATIVE_HALF_WIDTH:.0%}), not counted"
        )
    return [
        f"check    the profile predicts its own {summary['configurations']} in-situ configurations (median steps, "
        f"timed as a run times them) within {summary['median_error']:.1%} (median), {summary['largest_error']:.1%} "
        f"at most, {summary['bias']:+.1%} on average{inside}"
    ]


# A bias is a disturbance only when it is also large: below this, a profile that predicts its own steps a few per
# cent off is within the accuracy asked of it (median |error| <= 5%), whatever the test says of a tight set.
MIN_DISTURBED_BIAS = 0.05
Z90 = 1.645  # a normal 90% interval's half-width in standard deviations


def disturbance(summary: dict[str, Any] | None, load: Any = None) -> dict[str, Any] | None:
    """Whether a profile's check shows a bias rather than noise (`check_summary`'s figures with their rows): the
    95% t-interval of its mean log error excludes 0 AND the mean exceeds the spread the profile reports for one
    prediction (the standard deviation its 90% intervals stand for: half-width / 1.645, the median over the
    rows; at least MIN_DISTURBED_BIAS), or exceeds MIN_DISTURBED_BIAS while other processes held at least
    MAX_QUIET_OTHER_SHARE of the cores (a bias hidden under a spread that other work widened: seen, a check off by
    -7.7%, CI -12.1% to -3.0%, under a 28.6% spread while others held 0.97 of 2 cores); or, whatever the check
    says, the ranks contended for cores with other work (pipesim.analysis.machine_share.contended): a check
    measured under the same contention cannot vouch for it. `load`: the profile's record of the machine
    (`machine_load`), named in the line. None with fewer than 2 readable rows."""
    rows = summary.get("rows") if isinstance(summary, dict) else None
    logs, spreads = [], []
    for row in rows if isinstance(rows, list) else []:
        measured, predicted = _positive(row, "measured_ms"), _positive(row, "predicted_ms")
        if measured is None or predicted is None:
            continue
        logs.append(math.log(predicted / measured))
        low, high = _positive(row, "predicted_p05_ms"), _positive(row, "predicted_p95_ms")
        if low is not None and high is not None and high >= low:
            spreads.append((high - low) / 2 / predicted / Z90)
    if len(logs) < 2:
        return None
    centre = statistics.fmean(logs)
    half = t_quantile(CONFIDENCE, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    spread = statistics.median(spreads) if spreads else 0.0
    bias, low, high = math.exp(centre) - 1, math.exp(centre - half) - 1, math.exp(centre + half) - 1
    shared = other_share(load) >= MAX_QUIET_OTHER_SHARE
    biased = not low <= 0 <= high and abs(bias) > max(0.0 if shared else spread, MIN_DISTURBED_BIAS)
    busy = contended(load)
    result = {"disturbed": biased or busy, "bias": bias, "low": low, "high": high, "spread": spread,
              "shared": shared, "contended": busy, "biased": biased}  # fmt: skip
    return {**result, "line": disturbance_line(result, load)}


def _positive(row: Any, key: str) -> float | None:
    value = row.get(key) if isinstance(row, dict) else None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    return float(value) if ok else None


def disturbance_line(verdict: dict[str, Any], load: Any) -> str:
    """The verdict in one line, naming the load the profile saw."""
    figures = (
        f"its own check is off by {verdict['bias']:+.1%} on average (95% CI {verdict['low']:+.1%} to "
        f"{verdict['high']:+.1%})"
    )
    if not verdict["disturbed"]:
        return f"not disturbed: {figures}, within the {verdict['spread']:.1%} spread it reports"
    if verdict.get("contended") and not verdict.get("biased"):
        why = (
            "which cannot vouch for it: its ranks waited for cores that other work held, so its times, and its check's,"
            " are the machine's leftovers"
        )
    elif verdict.get("shared") and abs(verdict["bias"]) <= verdict["spread"]:
        why = f"a bias that the {verdict['spread']:.1%} spread it reports, widened by other work, hides"
    else:
        why = f"a bias beyond the {verdict['spread']:.1%} spread it reports"
    return f"disturbed: {figures}, {why}; {load_words(load)}; profile again on a quieter machine"
