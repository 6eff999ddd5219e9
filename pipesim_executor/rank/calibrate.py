"""In-situ calibration: a few real training steps through the runtime, measured as the run measures them.

The isolated profile (pipesim_executor.rank.profile) times each stage's F/B/I/W alone, which misses what the schedule's
own interleaving does to them (other ranks computing at the same time on shared cores and memory, caches
warmed by a different action) and everything between the actions. On a 2-core machine those were the
3-5% by which profile-then-predict fell short every time. These steps give, per rank:

* each action kind's median duration per stage, under the schedule's real interleaving (and its mean, what a step
  pays for it, which the unit profile prices);
* the dispatch gap before each action (`CostModel.dispatch_ms`): the time from the previous action's end (or
  the step's start) to this action's start, minus the time blocked in a receive, which the simulation
  models separately (transfers and data dependencies). One value per rank, the mean over the step's actions of
  each kind's median gap: the gaps differ by kind (a W, which receives nothing, follows its I within 15 us; an
  F or I that completes a receive waits about 0.1 ms), so the median over all actions, which a split
  backward's W alone can set, priced ZB-H1's F and I gaps at the W's (10-15% short on 2 CPU ranks);
* the tail after the last action (`CostModel.step_overhead_ms`): waiting for the last sends, the loss, the
  optimizer step and gradient zeroing;
* the lead before the first action: setting the step up (over gloo every receive of the
  step is posted at its start, `runtime.ahead_for`; the timing marks) before a rank whose first action waits for
  nothing can start it. That rank starts the pipeline, so every rank's actions start that much later: 0.1-0.5 ms a
  step on 2 CPU ranks beyond the dispatch gap, growing with the receives posted (about 0.02 ms each), unpriced
  before (a median over every action's gap drowns the one first gap of a step). Measured at the steps' own shape:
  the unit profile's in-situ steps (8 microbatches) price it high for fewer microbatches. A rank
  whose first action waits for a receive hides its own lead in the wait, so it has none. `priced_tails` adds
  the step's lead (the largest over the ranks, beyond the dispatch gap already charged before the first action)
  to every rank's tail: shifting every rank's start by the same time and lengthening every rank's tail by it
  give the same step.

CPU ranks that outnumber the cores (4 ranks on 2 cores) slow each other down by how many compute at once;
then the durations are turned into full-speed work from every rank's spans (`full_speed_durations`) and the
cost model says how many can run at once (`CostModel.shared_cores`), so the simulation shares the cores the
same way (pipesim.sim.shared_cores). Ranks that take turns on one GPU (staged) are the same case: CUDA time-slices
the processes of a GPU, so two ranks computing at once each go at half speed; `shared_slots` counts the GPUs
as the slots, and the cost file says which kind of sharing it models (`sharing_note`).

The steps train for real, so the weights and the optimizer state are saved before and restored after: the
measured steps and the losses start from the same state as a run without calibration.
"""

from __future__ import annotations

import copy
import os
import statistics
from collections.abc import Callable
from typing import Any

import torch

from pipesim.ir import Action, parse_entry
from pipesim.semantics.lower import RELOAD_SERVES
from pipesim.sim.shared_cores import work_of_spans
from pipesim_executor.rank.setup import Rank
from pipesim_executor.rank.timing import step_time_ms
from pipesim_executor.rank.train_loop import train_step

# The first is dropped: it pays first-touch costs the measured steps do not. Eleven kept, not three: a machine whose
# steps vary 12-25% and whose speed drifts over seconds prices a run's actions from 3 steps 5-7% off (the straggler
# bench's real-compute pairs: the run's own prediction of its slowed steps off by 1.5-6.6%); a step costs milliseconds.
CALIBRATION_STEPS = 12


def calibrate(r: Rank, steps: int = CALIBRATION_STEPS) -> dict[str, Any]:
    """Run `steps` training steps on every rank (collective), restore the state, summarise this rank's share."""
    return calibration_summary(calibration_records(r, steps))


def calibration_records(r: Rank, steps: int) -> list[dict[str, Any]]:
    """`steps` training steps on every rank (collective), the state restored after; the first step is dropped
    (it pays first-touch costs the measured steps do not). The unit profile runs several batches of these per
    schedule, interleaved with the other schedules' (pipesim_executor.rank.unit_profile)."""
    params = r.model.parameters()
    saved_params = [p.detach().clone() for p in params]
    saved_state = copy.deepcopy(r.optimizer.state_dict())
    records = [train_step(r, 0) for _ in range(steps)]
    with torch.no_grad():
        for p, saved in zip(params, saved_params, strict=True):
            p.copy_(saved)
    r.optimizer.load_state_dict(saved_state)
    r.optimizer.zero_grad(set_to_none=True)
    return records[1:] if len(records) > 1 else records


