"""Everything a run can be refused for, checked before a process starts or a folder is made.

A bad run should cost the user nothing: unknown or invalid schedules,
deadlocks, more stages than the model has layers, NCCL without a GPU per
rank, more CPU ranks than the machine can sensibly time. Each message names
the problem and what to do instead. Imports torch only to count GPUs, and
only when the run could use one (the app imports this module).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from executor.config import RunConfig
from pipesim.ir import Schedule

MAX_CPU_RANKS = 16


def check_run(config: RunConfig, schedule: Schedule | None = None) -> tuple[RunConfig, Schedule]:
    """Return the config with device and backend resolved, and the schedule; ValueError on any user mistake."""
    schedule = _checked_schedule(config, schedule)
    _check_model_fits(config, schedule)
    _check_nodes(config)
    config = _resolve_device(config)
    _check_cpu_ranks(config)
    return config, schedule


def _checked_schedule(config: RunConfig, schedule: Schedule | None) -> Schedule:
    from pipesim.cost import CostModel
    from pipesim.schedules import build_schedule
    from pipesim.simulate import simulate
    from pipesim.validate import validate

    if schedule is None:
        schedule = build_schedule(
            config.schedule, config.num_ranks, config.num_microbatches, num_virtual_stages=config.num_virtual_stages
        )
    elif (schedule.num_ranks, schedule.num_microbatches) != (config.num_ranks, config.num_microbatches):
        raise ValueError(
            f"schedule {schedule.name!r} is for {schedule.num_ranks} ranks and {schedule.num_microbatches} "
            f"microbatches but the run asks for {config.num_ranks} ranks and {config.num_microbatches}"
        )
    validate(schedule)  # ScheduleError (a ValueError) names rank, action and rule
    simulate(schedule, CostModel.uniform())  # DeadlockError says which rank waits on which action
    return schedule


def model_units(config: RunConfig) -> int:
    """Layers of the model that stages share out (mirrors executor.model.build_model without importing torch).

    Transformer: embedding, num_layers blocks, output projection. CNN: cnn_blocks conv blocks, 3 FC layers.
    """
    model = config.model
    return model.num_layers + 2 if model.kind == "transformer" else model.cnn_blocks + 3


def _check_model_fits(config: RunConfig, schedule: Schedule) -> None:
    units = model_units(config)
    if config.model.kind == "transformer":
        what, knob = f"embedding + {config.model.num_layers} blocks + output", "--layers"
    else:
        what, knob = f"{config.model.cnn_blocks} conv blocks + 3 FC layers", "--cnn-blocks"
    if schedule.num_stages > units:
        raise ValueError(
            f"schedule {schedule.name!r} has {schedule.num_stages} stages but the model has only {units} layers "
            f"({what}) and every stage needs one; use fewer ranks or virtual stages, or raise {knob}"
        )
    points = config.model.split_points
    if points is not None:
        if len(points) != schedule.num_stages - 1:
            raise ValueError(
                f"split_points {list(points)} give {len(points) + 1} stages but the schedule has "
                f"{schedule.num_stages}: give {schedule.num_stages - 1} layer indices"
            )
        if points and (list(points) != sorted(set(points)) or points[0] < 1 or points[-1] >= units):
            raise ValueError(f"split_points must increase strictly within 1..{units - 1}, got {list(points)}")


def _check_nodes(config: RunConfig) -> None:
    if config.nnodes < 1 or not 0 <= config.node_rank < config.nnodes:
        raise ValueError(f"node_rank must lie in 0..{config.nnodes - 1} (nnodes {config.nnodes})")
    if config.num_ranks % config.nnodes:
        raise ValueError(f"{config.num_ranks} ranks do not split evenly over {config.nnodes} nodes")
    if config.nnodes > 1 and not config.rdzv_endpoint:
        raise ValueError("a multi-node run needs rdzv_endpoint HOST:PORT (the same on every node)")
    if config.rdzv_endpoint and not re.fullmatch(r"[\w.\-\[\]:]+:\d{1,5}", config.rdzv_endpoint):
        raise ValueError(f"rdzv_endpoint must look like HOST:PORT, got {config.rdzv_endpoint!r}")


def ranks_per_node(config: RunConfig) -> int:
    return config.num_ranks // config.nnodes


def cuda_device_count() -> int:
    """CUDA devices torch would see, without importing torch into this process.

    The app imports this module, and torch costs seconds and hundreds of MB
    there. No NVIDIA device node means no GPU, answered at once; otherwise a
    short subprocess asks torch itself (it also knows whether this torch build
    has CUDA at all, and honours CUDA_VISIBLE_DEVICES).
    """
    if not any(Path("/dev").glob("nvidia[0-9]*")):
        return 0
    probe = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    try:
        answer = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
        return int(answer.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError, OSError):
        return 0


def _resolve_device(config: RunConfig) -> RunConfig:
    """Resolve auto: CUDA when torch sees a GPU, nccl with a GPU per rank, staged with fewer, gloo on CPU."""
    device, backend, per_node = config.device, config.backend, ranks_per_node(config)
    if device == "cpu" and backend in ("nccl", "staged"):
        raise ValueError(f"backend {backend} moves CUDA tensors; on device cpu use backend gloo (or auto)")
    if device == "cpu" or (device == "auto" and backend == "gloo"):
        return replace(config, device="cpu", backend="gloo")
    gpus = cuda_device_count()
    if device == "cuda" and gpus == 0:
        raise ValueError("device cuda was asked for but torch sees no CUDA GPU; use device cpu (backend gloo)")
    if device == "auto":
        if gpus == 0 and backend in ("nccl", "staged"):
            raise ValueError(f"backend {backend} needs CUDA GPUs and torch sees none; use backend gloo or auto")
        device = "cuda" if gpus else "cpu"
        if device == "cpu":
            return replace(config, device="cpu", backend="gloo")
    if backend == "nccl" and gpus < per_node:
        raise ValueError(
            f"backend nccl needs one GPU per rank: {per_node} ranks on this node but {gpus} GPU(s); "
            f"use backend staged (ranks share GPUs, transfers go through host memory) or fewer ranks"
        )
    if backend == "auto":
        backend = "nccl" if gpus >= per_node else "staged"
    elif backend == "gloo":  # gloo moves host memory: CUDA tensors go through it staged
        backend = "staged"
    return replace(config, device=device, backend=backend)


def max_cpu_ranks() -> int:
    """More CPU ranks than this only measure the OS scheduler: 2 per core, at most 16."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(MAX_CPU_RANKS, 2 * cores)


def _check_cpu_ranks(config: RunConfig) -> None:
    per_node, limit = ranks_per_node(config), max_cpu_ranks()
    if config.device == "cpu" and per_node > limit:
        raise ValueError(
            f"{per_node} CPU ranks on one node is too many for this machine: the limit is {limit} "
            f"(2 per core, at most {MAX_CPU_RANKS}); use fewer ranks or more nodes"
        )
