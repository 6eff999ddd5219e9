"""Data parallel: each stage's gradients averaged over its replicas, DDP-style, overlapped with the backward.

D replicas of the pipeline run the same schedule on different rows of the global batch. Pipeline rank p of
every replica holds the same stages, so one process group per pipeline rank (its D copies) carries those
stages' all-reduces. As DDP does:

* a stage's gradients are complete after its last B (or its last W when the backward is split) of the step;
  right then they go out, in buckets of at most `bucket_bytes` (pipesim.cost.collectives.DEFAULT_BUCKET_BYTES, DDP's
  25 MiB; the last parameters first, as they became ready), each one flattened, divided by D and all-reduced
  with `async_op=True`;
* the rank carries on with its remaining actions while the collectives run (gloo's own threads, NCCL's
  stream), and waits for them all at the end of the step, before the optimizer; the averaged buckets are then
  copied back into `.grad`.

Every replica issues the same collectives in the same order (the same schedule), so they always match.
Each all-reduce is recorded like a transfer: ("allreduce", D, the stage's last backward action, start, end),
from its launch (its bucket flattened and ready) to its end: measured.json shows it as a CommSpan of kind
"allreduce" whose `peer` is the number of replicas, and the attribution counts the part of it the rank spent
idle as communication wait. Where the end comes from depends on the clock:

* on the CPU (gloo) the end is when the rank first saw the work complete: polled before each later action,
  or waited at the end of the step;
* on a GPU (NCCL) that would be wrong: the host runs ahead of the GPU, so a poll that finds the work complete
  is stamped with an event on the compute stream, which the GPU reaches only when it gets to the poll's place
  in the stream, long after (or, where the compute stream is behind, the reduction's own end is unknown to
  it). The end is an event on a side stream that waits for the collective itself
  (`CudaClock.mark_when_done`): the reduction's end on the GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from pipesim.cost.collectives import DEFAULT_BUCKET_BYTES
from pipesim.ir import Action, ActionKind, Schedule
from pipesim_executor.rank.stage import StageRunner

ALLREDUCE = "allreduce"  # the comm record's kind (pipesim.sim.data_parallel.ALLREDUCE)


def last_grad_actions(schedule: Schedule, rank: int) -> dict[Action, int]:
    """Action -> stage: the action after which the stage's weight gradients of the step are complete."""
    last: dict[int, Action] = {}
    for action in schedule.actions[rank]:
        if action.kind in (ActionKind.BACKWARD, ActionKind.BACKWARD_WEIGHT):
            last[action.stage] = action
    return {action: stage for stage, action in last.items()}


def buckets(params: Sequence[torch.nn.Parameter], bucket_bytes: int) -> list[list[torch.nn.Parameter]]:
    """Parameters in reverse order (the backward makes the last ones' gradients first), cut into buckets."""
    out: list[list[torch.nn.Parameter]] = []
    size = bucket_bytes
    for param in reversed(list(params)):
        nbytes = param.numel() * param.element_size()
        if size + nbytes > bucket_bytes and (not out or out[-1]):
            out.append([])
            size = 0
        out[-1].append(param)
        size += nbytes
    return out


@dataclass
class _InFlight:
    work: Any
    flat: torch.Tensor
    params: list[torch.nn.Parameter]
    action: Action
    start: Any
    end: Any = None


class GradSync:
    """Launches each stage's bucketed all-reduce after its last backward; `finish` waits and writes the
    averaged gradients back. One per rank, used by the runtime step after step."""

    def __init__(
        self,
        schedule: Schedule,
        rank: int,
        runners: dict[int, StageRunner],
        group: Any,
        replicas: int,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        alone: Sequence[torch.nn.Parameter] = (),
    ) -> None:
        """`alone`: parameters this process holds alone, an expert's under expert parallelism
        (pipesim_executor.rank.moe): their gradient already sums every replica's tokens, so it is divided by D
        and never all-reduced."""
        self.group, self.replicas = group, replicas
        self._last = last_grad_actions(schedule, rank)
        ids = {id(p) for p in alone}
        self._buckets = {
            stage: buckets([p for p in runners[stage].parameters() if id(p) not in ids], bucket_bytes)
            for stage in runners
        }
        self._alone = {stage: [p for p in runners[stage].parameters() if id(p) in ids] for stage in runners}
        self._flight: list[_InFlight] = []

    def after(self, action: Action, clock: Any) -> None:
        """Called after each action: launches the stage's all-reduces if its gradients are now complete."""
        stage = self._last.get(action)
        if stage is None:
            return
        for param in self._alone[stage]:
            if param.grad is not None:
                param.grad.div_(self.replicas)
        for bucket in self._buckets[stage]:
            grads = [torch.zeros_like(p) if p.grad is None else p.grad for p in bucket]
            flat = torch.cat([g.reshape(-1) for g in grads]).div_(self.replicas)
            start = clock.mark()  # the bucket is ready: the collective may start
            work = dist.all_reduce(flat, group=self.group, async_op=True)
            # a GPU clock marks the reduction's own end now; the host clock leaves it to poll / finish
            self._flight.append(_InFlight(work, flat, bucket, action, start, clock.mark_when_done(work)))

    def poll(self, clock: Any) -> None:
        """Stamp the all-reduces that have completed since the last look (never blocks; the host clock only:
        a GPU clock's ends are already marked)."""
        for item in self._flight:
            if item.end is None and item.work.is_completed():
                item.end = clock.mark()

    def finish(self, clock: Any, comm: list) -> None:
        """Wait for every all-reduce of the step, copy the averages into .grad, record each one in `comm`."""
        for item in self._flight:
            # gloo: the host waits; NCCL: the compute stream waits (the copies below run after the reduction)
            item.work.wait()
            if item.end is None:
                item.end = clock.mark()
            offset = 0
            for param in item.params:
                count = param.numel()
                average = item.flat[offset : offset + count].view_as(param)
                if param.grad is None:
                    param.grad = average.clone()
                else:
                    param.grad.copy_(average)
                offset += count
            comm.append((ALLREDUCE, self.replicas, item.action, item.start, item.end))
        self._flight.clear()
