"""One rank of a run, set up: its process groups, transport, stages, runtime, optimizer and clock.

`setup` is the only place a rank is assembled; the worker's training loop, the profile phase
(pipesim_executor.rank.profile) and the side-by-side reference run all take the `Rank` it returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch

from pipesim.ir import Schedule
from pipesim.semantics.lower import overlap_groups
from pipesim_executor.config import OPTIMIZERS, SGD_MOMENTUM, RunConfig
from pipesim_executor.rank.runtime import (
    PipelineRuntime,
    RankModel,
    ahead_for,
    build_rank_model,
    microbatches,
    schedule_links,
)
from pipesim_executor.rank.timing import CudaClock, HostClock, make_clock
from pipesim_executor.rank.transport import BackendChoice, Transport, env_int, init_distributed, resolve_backend
from pipesim_executor.seq_cut import data_microbatches


def make_optimizer(config: RunConfig, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """The run's optimizer over `params` (ours and torch's reference use this same factory)."""
    return optimizer_for(config.training.optimizer, params, config.training.lr)


def optimizer_for(name: str, params: list[torch.nn.Parameter], lr: float) -> torch.optim.Optimizer:
    """The optimizer `name` (pipesim_executor.config.OPTIMIZERS) over `params`: the one mapping of the names the planner
    prices (sgd, sgd-momentum, adam) onto torch's optimizers, which the profile times too."""
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=lr, momentum=SGD_MOMENTUM)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    raise ValueError(f"unknown optimizer {name!r}; valid: {', '.join(OPTIMIZERS)}")


@dataclass
class Rank:
    """Everything one rank holds for a run.

    `rank` and `world_size` count processes (torchrun's RANK and WORLD_SIZE); with data parallelism process
    `rank` is pipeline rank `pipe_rank` of replica `replica` (rank = replica x num_ranks + pipe_rank), and
    replica 0's processes are 0..num_ranks-1.
    """

    config: RunConfig
    schedule: Schedule
    rank: int
    world_size: int
    choice: BackendChoice
    control: torch.distributed.ProcessGroup  # gloo group over all ranks
    model: RankModel
    runtime: PipelineRuntime
    optimizer: torch.optim.Optimizer
    clock: HostClock | CudaClock

    @property
    def num_ranks(self) -> int:
        return self.schedule.num_ranks

    @property
    def pipe_rank(self) -> int:
        return self.rank % self.schedule.num_ranks

    @property
    def replica(self) -> int:
        return self.rank // self.schedule.num_ranks

    @property
    def overlap_groups(self) -> list[list[str]]:
        """The schedule's overlapped groups (torch's OVERLAP_F_B), as action texts."""
        return [[str(a) for a in group] for group in overlap_groups(self.schedule)]

    def batch(self, step: int) -> tuple[list | None, list | None]:
        """This step's microbatches: inputs where a first stage lives, targets where a last stage lives (with
        pipelines in both directions, DualPipe, each direction has its own first and last stage).

        With D replicas the step's global batch is batch_size x D rows and this replica takes its own
        batch_size rows of it (D = 1: the batch itself)."""
        runners = self.runtime.runners.values()
        first, last = any(r.is_first for r in runners), any(r.is_last for r in runners)
        if not (first or last):
            return None, None
        training, replicas = self.config.training, self.config.pipeline.data_parallel
        size = training.batch_size
        inputs, targets = self.model.make_batch(size * replicas, training.seed, step)
        if replicas > 1:
            rows = slice(self.replica * size, (self.replica + 1) * size)
            inputs, targets = inputs[rows], targets[rows]
        m, device = self.config.pipeline.num_microbatches, self.choice.device
        return (
            microbatches(inputs, m, device) if first else None,
            microbatches(targets, m, device) if last else None,
        )


def data_parallel_groups(config: RunConfig, timeout_s: float) -> list:
    """One group per pipeline rank over its replicas (created by every process, in one order)."""
    ranks, replicas = config.pipeline.num_ranks, config.pipeline.data_parallel
    timeout = timedelta(seconds=timeout_s)
    return [
        torch.distributed.new_group([d * ranks + p for d in range(replicas)], backend=None, timeout=timeout)
        for p in range(ranks)
    ]


