"""The measured part of a run on one rank: timed training steps (recorded by torch.profiler with
--torch-profile), then every rank's records gathered into measured.json (the measured Timeline plus step times,
losses, optimizer times and peak memory).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist

from pipesim.io.formats import timeline_to_dict, write_json
from pipesim_executor.allocator import allocator_settings
from pipesim_executor.processes import launcher_gone
from pipesim_executor.progress import emit
from pipesim_executor.rank.setup import Rank
from pipesim_executor.rank.timing import assemble_measured
from pipesim_executor.rank.torch_profile import profiled
from pipesim_executor.rank.transport import env_int
from pipesim_executor.run_files import MEASURED_FILE, STOP_FILE


class Switch(Protocol):
    """What the loop needs of the injection's switch (pipesim_executor.rank.inject.StepSwitch, not imported: the
    injection's module is loaded only for runs that inject)."""

    def set_step(self, step: int) -> bool: ...


def train_step(r: Rank, step: int) -> dict[str, Any]:
    """One timed training step: all actions, then the optimizer. Times are absolute ms on this rank's clock."""
    inputs, targets = r.batch(step)
    dist.barrier(group=r.control)
    r.clock.begin_step()
    start = r.clock.mark()
    record = r.runtime.run_step(inputs, targets)
    before_optimizer = r.clock.mark()
    r.optimizer.step()
    grads = gradient_bytes(r.model.parameters())  # a host-side sum over the parameters: microseconds
    r.optimizer.zero_grad(set_to_none=True)
    end = r.clock.mark()
    r.clock.finish_step()
    result = record.resolved(r.clock)
    result.update(
        start=r.clock.resolve(start),
        end=r.clock.resolve(end),
        optimizer_ms=r.clock.resolve(end) - r.clock.resolve(before_optimizer),
        loss=None if record.loss is None else float(record.loss.item()),
        peak_stash_bytes=record.peak_stash_bytes,
        moved_bytes=record.moved_bytes,
        grad_bytes=grads,
    )
    return result


def gradient_bytes(params: list[torch.Tensor]) -> int:
    """Bytes of the gradients the parameters hold (allocated by the step's backwards)."""
    return sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)


