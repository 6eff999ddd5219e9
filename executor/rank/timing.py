"""One clock for all ranks, and the measured timeline assembled from per-rank records.

On the CPU a mark is `time.perf_counter()` (CLOCK_MONOTONIC on Linux: one
clock shared by every process on a machine). On a GPU a mark is a CUDA event
on the compute stream, resolved after the step against an anchor event taken
right after a synchronize, when host and device time agree: this times what
the GPU did, not when the host queued it, without synchronising per action.
Across machines each rank's offset to rank 0 comes from a ping-pong exchange.

The assembly functions are pure Python (no torch) so that tests and the
launcher can use them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from pipesim.ir import Action
from pipesim.records import CommSpan, Span, Timeline

# Recv waits are kept even when zero (they say the data was already there); send waits only when they blocked.
MIN_SEND_WAIT_MS = 0.05


def now_ms() -> float:
    return time.perf_counter() * 1e3


class HostClock:
    """Marks are host times in ms."""

    def begin_step(self) -> None:
        pass

    def mark(self) -> float:
        return now_ms()

    def finish_step(self) -> None:
        pass

    def resolve(self, marker: float) -> float:
        return marker


class CudaClock:
    """Marks are CUDA events; `resolve` is valid after `finish_step` and until the next `begin_step`."""

    def __init__(self, device: Any) -> None:
        import torch

        self._torch, self._device = torch, device
        self._anchor = None
        self._anchor_ms = 0.0

    def begin_step(self) -> None:
        self._torch.cuda.synchronize(self._device)
        self._anchor = self._torch.cuda.Event(enable_timing=True)
        self._anchor.record()
        self._anchor_ms = now_ms()

    def mark(self) -> Any:
        event = self._torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def finish_step(self) -> None:
        self._torch.cuda.synchronize(self._device)

    def resolve(self, marker: Any) -> float:
        return self._anchor_ms + self._anchor.elapsed_time(marker)


def make_clock(device: Any) -> HostClock | CudaClock:
    return CudaClock(device) if getattr(device, "type", "cpu") == "cuda" else HostClock()


def offset_from_samples(samples: Sequence[tuple[float, float, float]]) -> float:
    """Offset of rank 0's clock minus this rank's, from (sent, rank-0 time, received) triples.

    NTP's estimate from the exchange with the shortest round trip (least queuing).
    """
    sent, remote, received = min(samples, key=lambda s: s[2] - s[0])
    return remote - (sent + received) / 2


def estimate_clock_offsets(group: Any, rank: int, world_size: int, rounds: int = 8) -> list[float]:
    """Each rank's clock offset to rank 0 (ms; add it to a rank's times). Rank 0 gets the full list.

    Ranks ping-pong with rank 0 one at a time over the (gloo) control group.
    """
    import torch
    import torch.distributed as dist

    offsets = [0.0] * world_size
    buffer = torch.zeros(1, dtype=torch.float64)
    for peer in range(1, world_size):
        if rank == 0:
            for _ in range(rounds):
                dist.recv(buffer, src=peer, group=group)
                buffer.fill_(now_ms())
                dist.send(buffer, dst=peer, group=group)
            dist.recv(buffer, src=peer, group=group)
            offsets[peer] = float(buffer.item())
        elif rank == peer:
            samples = []
            for _ in range(rounds):
                sent = now_ms()
                buffer.fill_(sent)
                dist.send(buffer, dst=0, group=group)
                dist.recv(buffer, src=0, group=group)
                samples.append((sent, float(buffer.item()), now_ms()))
            offsets[rank] = offset_from_samples(samples)
            buffer.fill_(offsets[rank])
            dist.send(buffer, dst=0, group=group)
    return offsets


def assemble_measured(
    num_ranks: int,
    schedule_name: str,
    per_rank_steps: Sequence[Sequence[dict[str, Any]]],
    offsets: Sequence[float],
    meta: dict[str, Any] | None = None,
) -> tuple[Timeline, list[float]]:
    """The measured Timeline (steps 0..n-1, ms from each step's start) and each step's time.

    `per_rank_steps[r]` lists rank r's measured steps in order, each a dict with
    absolute times on rank r's clock: "start", "end" (step), "spans" as
    [action text, start, end] and "comm" as [kind, peer, action text, start, end].
    A step starts at the earliest rank's start and ends at the latest rank's end.
    """
    counts = {len(steps) for steps in per_rank_steps}
    if len(counts) != 1:
        raise ValueError(f"ranks recorded different numbers of steps: {sorted(counts)}")
    spans: list[Span] = []
    comm: list[CommSpan] = []
    step_times: list[float] = []
    for step in range(counts.pop()):
        records = [steps[step] for steps in per_rank_steps]
        origin = min(rec["start"] + offsets[r] for r, rec in enumerate(records))
        step_times.append(max(rec["end"] + offsets[r] for r, rec in enumerate(records)) - origin)
        for rank, rec in enumerate(records):
            shift = offsets[rank] - origin
            for text, start, end in rec["spans"]:
                spans.append(Span(rank, Action.parse(text), start + shift, end + shift, step))
            for kind, peer, text, start, end in rec["comm"]:
                if kind == "send" and end - start < MIN_SEND_WAIT_MS:
                    continue
                comm.append(CommSpan(rank, kind, peer, Action.parse(text), start + shift, end + shift, step))
    timeline = Timeline(num_ranks, tuple(spans), "measured", schedule_name, tuple(comm), dict(meta or {}))
    return timeline, step_times
