"""A plan's answer: the Pareto front on (step time, memory), the best candidate that fits, and why the others lost.

    {"candidates": [...], "pareto": [...], "best": {...} | null, "trades": [...], "inputs": {...}, "summary": [...]}

Every entry carries schedule, ranks, microbatches, virtual_stages, recompute, split, step_ms, throughput,
peak_memory_bytes and fits (plus the microbatch size, W share, bubble, imbalance and, for a candidate that
could not be built, its error). step_ms is the step time (`pipesim.sim.steps.step_time_ms`: the pipeline, the
part of the data-parallel all-reduce its backward does not hide, and the per-step overhead from a cost file);
`makespan_ms` repeats it under its older name, for one version (deprecated: read step_ms). Where the
planner sampled a candidate (`pipesim.plan.intervals`), step_ms is the median of its sampled steps, `step_ms_p05`
and `step_ms_p95` their 90% interval and `step_ms_deterministic` the step of the medians; `extrapolated` marks a
microbatch size outside the profile.
throughput is samples per second of the global batch; peak_memory_bytes is the fullest device's parameters,
gradients, optimizer state and activation peak. `offload` names the candidate's activation offload
(`pipesim.plan.offload`; "none": kept on the device) and `peak_host_bytes` what an offloaded one holds in host
memory at most. `trades` says, for the best and the leaner fitting candidates of the front, their peak memory
against their step and bubble relative to the fastest candidate without the cap (`trade`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipesim.limits import require_items
from pipesim.plan.inputs import TIE
from pipesim.plan.search import Candidate
from pipesim.programs import programs
from pipesim.units import format_bytes, format_ms

PLAN_FORMAT = "pipesim.plan"


def pareto_front(candidates: list[Candidate]) -> list[Candidate]:
    """The built candidates that no other beats on both step time and memory (at least as good on both, better on
    one), fastest first. Candidates with identical numbers do not beat each other: all of them stay."""
    require_items(candidates, "candidates", Candidate, "Candidates (plan_candidates' result)")
    built = sorted((c for c in candidates if c.built), key=lambda c: (c.step_ms, c.peak_memory_bytes))
    front: list[Candidate] = []
    best_before = float("inf")  # lowest memory among strictly faster candidates
    i = 0
    while i < len(built):
        j = i
        while j < len(built) and built[j].step_ms == built[i].step_ms:
            j += 1
        group = built[i:j]
        lowest = group[0].peak_memory_bytes  # sorted by memory within a time
        front += [c for c in group if c.peak_memory_bytes == lowest and c.peak_memory_bytes < best_before]
        best_before = min(best_before, lowest)
        i = j
    return front


def time_key(step_ms: float) -> float:
    """A step time as candidates are ordered by it: to the nanosecond, so that two schedules with the same step
    but for rounding in the last bits (GPipe and 1F1B on 2 ranks) tie, and less memory decides."""
    return round(step_ms, 6)


def best_candidate(candidates: list[Candidate]) -> Candidate | None:
    """The fastest candidate that fits the cap (less memory breaks a tie: `time_key`); None when none fits. A
    candidate at a microbatch size outside the profile (`extrapolated`) only when no measured size fits: its price
    rests on no measurement."""
    require_items(candidates, "candidates", Candidate, "Candidates (plan_candidates' result)")
    fitting = [c for c in candidates if c.built and c.fits]
    measured = [c for c in fitting if not c.extrapolated]
    return min(measured or fitting, key=lambda c: (time_key(c.step_ms), c.peak_memory_bytes), default=None)


def fastest_unconstrained(candidates: list[Candidate]) -> Candidate | None:
    """The fastest built candidate with its activations on the device, fitting the cap or not (less memory breaks
    a tie): what the cap costs is read against it (an offloaded one only where none is kept on the device)."""
    built = [c for c in candidates if c.built]
    built = [c for c in built if c.offload == "none"] or built
    return min(built, key=lambda c: (time_key(c.step_ms), c.peak_memory_bytes), default=None)


MAX_TRADES = 5  # the best and at most this many leaner candidates of the front in a plan's trades


def recommended(candidates: list[Candidate]) -> list[Candidate]:
    """The best, then the fitting candidates of the front that need less memory than it, fastest first: each a
    recommendation for its memory (what pruning keeps exactly: `pipesim.plan.prune`)."""
    best = best_candidate(candidates)
    if best is None:
        return []
    leaner = [c for c in pareto_front(candidates) if c.fits and c.peak_memory_bytes < best.peak_memory_bytes]
    return [best, *leaner[:MAX_TRADES]]


def trade(candidate: Candidate, reference: Candidate) -> dict[str, Any]:
    """What `candidate` trades against `reference` (the fastest without the cap): its peak memory against its
    step and bubble, relative, with the words the summary prints."""
    memory = candidate.peak_memory_bytes / reference.peak_memory_bytes - 1
    step = candidate.step_ms / reference.step_ms - 1
    host = f"; {format_bytes(candidate.peak_host_bytes)} in host memory" if candidate.peak_host_bytes else ""
    return {
        "candidate": candidate.label,
        "against": reference.label,
        "memory_change": memory,
        "step_change": step,
        "bubble_fraction": candidate.bubble_fraction,
        "against_bubble_fraction": reference.bubble_fraction,
        "offload": candidate.offload,
        "peak_host_bytes": candidate.peak_host_bytes,
        "text": f"{memory:+.0%} peak memory for {step:+.1%} step (bubble {candidate.bubble_fraction:.1%} against "
        f"{reference.bubble_fraction:.1%}{host})",
    }


def trades(candidates: list[Candidate]) -> list[dict[str, Any]]:
    """Each recommended candidate's trade (`recommended`, `trade`) against the fastest without the cap."""
    reference = fastest_unconstrained(candidates)
    return [] if reference is None else [trade(c, reference) for c in recommended(candidates)]


