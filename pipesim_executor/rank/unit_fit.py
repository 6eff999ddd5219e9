"""`executor profile`'s fits, on rank 0: every process's measurements (pipesim_executor.rank.unit_profile) into one unit
profile (pipesim.cost.profile.UnitProfile): medians over the processes, the constants a cut stage pays at its
start and its end (least squares), each optimizer's fixed and per-byte time, the dispatch gap and the tail from the
in-situ steps, the link's in-run hop (`in_run_link`), and the in-situ factor of every kind (what real steps of the
runtime took against the profile's own price of the same stages).
"""

from __future__ import annotations

import math
import os
import socket
import statistics
import time
from dataclasses import asdict, replace
from typing import Any

import torch

from pipesim.analysis.drift import speed_drift
from pipesim.analysis.hops import hop_samples
from pipesim.cost.links import LinkCost
from pipesim.cost.profile import (
    BYTE_KINDS,
    OPTIONAL_BYTE_KINDS,
    TIME_KINDS,
    ActionConstants,
    InSituTerms,
    ProfiledUnit,
    SizeCurve,
    UnitProfile,
    schedule_class,
)
from pipesim.cost.runtime import OptimizerTime
from pipesim.schedules import in_situ_representatives
from pipesim_executor.allocator import allocator_settings
from pipesim_executor.config import RunConfig
from pipesim_executor.rank import calibrate
from pipesim_executor.rank.calibrate import full_speed_durations, in_situ_counts, priced_tails, round_work
from pipesim_executor.rank.profile import link_cost
from pipesim_executor.rank.setup import Rank
from pipesim_executor.rank.unit_timing import KINDS


def in_situ_steps() -> dict[tuple[str, int], str]:
    """The in-situ steps, one schedule per class (pipesim.cost.profile.IN_SITU_CLASSES), each run plain and
    recomputing: (schedule, chunks per rank) -> its class. The registry names each class's representative
    (`ScheduleInfo.in_situ`)."""
    return {
        (info.name, info.chunks_per_rank()): schedule_class(info.split_backward, info.chunked)
        for info in in_situ_representatives()
    }


# Which profile kind each action kind of an in-situ step is timed against, by (split backward, recomputation).
IN_SITU_KINDS = {
    (False, False): {"F": "forward_ms", "B": "backward_ms"},
    (True, False): {"F": "forward_split_ms", "I": "input_ms", "W": "weight_ms"},
    (False, True): {"F": "forward_recompute_ms", "B": "backward_recompute_ms"},
    (True, True): {"F": "forward_recompute_ms", "I": "input_recompute_ms", "W": "weight_ms"},
}
CALIBRATION_STEPS = 8  # in-situ steps per size and schedule at first (the first is dropped)
ROUND_STEPS = CALIBRATION_STEPS - 1  # the steps one in-situ round keeps
IN_SITU_CI = 0.03  # then more, CALIBRATION_STEPS at a time, until every factor's 95% CI is within +-3% ...
MAX_IN_SITU_STEPS = 40  # ... or this many steps were run (the profile then says which factors did not get there)


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def coefficient_of_variation(values: list[float]) -> float:
    """The sample standard deviation over the mean (0 for fewer than two values or a mean of 0)."""
    if len(values) < 2:
        return 0.0
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean > 0 else 0.0


def round_se(values: list[float], rounds: int) -> float:
    """The relative standard error of a price measured in `rounds` consecutive rounds of equal length (`values` in
    round order): the standard deviation of the round medians over their mean, / sqrt(rounds). What the machine's
    drift between rounds makes of a median (0 for fewer than two rounds)."""
    per_round = len(values) // rounds if rounds > 0 else 0
    if rounds < 2 or per_round < 1:
        return 0.0
    medians = [statistics.median(values[i * per_round : (i + 1) * per_round]) for i in range(rounds)]
    return coefficient_of_variation(medians) / math.sqrt(rounds)


