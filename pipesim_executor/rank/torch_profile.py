"""torch.profiler (Kineto) capture of the measured steps, with pipesim's actions labelled as torch labels its own.

torch.distributed.pipelining's runtime (`_PipelineScheduleRuntime._step_microbatches`, torch 2.13) wraps every
action in `record_function(f"PP:{action}")`, e.g. `PP:2F0`, `PP:1SEND_F0`; the executor's runtime does the
same when a run asks for `--torch-profile`, so kernels show under the action that ran them and one importer
(`python -m pipesim import-trace`) reads both. Without the flag nothing here runs: no profiler, no
record_function in the action loop.

Files: `traces/rank{R}.json` (our executor) and `traces/torch-rank{R}.json` (torch's schedule, reference run).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from pipesim.ir import Action
from pipesim_executor.run_files import TRACES_DIR


def action_label(action: Action) -> str:
    """The record_function name torch's runtime gives the same action (`_get_profiler_function_name`)."""
    return f"PP:{action}"


def trace_path(run_dir: Path, rank: int, side: str = "") -> Path:
    """Where a rank's Kineto trace goes: traces/rank0.json, or traces/torch-rank0.json for torch's side."""
    return run_dir / TRACES_DIR / f"{side + '-' if side else ''}rank{rank}.json"


@contextmanager
def profiled(path: Path | None, device: torch.device) -> Iterator[None]:
    """Record everything inside into a Kineto trace at `path`; with `path` None, do nothing at all."""
    if path is None:
        yield
        return
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as recorder:
        yield
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    path.parent.mkdir(parents=True, exist_ok=True)
    recorder.export_chrome_trace(str(path))
