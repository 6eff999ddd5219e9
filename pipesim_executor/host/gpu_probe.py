"""How many CUDA GPUs torch sees on this machine, asked without importing torch here, and why none when none.

The launcher (and the app, which imports it) must not load torch: a probe subprocess asks torch itself, which
also knows whether this torch build has CUDA at all and honours CUDA_VISIBLE_DEVICES. A machine without a GPU
device node (`/dev/nvidiaN`, or `/dev/dxg` under WSL2, where GPUs have no nvidia nodes) is answered at once.

Zero GPUs is an answer with a reason. Where a device node exists but the probe found no GPU (it failed, timed
out, this torch is a CPU build, CUDA_VISIBLE_DEVICES hides them, the driver refused), `GpuProbe.reason` says
which, so that `--device auto` falling back to the CPU is said out loud and `--device cuda` is refused naming
the cause (pipesim_executor.host.checks).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PROBE_TIMEOUT_S = 120.0  # a first CUDA initialisation can take tens of seconds; a hung driver never answers

# The probe's program: one JSON line. torch.cuda.init() raises the driver's own reason when CUDA is unusable.
PROBE = """
import json, os, torch
info = {"count": 0, "torch": torch.__version__, "cuda": torch.version.cuda,
        "visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "error": None}
try:
    info["count"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if info["count"] == 0 and torch.version.cuda:
        torch.cuda.init()
except Exception as error:
    info["error"] = f"{type(error).__name__}: {error}".splitlines()[0]
print(json.dumps(info))
"""


@dataclass(frozen=True)
class GpuProbe:
    """What the probe found: `count` GPUs; the device nodes that say a GPU may be here; and when it found none
    though a node exists, what went wrong (`error`) and what torch it asked (`torch_version`, `torch_cuda`:
    None for a CPU build; `visible`: CUDA_VISIBLE_DEVICES)."""

    count: int
    device_nodes: tuple[str, ...] = ()
    error: str | None = None
    torch_version: str | None = None
    torch_cuda: str | None = None
    visible: str | None = None

    @property
    def gpu_seems_present(self) -> bool:
        """A device node exists but no GPU was found: the case that must not pass in silence."""
        return self.count == 0 and bool(self.device_nodes)

    def reason(self) -> str:
        """Why no GPU, in one clause."""
        if not self.device_nodes:
            return "this machine has no NVIDIA device (/dev/nvidiaN, /dev/dxg)"
        if self.error:
            return f"the GPU probe failed: {self.error}"
        if self.torch_version and not self.torch_cuda:
            return f"this torch ({self.torch_version}) is a CPU build: install a CUDA build of torch"
        if self.visible is not None and self.visible.strip() in ("", "-1"):
            return f"CUDA_VISIBLE_DEVICES={self.visible!r} hides every GPU"
        return "torch sees no usable CUDA device"

    def warning(self) -> str | None:
        """One line for `--device auto` falling back to the CPU though a GPU seems present; None otherwise."""
        if not self.gpu_seems_present:
            return None
        return f"{', '.join(self.device_nodes)} exist(s) but {self.reason()}; device auto runs on the CPU"


def device_nodes(dev: Path = Path("/dev")) -> tuple[str, ...]:
    """The device nodes that say an NVIDIA GPU may be here: /dev/nvidiaN, and /dev/dxg (WSL2)."""
    nodes = sorted(str(path) for path in dev.glob("nvidia[0-9]*"))
    if (dev / "dxg").exists():
        nodes.append(str(dev / "dxg"))
    return tuple(nodes)


def probe_gpus(
    dev: Path = Path("/dev"),
    timeout_s: float = PROBE_TIMEOUT_S,
    run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
) -> GpuProbe:
    """Ask torch in a subprocess how many GPUs it sees (at once 0 without a device node); never raises."""
    nodes = device_nodes(dev)
    if not nodes:
        return GpuProbe(0)
    try:
        answer = run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return GpuProbe(0, nodes, f"no answer from torch within {timeout_s:g} s (a hung driver or CUDA init)")
    except OSError as error:
        return GpuProbe(0, nodes, f"could not start {sys.executable}: {error.strerror or error}")
    if answer.returncode != 0:
        lines = (answer.stderr or "").strip().splitlines()
        return GpuProbe(0, nodes, f"exit status {answer.returncode}: {lines[-1] if lines else 'no output'}")
    try:
        info = json.loads((answer.stdout or "").strip().splitlines()[-1])
        count = info["count"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"count {count!r}")
    except (ValueError, IndexError, KeyError, TypeError) as error:
        return GpuProbe(0, nodes, f"unreadable answer ({error}): {(answer.stdout or '').strip()[-200:]!r}")
    text = {key: info.get(key) if isinstance(info.get(key), str) else None for key in ("error", "torch", "cuda")}
    visible = info.get("visible") if isinstance(info.get("visible"), str) else None
    return GpuProbe(count, nodes, None if count else text["error"], text["torch"], text["cuda"], visible)
