"""A fake `torch.cuda` for the clock tests: one host clock, one GPU, streams and events with known times.

Each stream runs its work in order, a piece at a time (streams run side by side, as a collective's stream runs
beside the compute stream); a piece starts once the host has queued it and its stream is free.
`slice_wait_ms` is how long the GPU is busy with another process's time slice before it gets to the next piece
(staged ranks sharing one GPU). Host-side calls cost nothing unless they wait: `synchronize`
moves the host clock to when the GPU is done, plus `wake_ms` (the latency of waking up a waiting thread).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any


class FakeGpu:
    def __init__(self, wake_ms: float = 0.005) -> None:
        self.host_ms = 1000.0  # the host clock (now_ms stand-in)
        self.wake_ms = wake_ms
        self.slice_wait_ms = 0.0  # another process's time slice the next piece of work waits out
        self.free_at = 0.0  # when the GPU finishes everything queued so far
        self.current: FakeStream | None = None
        self.default = FakeStream(self)
        self.current = self.default

    # --- what a test does ------------------------------------------------------------------------------------
    def host(self) -> float:
        return self.host_ms

    def host_work(self, ms: float) -> None:
        """The host spends `ms` (queuing kernels, Python)."""
        self.host_ms += ms

    def kernel(self, ms: float, stream: FakeStream | None = None) -> tuple[float, float]:
        """Queue a kernel of `ms` on the current stream; returns its (start, end) GPU time."""
        return (stream or self.current).run(ms)

    # --- the torch.cuda interface CudaClock uses ---------------------------------------------------------------
    def synchronize(self, device: Any = None) -> None:
        self.host_ms = max(self.host_ms, self.free_at) + self.wake_ms

    def Event(self, enable_timing: bool = False) -> FakeEvent:  # noqa: N802 - torch.cuda.Event's name
        assert enable_timing, "CudaClock's events must time"
        return FakeEvent(self)

    def Stream(self, device: Any = None) -> FakeStream:  # noqa: N802 - torch.cuda.Stream's name
        return FakeStream(self)

    @contextmanager
    def stream(self, stream: FakeStream):
        previous, self.current = self.current, stream
        try:
            yield
        finally:
            self.current = previous


class FakeStream:
    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu
        self.done_at = 0.0  # when this stream's queued work ends
        self.waits_for = 0.0  # GPU time before which the next piece of work may not start (stream waits)

    def run(self, ms: float) -> tuple[float, float]:
        gpu = self.gpu
        start = max(gpu.host_ms, self.done_at, self.waits_for) + gpu.slice_wait_ms
        gpu.slice_wait_ms = 0.0
        end = start + ms
        self.done_at = end
        gpu.free_at = max(gpu.free_at, end)
        return start, end


class FakeEvent:
    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu
        self.time: float | None = None

    def record(self, stream: FakeStream | None = None) -> None:
        self.time = (stream or self.gpu.current).run(0.0)[1]

    def synchronize(self) -> None:
        assert self.time is not None, "synchronize on an event never recorded"
        self.gpu.host_ms = max(self.gpu.host_ms, self.time) + self.gpu.wake_ms

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.time is not None and end.time is not None, "elapsed_time needs two recorded events"
        assert self.gpu.host_ms >= max(self.time, end.time), "elapsed_time before both events completed"
        return end.time - self.time


class FakeCollective:
    """An async collective on its own stream: it runs `ms` once its input is ready (queued after the current
    stream's work). `wait()` makes the current stream wait for its end, as NCCL's Work.wait does; the host does
    not wait. `is_completed()` answers for the host's present time."""

    def __init__(self, gpu: FakeGpu, ms: float) -> None:
        self.gpu = gpu
        ready = gpu.current.run(0.0)[1]
        comm = FakeStream(gpu)
        comm.waits_for = ready
        self.start, self.end = comm.run(ms)

    def wait(self) -> None:
        stream = self.gpu.current
        stream.waits_for = max(stream.waits_for, self.end)

    def is_completed(self) -> bool:
        return self.gpu.host_ms >= self.end