def calibration_summary(kept: list[dict[str, Any]]) -> dict[str, Any]:
    """`summarise` of the kept steps, with each stage and kind's CI (`step_cis`) and the compute spans themselves
    (on this machine's clock: rank 0 turns them into full-speed work when the ranks share cores, `shared_slots`,
    which needs every rank's spans at once)."""
    summary = summarise(kept)
    summary["ci"] = step_cis(kept)
    summary["spans"] = [span for record in kept for span in record["spans"]]
    return summary


def agreed_ci(r: Rank, records: list[dict[str, Any]]) -> float:
    """The widest relative CI of any stage and kind's median over `records`, the widest over every rank (a
    collective: the ranks decide together whether to run more steps)."""
    worst = torch.tensor([_worst_ci(records)], dtype=torch.float64)
    if torch.distributed.is_initialized():
        torch.distributed.all_reduce(worst, op=torch.distributed.ReduceOp.MAX, group=r.control)
    return float(worst.item())


def shared_slots(device_type: str, ranks_on_this_machine: int, gpus: int = 0) -> int | None:
    """How many of this machine's ranks can compute at full speed at once, or None when each has its own device.

    CPU: cores / threads per rank. GPU: the GPUs, when there are fewer than ranks (staged: each rank takes GPU
    local_rank mod gpus, pipesim_executor.rank.transport). One GPU shared by every rank, the usual staged case, is
    exactly processor sharing with one slot; with several GPUs the pool of slots is an approximation (two ranks
    busy on one GPU while another GPU idles count as full speed).
    """
    if device_type != "cpu":
        return gpus if 0 < gpus < ranks_on_this_machine else None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    slots = max(1, cores // max(1, torch.get_num_threads()))
    return slots if slots < ranks_on_this_machine else None


def sharing_note(device_type: str, ranks_on_this_machine: int, slots: int | None) -> str | None:
    """What the prediction assumes about ranks sharing a device, in words (None: each rank has its own)."""
    if slots is None:
        return None
    if device_type == "cpu":
        return (
            f"{ranks_on_this_machine} ranks share {slots} core slot(s): simulated as processor sharing "
            "(pipesim.sim.shared_cores)"
        )
    return (
        f"{ranks_on_this_machine} ranks take turns on {slots} GPU(s) (staged): simulated as processor sharing "
        "(pipesim.sim.shared_cores), as CPU ranks share cores"
    )


def full_speed_durations(
    spans_by_rank: list[list[list]], slots: int, average: Callable[[list[float]], float] = statistics.median
) -> dict[str, dict[str, float]]:
    """Per stage and kind, the `average` (median by default) full-speed work of the calibration spans of every rank,
    given that the ranks shared `slots` cores while they ran (pipesim.sim.shared_cores.work_of_spans)."""
    flat = [(Action.parse(text), start, end) for spans in spans_by_rank for text, start, end in spans]
    work = work_of_spans([(start, end) for _, start, end in flat], slots)
    grouped: dict[str, dict[str, list[float]]] = {}
    for (action, _, _), amount in zip(flat, work, strict=True):
        grouped.setdefault(str(action.stage), {}).setdefault(action.kind.value, []).append(amount)
    return {stage: {kind: average(v) for kind, v in kinds.items()} for stage, kinds in grouped.items()}


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Median durations per (stage, kind), the median dispatch gap and the median tail of one rank's steps.

    Each record holds `start`, `end`, `spans` ([action text, start, end], in run order) and `comm`
    ([kind, peer, action text, start, end]) on one clock, as `train_loop.train_step` returns them.
    """
    durations: dict[str, dict[str, list[float]]] = {}
    gaps: dict[str, list[float]] = {}
    tails: list[float] = []
    leads: list[float] = []
    for record in records:
        waits = sorted((c[3], c[4]) for c in record["comm"] if c[0] == "recv")
        reloads = _reloads(record["comm"])
        previous = record["start"]
        if record["spans"]:
            leads.append(_lead(record["start"], record["spans"][0][1], waits))
        for text, start, end in record["spans"]:
            action = Action.parse(text)
            durations.setdefault(str(action.stage), {}).setdefault(action.kind.value, []).append(end - start)
            # the wait for its RELOAD is the copy engine's time, which the simulation has, not dispatch
            own = reloads.get((action.stage, action.microbatch), []) if action.kind in RELOAD_SERVES else []
            blocked = _blocked(_merged(sorted([*waits, *own])), previous, start)
            gaps.setdefault(action.kind.value, []).append(max(start - previous - blocked, 0.0))
            previous = end
        if record["spans"]:
            # The gradient all-reduce's wait is not overhead: the cost model has it (pipesim.sim.data_parallel).
            syncs = _merged(sorted((c[3], c[4]) for c in record["comm"] if c[0] == "allreduce"))
            tails.append(max(record["end"] - previous - _blocked(syncs, previous, record["end"]), 0.0))
    return {
        "durations_ms": {
            stage: {kind: statistics.median(v) for kind, v in kinds.items()} for stage, kinds in durations.items()
        },
        # the mean, what a step pays: a step sums its actions, whose times are skewed to the right (a late wake-up,
        # a cold cache), so the sum of their medians falls short of it; the unit profile's in-situ factors price
        # an action at its mean (medians fell 6-15% short on 2 CPU ranks)
        "means_ms": {
            stage: {kind: statistics.fmean(v) for kind, v in kinds.items()} for stage, kinds in durations.items()
        },
        "dispatch_ms": _gap_per_action(gaps),
        "dispatch_by_kind_ms": {kind: statistics.median(values) for kind, values in gaps.items()},
        "tail_ms": statistics.median(tails) if tails else 0.0,
        # the median, as the tail's: sleep mode prices its runtime by medians (pipesim_executor.rank.sleep_calibrate)
        "lead_ms": statistics.median(leads) if leads else 0.0,
        "steps": len(records),
        # how much one action of a stage and kind varied over the steps and microbatches (sample sd / mean) and
        # from how many: what a prediction's interval is drawn from (pipesim.sim.spread)
        "cv": {stage: {kind: _cv(v) for kind, v in kinds.items()} for stage, kinds in durations.items()},
        "samples": {stage: {kind: len(v) for kind, v in kinds.items()} for stage, kinds in durations.items()},
    }


def priced_tails(summaries: list[dict[str, Any]]) -> list[float]:
    """Per rank (one `summarise` each, in rank order, of the same steps), what the cost model charges a step outside
    its actions beyond the dispatch gaps: its tail plus the step's lead, the largest of any rank's lead beyond that
    rank's dispatch gap (which the simulation already charges before the first action). The one rule of a step's
    time outside its actions for the executor's prediction, sleep mode and the unit profile."""
    lead = max((max(s.get("lead_ms", 0.0) - s["dispatch_ms"], 0.0) for s in summaries), default=0.0)
    return [s["tail_ms"] + lead for s in summaries]


def _lead(start: float, first_start: float, waits: list[tuple[float, float]]) -> float:
    """A step's lead on one rank: from its start to its first action's start, or 0 when that action waited for a
    receive (the wait hides the lead: the rank is not what the step waits for)."""
    return 0.0 if _blocked(waits, start, first_start) > 0 else max(first_start - start, 0.0)


def step_cis(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per stage and kind, the relative half-width of the 95% bootstrap interval of the mean over the steps of each
    step's mean duration (`mean_ci`): the CI of the price the unit profile's in-situ factors take (`means_ms`)."""
    per_step: dict[str, dict[str, list[float]]] = {}
    for record in records:
        one: dict[tuple[str, str], list[float]] = {}
        for text, start, end in record["spans"]:
            action = Action.parse(text)
            one.setdefault((str(action.stage), action.kind.value), []).append(end - start)
        for (stage, kind), values in one.items():
            per_step.setdefault(stage, {}).setdefault(kind, []).append(statistics.fmean(values))
    return {stage: {kind: mean_ci(v) for kind, v in kinds.items()} for stage, kinds in per_step.items()}


def median_ci(values: list[float], resamples: int = 1000, seed: int = 0) -> float:
    """The 95% bootstrap interval of the median of `values`, as a relative half-width ((high - low) / 2 / median;
    inf for fewer than 3 values, 0 for a median of 0). Seeded: the same values give the same answer."""
    return _bootstrap_ci(values, "median", resamples, seed)


def mean_ci(values: list[float], resamples: int = 1000, seed: int = 0) -> float:
    """`median_ci` for the mean of `values` (relative to the mean)."""
    return _bootstrap_ci(values, "mean", resamples, seed)


def _bootstrap_ci(values: list[float], statistic: str, resamples: int, seed: int) -> float:
    import numpy as np

    if len(values) < 3:
        return float("inf")
    centre = getattr(np, statistic)
    data = np.asarray(values, dtype=float)
    middle = float(centre(data))
    if middle <= 0:
        return 0.0
    draws = np.random.default_rng(seed).choice(data, size=(resamples, len(data)), replace=True)
    low, high = np.percentile(centre(draws, axis=1), [2.5, 97.5])
    return float((high - low) / 2 / middle)


def _worst_ci(records: list[dict[str, Any]]) -> float:
    return max((ci for kinds in step_cis(records).values() for ci in kinds.values()), default=float("inf"))


def _cv(values: list[float]) -> float:
    mean = statistics.fmean(values) if values else 0.0
    return statistics.stdev(values) / mean if len(values) > 1 and mean > 0 else 0.0


def _gap_per_action(gaps: dict[str, list[float]]) -> float:
    """The dispatch gap the simulation charges every action: each kind's median gap, weighted by how many actions
    of that kind the steps ran (so the gaps of a step add up as they did)."""
    count = sum(len(values) for values in gaps.values())
    return sum(statistics.median(values) * len(values) for values in gaps.values()) / count if count else 0.0


def _reloads(comm: list) -> dict[tuple[int, int], list[tuple[float, float]]]:
    """Per (stage, microbatch), its RELOAD's span on the copy engine (none without offload)."""
    found: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for kind, _, text, start, end in comm:
        if kind == "reload":
            entry = parse_entry(text)
            found.setdefault((entry.stage, entry.microbatch), []).append((start, end))
    return found


def _merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted intervals with the overlapping ones joined (buckets in flight together count once)."""
    out: list[tuple[float, float]] = []
    for start, end in intervals:
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _blocked(waits: list[tuple[float, float]], lo: float, hi: float) -> float:
    """Time inside [lo, hi] spent blocked in receives."""
    return sum(max(min(end, hi) - max(start, lo), 0.0) for start, end in waits)


def round_work(calibrations: list[dict[str, Any]], round_steps: int) -> list[list[list[float]]]:
    """Per in-situ schedule and rank, its rounds in order (`round_steps` kept steps each, as the rounds added them),
    each round its steps' summed compute in ms (the rank's own work: waiting does not count): what
    `pipesim.analysis.drift.speed_drift` reads the machine's drift between rounds off. `calibrations`: each rank's
    in-situ summaries (key -> summary holding its steps' "timing")."""
    series = []
    for calibration in calibrations:
        for summary in calibration.values():
            work = [sum(end - start for _, start, end in step["spans"]) for step in summary.get("timing", ())]
            rounds = [work[i : i + round_steps] for i in range(0, len(work) - round_steps + 1, round_steps)]
            if len(rounds) > 1:
                series.append(rounds)
    return series


def in_situ_counts(calibration: dict[tuple, dict[str, Any]]) -> dict[str, list[int]]:
    """The microbatches per step the in-situ steps ran at each size (`"size": [counts]`, one count unless a
    schedule could not build the plans' count and ran the profile's own)."""
    counts: dict[str, set[int]] = {}
    for key, summary in calibration.items():
        if "microbatches" in summary:
            counts.setdefault(str(key[0]), set()).add(int(summary["microbatches"]))
    return {size: sorted(found) for size, found in sorted(counts.items(), key=lambda item: int(item[0]))}


def in_situ_step_rows(ranks: list[dict[str, Any]], optimizer: str) -> list[dict[str, Any]]:
    """Every in-situ configuration the pipeline ranks ran (`ranks`: each one's measurements, in rank order), one row
    each (`in_situ_step_row`): the profile's `provenance.in_situ.measured_steps`, which it checks its own predictions
    against (pipesim.analysis.profile_check)."""
    return [in_situ_step_row(key, [e["calibration"][key] for e in ranks], optimizer) for key in ranks[0]["calibration"]]


def in_situ_step_row(key: tuple, summaries: list[dict[str, Any]], optimizer: str) -> dict[str, Any]:
    """One in-situ configuration (its calibration key and every rank's summary of it) for the provenance: what ran
    (size, schedule, chunks per rank, recomputation, split backward, the cut, the microbatches, the ranks, the
    optimizer) and
    each of its steps' time as a run measures it (`pipeline_steps`)."""
    size, name, chunks, recompute, split = key
    first = summaries[0]
    return {"microbatch_size": size, "schedule": name, "chunks": chunks, "recompute": recompute,
            "split_backward": split, "split_points": list(first.get("split_points", [])),
            "microbatches": first.get("microbatches"), "ranks": len(summaries), "optimizer": optimizer,
            "step_ms": pipeline_steps(summaries)}  # fmt: skip


def pipeline_steps(summaries: list[dict[str, Any]]) -> list[float]:
    """Each in-situ step's time as a run measures it (`timing.step_time_ms`), on the machine's one clock
    (`summaries`: every rank's of the same steps); empty where a rank kept no timing (steps of several machines)."""
    timings = [s.get("timing") for s in summaries]
    if not timings or any(not t or "start" not in t[0] for t in timings):
        return []
    return [step_time_ms([t[i] for t in timings]) for i in range(len(timings[0]))]
