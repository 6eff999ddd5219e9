"""Everything a run can be refused for, checked before a process starts or a folder is made.

A bad run should cost the user nothing: unknown or invalid schedules,
deadlocks, more stages than the model has layers, NCCL without a GPU per
rank, more CPU ranks than the machine can sensibly time. Each message names
the problem and what to do instead. Imports torch only to count GPUs, and
only when the run could use one (the app imports this module); a custom
model is checked in a child process (pipesim_executor.host.model_check).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import replace

from pipesim.ir import Schedule
from pipesim_executor.config import CUSTOM, DeviceConfig, RunConfig, check_split_points, ranks_per_node
from pipesim_executor.devices import resolve_device, torch_missing
from pipesim_executor.host.gpu_probe import GpuProbe, probe_gpus
from pipesim_executor.host.model_check import check_custom_model
from pipesim_executor.host.model_memory import check_model_memory
from pipesim_executor.seq_cut import data_microbatches, token_bounds

MAX_CPU_RANKS = 16


def check_run(config: RunConfig, schedule: Schedule | None = None) -> tuple[RunConfig, Schedule]:
    """Return the config with device and backend resolved, and the schedule; ValueError on any user mistake."""
    missing = torch_missing()
    if missing is not None:
        raise ValueError(f"a run needs torch, and {missing}")
    schedule = _checked_schedule(config, schedule)
    if config.compute.sleeps:  # no model runs: its costs must fit the schedule instead
        config.compute.cost_model(schedule)
    else:
        _check_model_fits(config, schedule)
    _check_combinations(config)
    _check_nodes(config)
    config = _resolve_device(config)
    # every replica of the model on this machine (a multi-node run: this node's share of them)
    replicas = max(1, config.pipeline.data_parallel // config.nodes.nnodes)
    training = config.training
    check_model_memory(
        config.model, config.microbatch_size, training.optimizer, training.dtype, replicas, config.devices.device
    )
    if config.pipeline.data_parallel > 1 and config.devices.backend == "staged":
        raise ValueError(
            "--data-parallel needs a GPU per process (nccl) or the CPU (gloo); with ranks sharing a "
            "GPU (backend staged) use --data-parallel 1, or fewer ranks"
        )
    _check_cpu_ranks(config)
    if config.pipeline.offload != "none" and config.devices.device != "cpu":
        raise ValueError(
            f"--offload runs its copies on a CPU thread, and this run is on {config.devices.device}; "
            "use --device cpu, or --offload none"
        )
    return config, schedule


def _checked_schedule(config: RunConfig, schedule: Schedule | None) -> Schedule:
    from pipesim.cost.model import CostModel
    from pipesim.schedules import build_schedule
    from pipesim.semantics.validate import validate
    from pipesim.sim.simulate import simulate

    pipeline = config.pipeline
    if schedule is None:
        schedule = build_schedule(
            pipeline.schedule,
            pipeline.num_ranks,
            pipeline.num_microbatches,
            num_virtual_stages=pipeline.num_virtual_stages,
            seq_chunks=pipeline.seq_chunks,
            seq_cut=pipeline.seq_cut,
        )
    elif (schedule.num_ranks, data_microbatches(schedule)) != (pipeline.num_ranks, pipeline.num_microbatches):
        raise ValueError(
            f"schedule {schedule.name!r} is for {schedule.num_ranks} ranks and {data_microbatches(schedule)} "
            f"microbatches but the run asks for {pipeline.num_ranks} ranks and {pipeline.num_microbatches}"
        )
    validate(schedule)  # ScheduleError (a ValueError) names rank, action and rule
    _check_runnable(schedule, config)
    if pipeline.offload != "none":
        schedule = _with_offload(config, schedule)
    simulate(schedule, CostModel.uniform())  # DeadlockError says which rank waits on which action
    return schedule


def _check_runnable(schedule: Schedule, config: RunConfig) -> None:
    """What the executor's runtime cannot run yet, refused in one line with what to run instead."""
    if schedule.seq_chunks > 1:
        _check_seq_chunks(schedule, config)
    if schedule.pipelines > 1 and (config.pipeline.data_parallel > 1 or config.profile or config.reference):
        raise ValueError(
            f"schedule {schedule.name!r} runs {schedule.pipelines} pipelines in opposite directions, each with its "
            "own copy of the weights, which the executor runs on one replica without --profile or --reference; "
            "drop those, or run dualpipev (its pairs on one copy)"
        )


def _check_seq_chunks(schedule: Schedule, config: RunConfig) -> None:
    """Sequence chunks run on the built-in Transformer, its sequence long enough for the cut
    (pipesim_executor.seq_cut), without what moves or times a whole microbatch's stash."""
    if not config.compute.sleeps:
        token_bounds(config.model, schedule)
    for flag, on, fix in (
        ("--offload", config.pipeline.offload != "none", "use --offload none"),
        ("--profile", config.profile, "drop --profile"),
        ("--reference", config.reference, "drop --reference"),
    ):
        if on:
            raise ValueError(
                f"schedule {schedule.name!r} runs each microbatch as {schedule.seq_chunks} sequence chunks, and "
                f"{flag} moves or times whole microbatches; {fix}, or run 1f1b"
            )


def _with_offload(config: RunConfig, schedule: Schedule) -> Schedule:
    """The schedule with pipesim's OFFLOADs and RELOADs placed for --offload (pipesim.sim.offload)."""
    from pipesim.sim.offload import with_offload

    mode = config.pipeline.offload
    cost = None
    if mode == "selective":
        if not config.compute.sleeps:
            raise ValueError(
                "--offload selective weighs each wait against the copy's priced time, which a model run does not "
                "know before it runs; use --offload full, or --compute sleep with --cost (a host_link prices copies)"
            )
        cost = config.compute.cost_model(schedule)
    return with_offload(schedule, mode, cost)


