"""Calibration: measure the real model on the real hardware and write pipesim's cost file.

Run inside the workers before the measured steps (RunConfig.profile). What a
simulation needs to predict a measured step, and where it comes from here:

* per-stage F, B, I and W: the very StageRunner calls the runtime makes (the
  loss on the last stage, recomputation when on), each timed alone on the
  stage's own rank, median of several repetitions;
* per-stage bytes: activations saved for backward, what W still needs after I,
  the stage input and output, the parameters;
* per boundary between two ranks: a ping-pong through the run's own transport
  with a tiny and with the real tensor (latency plus bandwidth); staged, from
  host memory to host memory, as the runtime's copies to and from the GPU are
  inside the actions' spans (pipesim_executor.rank.transport);
* per rank, the optimizer step and gradient zeroing that end every step,
  timed alone (kept in meta);
* then a few real training steps of the run's own schedule (pipesim_executor.rank.calibrate):
  F/B/I/W means (what a step pays) under the schedule's real interleaving replace the isolated
  ones, and they give the dispatch gap before each action
  (CostModel.dispatch_ms) and the tail after each rank's last action
  (CostModel.step_overhead_ms: last sends, optimizer, zeroing).

The cost model's recompute flag adds F to every B and I in the simulation, so
with recomputation on the measured recomputing backward is stored minus F.

Ranks profile their stages at the same time by default, so that ranks sharing
a machine's cores and memory see the contention they see in the run;
PIPESIM_PROFILE_MODE=sequential measures one rank at a time instead.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from pipesim.cost.collectives import fit_ring_link
from pipesim.cost.convert import measured_stage_cost
from pipesim.cost.model import CostModel, DataParallelGroup, LinkCost, Provenance, RankRuntime, StageCost
from pipesim.io.cost_file import save_cost
from pipesim_executor.allocator import allocator_settings
from pipesim_executor.progress import emit
from pipesim_executor.rank.calibrate import calibrate, full_speed_durations, priced_tails, shared_slots, sharing_note
from pipesim_executor.rank.setup import Rank
from pipesim_executor.rank.stage import tensor_bytes
from pipesim_executor.rank.transport import env_int

PROFILE_REPEATS = 7  # measured repetitions per quantity (one more runs first, untimed)
SMALL_ELEMENTS = 1


class Stopwatch:
    """Times a call on the host clock, or with CUDA events (synchronising around the call only)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device

    def time(self, fn: Callable[[], Any]) -> tuple[float, Any]:
        if not self.cuda:
            start = time.perf_counter()
            result = fn()
            return (time.perf_counter() - start) * 1e3, result
        torch.cuda.synchronize(self.device)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        result = fn()
        end.record()
        torch.cuda.synchronize(self.device)
        return begin.elapsed_time(end), result


def _median(values: list[float]) -> float:
    return float(statistics.median(values))


def profile_stage(r: Rank, stage: int, repeats: int, watch: Stopwatch) -> dict[str, float]:
    """Median F, B, I, W (and F with split capture) of one stage, plus its byte counts."""
    runner, device = r.model.runners[stage], r.choice.device
    inputs, targets = r.batch(0)
    in_shape, out_shape = r.model.shapes[stage]
    x = inputs[0] if stage == 0 else torch.randn(in_shape, device=device)
    target = targets[0] if runner.is_last else None
    grad = None if runner.is_last else torch.randn(out_shape, device=device) * 1e-3
    times: dict[str, list[float]] = {key: [] for key in ("f", "b", "f_split", "i", "w", "a2a_f", "a2a_b")}
    for rep in range(repeats + 1):
        exchanged_ms(r)  # what ran before this round is not its own
        f_ms, (_, stash) = watch.time(lambda: runner.forward(x, target, split=False))
        f_a2a = exchanged_ms(r)
        b_ms, _ = watch.time(functools.partial(runner.backward, stash, grad))
        b_a2a = exchanged_ms(r)
        fs_ms, (_, stash) = watch.time(lambda: runner.forward(x, target, split=True))
        i_ms, (_, work) = watch.time(functools.partial(runner.backward_input, stash, grad))
        w_ms, _ = watch.time(functools.partial(runner.backward_weight, work))
        if rep:  # the first round warms caches and allocators
            for key, value in zip(times, (f_ms, b_ms, fs_ms, i_ms, w_ms, f_a2a, b_a2a), strict=True):
                times[key].append(value)
    activation, weight, input_bytes = r.model.stash_bytes[stage]
    wire = torch.empty(0, dtype=r.model.wire_dtype).element_size()  # bf16 runs send 2 bytes per element
    out_bytes = 0 if runner.is_last else torch.Size(out_shape).numel() * wire
    result = {key: _median(values) for key, values in times.items()}
    # the quickest round's exchanges: a wait for a late replica is skew, not the exchange's cost
    result.update(a2a_f=min(times["a2a_f"]), a2a_b=min(times["a2a_b"]))
    result.update(
        activation_bytes=float(activation),
        weight_grad_bytes=float(weight),
        input_bytes=float(input_bytes),
        output_bytes=float(out_bytes),
        param_bytes=float(sum(tensor_bytes(p) for p in runner.parameters())),
    )
    if r.runtime.experts is not None:  # an MoE stage: its blocks, how finely an overlapped pair interleaves
        from pipesim_executor.rank.moe import moe_modules

        result["moe_layers"] = len(moe_modules([runner.module]))
    return result


