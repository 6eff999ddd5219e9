"""The measured part of a run on one rank: timed training steps, then every rank's records gathered into
measured.json (the measured Timeline plus step times, losses, optimizer times and peak memory).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from executor.config import STOP_FILE
from executor.progress import emit
from executor.rank import Rank
from executor.timing import assemble_measured
from executor.transport import env_int
from pipesim.formats import timeline_to_dict, write_json


def train_step(r: Rank, step: int) -> dict[str, Any]:
    """One timed training step: all actions, then the optimizer. Times are absolute ms on this rank's clock."""
    inputs, targets = r.batch(step)
    dist.barrier(group=r.control)
    r.clock.begin_step()
    start = r.clock.mark()
    record = r.runtime.run_step(inputs, targets)
    before_optimizer = r.clock.mark()
    r.optimizer.step()
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
    )
    return result


def crash_step() -> int | None:
    """The step at which this rank must crash (fault injection), or None."""
    if os.environ.get("PIPESIM_CRASH_RANK", "") != str(env_int("RANK", 0)):
        return None
    return env_int("PIPESIM_CRASH_STEP", 0)


def stop_asked(r: Rank, run_dir: Path) -> bool:
    """Whether any rank sees the launcher's stop file; every rank gets the same answer (one small gloo
    all-reduce per step, before the step's timed region), so all stop after the same step."""
    flag = torch.tensor([1.0 if (run_dir / STOP_FILE).exists() else 0.0])
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=r.control)
    return bool(flag.item() > 0)


def train(r: Rank, run_dir: Path | None = None) -> list[dict[str, Any]]:
    """Warm-up then measured steps; with `run_dir`, stops early (keeping the steps done) when the launcher
    asks (a cancel)."""
    crash_at = crash_step()
    phases = [("warmup", r.config.training.warmup_steps), ("measure", r.config.training.steps)]
    records, step = [], 0
    if r.choice.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(r.choice.device)
    for phase, count in phases:
        for index in range(count):
            if run_dir is not None and stop_asked(r, run_dir):
                emit("stopped", rank=r.rank, step=step)
                return records
            if crash_at == step:
                print(f"rank {r.rank}: injected crash at step {step} (PIPESIM_CRASH_RANK)", file=sys.stderr, flush=True)
                os._exit(3)
            result = train_step(r, step)
            result.update(step=step, phase=phase)
            records.append(result)
            # the step's time travels with the event, so a cancelled run can still say what it measured
            emit("step", rank=r.rank, step=index, steps=count, phase=phase, ms=float(result["end"] - result["start"]))
            step += 1
    return records


def peak_memory(r: Rank, records: list[dict[str, Any]]) -> int:
    if r.choice.device.type == "cuda":
        return int(torch.cuda.max_memory_allocated(r.choice.device))
    return max((rec["peak_stash_bytes"] for rec in records), default=0)


def write_measured(r: Rank, records: list[dict[str, Any]], offsets: list[float], run_dir: Path) -> None:
    """Gather every rank's records on rank 0 and write measured.json (atomically)."""
    mine = {"records": records, "peak": peak_memory(r, records)}
    gathered: list[Any] | None = [None] * r.world_size if r.rank == 0 else None
    dist.gather_object(mine, gathered, dst=0, group=r.control)
    if r.rank != 0:
        return
    measured = [[rec for rec in g["records"] if rec["phase"] == "measure"] for g in gathered]
    if not all(measured):  # stopped before a measured step ended on every rank: nothing to write
        return
    multi_node = env_int("LOCAL_WORLD_SIZE", r.world_size) != r.world_size
    applied = offsets if multi_node else [0.0] * r.world_size
    meta = {"clock_offsets_ms": offsets, "clock_offsets_applied": multi_node,
            "clock": "cuda events" if r.choice.device.type == "cuda" else "perf_counter"}
    timeline, step_times = assemble_measured(r.world_size, r.schedule.name, measured, applied, meta)
    cuda = r.choice.device.type == "cuda"
    loss_rank = r.schedule.stage_to_rank[r.schedule.num_stages - 1]
    all_steps = gathered[loss_rank]["records"]
    summary = {
        "step_times_ms": step_times,
        "losses": [rec["loss"] for rec in all_steps],
        "loss_phases": [rec["phase"] for rec in all_steps],
        "warmup_steps": r.config.training.warmup_steps,
        "steps": r.config.training.steps,
        "optimizer_ms": [[rec["optimizer_ms"] for rec in m] for m in measured],
        "peak_memory_bytes": [g["peak"] for g in gathered],
        "peak_memory_kind": "cuda max_memory_allocated" if cuda else "tracked stashed activations",
        "backend": r.choice.transport,
        "device": r.choice.device.type,
        "torch_version": torch.__version__,
    }
    write_json(timeline_to_dict(timeline, summary), run_dir / "measured.json")
