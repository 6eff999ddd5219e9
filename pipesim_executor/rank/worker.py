"""The torchrun entry point: one process per rank runs the run folder's schedule for real.

Usage (the launcher starts it; see pipesim_executor/config.py for the run folder):

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m pipesim_executor.rank.worker --run-dir runs/NAME

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
warmup_steps, steps, torch_version, dtype, data_parallel; meta holds the clock offsets.
With data parallelism (processes = ranks x replicas) the timeline is replica 0's
ranks, each gradient all-reduce a comm span of kind "allreduce" (peer: the number
of replicas), and allreduce_replica_lag_ms says how far the other replicas lagged.
With --offload each OFFLOAD and RELOAD is a comm span of kind "offload" / "reload" (peer -1: the host, action the
copy's own entry, as the simulator writes them) and offload_moved_bytes says, per rank and stage, the bytes one
OFFLOAD moved. With a schedule in both directions (DualPipe) the losses are the sum of both last stages'.
With --torch-profile each rank also writes traces/rankR.json, the torch.profiler
trace of the measured steps (see pipesim_executor.rank.torch_profile).
"""

from __future__ import annotations

import time
from pathlib import Path

from pipesim.io.formats import read_json, schedule_from_dict
from pipesim_executor.config import RunConfig
from pipesim_executor.processes import exit_when_launcher_gone
from pipesim_executor.progress import emit
from pipesim_executor.rank.entry import rank_main
from pipesim_executor.rank.setup import setup
from pipesim_executor.rank.teardown import finish
from pipesim_executor.rank.timing import estimate_clock_offsets
from pipesim_executor.rank.torch_profile import trace_path
from pipesim_executor.rank.train_loop import train, write_measured


def run(run_dir: Path) -> None:
    config = RunConfig.from_dict(read_json(run_dir / "config.json"))
    schedule = schedule_from_dict(read_json(run_dir / "schedule.json"))
    before_training = exit_when_launcher_gone()  # until the training loop's own check takes over
    r = setup(config, schedule)
    emit("started", rank=r.rank, backend=r.choice.transport, device=str(r.choice.device))
    offsets = estimate_clock_offsets(r.control, r.rank, r.world_size)
    if config.profile:
        from pipesim_executor.rank.profile import profile_run

        profile_run(r, run_dir)
    elif config.compute.sleeps:  # the runtime beyond the sleeps, measured here and priced (cost.json)
        from pipesim_executor.rank.sleep_calibrate import calibrate_sleep

        calibrate_sleep(r, run_dir)
    switch = None
    if config.inject.inject:  # after the profile: it measures the devices as they are
        from pipesim_executor.rank.inject import inject

        switch = inject(r)
    before_training.set()
    started = time.perf_counter()
    # a cancel stops it after the step in progress, keeping the steps done
    records = train(r, run_dir, trace_path(run_dir, r.rank) if config.training.torch_profile else None, switch)
    write_measured(r, records, offsets, run_dir)
    emit("done", rank=r.rank, seconds=round(time.perf_counter() - started, 3))


def main(argv: list[str] | None = None) -> int:
    return rank_main(
        run,
        "python -m pipesim_executor.rank.worker",
        __doc__.splitlines()[0],
        "run folder with config.json and schedule.json",
        argv,
    )


if __name__ == "__main__":
    finish(main)  # releases the process groups, then exits without finalisation (see pipesim_executor.rank.teardown)
