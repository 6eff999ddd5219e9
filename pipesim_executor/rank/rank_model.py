"""A rank's share of the model: its stages' runners, every stage's boundary shapes and its stash sizes.

`build_rank_model` builds the whole layer list on every rank (same seed, same weights) and keeps this rank's
stages; with pipelines in both directions (DualPipe) the model is cut into one chain's stages and stage s holds
piece s mod chain, each direction its own copy of the weights (pipesim_executor.rank.weight_copies sums their
gradients).
"""

from __future__ import annotations

from copy import deepcopy
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from pipesim.ir import Schedule
from pipesim_executor.config import ModelConfig
from pipesim_executor.rank.stage import StageRunner
from pipesim_executor.seq_cut import data_microbatches, token_bounds


@dataclass
class RankModel:
    """This rank's stages, the boundary shapes of all stages, and per-stage stash sizes."""

    runners: dict[int, StageRunner]
    shapes: list[tuple[torch.Size, torch.Size]]
    stash_bytes: dict[int, tuple[int, int, int]]
    make_batch: Any = (
        None  # (batch_size, seed, step) -> (inputs, targets): pipesim_executor.rank.model.model_parts' maker
    )
    wire_dtype: torch.dtype = torch.float32  # of the tensors that cross between ranks
    split_points: tuple[int, ...] = ()  # where each stage after the first starts (unit indices)
    copies: Any = None  # how OFFLOAD and RELOAD move a stash (None: pipesim_executor.rank.offload.HostCopies)
    seq_bounds: tuple[int, ...] | None = None  # where each sequence chunk starts, and the end (Seq1F1B)

    def parameters(self) -> list[torch.nn.Parameter]:
        return [p for stage in sorted(self.runners) for p in self.runners[stage].parameters()]


def build_rank_model(
    schedule: Schedule,
    model_config: ModelConfig,
    *,
    seed: int,
    microbatch_size: int,
    rank: int,
    device: torch.device,
    recompute: bool = False,
    dtype: str = "fp32",
) -> RankModel:
    """Build the full layer list (same weights on every rank), keep this rank's stages, move them to `device`.

    dtype "bf16": the stages compute under autocast and hand bfloat16 tensors to other ranks
    (pipesim_executor.rank.stage)."""
    from pipesim_executor.rank.model import model_parts, split_stages, stage_io_shapes, stage_starts
    from pipesim_executor.rank.stage import measure_stash_bytes, tensor_bytes

    layers, make_batch, loss = model_parts(model_config, seed)
    chain = schedule.pipeline_stages
    # the planner's cut of the model (`ModelConfig.stage_split`), one chain of stages (DualPipe copies it per direction)
    starts = stage_starts(layers, chain, model_config.stage_split(chain, microbatch_size, recompute))
    pieces = split_stages(layers, chain, starts)
    piece_shapes = stage_io_shapes(pieces, model_config, microbatch_size, make_batch)
    shapes = [piece_shapes[s % chain] for s in range(schedule.num_stages)]
    sample, target = make_batch(microbatch_size, seed, 0)
    runners, stash_bytes = {}, {}
    half = torch.bfloat16 if dtype == "bf16" else None
    wire = half or torch.float32
    used: set[int] = set()
    for stage in schedule.stages_of_rank(rank):
        piece = stage % chain
        module = pieces[piece] if piece not in used else deepcopy(pieces[piece])  # a second copy here
        used.add(piece)
        module = module.to(device)
        runner = StageRunner(
            stage,
            module,
            piece == 0,
            piece == chain - 1,
            loss,
            1.0 / data_microbatches(schedule),  # a sequence chunk's loss is also weighed by its tokens (StageRunner)
            recompute,
            autocast_dtype=half,
            wire_dtype=wire,
        )
        x = sample.to(device) if piece == 0 else torch.zeros(shapes[stage][0], device=device)
        activation, weight = measure_stash_bytes(runner, x, target.to(device) if runner.is_last else None)
        stash_bytes[stage] = (activation, weight, tensor_bytes(x))
        runners[stage] = runner
    del pieces
    bounds = token_bounds(model_config, schedule) if schedule.seq_chunks > 1 else None
    return RankModel(runners, shapes, stash_bytes, make_batch, wire, starts, seq_bounds=bounds)


def microbatches(batch: Tensor, num_microbatches: int, device: torch.device) -> list[Tensor]:
    return [chunk.to(device) for chunk in batch.chunk(num_microbatches)]