def round_se_curves(everyone: list[dict[str, Any]], sizes: list[int]) -> dict[str, SizeCurve]:
    """Per time kind, the median over the processes and the stages timed whole of each stage's `round_se`, at every
    size (`UnitProfile.spread_round_se`); empty when the processes measured none."""
    if not all("round_se" in e for e in everyone):
        return {}
    return {
        kind: SizeCurve(
            tuple(sizes),
            tuple(_median([se for e in everyone for se in e["round_se"][s][kind]]) for s in sizes),
            monotone=False,
        )
        for kind in TIME_KINDS
    }


def spread_curves(everyone: list[dict[str, Any]], sizes: list[int]) -> dict[str, SizeCurve]:
    """Per time kind, the median over the processes and the stages timed whole of each stage's coefficient of
    variation, at every size (`UnitProfile.spread`); empty when the processes measured none."""
    if not all("spread" in e for e in everyone):
        return {}
    return {
        kind: SizeCurve(
            tuple(sizes),
            tuple(_median([cv for e in everyone for cv in e["spread"][s][kind]]) for s in sizes),
            monotone=False,
        )
        for kind in TIME_KINDS
    }


def fit_optimizer(points: list[tuple[float, float]]) -> OptimizerTime:
    """Least squares of time against parameter bytes (fixed + per byte), both clamped at 0."""
    if len(points) == 1 or len({b for b, _ in points}) == 1:
        return OptimizerTime(0.0, max(0.0, _median([t for _, t in points]) / max(points[0][0], 1.0)))
    n = len(points)
    mean_b, mean_t = sum(b for b, _ in points) / n, sum(t for _, t in points) / n
    sxx = sum((b - mean_b) ** 2 for b, _ in points)
    slope = max(0.0, sum((b - mean_b) * (t - mean_t) for b, t in points) / sxx)
    return OptimizerTime(max(0.0, mean_t - slope * mean_b), slope)


def fit_cuts(rows: list[tuple[bool, bool, float]]) -> tuple[float, float, float]:
    """(at a cut start, at a cut end, RMS residual) of residual = start x [cut at the start] + end x [cut at the
    end], least squares over the measured stages (each a row: cut at its start, cut at its end, its time less its
    units' shares)."""
    ss = sum(1 for s, _, _ in rows if s)
    ee = sum(1 for _, e, _ in rows if e)
    se = sum(1 for s, e, _ in rows if s and e)
    sd = sum(d for s, _, d in rows if s)
    ed = sum(d for _, e, d in rows if e)
    det = ss * ee - se * se
    if det == 0:  # one kind of cut only: one constant for both
        both = _median([d / max(1, s + e) for s, e, d in rows if s or e])
        start, end = both, both
    else:
        start, end = (sd * ee - ed * se) / det, (ed * ss - sd * se) / det
    residuals = [d - start * s - end * e for s, e, d in rows]
    return start, end, (sum(r * r for r in residuals) / len(residuals)) ** 0.5 if residuals else 0.0


