"""The torchrun entry point: one process per rank runs the run folder's schedule for real.

Usage (the launcher starts it; see executor/config.py for the run folder):

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m executor.worker --run-dir runs/NAME

Reads config.json and schedule.json; optionally profiles (cost.json); runs the
warm-up steps, then the measured steps, timing every action; rank 0 gathers
everything and writes measured.json. Progress goes to stdout as
`PIPESIM {json}` lines: started, step (phase profile | warmup | measure, with
step and steps counted within the phase), done, or error with a message.
Fault injection for tests: PIPESIM_CRASH_RANK=r makes rank r exit abruptly
(status 3) at the start of step PIPESIM_CRASH_STEP (default 0, counting
warm-up steps).

measured.json is pipesim's timeline document (source "measured"; one span per
action per measured step, steps 0..steps-1, ms from each step's start; comm =
time blocked in recv/send waits) with these top-level keys added:
step_times_ms (measured steps: earliest rank's start to latest rank's end of
the optimizer step), losses and loss_phases (every step, warm-up first, each
marked "warmup" or "measure"), optimizer_ms (per rank, per measured step),
peak_memory_bytes (per rank) and peak_memory_kind, backend, device,
warmup_steps, steps, torch_version; meta holds the clock offsets.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from executor.config import PROGRESS_PREFIX, RunConfig
from executor.model import make_batch
from executor.runtime import PipelineRuntime, RankModel, build_rank_model, microbatches, schedule_links
from executor.teardown import finish
from executor.timing import assemble_measured, estimate_clock_offsets, make_clock
from executor.transport import BackendChoice, Transport, env_int, init_distributed, resolve_backend
from pipesim.formats import read_json, schedule_from_dict, timeline_to_dict, write_json
from pipesim.ir import Schedule


def emit(event: str, **fields: Any) -> None:
    """One progress line, written in one call: ranks share a pipe, and a line must not be split by another's."""
    sys.stdout.write(PROGRESS_PREFIX + json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def make_optimizer(config: RunConfig, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.lr)
    return torch.optim.SGD(params, lr=config.lr)


@dataclass
class Rank:
    """Everything one rank holds for a run."""

    config: RunConfig
    schedule: Schedule
    rank: int
    world_size: int
    choice: BackendChoice
    control: Any  # gloo group over all ranks
    model: RankModel
    runtime: PipelineRuntime
    optimizer: torch.optim.Optimizer
    clock: Any

    def batch(self, step: int) -> tuple[list | None, list | None]:
        """This step's microbatches: inputs where stage 0 lives, targets where the last stage lives."""
        stages = self.runtime.runners
        if 0 not in stages and self.schedule.num_stages - 1 not in stages:
            return None, None
        inputs, targets = make_batch(self.config.model, self.config.batch_size, self.config.seed, step)
        m, device = self.config.num_microbatches, self.choice.device
        return (microbatches(inputs, m, device) if 0 in stages else None,
                microbatches(targets, m, device) if self.schedule.num_stages - 1 in stages else None)


def setup(config: RunConfig, schedule: Schedule) -> Rank:
    rank, world = env_int("RANK", 0), env_int("WORLD_SIZE", 1)
    if world != schedule.num_ranks or world != config.num_ranks:
        raise ValueError(f"torchrun started {world} ranks but the schedule has {schedule.num_ranks} "
                         f"and the config {config.num_ranks}")
    if schedule.num_microbatches != config.num_microbatches:
        raise ValueError(
            f"the schedule has {schedule.num_microbatches} microbatches, the config {config.num_microbatches}"
        )
    local_world, local_rank = env_int("LOCAL_WORLD_SIZE", world), env_int("LOCAL_RANK", rank)
    choice = resolve_backend(config.device, config.backend, local_world, local_rank)
    control = init_distributed(choice, config.timeout_s)
    transport = Transport(choice, rank, schedule_links(schedule), config.timeout_s)
    transport.warm_up()
    model = build_rank_model(schedule, config.model, config.seed, config.microbatch_size, rank, choice.device,
                             config.recompute)
    clock = make_clock(choice.device)
    runtime = PipelineRuntime(schedule, rank, model.runners, model.shapes, transport, clock,
                              stash_bytes=model.stash_bytes)
    return Rank(config, schedule, rank, world, choice, control, model, runtime,
                make_optimizer(config, model.parameters()), clock)


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


def train(r: Rank) -> list[dict[str, Any]]:
    crash_at = crash_step()
    phases = [("warmup", r.config.warmup_steps), ("measure", r.config.steps)]
    records, step = [], 0
    if r.choice.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(r.choice.device)
    for phase, count in phases:
        for index in range(count):
            if crash_at == step:
                print(f"rank {r.rank}: injected crash at step {step} (PIPESIM_CRASH_RANK)", file=sys.stderr, flush=True)
                os._exit(3)
            result = train_step(r, step)
            result.update(step=step, phase=phase)
            records.append(result)
            emit("step", rank=r.rank, step=index, steps=count, phase=phase)
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
        "warmup_steps": r.config.warmup_steps,
        "steps": r.config.steps,
        "optimizer_ms": [[rec["optimizer_ms"] for rec in m] for m in measured],
        "peak_memory_bytes": [g["peak"] for g in gathered],
        "peak_memory_kind": "cuda max_memory_allocated" if cuda else "tracked stashed activations",
        "backend": r.choice.transport,
        "device": r.choice.device.type,
        "torch_version": torch.__version__,
    }
    write_json(timeline_to_dict(timeline, summary), run_dir / "measured.json")


def run(run_dir: Path) -> None:
    config = RunConfig.from_dict(read_json(run_dir / "config.json"))
    schedule = schedule_from_dict(read_json(run_dir / "schedule.json"))
    r = setup(config, schedule)
    emit("started", rank=r.rank, backend=r.choice.transport, device=str(r.choice.device))
    offsets = estimate_clock_offsets(r.control, r.rank, r.world_size)
    if config.profile:
        from executor.profile import profile_run

        profile_run(r, run_dir, emit)
    started = time.perf_counter()
    records = train(r)
    write_measured(r, records, offsets, run_dir)
    emit("done", rank=r.rank, seconds=round(time.perf_counter() - started, 3))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m executor.worker", description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True, type=Path, help="run folder with config.json and schedule.json")
    args = parser.parse_args(argv)
    try:
        run(args.run_dir)
    except Exception as error:  # report, then fail this rank; torchrun ends the others
        emit("error", rank=env_int("RANK", 0), message=f"{type(error).__name__}: {error}")
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    finish(main)  # releases the process groups, then exits without finalisation (see executor.teardown)
