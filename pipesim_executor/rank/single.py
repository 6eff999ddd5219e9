"""The run's model in one process on the CPU: what a pipelined run's losses and per-rank memory must come to.

`executor doctor` (pipesim_executor.host.doctor) compares every run it launches with these. No process group, no
schedule: the whole layer list, the whole batch, the run's optimizer (pipesim_executor.rank.setup.make_optimizer),
step after step. A pipelined step's loss is the sum over microbatches of each one's mean loss over the number
of microbatches, which is the whole batch's mean when the microbatches are equal (RunConfig makes them so); so
the two agree up to summation order. With D data-parallel replicas the global batch is batch_size x D rows and
measured.json's losses are replica 0's, on its own rows: the reference trains on the global batch (the replicas'
averaged gradients are exactly that) and reports the loss on replica 0's rows.
"""

from __future__ import annotations

import torch

from pipesim.ir import Schedule
from pipesim_executor.config import RunConfig
from pipesim_executor.rank.model import model_parts, split_stages
from pipesim_executor.rank.setup import make_optimizer


def reference_losses(config: RunConfig) -> list[float]:
    """Each step's loss (warm-up steps first, as measured.json lists them) of the run's model trained in one
    process on the CPU in fp32."""
    training, replicas = config.training, config.pipeline.data_parallel
    layers, make_batch, loss_fn = model_parts(config.model, training.seed)
    model = torch.nn.Sequential(*layers)
    optimizer = make_optimizer(config, [p for p in model.parameters() if p.requires_grad])
    rows = training.batch_size  # replica 0's rows of the global batch
    losses = []
    for step in range(training.warmup_steps + training.steps):
        inputs, targets = make_batch(training.batch_size * replicas, training.seed, step)
        optimizer.zero_grad(set_to_none=True)
        output = model(inputs)
        loss_fn(output, targets).backward()
        with torch.no_grad():
            losses.append(float(loss_fn(output[:rows], targets[:rows])))
        optimizer.step()
    return losses


def parameter_bytes_per_rank(config: RunConfig, schedule: Schedule) -> list[int]:
    """Bytes of the fp32 parameters each pipeline rank holds: the stages the schedule places on it, cut as the
    ranks cut them (pipesim_executor.rank.model.split_stages)."""
    layers, _, _ = model_parts(config.model, config.training.seed)
    stages = split_stages(layers, schedule.num_stages, config.stage_split(schedule.num_stages))
    sizes = [0] * schedule.num_ranks
    for stage, module in enumerate(stages):
        params = (p for p in module.parameters() if p.requires_grad)
        sizes[schedule.stage_to_rank[stage]] += sum(p.numel() * p.element_size() for p in params)
    return sizes
