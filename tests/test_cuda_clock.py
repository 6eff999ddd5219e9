"""The CUDA clock's arithmetic and the GPU timing of the gradient all-reduce, with fake events (no GPU needed).

`tests/helpers/fake_cuda.py` is a GPU whose every event time is known, so each test states what a real GPU would
have done and checks that the clock resolves every marker to that GPU time on the host clock.
"""

from __future__ import annotations

import pytest
import torch

from pipesim.ir import Action
from pipesim.schedules import build_schedule
from pipesim_executor.rank import grad_sync as grad_sync_module
from pipesim_executor.rank.grad_sync import GradSync
from pipesim_executor.rank.stage import StageRunner
from pipesim_executor.rank.timing import CudaClock, HostClock
from tests.helpers.fake_cuda import FakeCollective, FakeGpu

WAKE_MS = 0.005


def _clock(gpu: FakeGpu) -> CudaClock:
    return CudaClock("cuda:0", cuda=gpu, host_ms=gpu.host)


def test_marks_resolve_to_gpu_times_while_the_host_runs_ahead() -> None:
    """The host queues three 5 ms kernels in microseconds; their marks resolve to when the GPU ran them."""
    gpu = FakeGpu(WAKE_MS)
    clock = _clock(gpu)
    clock.begin_step()
    marks, truth = [], []
    for _ in range(3):
        marks.append(clock.mark())
        start, end = gpu.kernel(5.0)
        gpu.host_work(0.01)
        truth.append((start, end))
    marks.append(clock.mark())
    clock.finish_step()
    resolved = [clock.resolve(m) for m in marks]
    expected = [start for start, _ in truth] + [truth[-1][1]]
    assert resolved == pytest.approx(expected, abs=2 * WAKE_MS)
    assert resolved[-1] - resolved[0] == pytest.approx(15.0, abs=1e-9)  # the GPU's time, not the host's 0.03 ms


def test_anchor_waiting_for_another_process_time_slice_does_not_shift_the_step() -> None:
    """Staged ranks share a GPU: the anchor event waits 1 ms for another process's time slice. The clock reads the
    host time after the anchor completed, so times stay right; reading it right after record() (the old clock)
    put every time of the step 1 ms early."""
    gpu = FakeGpu(WAKE_MS)
    clock = _clock(gpu)
    gpu.slice_wait_ms = 1.0  # whatever the GPU runs next waits 1 ms: the anchor
    clock.begin_step()
    first = clock.mark()
    start, end = gpu.kernel(2.0)
    last = clock.mark()
    clock.finish_step()
    assert clock.resolve(first) == pytest.approx(start, abs=2 * WAKE_MS)
    assert clock.resolve(last) == pytest.approx(end, abs=2 * WAKE_MS)


def test_each_step_has_its_own_anchor() -> None:
    gpu = FakeGpu(WAKE_MS)
    clock = _clock(gpu)
    for step in range(3):
        gpu.host_work(7.0 * step)
        clock.begin_step()
        mark = clock.mark()
        start, _ = gpu.kernel(1.0)
        clock.finish_step()
        assert clock.resolve(mark) == pytest.approx(start, abs=2 * WAKE_MS)


def test_collective_end_is_its_gpu_end_not_when_the_host_looked() -> None:
    """A 3 ms all-reduce beside 10 ms of compute: its end marker resolves to the reduction's end on the GPU. A mark
    taken when the host saw it complete would resolve to where the compute stream was at that point: 10 ms in."""
    gpu = FakeGpu(WAKE_MS)
    clock = _clock(gpu)
    clock.begin_step()
    collective = FakeCollective(gpu, 3.0)
    end_marker = clock.mark_when_done(collective)
    gpu.kernel(10.0)
    gpu.host_work(4.0)  # the host looks after the reduction ended
    assert collective.is_completed()
    seen_marker = clock.mark()  # the old way: a compute-stream event at the poll
    clock.finish_step()
    assert clock.resolve(end_marker) == pytest.approx(collective.end, abs=2 * WAKE_MS)
    assert clock.resolve(seen_marker) > collective.end + 6.0


def test_host_clock_leaves_collective_ends_to_the_caller() -> None:
    assert HostClock().mark_when_done(object()) is None


def _grad_sync() -> tuple[GradSync, Action]:
    schedule = build_schedule("1f1b", 2, 2)
    module = torch.nn.Linear(4, 4)
    runner = StageRunner(0, module, True, False, None, 0.5)
    for p in module.parameters():
        p.grad = torch.ones_like(p)
    sync = GradSync(schedule, 0, {0: runner}, group=None, replicas=2)
    last_backward = [a for a in schedule.actions[0] if a.kind.value == "B"][-1]
    return sync, last_backward


def test_grad_sync_records_the_reduction_on_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a GPU clock the all-reduce's span runs from the bucket being ready to the reduction's GPU end, though
    the compute stream ran 10 ms past it and the host polled late."""
    gpu = FakeGpu(WAKE_MS)
    clock = _clock(gpu)
    launched: list[FakeCollective] = []

    def all_reduce(tensor, group=None, async_op=False):
        launched.append(FakeCollective(gpu, 3.0))
        return launched[-1]

    monkeypatch.setattr(grad_sync_module.dist, "all_reduce", all_reduce)
    sync, action = _grad_sync()
    clock.begin_step()
    gpu.kernel(1.0)  # the backward that made the gradients
    sync.after(action, clock)
    gpu.kernel(10.0)
    gpu.host_work(20.0)
    sync.poll(clock)
    comm: list = []
    sync.finish(clock, comm)
    clock.finish_step()
    assert len(comm) == len(launched) == 1
    kind, peer, recorded_action, start, end = comm[0]
    assert (kind, peer, recorded_action) == ("allreduce", 2, action)
    assert clock.resolve(start) == pytest.approx(launched[0].start, abs=2 * WAKE_MS)
    assert clock.resolve(end) == pytest.approx(launched[0].end, abs=2 * WAKE_MS)


def test_grad_sync_on_the_host_clock_stamps_the_end_when_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """gloo: the host clock's end is when the rank saw the work complete (poll), the CPU path as it was."""

    class Done:
        waited = False

        def is_completed(self) -> bool:
            return True

        def wait(self) -> None:
            self.waited = True

    work = Done()
    monkeypatch.setattr(grad_sync_module.dist, "all_reduce", lambda tensor, group=None, async_op=False: work)
    sync, action = _grad_sync()
    clock = HostClock()
    sync.after(action, clock)
    sync.poll(clock)
    comm: list = []
    sync.finish(clock, comm)
    assert work.waited and comm[0][3] <= comm[0][4]