def optimizer_state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes of every tensor the optimizer keeps per parameter (momentum, Adam's two moments and step count)."""
    return sum(
        v.numel() * v.element_size()
        for state in optimizer.state.values()
        for v in state.values()
        if isinstance(v, torch.Tensor)
    )


def static_memory(r: Rank, records: list[dict[str, Any]]) -> dict[str, int]:
    """Parameters, gradients and optimizer state of this rank, counted tensor by tensor (pipesim.sim.memory models
    the same three parts)."""
    params = sum(p.numel() * p.element_size() for p in r.model.parameters())
    return {
        "param_bytes": params,
        "grad_bytes": max((rec["grad_bytes"] for rec in records), default=0),
        "optimizer_bytes": optimizer_state_bytes(r.optimizer),
    }


def crash_step() -> int | None:
    """The step at which this rank must crash (fault injection), or None."""
    if os.environ.get("PIPESIM_CRASH_RANK", "") != str(env_int("RANK", 0)):
        return None
    return env_int("PIPESIM_CRASH_STEP", 0)


def stop_asked(r: Rank, run_dir: Path) -> bool:
    """Whether any rank sees the launcher's stop file, or sees its launcher gone; every rank gets the same answer
    (one small gloo all-reduce per step, before the step's timed region), so all stop after the same step."""
    flag = torch.tensor([1.0 if (run_dir / STOP_FILE).exists() or launcher_gone() else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=r.control)
    return bool(flag.item() > 0)


def train(
    r: Rank, run_dir: Path | None = None, trace: Path | None = None, switch: Switch | None = None
) -> list[dict[str, Any]]:
    """Warm-up then measured steps; with `run_dir`, stops early (keeping the steps done) when the launcher
    asks (a cancel); with `trace`, torch.profiler records the measured steps into that file; with the injection's
    `switch`, it is set before each step, outside the timed region, and each record says whether it was on."""
    crash_at = crash_step()
    phases = [("warmup", r.config.training.warmup_steps), ("measure", r.config.training.steps)]
    records, step = [], 0
    if r.choice.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(r.choice.device)
    for phase, count in phases:
        with profiled(trace if phase == "measure" else None, r.choice.device):
            for index in range(count):
                if run_dir is not None and stop_asked(r, run_dir):
                    emit("stopped", rank=r.rank, step=step)
                    return records
                if crash_at == step:
                    print(
                        f"rank {r.rank}: injected crash at step {step} (PIPESIM_CRASH_RANK)",
                        file=sys.stderr,
                        flush=True,
                    )
                    os._exit(3)
                injected = switch.set_step(step) if switch is not None else None
                result = train_step(r, step)
                result.update(step=step, phase=phase, injected=injected)
                records.append(result)
                # the step's time travels with the event, so a cancelled run can still say what it measured
                emit(
                    "step", rank=r.rank, step=index, steps=count, phase=phase, ms=float(result["end"] - result["start"])
                )
                step += 1
    return records


def peak_memory(r: Rank, records: list[dict[str, Any]]) -> int:
    if r.choice.device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(r.choice.device))
    return max((rec["peak_stash_bytes"] for rec in records), default=0)


def replica_lag(gathered: list[dict[str, Any]], ranks: int, offsets: list[float] | None) -> list[list[float]]:
    """Per pipeline rank and measured step: how much later than replica 0 the last replica launched the first
    all-reduce of the step. An all-reduce ends only once every replica joined it, so replica 0 waits at least
    this long whatever the link's speed: the skew between replicas, which the per-replica simulation does not
    have (on a shared CPU, mostly processes waiting for a core)."""
    lags: list[list[float]] = []
    for rank in range(ranks):
        copies = gathered[rank::ranks]
        steps = [[rec for rec in g["records"] if rec["phase"] == "measure"] for g in copies]
        per_step = []
        for index in range(len(steps[0])):
            launches = []
            for replica, recs in enumerate(steps):
                shift = offsets[replica * ranks + rank] if offsets else 0.0
                starts = [c[3] for c in recs[index]["comm"] if c[0] == "allreduce"]
                if starts:
                    launches.append(min(starts) + shift)
            per_step.append(max(launches) - launches[0] if len(launches) == len(steps) else 0.0)
        lags.append(per_step)
    return lags


def write_measured(r: Rank, records: list[dict[str, Any]], offsets: list[float], run_dir: Path) -> None:
    """Gather every process's records on process 0 and write measured.json (atomically).

    With data parallelism the timeline holds every replica's ranks, each span tagged with its replica
    (`Span.replica`): a straggling replica shows in the trace and the charts. Step times run from the earliest
    process's start to the latest one's end (replicas meet at each gradient all-reduce, so one slow replica
    slows the step). The per-rank lists (peak memory, optimizer times) are replica 0's, which the per-replica
    simulation is compared with; `static_memory_bytes` and `tracked_peak_bytes` list every process.
    """
    mine = {"records": records, "peak": peak_memory(r, records), "static": static_memory(r, records)}
    gathered: list[Any] | None = [None] * r.world_size if r.rank == 0 else None
    dist.gather_object(mine, gathered, dst=0, group=r.control)
    if r.rank != 0:
        return
    ranks = r.num_ranks
    replica0 = gathered[:ranks]
    measured = [[rec for rec in g["records"] if rec["phase"] == "measure"] for g in gathered]
    if not all(measured):  # stopped before a measured step ended on every process: nothing to write
        return
    multi_node = env_int("LOCAL_WORLD_SIZE", r.world_size) != r.world_size
    applied = offsets if multi_node else [0.0] * r.world_size
    meta = {
        "clock_offsets_ms": offsets,
        "clock_offsets_applied": multi_node,
        "clock": "cuda events" if r.choice.device.type == "cuda" else "perf_counter",
        "split_points": list(r.model.split_points),  # the units each stage holds (pipesim plan --calibrate-from)
    }
    if r.config.inject.inject:  # what was injected (pipesim.cost.perturb's form): the Run page and stragglers read it
        meta["injection"] = r.config.inject.perturbation().to_dict()
        meta["inject_steps"] = r.config.inject.inject_steps
    if r.config.compute.sleeps:
        meta["compute"] = "sleep"
    if r.model.seq_bounds is not None:  # where each sequence chunk started (pipesim_executor.seq_cut)
        meta["seq_bounds"] = list(r.model.seq_bounds)
    if r.overlap_groups:  # at once where each member's all-to-alls have their own group, else back to back
        meta["overlap_groups"] = r.overlap_groups
        meta["overlapped"] = r.runtime.overlaps  # the prediction simulates the groups as they ran
        meta["overlap"] = (
            "members run at once on two threads, one's all-to-all in flight while the other computes"
            if r.runtime.overlaps
            else "members run back to back (no overlap on this device)"
        )
    timeline, step_times = assemble_measured(ranks, r.schedule.name, measured, applied, meta)
    cuda = r.choice.device.type == "cuda"
    # the loss is the last stage's; with pipelines in both directions (DualPipe) the sum of each direction's
    schedule, chain = r.schedule, r.schedule.pipeline_stages
    loss_ranks = sorted({schedule.stage_to_rank[c * chain + chain - 1] for c in range(schedule.pipelines)})
    all_steps = replica0[loss_ranks[0]]["records"]
    losses = [
        None
        if any(replica0[k]["records"][i]["loss"] is None for k in loss_ranks)
        else sum(replica0[k]["records"][i]["loss"] for k in loss_ranks)
        for i in range(len(all_steps))
    ]
    replicas = r.config.pipeline.data_parallel
    summary = {
        "step_times_ms": step_times,
        "losses": losses,
        "loss_phases": [rec["phase"] for rec in all_steps],
        "warmup_steps": r.config.training.warmup_steps,
        "steps": r.config.training.steps,
        "optimizer_ms": [[rec["optimizer_ms"] for rec in m] for m in measured[:ranks]],
        "peak_memory_bytes": [g["peak"] for g in replica0],
        "peak_memory_kind": "cuda max_memory_allocated" if cuda else "tracked stashed activations",
        # tracked tensor bytes: parameters, gradients, optimizer state, plus the tracked activation peak
        "static_memory_bytes": [g["static"] for g in gathered],
        "tracked_peak_bytes": [
            sum(g["static"].values()) + max((rec["peak_stash_bytes"] for rec in g["records"]), default=0)
            for g in gathered
        ],
        "backend": r.choice.transport,
        "device": r.choice.device.type,
        "torch_version": torch.__version__,
        "allocator": allocator_settings(),
        "dtype": r.config.training.dtype,
        "data_parallel": replicas,
    }
    if any(rec["moved_bytes"] for g in replica0 for rec in g["records"]):  # the copies' own bytes, per stage
        summary["offload_moved_bytes"] = [
            {str(k): v for k, v in sorted(_most_moved(g["records"]).items())} for g in replica0
        ]
    if r.config.inject.inject:  # which measured steps carried it (all of them, or every other one: alternate)
        summary["injected_steps"] = [bool(rec["injected"]) for rec in measured[0]]
    if replicas > 1:
        summary["allreduce_replica_lag_ms"] = replica_lag(gathered, ranks, offsets if multi_node else None)
        summary["replicas_recorded"] = (
            f"all {replicas} replicas (processes 0..{r.world_size - 1}; each span's replica is tagged)"
        )
        summary["losses_note"] = "replica 0's loss on its own rows of the global batch"
    write_json(timeline_to_dict(timeline, summary), run_dir / MEASURED_FILE)


def _most_moved(records: list[dict[str, Any]]) -> dict[int, int]:
    """Per stage, the most bytes one OFFLOAD moved over the records."""
    most: dict[int, int] = {}
    for rec in records:
        for stage, moved in rec["moved_bytes"].items():
            most[stage] = max(most.get(stage, 0), moved)
    return most