def exchanged_ms(r: Rank) -> float:
    """The time this rank's MoE all-to-alls took since the last call (pipesim_executor.rank.moe), 0 without
    expert parallelism, and on a GPU, whose clock resolves its marks only within a step."""
    experts = r.runtime.experts
    if experts is None or r.choice.device.type != "cpu":
        return 0.0
    return sum(end - start for start, end in experts.take(experts.lane))


def _ping_pong_ms(r: Rank, src: int, dst: int, shape: torch.Size, repeats: int) -> float | None:
    """One-way time of `shape` from src to dst (half the median round trip); None on other ranks."""
    transport, device, dtype = r.runtime.transport, r.choice.device, r.model.wire_dtype
    if r.pipe_rank not in (src, dst):
        return None
    payload = torch.zeros(shape, device=transport.wire_device, dtype=dtype)
    round_trips = []
    # Receives are posted before the matching send can start, as the runtime's look-ahead does.
    pending = transport.irecv(shape, dtype, dst if r.pipe_rank == src else src, tag=0)
    for rep in range(repeats + 1):
        if r.pipe_rank == src:
            start = time.perf_counter()
            transport.isend(payload, dst, tag=0).wait()
            pending.wait()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            if rep:
                round_trips.append((time.perf_counter() - start) * 1e3)
            if rep < repeats:
                pending = transport.irecv(shape, dtype, dst, tag=0)
        else:
            received = pending.wait()
            if rep < repeats:
                pending = transport.irecv(shape, dtype, src, tag=0)
            transport.isend(received, src, tag=0).wait()
    return _median(round_trips) / 2 if round_trips else None


def profile_links(r: Rank, repeats: int) -> dict[int, dict[str, float]]:
    """Per cross-rank boundary measured by its sending rank: one-way times for a tiny and the real tensor.

    Every rank walks the boundaries in the same order, so the blocking ping-pongs never cross.
    """
    schedule, results = r.schedule, {}
    for boundary in range(schedule.num_stages - 1):
        src, dst = schedule.stage_to_rank[boundary], schedule.stage_to_rank[boundary + 1]
        if src == dst:
            continue
        shape = r.model.shapes[boundary][1]
        small = _ping_pong_ms(r, src, dst, torch.Size((SMALL_ELEMENTS,)), repeats)
        large = _ping_pong_ms(r, src, dst, shape, repeats)
        if r.pipe_rank == src:
            size = torch.empty(0, dtype=r.model.wire_dtype).element_size()
            results[boundary] = {
                "small_ms": small,
                "small_bytes": float(size * SMALL_ELEMENTS),
                "large_ms": large,
                "large_bytes": float(size * shape.numel()),
            }
    return results


