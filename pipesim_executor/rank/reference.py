"""The same model, batch and microbatches on torch.distributed.pipelining's own schedules.

    torchrun --nproc-per-node 2 -m pipesim_executor.rank.reference --run-dir runs/NAME   (the launcher starts it)

Why: our executor interprets a pipesim Schedule; torch ships hand-written
schedules for the classic ones. Running both on the same stage modules
(pipesim_executor.rank.model, same seed -> same weights), the same batches and the same
optimizer says whether ours is as fast and computes the same losses.
Writes runs/NAME/reference.json: {"torch_schedule", "step_times_ms", "losses", "torch_order", ...}; with
PIPESIM_REFERENCE_SIDE_BY_SIDE=1 also "ours_step_times_ms" and "ours_losses" (see SIDE_BY_SIDE_ENV).
With --torch-profile, torch.profiler records the measured steps into traces/torch-rankR.json (and ours,
side by side, into traces/rankR.json). torch 2.13 labels each action `PP:<action>` (record_function) only in
its multi-stage runtime (_PipelineScheduleRuntime: interleaved-1f1b, looped-bfs, zb-h1, zbv, dualpipev);
ScheduleGPipe labels "Forward i" / "Backward i" and Schedule1F1B nothing: for those two the stage's compute
calls are labelled here (`label_single_stage`).

Only public torch.distributed.pipelining API that exists since torch 2.6
(PipelineStage, Schedule*.step(*args, target=, losses=)); the newest keyword
arguments are avoided so torch 2.11 works as well as 2.13.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from pipesim.ir import Schedule
from pipesim.schedules import schedule_info, schedule_names
from pipesim_executor.config import RunConfig
from pipesim_executor.processes import exit_when_launcher_gone
from pipesim_executor.progress import emit

# Set to 1 (the bench does) to run our executor in the same processes, alternating step by step
# with torch's: both then see the same machine at the same time, which a busy host needs for a fair ratio.
SIDE_BY_SIDE_ENV = "PIPESIM_REFERENCE_SIDE_BY_SIDE"


def torch_counterparts() -> dict[str, str]:
    """pipesim family -> torch.distributed.pipelining class name, for every registered family that has one
    (the registry entry's `torch_class`)."""
    return {info.name: info.torch_class for info in map(schedule_info, schedule_names()) if info.torch_class}


def torch_schedule_name(name: str) -> str | None:
    """torch's class for family `name`, None where it has none (or no family has that name)."""
    return torch_counterparts().get(name.strip().lower())


def unavailable_reason(config: RunConfig, schedule: Schedule) -> str | None:
    """Why no reference run can be made for this run, or None when it can (no torch import)."""
    name = schedule.name.strip().lower()
    if torch_schedule_name(name) is None:
        return (
            f"torch.distributed.pipelining has no schedule equivalent to {schedule.name!r}; "
            f"reference runs exist for: {', '.join(torch_counterparts())}"
        )
    expected = schedule_info(name).stage_to_rank(schedule.num_ranks, schedule.num_stages // schedule.num_ranks)
    if tuple(schedule.stage_to_rank) != expected:
        placed = list(schedule.stage_to_rank)
        return f"schedule {schedule.name!r} places stages as {placed}, unlike torch's {list(expected)}"
    if config.devices.backend == "staged":
        return "torch.distributed.pipelining sends device tensors directly; it cannot run on backend staged"
    return torch_refusal(
        torch_schedule_name(name) or "", schedule.num_ranks, schedule.num_stages, schedule.num_microbatches
    )


def torch_refusal(class_name: str, num_ranks: int, num_stages: int, num_microbatches: int) -> str | None:
    """Why torch's own schedule class refuses these sizes (its constructor's message), or None when it builds.

    torch's rules are asked, not copied: the class is constructed on mocked stages (as torch's own schedule
    visualiser does), which runs every check its constructor makes and needs no process group. torch is
    imported here, lazily, so the launcher module stays free of it until a reference run is asked for.
    """
    import logging
    from unittest import mock

    try:
        from torch.distributed.pipelining import schedules as torch_schedules
        from torch.distributed.pipelining.stage import PipelineStage
    except ImportError as error:
        return f"torch.distributed.pipelining cannot be imported ({error})"
    schedule_class = getattr(torch_schedules, class_name, None)
    if schedule_class is None:
        return f"this torch has no {class_name}"
    stage = mock.create_autospec(PipelineStage, instance=True)
    stage.group_rank, stage.group_size, stage.num_stages, stage.submod = 0, num_ranks, num_stages, None
    logger = logging.getLogger(torch_schedules.__name__)
    level = logger.level
    logger.setLevel(logging.ERROR)  # the constructor logs "Using <class>" at info level
    try:
        if issubclass(schedule_class, torch_schedules.PipelineScheduleSingle):
            schedule_class(stage, num_microbatches)
        else:
            schedule_class([stage] * max(1, num_stages // num_ranks), num_microbatches)
    except (ValueError, AssertionError, RuntimeError, ZeroDivisionError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return (
            f"torch's {class_name} refuses {num_ranks} ranks x {num_microbatches} microbatches: "
            f"{' '.join(first.split())}"
        )
    finally:
        logger.setLevel(level)
    return None


def _build_pipeline(config: RunConfig, schedule: Schedule, rank: int, device):
    """PipelineStage per local stage around pipesim_executor.rank.model's stage modules, and torch's schedule over
    them."""
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining import schedules as torch_schedules

    from pipesim_executor.rank.model import build_model, loss_fn, split_stages
    from pipesim_executor.rank.setup import make_optimizer

    class_name = torch_schedule_name(schedule.name)
    schedule_class = getattr(torch_schedules, class_name or "", None)
    if schedule_class is None:
        raise RuntimeError(f"this torch has no {class_name}; upgrade torch for a reference run of {schedule.name}")
    layers = build_model(config.model, config.training.seed)
    modules = split_stages(layers, schedule.num_stages, config.stage_split(schedule.num_stages))
    local = schedule.stages_of_rank(rank)
    stages = [PipelineStage(modules[s].to(device), s, schedule.num_stages, device) for s in local]
    loss = loss_fn(config.model)
    if issubclass(schedule_class, torch_schedules.PipelineScheduleSingle):
        pipe = schedule_class(stages[0], n_microbatches=schedule.num_microbatches, loss_fn=loss)
    else:
        pipe = schedule_class(stages, n_microbatches=schedule.num_microbatches, loss_fn=loss)
    params = [p for s in local for p in modules[s].parameters()]
    return pipe, make_optimizer(config, params), local, class_name


def label_single_stage(pipe) -> None:
    """Label a single-stage torch schedule's actions `PP:<stage><F|B|I><microbatch>` for the profiler.

    torch 2.13 labels actions `PP:` only in its multi-stage runtime; ScheduleGPipe writes "Forward i" and
    Schedule1F1B nothing. Wrapping the stage's forward_one_chunk / backward_one_chunk (the calls its loops
    make, in the order they make them) gives their traces the same labels, around the compute alone (those
    loops wait for transfers outside these calls). Multi-stage schedules are left as torch runs them.
    """
    from torch.distributed.pipelining.schedules import PipelineScheduleSingle
    from torch.profiler import record_function

    if not isinstance(pipe, PipelineScheduleSingle):
        return
    stage = pipe._stage
    forward, backward, index = stage.forward_one_chunk, stage.backward_one_chunk, stage.stage_index

    def labelled_forward(fwd_chunk_id: int, *args, **kwargs):
        with record_function(f"PP:{index}F{fwd_chunk_id}"):
            return forward(fwd_chunk_id, *args, **kwargs)

    def labelled_backward(bwd_chunk_id: int, *args, **kwargs):
        kind = "B" if kwargs.get("full_backward", True) else "I"
        with record_function(f"PP:{index}{kind}{bwd_chunk_id}"):
            return backward(bwd_chunk_id, *args, **kwargs)

    stage.forward_one_chunk, stage.backward_one_chunk = labelled_forward, labelled_backward


class TorchSide:
    """torch's schedule over this rank's stages: one timed training step at a time."""

    def __init__(self, config: RunConfig, schedule: Schedule, rank: int, device) -> None:
        self.config, self.device = config, device
        self.pipe, self.optimizer, local, self.class_name = _build_pipeline(config, schedule, rank, device)
        self.first, self.last = 0 in local, schedule.num_stages - 1 in local
        if config.training.torch_profile:
            label_single_stage(self.pipe)

    def step(self, step: int) -> tuple[float, float, float]:
        """(start ms, end ms) on the host clock and the step's loss (0 off the last stage's rank)."""
        import torch
        import torch.distributed as dist

        from pipesim_executor.rank.model import make_batch

        batch = make_batch(self.config.model, self.config.training.batch_size, self.config.training.seed, step)
        inputs, targets = (t.to(self.device) for t in batch)
        mb_losses: list = []
        args = (inputs,) if self.first else ()
        kwargs = {"target": targets, "losses": mb_losses} if self.last else {}
        _synchronize(self.device)
        dist.barrier()
        start = time.perf_counter()
        self.pipe.step(*args, **kwargs)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        _synchronize(self.device)
        end = time.perf_counter()
        loss = float(torch.stack([x.detach().float() for x in mb_losses]).mean()) if self.last else 0.0
        return start * 1e3, end * 1e3, loss


class OursSide:
    """Our executor (pipesim_executor.rank.worker's rank setup and timed step) in the same processes."""

    def __init__(self, rank_state) -> None:
        self.r = rank_state

    def step(self, step: int) -> tuple[float, float, float]:
        from pipesim_executor.rank.train_loop import train_step

        record = train_step(self.r, step)
        return record["start"], record["end"], record["loss"] or 0.0


def run_sides(
    config: RunConfig, rank: int, sides: dict, traces: dict[str, Path] | None = None, device=None
) -> dict[str, dict]:
    """Warm-up + measured steps of every side; with two sides they alternate step by step, the
    first side switching every step, so that both see the same machine at the same time.

    With `traces` (--torch-profile) each side's measured steps run under their own torch.profiler session
    (one profiler at a time), one side after the other; the warm-up still alternates.
    Per side: (start, end) of each measured step on this rank, and every step's loss.
    """
    warmup = config.training.warmup_steps
    total = warmup + config.training.steps
    out = {name: {"spans": [], "losses": []} for name in sides}
    names = list(sides)

    def one(name: str, step: int) -> None:
        start, end, loss = sides[name].step(step)
        if step >= warmup:
            out[name]["spans"].append((start, end))
        out[name]["losses"].append(loss)

    alternating = range(total) if traces is None else range(warmup)
    for step in alternating:
        for name in names if step % 2 == 0 else names[::-1]:
            one(name, step)
        emit("step", rank=rank, step=step, steps=total, phase="reference")
    if traces is not None:
        from pipesim_executor.rank.torch_profile import profiled

        for name in names:
            with profiled(traces[name], device):
                for step in range(warmup, total):
                    one(name, step)
                    if name == names[-1]:
                        emit("step", rank=rank, step=step, steps=total, phase="reference")
    return out


def torch_order(pipe) -> dict[str, list[str]] | None:
    """The order torch's schedule runs, per rank as action texts ("" for an idle slot), when it states one."""
    order = getattr(pipe, "pipeline_order", None)
    if not isinstance(order, dict):
        return None
    return {
        str(rank): ["" if action is None else str(action) for action in actions]
        for rank, actions in sorted(order.items())
    }


def _synchronize(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gather_side(local: dict, device, shared_clock: bool) -> dict:
    """A step runs from the earliest rank's start to the latest rank's end, as in our measured.json.

    Across machines the host clocks differ, so there each rank's own duration is used (the longest).
    Losses come from the rank of the last stage (a sum with a single non-zero term).
    """
    import torch
    import torch.distributed as dist

    spans = torch.tensor(local["spans"], dtype=torch.float64, device=device).reshape(-1, 2)
    if shared_clock:
        starts, ends = spans[:, 0].contiguous(), spans[:, 1].contiguous()
        dist.all_reduce(starts, op=dist.ReduceOp.MIN)
        dist.all_reduce(ends, op=dist.ReduceOp.MAX)
        times = ends - starts
    else:
        times = (spans[:, 1] - spans[:, 0]).contiguous()
        dist.all_reduce(times, op=dist.ReduceOp.MAX)
    losses = torch.tensor(local["losses"], dtype=torch.float64, device=device)
    dist.all_reduce(losses, op=dist.ReduceOp.SUM)
    step_times = [float(t) for t in times.cpu()]
    return {"step_times_ms": step_times, "losses": [float(x) for x in losses.cpu()]}


def _setup(config: RunConfig, schedule: Schedule, side_by_side: bool):
    """Join the process group (through our worker's setup when ours runs too); returns (rank, device, ours)."""
    import torch
    import torch.distributed as dist

    torch.manual_seed(config.training.seed)
    if side_by_side:
        from pipesim_executor.rank.setup import setup

        ours = setup(config, schedule)
        return ours.rank, ours.choice.device, ours
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if config.devices.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return rank, device, None


def main(argv: list[str] | None = None) -> int:
    import torch

    from pipesim.io.formats import read_json, schedule_from_dict, write_json

    parser = argparse.ArgumentParser(prog="python -m pipesim_executor.rank.reference")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--launch-node", type=int, default=0, help="this node's rank (names the launch's processes)")
    run_dir = parser.parse_args(argv).run_dir
    exit_when_launcher_gone()  # the whole reference run: it keeps nothing of a run cut short
    config = RunConfig.from_dict(read_json(run_dir / "config.json"))
    schedule = schedule_from_dict(read_json(run_dir / "schedule.json"))
    side_by_side = os.environ.get(SIDE_BY_SIDE_ENV) == "1"
    rank, device, ours = _setup(config, schedule, side_by_side)
    torch_side = TorchSide(config, schedule, rank, device)
    sides = {"torch": torch_side} if ours is None else {"ours": OursSide(ours), "torch": torch_side}
    traces = None
    if config.training.torch_profile:
        from pipesim_executor.rank.torch_profile import trace_path

        traces = {"torch": trace_path(run_dir, rank, "torch"), "ours": trace_path(run_dir, rank)}
    measured = run_sides(config, rank, sides, traces, device)
    shared_clock = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) == int(os.environ.get("WORLD_SIZE", "1"))
    gathered = {name: gather_side(local, device, shared_clock) for name, local in measured.items()}
    result = {
        "torch_schedule": torch_side.class_name,
        "torch_version": torch.__version__,
        **gathered["torch"],
        "median_step_ms": statistics.median(gathered["torch"]["step_times_ms"]),
        "warmup_steps": config.training.warmup_steps,
        "side_by_side": ours is not None,
        "torch_order": torch_order(torch_side.pipe),
    }
    if ours is not None:
        result["ours_step_times_ms"] = gathered["ours"]["step_times_ms"]
        result["ours_losses"] = gathered["ours"]["losses"]
    if config.training.recompute:
        result["note"] = "torch's schedules ran without recomputation"
    if rank == 0:
        write_json(result, run_dir / "reference.json")
    emit("done", rank=rank, phase="reference")
    return 0


if __name__ == "__main__":
    from pipesim_executor.rank.teardown import finish

    finish(main)  # releases the process groups, then exits without finalisation (see pipesim_executor.rank.teardown)
