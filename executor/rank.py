"""One rank of a run, set up: its process groups, transport, stages, runtime, optimizer and clock.

`setup` is the only place a rank is assembled; the worker's training loop, the profile phase
(executor.profile) and the side-by-side reference run all take the `Rank` it returns.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from executor.config import RunConfig
from executor.model import make_batch
from executor.runtime import PipelineRuntime, RankModel, build_rank_model, microbatches, schedule_links
from executor.timing import CudaClock, HostClock, make_clock
from executor.transport import BackendChoice, Transport, env_int, init_distributed, resolve_backend
from pipesim.ir import Schedule
from pipesim.lower import overlap_groups


def make_optimizer(config: RunConfig, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """The run's optimizer over `params` (ours and torch's reference use this same factory)."""
    if config.training.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.training.lr)
    return torch.optim.SGD(params, lr=config.training.lr)


@dataclass
class Rank:
    """Everything one rank holds for a run."""

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
    def overlap_groups(self) -> list[list[str]]:
        """The schedule's overlapped groups (torch's OVERLAP_F_B), as action texts."""
        return [[str(a) for a in group] for group in overlap_groups(self.schedule)]

    def batch(self, step: int) -> tuple[list | None, list | None]:
        """This step's microbatches: inputs where stage 0 lives, targets where the last stage lives."""
        stages = self.runtime.runners
        if 0 not in stages and self.schedule.num_stages - 1 not in stages:
            return None, None
        training = self.config.training
        inputs, targets = make_batch(self.config.model, training.batch_size, training.seed, step)
        m, device = self.config.pipeline.num_microbatches, self.choice.device
        return (microbatches(inputs, m, device) if 0 in stages else None,
                microbatches(targets, m, device) if self.schedule.num_stages - 1 in stages else None)


def setup(config: RunConfig, schedule: Schedule) -> Rank:
    rank, world = env_int("RANK", 0), env_int("WORLD_SIZE", 1)
    if world != schedule.num_ranks or world != config.pipeline.num_ranks:
        raise ValueError(f"torchrun started {world} ranks but the schedule has {schedule.num_ranks} "
                         f"and the config {config.pipeline.num_ranks}")
    if schedule.num_microbatches != config.pipeline.num_microbatches:
        raise ValueError(
            f"the schedule has {schedule.num_microbatches} microbatches, the config {config.pipeline.num_microbatches}"
        )
    local_world, local_rank = env_int("LOCAL_WORLD_SIZE", world), env_int("LOCAL_RANK", rank)
    choice = resolve_backend(config.devices.device, config.devices.backend, local_world, local_rank)
    control = init_distributed(choice, config.timeout_s)
    transport = Transport(choice, rank, schedule_links(schedule), config.timeout_s)
    transport.warm_up()
    model = build_rank_model(schedule, config.model, seed=config.training.seed, microbatch_size=config.microbatch_size,
                             rank=rank, device=choice.device, recompute=config.training.recompute)
    clock = make_clock(choice.device)
    runtime = PipelineRuntime(schedule, rank, model.runners, model.shapes, transport, clock,
                              stash_bytes=model.stash_bytes)
    return Rank(config, schedule, rank, world, choice, control, model, runtime,
                make_optimizer(config, model.parameters()), clock)