def _check_model_fits(config: RunConfig, schedule: Schedule) -> None:
    if config.model.kind == CUSTOM:
        # In a child process with a time and a memory limit (pipesim_executor.host.model_check): the launcher, which may
        # be the web page's server, never imports or calls a user-named module itself.
        check_custom_model(config.model.spec, schedule.pipeline_stages, config.model.split_points)
        return
    units = config.model.num_units
    knob = "--cnn-blocks" if config.model.kind == "cnn" else "--layers"
    experts, replicas = config.model.moe.experts, config.pipeline.data_parallel
    if config.model.kind == "moe" and experts % replicas:  # expert parallel: each replica holds experts / D
        raise ValueError(
            f"--experts {experts} do not split evenly over --data-parallel {replicas} replicas (each holds "
            "experts / replicas of every block): choose a multiple of the replicas"
        )
    if schedule.pipeline_stages > units:  # DualPipe's second direction holds copies of the first's stages
        raise ValueError(
            f"schedule {schedule.name!r} has {schedule.pipeline_stages} stages but the model has only {units} layers "
            f"({config.model.describe_units()}) and every stage needs one; use fewer ranks or virtual stages, "
            f"or raise {knob}"
        )
    if config.model.split_points is not None:
        check_split_points(config.model.split_points, units, schedule.pipeline_stages)


def _check_combinations(config: RunConfig) -> None:
    """What the torch reference run cannot reproduce: it runs one fp32 pipeline."""
    if config.reference and config.pipeline.data_parallel > 1:
        raise ValueError("--reference runs torch's schedule on one pipeline: drop it, or --data-parallel 1")
    if config.reference and config.training.dtype != "fp32":
        raise ValueError("--reference runs torch's schedule in fp32: drop it, or use --dtype fp32")


def _check_nodes(config: RunConfig) -> None:
    if config.nodes.nnodes < 1 or not 0 <= config.nodes.node_rank < config.nodes.nnodes:
        raise ValueError(f"node_rank must lie in 0..{config.nodes.nnodes - 1} (nnodes {config.nodes.nnodes})")
    if config.world_size % config.nodes.nnodes:
        raise ValueError(
            f"{config.world_size} processes ({config.pipeline.num_ranks} ranks x "
            f"{config.pipeline.data_parallel} replicas) do not split evenly over {config.nodes.nnodes} "
            "nodes"
        )
    if config.nodes.nnodes > 1 and not config.nodes.rdzv_endpoint:
        raise ValueError("a multi-node run needs rdzv_endpoint HOST:PORT (the same on every node)")
    if config.nodes.rdzv_endpoint and not re.fullmatch(r"[\w.\-\[\]:]+:\d{1,5}", config.nodes.rdzv_endpoint):
        raise ValueError(f"rdzv_endpoint must look like HOST:PORT, got {config.nodes.rdzv_endpoint!r}")


def gpu_probe() -> GpuProbe:
    """What torch sees of this machine's GPUs, without importing torch here (pipesim_executor.host.gpu_probe)."""
    return probe_gpus()


def cuda_device_count() -> int:
    """CUDA devices torch would see (0 at once without an NVIDIA device node), without importing torch here."""
    return gpu_probe().count


def _resolve_device(config: RunConfig) -> RunConfig:
    """Resolve auto (pipesim_executor.devices' rules); the GPUs are probed only when the run could use one.

    A probe that finds no GPU where a device node says one may be is never silent: `--device cuda` is refused
    naming the probe's reason, and `--device auto` runs on the CPU after a warning line on stderr.
    """
    device, backend = config.devices.device, config.devices.backend
    could_use_gpu = device == "cuda" or (device == "auto" and backend != "gloo")
    probe = gpu_probe() if could_use_gpu else GpuProbe(0)
    if probe.gpu_seems_present:
        if device == "cuda":
            raise ValueError(f"device cuda was asked for but {probe.reason()}; or use device cpu (backend gloo)")
        print(f"warning: {probe.warning()}", file=sys.stderr, flush=True)
    choice = resolve_device(device, backend, ranks_per_node(config), probe.count)
    return replace(config, devices=DeviceConfig(choice.device, choice.transport))


def max_cpu_ranks() -> int:
    """More CPU ranks than this only measure the OS scheduler: 2 per core, at most 16."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(MAX_CPU_RANKS, 2 * cores)


def _check_cpu_ranks(config: RunConfig) -> None:
    # sleeping ranks do not compute: they share cores without measuring the scheduler (--compute sleep)
    per_node, limit = ranks_per_node(config), MAX_CPU_RANKS if config.compute.sleeps else max_cpu_ranks()
    if config.devices.device == "cpu" and per_node > limit:
        raise ValueError(
            f"{per_node} CPU ranks on one node is too many for this machine: the limit is {limit} "
            f"(2 per core, at most {MAX_CPU_RANKS}); use fewer ranks or more nodes"
        )


def check_schedule(config: RunConfig, schedule: Schedule | None = None) -> Schedule:
    """`check_run`'s checks of the schedule alone (built, valid, runnable by this executor with these settings, free
    of deadlock), with no torch, no device probe and no user module: what a form asks before Launch, to name a
    refusal at once; `check_run` still checks the whole run."""
    return _checked_schedule(config, schedule)