def link_cost(measure: dict[str, float] | None) -> LinkCost:
    """Latency plus bandwidth through the two sizes; the real size's time is reproduced exactly."""
    if measure is None:  # both stages on one rank: a local hand-over
        return LinkCost()
    small, large = measure["small_ms"], measure["large_ms"]
    extra_bytes = measure["large_bytes"] - measure["small_bytes"]
    if large <= small or extra_bytes <= 0:
        return LinkCost(latency_ms=max(large, 0.0))
    bandwidth = extra_bytes / ((large - small) * 1e-3) / 1e9
    latency = small - measure["small_bytes"] / (bandwidth * 1e9) * 1e3
    return LinkCost(latency_ms=max(latency, 0.0), bandwidth_gbps=bandwidth)


def profile_allreduce(r: Rank, repeats: int, watch: Stopwatch) -> dict[str, float] | None:
    """With data parallelism: this rank's gradient all-reduce over its replicas, timed alone, for a tiny and
    for the rank's real gradient size (median each); None without. Every process does it at once, as in a
    step's tail, each pipeline rank over its own group."""
    sync = r.runtime.grad_sync
    if sync is None:
        return None
    numel = sum(p.numel() for p in r.model.parameters())
    result: dict[str, float] = {"participants": float(sync.replicas)}
    for name, count in (("small", SMALL_ELEMENTS), ("large", numel)):
        flat = torch.zeros(count, device=r.choice.device)
        times = []
        for rep in range(repeats + 1):
            elapsed, _ = watch.time(lambda flat=flat: dist.all_reduce(flat, group=sync.group))
            if rep:
                times.append(elapsed)
        result[f"{name}_ms"], result[f"{name}_bytes"] = _median(times), 4.0 * count
    return result


def allreduce_link(measures: list[dict[str, float] | None]) -> LinkCost:
    """The data-parallel link: each rank's two timings through the ring model, the median over ranks."""
    fitted = [
        fit_ring_link(m["small_bytes"], m["small_ms"], m["large_bytes"], m["large_ms"], int(m["participants"]))
        for m in measures
        if m
    ]
    if not fitted:
        return LinkCost()
    return LinkCost(
        latency_ms=_median([f.latency_ms for f in fitted]), bandwidth_gbps=_median([f.bandwidth_gbps for f in fitted])
    )


def profile_optimizer(r: Rank, repeats: int, watch: Stopwatch) -> float:
    """Median optimizer step plus zero_grad on real-sized gradients; weights and state are restored after."""
    params = r.model.parameters()
    saved_params = [p.detach().clone() for p in params]
    saved_state = copy.deepcopy(r.optimizer.state_dict())
    grads = [torch.randn_like(p) * 1e-3 for p in params]
    times = []
    for rep in range(repeats + 1):
        for p, g in zip(params, grads, strict=True):
            p.grad = g.clone()

        def step() -> None:
            r.optimizer.step()
            r.optimizer.zero_grad(set_to_none=True)

        elapsed, _ = watch.time(step)
        if rep:
            times.append(elapsed)
    with torch.no_grad():
        for p, saved in zip(params, saved_params, strict=True):
            p.copy_(saved)
    r.optimizer.load_state_dict(saved_state)
    r.optimizer.zero_grad(set_to_none=True)
    return _median(times)


def stage_cost(measure: dict[str, float], split: bool, recompute: bool) -> StageCost:
    """One stage's measurements in the cost model's terms (pipesim.cost.convert.measured_stage_cost converts)."""
    sizes = StageCost(
        forward_ms=0.0, backward_ms=0.0,
        activation_bytes=measure["activation_bytes"],
        weight_grad_bytes=min(measure["weight_grad_bytes"], measure["activation_bytes"]),
        input_bytes=measure["input_bytes"], output_bytes=measure["output_bytes"], param_bytes=measure["param_bytes"],
    )  # fmt: skip
    # an MoE stage's all-to-alls (a dispatch and a combine in each pass) on the link, its passes' compute without them
    a2a = (measure.get("a2a_f", 0.0) + measure.get("a2a_b", 0.0)) / 4
    if a2a > 0:
        measure = {**measure, **{k: max(0.0, measure[k] - 2 * a2a) for k in ("f", "b", "f_split", "i")}}
        sizes = dataclasses.replace(sizes, a2a_ms=a2a, moe_layers=int(measure.get("moe_layers", 1)) or 1)
    if split:
        return measured_stage_cost(
            sizes, forward_ms=measure["f_split"], input_ms=measure["i"], weight_ms=measure["w"], recompute=recompute
        )
    share = measure["w"] / max(measure["i"] + measure["w"], 1e-9)  # W's share of B, from the split measurement
    return measured_stage_cost(
        sizes, forward_ms=measure["f"], backward_ms=measure["b"], weight_share=share, recompute=recompute
    )