def interval_text(candidate: Candidate) -> str:
    """A candidate's step as the CLI and the summary show it: the point, then its 90% interval where sampled."""
    if candidate.step_ms_p05 is None or candidate.step_ms_p95 is None:
        return format_ms(candidate.step_ms)
    return f"{format_ms(candidate.step_ms)} [{format_ms(candidate.step_ms_p05)}, {format_ms(candidate.step_ms_p95)}]"


@dataclass(frozen=True)
class Loss:
    """Why `candidate` lost to the best: `reason` is tie, memory, bubble, imbalance or compute."""

    candidate: Candidate
    reason: str
    detail: str


def why_lost(candidate: Candidate, best: Candidate, cap: float | None) -> Loss:
    """The main reason a runner-up lost: it does not fit, it idles more, its stages are less even, or it computes
    more (recomputation, a smaller microbatch's fixed costs)."""
    if not candidate.fits:
        return Loss(
            candidate,
            "memory",
            f"needs {format_bytes(candidate.peak_memory_bytes)} per device, over the cap of {format_bytes(cap or 0)}",
        )
    if candidate.step_ms <= best.step_ms * (1 + TIE):
        return Loss(candidate, "tie", f"within {TIE:.0%} of the best's step time: a tie within the model's accuracy")
    bubble = candidate.bubble_fraction - best.bubble_fraction
    imbalance = candidate.imbalance - best.imbalance
    if bubble >= imbalance and bubble > 0.005:
        return Loss(
            candidate, "bubble", f"idles {candidate.bubble_fraction:.1%} of the time against {best.bubble_fraction:.1%}"
        )
    if imbalance > 0.005:
        return Loss(
            candidate, "imbalance", f"slowest stage {candidate.imbalance:.2f}x the mean against {best.imbalance:.2f}x"
        )
    what = "recomputes every forward" if candidate.recompute and not best.recompute else "computes more"
    return Loss(candidate, "compute", f"{what} ({candidate.step_ms:.3g} ms against {best.step_ms:.3g} ms)")


def runners_up(candidates: list[Candidate], best: Candidate | None, cap: float | None, count: int = 5) -> list[Loss]:
    """The next `count` fastest candidates (fitting or not) and why each lost to `best`."""
    if best is None:
        return []
    others = sorted((c for c in candidates if c.built and c is not best), key=lambda c: c.step_ms)
    return [why_lost(c, best, cap) for c in others[:count]]


TRANSFORMER_UNITS = "units count the embedding and the head"  # a model description's units


