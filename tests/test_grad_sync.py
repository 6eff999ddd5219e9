"""The executor's data-parallel gradient sync, without processes: its all-reduces recorded by a stand-in.

`torch.distributed.all_reduce` is replaced for the test by one that records each call and sums D equal
contributions, so what GradSync launches (how many collectives, of how many bytes, after which action) and what
it writes back are checked directly. The torchrun tests (tests/test_data_parallel.py) check the real thing end to
end, but a tiny model's stage fits one bucket there, so they cannot tell bucketed from unbucketed.
"""

from __future__ import annotations

import inspect
import itertools

import pytest
import torch

from pipesim.cost.collectives import DEFAULT_BUCKET_BYTES, bucket_sizes
from pipesim.ir import Action
from pipesim.schedules import build_schedule
from pipesim.sim.data_parallel import ALLREDUCE as SIMULATED_ALLREDUCE
from pipesim_executor.rank import grad_sync
from pipesim_executor.rank.grad_sync import ALLREDUCE, GradSync

REPLICAS = 4
LAYER_BYTES = 16 * 16 * 4  # one bias-free Linear(16, 16) in fp32


class Runner:
    """What GradSync reads of a StageRunner: the stage's trainable parameters."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module

    def parameters(self) -> list[torch.nn.Parameter]:
        return list(self.module.parameters())


class Clock:
    """A clock that counts its marks (and, as a host clock, leaves an all-reduce's end to poll or finish)."""

    def __init__(self) -> None:
        self.ticks = itertools.count()

    def mark(self) -> int:
        return next(self.ticks)

    def mark_when_done(self, work: object) -> None:
        return None


class Work:
    def is_completed(self) -> bool:
        return True

    def wait(self) -> None:
        return None


@pytest.fixture
def launched(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Bytes of each all-reduce GradSync launches; each sums REPLICAS equal contributions, as D replicas would."""
    sizes: list[int] = []

    def all_reduce(tensor: torch.Tensor, group: object = None, async_op: bool = False) -> Work:
        assert async_op, "gradients are reduced asynchronously, overlapping the remaining backward"
        sizes.append(tensor.numel() * tensor.element_size())
        tensor.mul_(REPLICAS)
        return Work()

    monkeypatch.setattr(grad_sync.dist, "all_reduce", all_reduce)
    return sizes


def _stage(num_layers: int) -> torch.nn.Sequential:
    torch.manual_seed(0)
    layers = torch.nn.Sequential(*(torch.nn.Linear(16, 16, bias=False) for _ in range(num_layers)))
    for index, param in enumerate(layers.parameters()):
        param.grad = torch.full_like(param, float(index + 1))
    return layers


def test_each_stage_goes_out_in_buckets_as_pipesim_prices_them(launched: list[int]) -> None:
    """A stage of 6 layers with 2-layer buckets: 3 all-reduces of one bucket each, the sizes pipesim's
    `bucket_sizes` gives (the simulated step prices exactly these).

    Catches an unbucketed grad sync (one all-reduce of the whole stage: it passes every torchrun test, where a
    tiny model's stage is under one 25 MiB bucket) and buckets cut unlike pipesim's."""
    schedule = build_schedule("1f1b", 2, 2)  # rank 0 holds stage 0; its last backward is 0B1
    stage = _stage(6)
    sync = GradSync(schedule, 0, {0: Runner(stage)}, group=None, replicas=REPLICAS, bucket_bytes=2 * LAYER_BYTES)
    clock = Clock()
    sync.after(Action.parse("0F0"), clock)
    sync.after(Action.parse("0B0"), clock)
    assert launched == []  # the stage's gradients are complete only after its last backward
    sync.after(Action.parse("0B1"), clock)
    assert launched == bucket_sizes(6 * LAYER_BYTES, 2 * LAYER_BYTES) == [2 * LAYER_BYTES] * 3
    records: list[tuple] = []
    sync.finish(clock, records)
    assert [(kind, peer, str(action)) for kind, peer, action, *_ in records] == [(ALLREDUCE, REPLICAS, "0B1")] * 3
    assert ALLREDUCE == SIMULATED_ALLREDUCE  # the measured and the simulated reductions are one kind of span
    for index, param in enumerate(stage.parameters()):  # D equal gradients averaged: each its own value again
        assert torch.equal(param.grad, torch.full_like(param, float(index + 1)))


def test_the_default_bucket_is_the_one_pipesim_prices() -> None:
    """The executor's default bucket size is pipesim's (DDP's 25 MiB), so a cost model's group prices what runs."""
    default = inspect.signature(GradSync).parameters["bucket_bytes"].default
    assert default == DEFAULT_BUCKET_BYTES