# Which isolated measurement an in-situ median replaces (pipesim_executor.rank.calibrate): F is the plain forward, or
# the forward that keeps W's inputs when the schedule splits its backward.
_IN_SITU_KEYS = {"B": ("b",), "I": ("i",), "W": ("w",)}


def in_situ(measure: dict[str, float], calibrated: dict[str, float] | None, split: bool) -> dict[str, float]:
    """One stage's isolated measurements with the kinds the calibration steps ran replaced by their medians."""
    if not calibrated:
        return measure
    keys = {**_IN_SITU_KEYS, "F": ("f_split",) if split else ("f",)}
    updated = dict(measure)
    for kind, median in calibrated.items():
        for key in keys.get(kind, ()):
            updated[key] = median
    return updated


def _spread(gathered: list[dict[str, Any]]) -> dict[str, Any]:
    """Per action kind, the median over the stages of how much one action varied in the in-situ steps (its
    coefficient of variation), and the fewest actions one such figure rests on (`pipesim.sim.spread.cost_spread`
    reads it)."""
    cvs: dict[str, list[float]] = {}
    counts: list[int] = []
    for g in gathered:
        calibration = g["calibration"]
        for stage, kinds in calibration.get("cv", {}).items():
            for kind, cv in kinds.items():
                cvs.setdefault(kind, []).append(cv)
                counts.append(calibration.get("samples", {}).get(stage, {}).get(kind, 0))
    return {"cv": {kind: _median(values) for kind, values in cvs.items()}, "repeats": min(counts, default=0)}