def summary_lines(
    candidates: list[Candidate], cap: float | None, units: str = TRANSFORMER_UNITS, interval_of: Any = None
) -> list[str]:
    """The plan in words; `units` says what the split's unit indices count (the model's own layers)."""
    built = [c for c in candidates if c.built]
    failed = sum(c.error is not None for c in candidates)
    pruned = sum(c.pruned is not None for c in candidates)
    best = best_candidate(candidates)
    fitting = sum(c.fits for c in built)
    lines = [
        f"{len(candidates)} candidates: {len(built)} built, {fitting} fit"
        + (f" the cap of {format_bytes(cap)}" if cap is not None else "")
        + f", {failed} cannot be built"
        + (
            f", {pruned} pruned unbuilt (their lower bound cannot reach the best, a runner-up or the front)"
            if pruned
            else ""
        )
    ]
    if best is None:
        lowest = min(built, key=lambda c: c.peak_memory_bytes, default=None)
        lines.append(
            "no candidate fits"
            + (f"; the least memory is {format_bytes(lowest.peak_memory_bytes)} ({lowest.label})" if lowest else "")
        )
        return lines
    lines.append(
        f"best: {best.label}: {interval_text(best)} per step, {best.throughput:,.1f} samples/s, "
        f"{format_bytes(best.peak_memory_bytes)} on the fullest device"
        + (f" and {format_bytes(best.peak_host_bytes)} in host memory" if best.peak_host_bytes else "")
        + f", bubble {best.bubble_fraction:.1%}, "
        f"stages start at units {','.join(map(str, best.split)) or '-'} ({units}; "
        f"{programs().executor} run --split-points takes them)"
    )
    outside = [c for c in built if c.extrapolated]
    if outside:
        lines.append(
            f"{len(outside)} candidates at microbatch sizes outside the profile are extrapolated: wider intervals, "
            + ("recommended only because no measured size fits" if best.extrapolated else "never recommended")
        )
    if best.step_ms_p05 is not None:
        lines.append(f"steps: the median of sampled steps [5th, 95th percentile] {_interval_meaning(interval_of)}")
    reference = fastest_unconstrained(candidates)
    if reference is not None and not reference.fits:  # the cap costs something: say what each answer trades
        lines.append(
            f"what each recommendation trades against the fastest without the cap, {reference.label} "
            f"({format_ms(reference.step_ms)}, {format_bytes(reference.peak_memory_bytes)}):"
        )
        lines += [f"  {t['candidate']}: {t['text']}" for t in trades(candidates)]
    for loss in runners_up(candidates, best, cap):
        c = loss.candidate
        slower = c.step_ms / best.step_ms - 1
        lines.append(f"  {c.label}: {interval_text(c)}, {slower:+.1%} time; lost on {loss.reason}: {loss.detail}")
    return lines


def _interval_meaning(interval_of: Any) -> str:
    """What a plan's intervals are of (`plan --interval-of`), as the summary says it."""
    launches = interval_of.get("launches") if isinstance(interval_of, dict) else None
    steps = interval_of.get("steps") if isinstance(interval_of, dict) else None
    if not isinstance(launches, int) or not isinstance(steps, int) or steps <= 1:
        return "(each action's measured spread)"
    return (
        f"of the median step over {launches} launch{'es' * (launches > 1)} of {steps // launches} steps, as "
        "verify-plan measures it (--interval-of verification)"
    )


def plan_document(
    candidates: list[Candidate], inputs: dict[str, Any], cap: float | None, units: str = TRANSFORMER_UNITS
) -> dict[str, Any]:
    """The plan as JSON-ready data (`formats.write_json` writes it)."""
    best = best_candidate(candidates)
    return {
        "format": PLAN_FORMAT,
        "version": 1,
        "inputs": inputs,
        "candidates": [c.to_dict() for c in candidates],
        "pareto": [c.to_dict() for c in pareto_front(candidates)],
        "best": None if best is None else best.to_dict(),
        "trades": trades(candidates),
        "summary": summary_lines(candidates, cap, units, inputs.get("interval_of")),
    }


def ranked(candidates: list[Candidate]) -> list[Candidate]:
    """Built candidates that fit, fastest first (then the others): the order `verify` runs the top K in."""
    built = [c for c in candidates if c.built]
    return sorted(built, key=lambda c: (not c.fits, c.extrapolated, time_key(c.step_ms), c.peak_memory_bytes))


def best_per_schedule(candidates: list[Candidate]) -> list[Candidate]:
    """Each schedule family's fastest built candidate that fits (`ranked`'s first of each), in `ranked`'s order:
    the one per family whose robustness to a slow device a plan reports (`pipesim.analysis.sensitivity`). Among
    the built ones: a plan that pruned candidates (`pipesim.plan.prune`) may have left a family's best unbuilt."""
    best: dict[str, Candidate] = {}
    for candidate in ranked(candidates):
        if candidate.fits:
            best.setdefault(candidate.schedule, candidate)
    return list(best.values())


def torchtitan_settings(candidate: Candidate, csv_name: str, num_blocks: int | None = None) -> dict[str, Any]:
    """What torchtitan's [parallelism] section needs to run this candidate: the schedule as a compute_only CSV file,
    the microbatch size, the degree and the split points. pipesim's split points are unit indices (embedding,
    blocks, head); torchtitan names the module a stage starts at: unit u >= 1 is block `layers.{u-1}`, the head
    (unit num_blocks + 1) is `output`."""

    def module(unit: int) -> str:
        return "output" if num_blocks is not None and unit == num_blocks + 1 else f"layers.{unit - 1}"

    return {
        "pipeline_parallel_degree": candidate.ranks,
        "pipeline_parallel_schedule_csv": csv_name,
        "pipeline_parallel_microbatch_size": candidate.microbatch_size,
        "pipeline_parallel_split_points": [module(u) for u in candidate.split],
        "split_points_units": list(candidate.split),
        "schedule": candidate.schedule,
        "virtual_stages_per_rank": candidate.virtual_stages,
        "microbatches": candidate.microbatches,
        "recompute": candidate.recompute,
        "data_parallel_degree": candidate.data_parallel,
    }