def _rank_model(config: RunConfig, schedule: Schedule, rank: int, device: torch.device) -> RankModel:
    """This rank's stages: the model's, or under --compute sleep stages that sleep their simulated cost."""
    if config.compute.sleeps:
        from pipesim_executor.rank.inject import build_sleep_model

        return build_sleep_model(schedule, rank, config.compute.cost_model(schedule), config.microbatch_size)
    return build_rank_model(
        schedule,
        config.model,
        seed=config.training.seed,
        microbatch_size=config.microbatch_size,
        rank=rank,
        device=device,
        recompute=config.training.recompute,
        dtype=config.training.dtype,
    )


def setup(config: RunConfig, schedule: Schedule) -> Rank:
    process, world = env_int("RANK", 0), env_int("WORLD_SIZE", 1)
    replicas = config.pipeline.data_parallel
    if world != schedule.num_ranks * replicas or schedule.num_ranks != config.pipeline.num_ranks:
        raise ValueError(
            f"torchrun started {world} processes but the schedule has {schedule.num_ranks} ranks "
            f"and the config {config.pipeline.num_ranks} ranks x {replicas} replicas"
        )
    rank, replica = process % schedule.num_ranks, process // schedule.num_ranks
    if data_microbatches(schedule) != config.pipeline.num_microbatches:
        raise ValueError(
            f"the schedule has {data_microbatches(schedule)} microbatches, the config "
            f"{config.pipeline.num_microbatches}"
        )
    local_world, local_rank = env_int("LOCAL_WORLD_SIZE", world), env_int("LOCAL_RANK", process)
    choice = resolve_backend(config.devices.device, config.devices.backend, local_world, local_rank)
    control = init_distributed(choice, config.timeout_s)
    transport = Transport(
        choice,
        rank,
        schedule_links(schedule),
        config.timeout_s,
        replicas=replicas,
        replica=replica,
        ranks=schedule.num_ranks,
    )
    transport.warm_up()
    model = _rank_model(config, schedule, rank, choice.device)
    clock = make_clock(choice.device)
    experts, alone = None, []
    if config.model.kind == "moe" and replicas > 1 and not config.compute.sleeps:
        from pipesim_executor.rank.moe import ExpertParallel, expert_parameters, shard_experts

        # a group per lane where an overlapped pair's members run at once, each exchanging on its own thread
        # (ExpertParallel, PipelineRuntime); on a GPU they run back to back: one lane
        pairs = bool(overlap_groups(schedule)) and choice.device.type == "cpu"
        lanes = [data_parallel_groups(config, config.timeout_s)[rank] for _ in range(1 + pairs)]
        for lane in lanes:
            torch.distributed.all_reduce(torch.zeros(1, device=choice.device), group=lane)  # connect before timing
        experts = ExpertParallel(lanes, replica, replicas, clock)
        shard_experts([runner.module for runner in model.runners.values()], experts)
        alone = [p for runner in model.runners.values() for p in expert_parameters(runner.module)]
    sync = None
    if replicas > 1:
        from pipesim_executor.rank.grad_sync import GradSync

        group = data_parallel_groups(config, config.timeout_s)[rank]
        torch.distributed.all_reduce(torch.zeros(1, device=choice.device), group=group)  # connect before timing
        sync = GradSync(schedule, rank, model.runners, group, replicas, alone=alone)
    if schedule.pipelines > 1:  # a copy of the weights per direction: their gradients summed before the optimizer
        from pipesim_executor.rank.weight_copies import WeightCopies

        sync = WeightCopies(schedule, rank, model.runners, config.timeout_s, choice.device)
    runtime = PipelineRuntime(
        schedule,
        rank,
        model.runners,
        model.shapes,
        transport,
        clock,
        dtype=model.wire_dtype,
        stash_bytes=model.stash_bytes,
        grad_sync=sync,
        copies=model.copies,
        seq_bounds=model.seq_bounds,
        groups=config.compute.sleeps,  # sleep mode runs an overlapped pair as the simulation prices it
        label_actions=config.training.torch_profile,
        lookahead=ahead_for(choice.transport),
        experts=experts,
    )
    return Rank(
        config,
        schedule,
        process,
        world,
        choice,
        control,
        model,
        runtime,
        make_optimizer(config, model.parameters()),
        clock,
    )