def assemble(
    config: RunConfig, request: dict[str, Any], everyone: list[dict[str, Any]], r: Rank, slots: int | None
) -> UnitProfile:
    """Rank 0: the medians over the processes, the fits, the in-situ terms and the provenance."""
    sizes = request["sizes"]
    first = everyone[0]
    n = len(first["shares"][sizes[0]]["forward_ms"])
    shares = {
        s: {k: [_median([e["shares"][s][k][u] for e in everyone]) for u in range(n)] for k in KINDS} for s in sizes
    }
    stage_ms = {
        s: [(a, b, {k: _median([e["stages"][s][i][2][k] for e in everyone]) for k in KINDS})
            for i, (a, b, _) in enumerate(first["stages"][s])]
        for s in sizes
    }  # fmt: skip
    start, end, spread = {}, {}, {}
    for kind in KINDS:
        rows = [
            ((a > 0), (b < n), times[kind] - sum(shares[s][kind][a:b])) for s in sizes for a, b, times in stage_ms[s]
        ]
        start[kind], end[kind], spread[kind] = fit_cuts(rows)
    action = ActionConstants(start, end)
    optimizers = {
        name: fit_optimizer([p for e in everyone for p in e["optimizers"][name]]) for name in request["optimizers"]
    }
    own = optimizers[config.training.optimizer]
    ranks = everyone[: r.num_ranks]
    measured = [(key, c) for e in ranks for key, c in e["calibration"].items()]
    # each in-situ step's tail on each rank with the step's lead before its first action (calibrate.priced_tails)
    priced = {key: priced_tails([e["calibration"][key] for e in ranks]) for key in first["calibration"]}
    calibrations = [
        (key, {**c, "tail_ms": priced[key][rank]})
        for rank, e in enumerate(ranks)
        for key, c in e["calibration"].items()
    ]

    def runtime_of(chosen: list[dict[str, Any]]) -> tuple[float, float]:
        """(dispatch gap, tail with the step's lead less the optimizer's step): medians over the chosen in-situ
        steps' ranks."""
        tails = [c["tail_ms"] - own.step_ms(c["param_bytes"]) for c in chosen]
        return _median([c["dispatch_ms"] for c in chosen]), max(0.0, _median(tails))

    dispatch, tail = runtime_of([c for _, c in calibrations])
    links = {int(b): m for e in everyone for b, m in e["links"].items()}
    bytes_ = first["bytes"]
    units = []
    for u in range(n):
        curves = {k: SizeCurve(tuple(sizes), tuple(max(0.0, shares[s][k][u]) for s in sizes)) for k in TIME_KINDS}
        kinds = [*BYTE_KINDS, *(k for k in OPTIONAL_BYTE_KINDS if k in bytes_[sizes[0]][u])]
        curves.update({k: SizeCurve(tuple(sizes), tuple(bytes_[s][u][k] for s in sizes)) for k in kinds})
        units.append(ProfiledUnit(first["names"][u], bytes_[sizes[0]][u]["param_bytes"], curves))
    profile = UnitProfile(
        units=tuple(units), microbatch_sizes=tuple(sizes), action=action, dispatch_ms=dispatch, tail_ms=tail,
        optimizers=optimizers, link=link_cost(links.get(0)), core_slots=slots,
        model=asdict(config.model),
        stages={(s, a, b): times for s in sizes for a, b, times in stage_ms[s]},
        spread=spread_curves(everyone, sizes), spread_repeats=int(request["repeats"]),
        spread_round_se=round_se_curves(everyone, sizes),
        spread_drift=speed_drift(round_work([e["calibration"] for e in everyone[: r.num_ranks]], ROUND_STEPS)),
    )  # fmt: skip
    link, hop = in_run_link(profile, everyone[: r.num_ranks])
    profile = replace(profile, link=link)
    scales, ratios = in_situ_scales(profile, everyone, r, slots or r.world_size)
    cis = factor_cis(ratios)
    in_situ, steps = {}, in_situ_steps()
    for name in scales:
        chosen = [c for key, c in calibrations if steps[key[1:3]] == name]
        in_situ[name] = InSituTerms(
            *runtime_of(chosen), scales[name], ci_curves(cis, name, tuple(sizes)), stage_factors(ratios, name)
        )
    profile = replace(profile, in_situ=in_situ)
    provenance = {
        "source": "python -m executor profile",
        "model": config.model.spec or config.model.kind,
        "device": r.choice.device.type,
        "backend": r.choice.transport,
        "dtype": config.training.dtype,
        "processes": r.world_size,
        "threads_per_process": torch.get_num_threads(),
        "repeats": request["repeats"],
        "host": socket.gethostname(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "torch_version": torch.__version__,
        "allocator": allocator_settings(),
        "load_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "links": "a ping-pong between ranks 0 and 1 through the run's own transport (tiny and real tensor), its "
        "latency raised by the in-situ steps' median hop beyond its price (pipesim.analysis.hops)",
        "in_run_hop": hop,
        "action_constants": {"rms_residual_ms": spread},
        "in_situ": {
            "steps": ", ".join(f"{name} ({v} chunks per rank)" for name, v in in_situ_steps())
            + f", each plain and recomputing, on {r.num_ranks} ranks, in rounds of {CALIBRATION_STEPS - 1} steps",
            "microbatches": in_situ_counts(first["calibration"]),
            "ratios": ratios,
            "ci": cis,
            "target_ci": IN_SITU_CI,
            "dispatch_ms": [[*key, c["dispatch_ms"]] for key, c in calibrations],
            "tail_ms": [[*key, c["tail_ms"]] for key, c in measured],
            "lead_ms": [[*key, c.get("lead_ms", 0.0)] for key, c in measured],
            "measured_steps": calibrate.in_situ_step_rows(ranks, config.training.optimizer),  # what the profile checks
        },
        "process_spread": _process_spread(everyone, sizes, n),
    }
    return replace(profile, provenance=provenance)


def in_run_link(profile: UnitProfile, ranks: list[dict[str, Any]]) -> tuple[LinkCost, dict[str, Any]]:
    """The profile's link with its latency raised by the median (sleep mode's choice: a hop's tail is a
    waiting receiver's late wake-up, which under load inflates the mean by milliseconds and lands in few steps; the
    mean is kept beside it), over every in-situ step, size and boundary, of a message's in-run hop
    (`pipesim.analysis.hops.hop_samples`: its producer's end to its waiting consumer's start) less what the
    ping-pong's link prices that boundary's tensor at (never lowered): inside a step a message pays
    the send after the producer's span and the waiting receiver's wake-up, which a ping-pong does not see, on
    every boundary the critical path crosses. `ranks`: each pipeline rank's measurements (one clock: one
    machine). With the figures behind it, for the provenance."""
    excess: list[float] = []
    for key, summary in ranks[0]["calibration"].items():
        if not all("timing" in e["calibration"].get(key, {}) for e in ranks):
            continue
        size, bounds = key[0], [0, *summary["split_points"], len(profile.units)]
        samples = hop_samples([e["calibration"][key]["timing"] for e in ranks])
        for boundary, hops in samples.items():
            if not 0 <= boundary < len(bounds) - 2:
                continue
            sent = profile.units[bounds[boundary + 1] - 1].curves["output_bytes"].at(size)
            price = profile.link.transfer_ms(sent)
            excess += [hop - price for hop in hops]
    extra = max(0.0, _median(excess))
    link = replace(profile.link, latency_ms=profile.link.latency_ms + extra)
    mean = statistics.fmean(excess) if excess else 0.0
    return link, {
        "excess_ms": extra,
        "mean_excess_ms": mean,
        "samples": len(excess),
        "ping_pong_latency_ms": profile.link.latency_ms,
    }


def in_situ_scales(
    profile: UnitProfile, everyone: list[dict[str, Any]], r: Rank, slots: int
) -> tuple[dict[str, dict[str, SizeCurve]], list[dict[str, Any]]]:
    """Per class of schedule, profile kind and profiled size, the median over its in-situ steps' stages of (in-situ
    mean duration / what the profile prices the same stage at, `UnitProfile.stage_kinds` before any scaling: the
    mean, because a step sums its actions, and their times are skewed to the right, so pricing them at their
    medians fell 6-15% short of the step); and every
    ratio, for the provenance. When the processes outnumber the cores, the in-situ durations are first turned into
    full-speed work (pipesim_executor.rank.calibrate.full_speed_durations), as the simulation shares the cores
    itself."""
    rows, steps = [], in_situ_steps()
    for key, summary in everyone[0]["calibration"].items():
        size, name, chunks, recompute, split = key
        kinds = IN_SITU_KINDS[(split, recompute)]
        bounds = [0, *summary["split_points"], len(profile.units)]
        if slots < r.world_size:
            spans = [e["calibration"][key]["spans"] for e in everyone]
            durations = full_speed_durations(spans, slots, statistics.fmean)
        else:
            durations = {}
            for e in everyone[: r.num_ranks]:
                durations.update(e["calibration"][key].get("means_ms") or e["calibration"][key]["durations_ms"])
        medians: dict[str, dict[str, float]] = {}  # kept beside, for the provenance: what the median would price
        for e in everyone[: r.num_ranks]:
            medians.update(e["calibration"][key].get("durations_ms", {}))
        cis: dict[str, dict[str, float]] = {}  # each stage's own rank measured its CI
        for e in everyone[: r.num_ranks]:
            cis.update(e["calibration"][key].get("ci", {}))
        for stage, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
            predicted = profile.stage_kinds(size, a, b)
            for kind, measured in (durations.get(str(stage)) or {}).items():
                target = kinds.get(kind)
                if target is not None and predicted[target] > 0:
                    rows.append({"class": steps[(name, chunks)], "schedule": name, "recompute": recompute,
                                 "size": size, "stage": stage, "start": a, "stop": b, "kind": target,
                                 "ratio": measured / predicted[target],
                                 "median_ratio": medians.get(str(stage), {}).get(kind, 0.0) / predicted[target],
                                 "ci": _finite(cis.get(str(stage), {}).get(kind)),
                                 "steps": summary.get("steps", 0)})  # fmt: skip
    grouped: dict[str, dict[str, dict[int, list[float]]]] = {}
    for row in rows:
        grouped.setdefault(row["class"], {}).setdefault(row["kind"], {}).setdefault(row["size"], []).append(
            row["ratio"]
        )
    sizes = profile.microbatch_sizes
    scales: dict[str, dict[str, SizeCurve]] = {}
    for name, kinds in grouped.items():
        for kind, by_size in kinds.items():
            overall = _median([ratio for values in by_size.values() for ratio in values])
            factors = tuple(_median(by_size[s]) if s in by_size else overall for s in sizes)
            scales.setdefault(name, {})[kind] = SizeCurve(sizes, factors)
    return scales, rows


def stage_factors(rows: list[dict[str, Any]], name: str) -> dict[tuple[int, int, int], dict[str, float]]:
    """One class's factor of each stage its in-situ steps ran ((size, first unit, unit past the last) -> kind ->
    the median of its ratios, `in_situ_scales`' rows): what a stage of that very cut is priced with."""
    grouped: dict[tuple[int, int, int], dict[str, list[float]]] = {}
    for row in rows:
        if row["class"] == name:
            grouped.setdefault((row["size"], row["start"], row["stop"]), {}).setdefault(row["kind"], []).append(
                row["ratio"]
            )
    return {key: {kind: _median(v) for kind, v in kinds.items()} for key, kinds in grouped.items()}


def _finite(value: float | None) -> float | None:
    """A CI as the file holds it: None where it is unknown (too few steps), never an infinity JSON cannot hold."""
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def factor_cis(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per class, kind and size, the in-situ factor's 95% CI as a relative half-width: the widest of its stages'
    (each the bootstrap interval of a stage's mean over the in-situ steps, pipesim_executor.rank.calibrate.mean_ci;
    the factor is a median over them, so no wider), and the steps behind it."""
    grouped: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for row in rows:
        grouped.setdefault((row["class"], row["kind"], row["size"]), []).append(row)
    return [
        {"class": name, "kind": kind, "size": size, "factor": _median([g["ratio"] for g in group]),
         "ci": None if any(g["ci"] is None for g in group) else max(g["ci"] for g in group),
         "steps": max(g["steps"] for g in group)}
        for (name, kind, size), group in sorted(grouped.items())
    ]  # fmt: skip


def ci_curves(cis: list[dict[str, Any]], name: str, sizes: tuple[int, ...]) -> dict[str, SizeCurve]:
    """One class's factor CIs (`factor_cis`) per kind at every size: a size it could not bound, or did not
    measure, takes the kind's widest, else 100%."""
    out = {}
    for kind in dict.fromkeys(row["kind"] for row in cis if row["class"] == name):
        at = {row["size"]: row["ci"] for row in cis if row["class"] == name and row["kind"] == kind}
        widest = max((v for v in at.values() if v is not None), default=1.0)
        out[kind] = SizeCurve(sizes, tuple(at[s] if at.get(s) is not None else widest for s in sizes), monotone=False)
    return out


def _process_spread(everyone: list[dict[str, Any]], sizes: list[int], n: int) -> float | None:
    """How much the processes disagreed on the units' F and B shares: the median relative spread (max - min over
    the processes, over their mean) of the units that take at least a tenth of the mean unit's time."""
    if len(everyone) < 2:
        return None
    spreads = []
    for s in sizes:
        for kind in ("forward_ms", "backward_ms"):
            values = [[e["shares"][s][kind][u] for e in everyone] for u in range(n)]
            mean_unit = sum(statistics.mean(v) for v in values) / n
            spreads += [(max(v) - min(v)) / statistics.mean(v) for v in values if statistics.mean(v) > 0.1 * mean_unit]
    return _median(spreads) if spreads else None
