"""Which device and transport a run uses: one set of rules, for the launcher and for every rank.

The launcher resolves `auto` before anything starts (so a bad choice is refused at once, and config.json
records what runs); each rank applies the same rules to pick its own GPU. No torch import: the caller
says how many GPUs there are (the launcher asks without loading torch, a rank asks torch).
"""

from __future__ import annotations

import importlib.util
from typing import NamedTuple


class DeviceChoice(NamedTuple):
    """`device` is "cpu" or "cuda"; `transport` is gloo (CPU tensors), nccl (a GPU per rank) or staged
    (ranks share GPUs; transfers go through host memory over gloo)."""

    device: str
    transport: str


def resolve_device(device: str, backend: str, ranks_per_node: int, gpus: int) -> DeviceChoice:
    """auto: CUDA when there is a GPU; nccl with a GPU per rank on the node, staged with fewer; gloo on CPU.

    gloo asked for with CUDA means staged (gloo moves host memory). Impossible combinations raise ValueError
    naming what to choose instead.
    """
    if device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"unknown device {device!r}; valid: auto, cpu, cuda")
    if backend not in ("auto", "gloo", "nccl", "staged"):
        raise ValueError(f"unknown backend {backend!r}; valid: auto, gloo, nccl, staged")
    if device == "cpu" and backend in ("nccl", "staged"):
        raise ValueError(f"backend {backend} moves CUDA tensors; on device cpu use backend gloo (or auto)")
    if device == "cpu" or (device == "auto" and backend == "gloo"):
        return DeviceChoice("cpu", "gloo")
    if device == "cuda" and gpus == 0:
        raise ValueError("device cuda was asked for but torch sees no CUDA GPU; use device cpu (backend gloo)")
    if device == "auto" and gpus == 0:
        if backend in ("nccl", "staged"):
            raise ValueError(f"backend {backend} needs CUDA GPUs and torch sees none; use backend gloo or auto")
        return DeviceChoice("cpu", "gloo")
    if backend == "nccl" and gpus < ranks_per_node:
        raise ValueError(
            f"backend nccl needs one GPU per rank: {ranks_per_node} ranks on this node but {gpus} GPU(s); "
            "use backend staged (ranks share GPUs, transfers go through host memory) or fewer ranks"
        )
    if backend == "auto":
        return DeviceChoice("cuda", "nccl" if gpus >= ranks_per_node else "staged")
    return DeviceChoice("cuda", "nccl" if backend == "nccl" else "staged")


def torch_missing() -> str | None:
    """Why nothing that runs can start here, or None. pipesim installs without torch (`pipesim[run]` adds it):
    the launcher says so before a process starts, rather than torchrun failing in a run's log."""
    if importlib.util.find_spec("torch") is not None:
        return None
    return (
        "torch is not installed here: pip install 'pipesim[run]' (torch 2.11 to 2.13; a torch you installed "
        "yourself is kept)"
    )
