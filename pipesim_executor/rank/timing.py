"""One clock for all ranks, and the measured timeline assembled from per-rank records.

On the CPU a mark is `time.perf_counter()` (CLOCK_MONOTONIC on Linux: one
clock shared by every process on a machine). On a GPU a mark is a CUDA event
on the compute stream, resolved after the step against an anchor event whose
GPU time is known on the host clock: this times what the GPU did, not when the
host queued it, without synchronising per action (`CudaClock` says how the
anchor is taken). Across machines each rank's offset to rank 0 comes from a
ping-pong exchange.

The assembly functions are pure Python (no torch) so that tests and the
launcher can use them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from pipesim.ir import Action, CommAction, parse_entry
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

    def mark_when_done(self, work: Any) -> None:
        """The host cannot be told when an async collective ends: None, and the caller stamps it with `mark` once
        it sees the work complete (pipesim_executor.rank.grad_sync polls)."""
        return None

    def finish_step(self) -> None:
        pass

    def resolve(self, marker: float) -> float:
        return marker


class CudaClock:
    """Marks are CUDA events; `resolve` is valid after `finish_step` and until the next `begin_step`.

    The anchor ties GPU time to the host clock once per step: the device is synchronised, an event recorded, and
    the host clock read only after *that event* has completed. Reading it right after `record()` would assume the
    GPU executes the event at once; on a GPU shared by several processes (staged ranks) the event can wait out
    another process's time slice, up to about a millisecond, and every time of this rank's step would move by
    that wait. After the event's own synchronize the host reading is late by the wake-up latency alone
    (microseconds), whatever the other processes do.

    `cuda` is the `torch.cuda` module (a fake one in tests); `host_ms` the host clock (`now_ms`).
    """

    def __init__(self, device: Any, cuda: Any = None, host_ms: Callable[[], float] = now_ms) -> None:
        if cuda is None:
            import torch

            cuda = torch.cuda
        self._cuda, self._device, self._host_ms = cuda, device, host_ms
        self._anchor: Any = None
        self._anchor_ms = 0.0
        self._side_stream: Any = None  # where collectives' end events are recorded (`mark_when_done`)

    def begin_step(self) -> None:
        self._cuda.synchronize(self._device)
        anchor = self._cuda.Event(enable_timing=True)
        anchor.record()
        anchor.synchronize()  # the host reads its clock once the GPU has passed the anchor, not when it queued it
        self._anchor, self._anchor_ms = anchor, self._host_ms()

    def mark(self) -> Any:
        event = self._cuda.Event(enable_timing=True)
        event.record()
        return event

    def mark_when_done(self, work: Any) -> Any:
        """An event that completes when the async collective `work` does, on the GPU.

        NCCL runs a collective on its own stream, and the host runs ahead of the GPU: the moment the host sees
        the work complete says nothing of when it completed. A side stream is made to wait for the collective's
        end (`work.wait()` inside a stream context makes that stream wait, not the host) and records an event
        right after, so the event's time is the collective's end. Call it right after launching the collective:
        the side stream holds nothing else, so its event cannot be delayed by other work.
        """
        if self._side_stream is None:
            self._side_stream = self._cuda.Stream(self._device)
        with self._cuda.stream(self._side_stream):
            work.wait()
            event = self._cuda.Event(enable_timing=True)
            event.record()
        return event

    def finish_step(self) -> None:
        self._cuda.synchronize(self._device)

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


def step_time_ms(records: Sequence[dict[str, Any]], offsets: Sequence[float] | None = None) -> float:
    """One step's time as a run measures it: from the earliest process's start to the latest process's end
    (`records`: every process's record of the same step, "start" and "end" on its clock; `offsets`: each clock's
    offset to rank 0's, none on one machine). The one rule: measured.json's step times and the unit profile's
    in-situ steps (pipesim_executor.rank.calibrate.pipeline_steps) both take it."""
    shift = offsets if offsets is not None else [0.0] * len(records)
    return max(r["end"] + shift[p] for p, r in enumerate(records)) - min(
        r["start"] + shift[p] for p, r in enumerate(records)
    )


def assemble_measured(
    num_ranks: int,
    schedule_name: str,
    per_rank_steps: Sequence[Sequence[dict[str, Any]]],
    offsets: Sequence[float],
    meta: dict[str, Any] | None = None,
) -> tuple[Timeline, list[float]]:
    """The measured Timeline (steps 0..n-1, ms from each step's start) and each step's time.

    `per_rank_steps[p]` lists process p's measured steps in order, each a dict with
    absolute times on its clock: "start", "end" (step), "spans" as
    [action text, start, end] and "comm" as [kind, peer, action text, start, end].
    With data parallelism there are num_ranks x replicas processes: process p is pipeline rank p mod num_ranks of
    replica p // num_ranks, and its spans carry both (`Span.rank`, `Span.replica`).
    A step starts at the earliest process's start and ends at the latest process's end.
    """
    counts = {len(steps) for steps in per_rank_steps}
    if len(counts) != 1:
        raise ValueError(f"ranks recorded different numbers of steps: {sorted(counts)}")
    if len(per_rank_steps) % num_ranks:
        raise ValueError(f"{len(per_rank_steps)} processes are not whole replicas of {num_ranks} ranks")
    spans: list[Span] = []
    comm: list[CommSpan] = []
    step_times: list[float] = []
    for step in range(counts.pop()):
        records = [steps[step] for steps in per_rank_steps]
        origin = min(rec["start"] + offsets[p] for p, rec in enumerate(records))
        step_times.append(step_time_ms(records, offsets))
        for process, rec in enumerate(records):
            rank, replica = process % num_ranks, process // num_ranks
            shift = offsets[process] - origin
            for text, start, end in rec["spans"]:
                spans.append(Span(rank, Action.parse(text), start + shift, end + shift, step, replica))
            for kind, peer, text, start, end in rec["comm"]:
                if kind == "send" and end - start < MIN_SEND_WAIT_MS:
                    continue
                comm.append(CommSpan(rank, kind, peer, _comm_action(text), start + shift, end + shift, step, replica))
    timeline = Timeline(num_ranks, tuple(spans), "measured", schedule_name, tuple(comm), dict(meta or {}))
    return timeline, step_times


def _comm_action(text: str) -> Action | CommAction:
    """A transfer's compute action (2F0), or a copy's own entry (0OFFLOAD3, as the simulator records it)."""
    entry = parse_entry(text)
    if not isinstance(entry, (Action, CommAction)):
        raise ValueError(f"a comm record names {text!r}, neither an action nor a memory move")
    return entry
