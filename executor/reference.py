"""The same model, batch and microbatches on torch.distributed.pipelining's own schedules.

    torchrun --nproc-per-node 2 -m executor.reference --run-dir runs/NAME   (the launcher starts it)

Why: our executor interprets a pipesim Schedule; torch ships hand-written
schedules for the classic ones. Running both on the same stage modules
(executor.model, same seed -> same weights), the same batches and the same
optimizer says whether ours is as fast and computes the same losses.
Writes runs/NAME/reference.json: {"torch_schedule", "step_times_ms", "losses", ...}.

Only public torch.distributed.pipelining API that exists since torch 2.6
(PipelineStage, Schedule*.step(*args, target=, losses=)); the newest keyword
arguments are avoided so torch 2.11 works as well as 2.13.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from executor.config import PROGRESS_PREFIX, RunConfig
from pipesim.ir import Schedule, loop_placement, v_placement

# pipesim schedule name -> torch.distributed.pipelining class name
TORCH_SCHEDULES = {
    "gpipe": "ScheduleGPipe",
    "1f1b": "Schedule1F1B",
    "interleaved-1f1b": "ScheduleInterleaved1F1B",
    "looped-bfs": "ScheduleLoopedBFS",
    "zb-h1": "ScheduleInterleavedZeroBubble",  # ZB1P; with one stage per rank it is ZB-H1
    "zbv": "ScheduleZBVZeroBubble",
    "dualpipev": "ScheduleDualPipeV",
}
V_SHAPED = ("zbv", "dualpipev")


def torch_schedule_name(name: str) -> str | None:
    return TORCH_SCHEDULES.get(name.strip().lower())


def unavailable_reason(config: RunConfig, schedule: Schedule) -> str | None:
    """Why no reference run can be made for this run, or None when it can (no torch import)."""
    name = schedule.name.strip().lower()
    if torch_schedule_name(name) is None:
        return (
            f"torch.distributed.pipelining has no schedule equivalent to {schedule.name!r}; "
            f"reference runs exist for: {', '.join(TORCH_SCHEDULES)}"
        )
    expected = v_placement(schedule.num_ranks) if name in V_SHAPED else loop_placement(schedule.num_ranks, schedule.num_stages)
    if tuple(schedule.stage_to_rank) != expected:
        return f"schedule {schedule.name!r} places stages as {list(schedule.stage_to_rank)}, unlike torch's {list(expected)}"
    if config.backend == "staged":
        return "torch.distributed.pipelining sends device tensors directly; it cannot run on backend staged"
    return None


def emit(event: dict) -> None:
    """One progress line in a single write, so the launcher never sees half of it."""
    import json

    sys.stdout.write(PROGRESS_PREFIX + json.dumps(event) + "\n")
    sys.stdout.flush()


def _optimizer(config: RunConfig, params: list):
    import torch

    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.lr)
    return torch.optim.SGD(params, lr=config.lr)


def _build_pipeline(config: RunConfig, schedule: Schedule, rank: int, device):
    """PipelineStage per local stage around executor.model's stage modules, and torch's schedule over them."""
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining import schedules as torch_schedules

    from executor.model import build_model, loss_fn, split_stages

    class_name = torch_schedule_name(schedule.name)
    schedule_class = getattr(torch_schedules, class_name or "", None)
    if schedule_class is None:
        raise RuntimeError(f"this torch has no {class_name}; upgrade torch for a reference run of {schedule.name}")
    modules = split_stages(build_model(config.model, config.seed), schedule.num_stages, config.model.split_points)
    local = schedule.stages_of_rank(rank)
    stages = [PipelineStage(modules[s].to(device), s, schedule.num_stages, device) for s in local]
    loss = loss_fn(config.model)
    if issubclass(schedule_class, torch_schedules.PipelineScheduleSingle):
        pipe = schedule_class(stages[0], n_microbatches=schedule.num_microbatches, loss_fn=loss)
    else:
        pipe = schedule_class(stages, n_microbatches=schedule.num_microbatches, loss_fn=loss)
    params = [p for s in local for p in modules[s].parameters()]
    return pipe, _optimizer(config, params), local, class_name


def run_reference(config: RunConfig, schedule: Schedule, rank: int, device) -> dict:
    """Train warmup + measured steps; every rank returns its own step times and (last stage) losses."""
    import torch
    import torch.distributed as dist

    from executor.model import make_batch

    pipe, optimizer, local, class_name = _build_pipeline(config, schedule, rank, device)
    first, last = 0 in local, schedule.num_stages - 1 in local
    total = config.warmup_steps + config.steps
    times, losses = [], []
    for step in range(total):
        inputs, targets = (t.to(device) for t in make_batch(config.model, config.batch_size, config.seed, step))
        mb_losses: list = []
        args = (inputs,) if first else ()
        kwargs = {"target": targets, "losses": mb_losses} if last else {}
        _synchronize(device)
        dist.barrier()
        start = time.perf_counter()
        pipe.step(*args, **kwargs)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        _synchronize(device)
        elapsed = (time.perf_counter() - start) * 1e3
        if step >= config.warmup_steps:
            times.append(elapsed)
            losses.append(float(torch.stack([x.detach().float() for x in mb_losses]).mean()) if last else 0.0)
        emit({"event": "step", "rank": rank, "step": step, "steps": total, "phase": "reference"})
    return {"torch_schedule": class_name, "times": times, "losses": losses}


def _synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _gather(local: dict, device) -> dict:
    """Step time = slowest rank per step; losses from the rank of the last stage (sum of one non-zero)."""
    import torch
    import torch.distributed as dist

    times = torch.tensor(local["times"], dtype=torch.float64, device=device)
    losses = torch.tensor(local["losses"], dtype=torch.float64, device=device)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    dist.all_reduce(losses, op=dist.ReduceOp.SUM)
    step_times = [float(t) for t in times.cpu()]
    return {
        "torch_schedule": local["torch_schedule"],
        "torch_version": torch.__version__,
        "step_times_ms": step_times,
        "median_step_ms": statistics.median(step_times),
        "losses": [float(x) for x in losses.cpu()],
    }


def main(argv: list[str] | None = None) -> int:
    import torch
    import torch.distributed as dist

    from pipesim.formats import read_json, schedule_from_dict, write_json

    parser = argparse.ArgumentParser(prog="python -m executor.reference")
    parser.add_argument("--run-dir", type=Path, required=True)
    run_dir = parser.parse_args(argv).run_dir
    config = RunConfig.from_dict(read_json(run_dir / "config.json"))
    schedule = schedule_from_dict(read_json(run_dir / "schedule.json"))
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if config.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.manual_seed(config.seed)
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    try:
        result = _gather(run_reference(config, schedule, rank, device), device)
        if config.recompute:
            result["note"] = "torch's schedules ran without recomputation"
        if rank == 0:
            write_json(result, run_dir / "reference.json")
        emit({"event": "done", "rank": rank, "phase": "reference"})
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
