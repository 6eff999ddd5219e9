"""DualPipe's weight copies: each direction's stage j holds its own copy of the model's piece j (the schedule's
`pipelines`: stage c x chain + j of every direction c), on different ranks. Each copy accumulates the gradients of
its own direction's microbatches; summed before the optimizer step, both copies get the whole batch's gradient,
and the same optimizer step on the same weights keeps them equal: training is the single-copy model's.

The sum is one all-reduce per group of ranks holding copies of the same pieces (DualPipe: rank r and rank
p-1-r hold pieces r and p-1-r each), every piece's gradients flattened in piece order. Every process creates
every group, in one order (torch.distributed.new_group's rule).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from pipesim.ir import Action, Schedule


def copy_holders(schedule: Schedule) -> dict[int, tuple[int, ...]]:
    """Per piece of the model (a chain's stage index), the ranks holding a copy, one per direction."""
    chain = schedule.pipeline_stages
    return {
        piece: tuple(schedule.stage_to_rank[c * chain + piece] for c in range(schedule.pipelines))
        for piece in range(chain)
    }


class WeightCopies:
    """Sums the gradients of a rank's weight copies with their other copies' at the end of each step (the
    runtime's `grad_sync` slot: nothing per action, everything in `finish`)."""

    def __init__(self, schedule: Schedule, rank: int, runners: dict[int, Any], timeout_s: float, device: Any):
        holders = copy_holders(schedule)
        if any(len(set(ranks)) != len(ranks) for ranks in holders.values()):
            raise ValueError("two copies of one piece on one rank: the weight copies need them on different ranks")
        chain = schedule.pipeline_stages
        self.device = device
        self.groups: list[tuple[Any, list[torch.nn.Parameter]]] = []
        for ranks in sorted({tuple(sorted(r)) for r in holders.values()}):
            group = dist.new_group(list(ranks), timeout=timedelta(seconds=timeout_s))
            if rank not in ranks:
                continue
            mine = sorted(stage for stage in runners if tuple(sorted(holders[stage % chain])) == ranks)
            params = [p for stage in sorted(mine, key=lambda s: s % chain) for p in runners[stage].parameters()]
            self.groups.append((group, params))
            dist.all_reduce(torch.zeros(1, device=device), group=group)  # connect before timing

    def poll(self, clock: Any) -> None:
        pass

    def after(self, action: Action, clock: Any) -> None:
        pass

    def finish(self, clock: Any, comm: list) -> None:
        """Every copy's gradient becomes the sum over its copies (a missing gradient counts as zeros)."""
        for group, params in self.groups:
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat, group=group)
            offset = 0
            for p in params:
                n = p.numel()
                p.grad = flat[offset : offset + n].view_as(p).clone()
                offset += n
