"""Point-to-point transfers between ranks, one implementation per backend.

* gloo: CPU tensors over gloo.
* nccl: one GPU per rank; tensors go GPU to GPU.
* staged: several ranks share a GPU (NCCL refuses two ranks on one device):
  compute on the GPU, transfers through host memory over gloo. The copies
  between GPU and host memory are the actions' own work (`to_wire`,
  `to_compute`, called by the runtime inside an action's span): they occupy
  the rank's stream as its compute does, so the link carries, and the profile
  prices, the host-to-host transfer alone (each copy counted once).

Every directed link (src -> dst) gets its own two-member process group. Within
one group only src sends and only dst receives, and the receiver posts its
receives in the sender's order; so NCCL's in-order matching per communicator is
always right and a receive posted early can never block a send going the other
way (with one group per pair, NCCL serialises both directions on one stream and
an early receive could deadlock against the peer's pending receive).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import Tensor

from pipesim_executor.devices import resolve_device


@dataclass(frozen=True)
class BackendChoice:
    """What `device` and `backend` of a RunConfig resolve to on this machine."""

    transport: str  # gloo | nccl | staged
    device: torch.device

    @property
    def process_group_backend(self) -> str:
        return "nccl" if self.transport == "nccl" else "gloo"


def resolve_backend(
    device: str,
    backend: str,
    local_world_size: int,
    local_rank: int,
    gpu_count: int | None = None,
) -> BackendChoice:
    """This rank's transport and device, by pipesim_executor.devices' rules; a CUDA rank takes GPU local_rank mod
    gpus."""
    gpus = (torch.cuda.device_count() if torch.cuda.is_available() else 0) if gpu_count is None else gpu_count
    choice = resolve_device(device, backend, local_world_size, gpus)
    if choice.device == "cpu":
        return BackendChoice("gloo", torch.device("cpu"))
    return BackendChoice(choice.transport, torch.device("cuda", local_rank % gpus))


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return default if value in (None, "") else int(value)


def init_distributed(choice: BackendChoice, timeout_s: float) -> dist.ProcessGroup:
    """Join torchrun's process group; returns a gloo group over all ranks for control messages."""
    if choice.device.type == "cuda":
        torch.cuda.set_device(choice.device)
    dist.init_process_group(backend=choice.process_group_backend, timeout=timedelta(seconds=timeout_s))
    if choice.process_group_backend == "gloo":
        return dist.group.WORLD
    return dist.new_group(backend="gloo", timeout=timedelta(seconds=timeout_s))


class SendHandle:
    """An isend in flight; keeps its tensor alive until the transfer is done."""

    def __init__(self, work: dist.Work, tensor: Tensor) -> None:
        self._work, self._tensor = work, tensor

    def is_completed(self) -> bool:
        return self._work.is_completed()

    def wait(self) -> None:
        self._work.wait()
        self._tensor = None


class PendingRecv:
    """An irecv in flight; `wait` returns the tensor as it arrived (in host memory when staged:
    `Transport.to_compute` moves it to the GPU)."""

    def __init__(self, work: dist.Work, buffer: Tensor) -> None:
        self._work, self._buffer = work, buffer

    def wait(self) -> Tensor:
        self._work.wait()
        return self._buffer


class Transport:
    """isend/irecv between ranks over one process group per directed link.

    Every rank must construct it with the same `links` (process groups are
    created collectively, in the same order everywhere).

    `rank` and the links are pipeline ranks. With data parallelism (`replicas` > 1) every replica of the
    pipeline gets its own groups: pipeline rank p of replica d is process d * ranks + p, and each process keeps
    the groups of its own replica (`replica`) only; all of them are still created everywhere, in one order.
    """

    def __init__(
        self,
        choice: BackendChoice,
        rank: int,
        links: Iterable[tuple[int, int]],
        timeout_s: float = 600.0,
        *,
        replicas: int = 1,
        replica: int = 0,
        ranks: int = 0,
    ):
        self.choice, self.rank, self.device = choice, rank, choice.device
        self._staged = choice.transport == "staged"
        self.links = sorted({(a, b) for a, b in links if a != b})
        self._groups: dict[tuple[int, int], dist.ProcessGroup | None] = {}
        self._base = replica * ranks  # process number of this replica's pipeline rank 0
        timeout = timedelta(seconds=timeout_s)
        for other in range(replicas):
            for src, dst in self.links:
                base = other * ranks
                group = dist.new_group([base + src, base + dst], backend=choice.process_group_backend, timeout=timeout)
                if other == replica:
                    self._groups[(src, dst)] = group if rank in (src, dst) else None

    def _group(self, src: int, dst: int) -> dist.ProcessGroup:
        group = self._groups.get((src, dst))
        if group is None:
            raise RuntimeError(f"rank {self.rank}: no link {src}->{dst}; links: {self.links}")
        return group

    @property
    def wire_device(self) -> torch.device:
        """Where a message travels from and arrives: host memory when staged, else the compute device."""
        return torch.device("cpu") if self._staged else self.device

    def to_wire(self, tensor: Tensor) -> Tensor:
        """`tensor` where `isend` sends it from: staged, the copy to host memory (the caller times it as part of
        the action that produced it); otherwise the tensor itself."""
        return tensor.detach().to(self.wire_device) if self._staged else tensor

    def to_compute(self, tensor: Tensor) -> Tensor:
        """A received tensor on the compute device: staged, the copy from host memory (part of the consuming
        action); otherwise the tensor itself."""
        return tensor.to(self.device) if tensor.device != self.device else tensor

    def isend(self, tensor: Tensor, dst: int, tag: int) -> SendHandle:
        tensor = tensor.detach().to(self.wire_device).contiguous()  # no copy when the caller did `to_wire`
        group = self._group(self.rank, dst)
        return SendHandle(dist.isend(tensor, dst=self._base + dst, group=group, tag=tag), tensor)

    def irecv(self, shape: torch.Size, dtype: torch.dtype, src: int, tag: int) -> PendingRecv:
        buffer = torch.empty(shape, dtype=dtype, device=self.wire_device)
        work = dist.irecv(buffer, src=self._base + src, group=self._group(src, self.rank), tag=tag)
        return PendingRecv(work, buffer)

    def warm_up(self) -> None:
        """One tiny transfer per link, in one global order, so connections (NCCL communicators are
        created lazily) exist before the first timed step and can never be set up in a crossed order."""
        for src, dst in self.links:
            if self.rank == src:
                self.isend(torch.ones(1, device=self.device), dst, tag=0).wait()
            elif self.rank == dst:
                self.irecv(torch.Size((1,)), torch.float32, src, tag=0).wait()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