def build_cost(r: Rank, everyone: list[dict[str, Any]]) -> CostModel:
    """The cost model of one replica (the simulation is per replica) from every process's measurements."""
    schedule, config = r.schedule, r.config
    replicas = config.pipeline.data_parallel
    gathered = everyone[: schedule.num_ranks]  # replica 0
    isolated = {int(s): m for g in gathered for s, m in g["stages"].items()}
    local_ranks = env_int("LOCAL_WORLD_SIZE", r.world_size)
    # The spans of all ranks share one clock only on one machine: across nodes, no sharing is modelled.
    device_type = r.choice.device.type
    gpus = torch.cuda.device_count() if device_type == "cuda" else 0
    slots = shared_slots(device_type, local_ranks, gpus) if local_ranks == r.world_size else None
    # each action at its in-situ mean, what a step pays for it (pipesim_executor.rank.calibrate.summarise's
    # means_ms): the price the unit profile's in-situ factors take too
    if slots is None:
        calibrated = {int(s): d for g in gathered for s, d in g["calibration"]["means_ms"].items()}
    else:  # every replica's processes competed for the cores: all their spans give the full-speed work
        spans = [g["calibration"]["spans"] for g in everyone]
        calibrated = {int(s): d for s, d in full_speed_durations(spans, slots, statistics.fmean).items()}
    # One replica's share of the cores, for the per-replica simulation.
    replica_slots = None if slots is None else max(1, slots // replicas)
    replica_slots = replica_slots if replica_slots is not None and replica_slots < schedule.num_ranks else None
    links = {int(b): m for g in gathered for b, m in g["links"].items()}
    split = schedule.uses_split_backward
    stages = {s: in_situ(m, calibrated.get(s), split) for s, m in isolated.items()}
    costs = tuple(stage_cost(stages[s], split, config.training.recompute) for s in range(schedule.num_stages))
    link_costs = tuple(link_cost(links.get(b)) for b in range(max(schedule.num_stages - 1, 1)))
    meta = {
        "measured": {str(s): isolated[s] for s in sorted(isolated)},
        "in_situ": {
            "steps": gathered[0]["calibration"]["steps"],
            "shared_cores": slots,
            "sharing": sharing_note(device_type, local_ranks, slots),
            "durations_ms": {str(s): calibrated[s] for s in sorted(calibrated)},
            "optimizer_ms": [g["optimizer_ms"] for g in gathered],
            # each rank's lead before its first action, priced into every rank's tail (calibrate.priced_tails)
            "lead_ms": [g["calibration"].get("lead_ms", 0.0) for g in gathered],
        },
        "spread": _spread(gathered),
        "links_measured": {str(b): links[b] for b in sorted(links)},
        "i_plus_w_over_b": {
            str(s): (m["i"] + m["w"]) / m["b"] if m["b"] > 0 else None for s, m in sorted(isolated.items())
        },
        "schedule": schedule.name,
        "num_ranks": schedule.num_ranks,
        "num_microbatches": schedule.num_microbatches,
        "microbatch_size": config.microbatch_size,
        "model": config.model.spec or config.model.kind,
        "dtype": config.training.dtype,
        "allreduce_measured": [g.get("allreduce") for g in gathered],
        "backend": r.choice.transport,
        "device": r.choice.device.type,
        "repeats": PROFILE_REPEATS,
        "torch_version": torch.__version__,
        "allocator": allocator_settings(),
    }
    return CostModel(
        stages=costs,
        links=link_costs,
        recompute=config.training.recompute,
        runtime=RankRuntime(
            step_overhead_ms=tuple(priced_tails([g["calibration"] for g in gathered])),
            dispatch_ms=tuple(g["calibration"]["dispatch_ms"] for g in gathered),
            shared_cores=replica_slots if replicas > 1 else slots,
        ),
        dp_group=DataParallelGroup(replicas, allreduce_link([g.get("allreduce") for g in gathered])),
        provenance=Provenance("profile", meta=meta),
    )


def profile_run(r: Rank, run_dir: Path, repeats: int = PROFILE_REPEATS) -> CostModel | None:
    """Profile this rank's stages, its links and its optimizer; rank 0 writes cost.json and returns the model."""
    watch = Stopwatch(r.choice.device)
    mine: dict[str, Any] = {"stages": {}, "links": {}}
    own = sorted(r.model.runners)
    parts = len(own) + 3
    mode = os.environ.get("PIPESIM_PROFILE_MODE", "concurrent")
    if mode not in ("concurrent", "sequential"):
        raise ValueError(f"PIPESIM_PROFILE_MODE={mode!r}; valid: concurrent, sequential")
    concurrent = mode == "concurrent"
    if not concurrent and r.runtime.experts is not None:
        raise ValueError(
            "PIPESIM_PROFILE_MODE=sequential profiles one process at a time, and the MoE model's all-to-alls need "
            "every replica of a stage at once; use PIPESIM_PROFILE_MODE=concurrent"
        )
    for turn in range(1 if concurrent else r.world_size):
        if concurrent or turn == r.rank:
            for index, stage in enumerate(own):
                mine["stages"][stage] = profile_stage(r, stage, repeats, watch)
                emit("step", rank=r.rank, step=index, steps=parts, phase="profile")
        dist.barrier(group=r.control)
    for p in r.model.parameters():
        p.grad = None
    mine["links"] = profile_links(r, repeats)
    emit("step", rank=r.rank, step=len(own), steps=parts, phase="profile")
    mine["allreduce"] = profile_allreduce(r, repeats, watch)
    mine["optimizer_ms"] = profile_optimizer(r, repeats, watch)
    emit("step", rank=r.rank, step=len(own) + 1, steps=parts, phase="profile")
    mine["calibration"] = calibrate(r)
    emit("step", rank=r.rank, step=len(own) + 2, steps=parts, phase="profile")
    gathered: list[Any] | None = [None] * r.world_size if r.rank == 0 else None
    dist.gather_object(mine, gathered, dst=0, group=r.control)
    cost = None
    if r.rank == 0:
        cost = build_cost(r, gathered)
        save_cost(cost, run_dir / "cost.json")
    dist.barrier(group=r.control)
    return cost
