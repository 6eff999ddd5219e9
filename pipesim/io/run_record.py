"""Reading a run folder's files, without the executor: what `pipesim.read_run` returns, and what the executor's
own reader (`pipesim_executor.host.run_folder.load_run`) is built on, so that the folder has one reader.

The folder's layout is the executor's contract (pipesim_executor/host/run_folder.py's docstring): config.json and
schedule.json written before any process starts, measured.json, cost.json, simulated.json, reference.json and
analysis.json by the run, result.json last. Every file is read through `pipesim.io.bounded` (a regular file within
its kind's size limit); anything wrong with one is a ValueError naming it.
"""

from __future__ import annotations

import errno
import os
import stat
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pipesim.cost.model import CostModel
from pipesim.io.cost_file import cost_from_dict
from pipesim.io.formats import read_json, schedule_from_dict, timeline_from_dict
from pipesim.ir import Schedule
from pipesim.limits import MAX_RESULT_BYTES, MAX_SCHEDULE_BYTES, MAX_SMALL_FILE_BYTES, PATH_TYPES, require
from pipesim.records import Timeline

RUN_STATUSES = ("ok", "partial", "failed", "timeout", "cancelled")  # what result.json may say
UNFINISHED = "unfinished"  # no result.json: still running, or its launcher was killed (the executor tells which)
# The bytes each file of a run folder may hold (pipesim.limits); any other file: MAX_RESULT_BYTES.
FILE_LIMITS = {
    "config.json": MAX_SMALL_FILE_BYTES,
    "result.json": MAX_SMALL_FILE_BYTES,
    "schedule.json": MAX_SCHEDULE_BYTES,
}


@dataclass(kw_only=True)
class RunOutputs:
    """What a run wrote besides its config and result (each None or empty when the run did not write it).

    Declared once: the executor's `RunResult` extends it (keyword-only, so its own positional fields come first)
    and copies every field (`dataclasses.fields`), so a new output reaches both."""

    measured: Timeline | None = None
    step_times_ms: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    peak_memory_bytes: list[int] = field(default_factory=list)
    cost: CostModel | None = None
    simulated: Timeline | None = None
    reference: dict[str, Any] | None = None
    analysis: dict[str, Any] | None = None  # pipesim.analysis.attribution's split of the measured step


@dataclass
class RunRecord:
    """A run folder as pipesim reads it: `config` is config.json's document (the executor's RunConfig as JSON),
    `status` result.json's (or UNFINISHED), `measured_step_ms` the median measured step."""

    run_dir: Path
    status: str
    message: str
    config: dict[str, Any]
    schedule: Schedule
    outputs: RunOutputs
    predicted_step_ms: float | None = None
    measured_step_ms: float | None = None
    prediction_error: float | None = None


def read_run_file(run_dir: Path, name: str, parse: Callable[[Any], Any]) -> Any:
    """Read and parse one file of a run folder (bounded: a regular file within its kind's size limit); anything
    wrong with it is a ValueError naming the file."""
    try:
        return parse(read_json(run_dir / name, FILE_LIMITS.get(name, MAX_RESULT_BYTES)))
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None
    except (TypeError, KeyError, AttributeError, IndexError) as error:
        raise ValueError(f"{name} is malformed ({type(error).__name__}: {error})") from None


def json_object(data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, found {type(data).__name__}")
    return data


def run_folder(run_dir: str | Path) -> Path:
    """`run_dir` resolved, once it is known to be a folder; ValueError saying what it is otherwise (no such
    path, a symbolic link loop, a file)."""
    try:
        info = os.stat(run_dir)
    except OSError as error:
        if error.errno == errno.ENOENT:
            raise ValueError(f"no such run folder: {run_dir}") from None
        if error.errno == errno.ELOOP:
            raise ValueError(f"{run_dir} is a symbolic link loop, not a run folder") from None
        raise ValueError(f"cannot read run folder {run_dir}: {error.strerror or error}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise ValueError(f"{run_dir} is not a run folder (not a folder)")
    return Path(os.path.realpath(run_dir))


def median_step_ms(step_times_ms: list[float]) -> float | None:
    """A run's measured step: the median, robust to the odd slow step a shared machine produces."""
    return statistics.median(step_times_ms) if step_times_ms else None


def _measured(data: Any) -> tuple[Timeline, list[float], list[float], list[int]]:
    data = json_object(data)
    step_times = [float(t) for t in data.get("step_times_ms", [])]
    losses = [float(x) for x in data.get("losses", [])]
    timeline = timeline_from_dict(data)
    flags = data.get("injected_steps")  # an injection on some steps only (the executor's --inject-steps alternate)
    if flags is not None:
        if not isinstance(flags, list) or len(flags) != len(step_times) or not all(isinstance(f, bool) for f in flags):
            raise ValueError(f"injected_steps must be one true or false per measured step, got {flags!r}")
        timeline = replace(timeline, meta={**timeline.meta, "injected_steps": flags})
    return timeline, step_times, losses, [int(x) for x in data.get("peak_memory_bytes", [])]


def read_outputs(run_dir: Path) -> RunOutputs:
    """measured.json, cost.json, simulated.json, reference.json and analysis.json, those the run wrote."""
    outputs = RunOutputs()
    if (run_dir / "measured.json").exists():
        outputs.measured, outputs.step_times_ms, outputs.losses, outputs.peak_memory_bytes = read_run_file(
            run_dir, "measured.json", _measured
        )
    if (run_dir / "cost.json").exists():
        outputs.cost = read_run_file(run_dir, "cost.json", cost_from_dict)
    if (run_dir / "simulated.json").exists():
        outputs.simulated = read_run_file(run_dir, "simulated.json", lambda d: timeline_from_dict(json_object(d)))
    if (run_dir / "reference.json").exists():
        outputs.reference = read_run_file(run_dir, "reference.json", json_object)
    if (run_dir / "analysis.json").exists():
        outputs.analysis = read_run_file(run_dir, "analysis.json", json_object)
    return outputs


def result_numbers(summary: dict[str, Any]) -> dict[str, float | None]:
    """result.json's numbers, each checked to be a number (or absent)."""
    numbers = {
        key: summary.get(key) for key in ("predicted_step_ms", "measured_step_ms", "prediction_error", "started_at")
    }
    for key, value in numbers.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError(f"result.json: {key} must be a number, got {value!r}")
    return numbers


def read_run(run_dir: str | Path) -> RunRecord:
    """A run folder's config, schedule, result and outputs; ValueError (naming the file and the fault) when it is
    not a run folder or is damaged."""
    require(run_dir, "run_dir", PATH_TYPES, "a run folder's path (str or pathlib.Path)")
    folder = run_folder(run_dir)
    if not (folder / "config.json").exists():
        raise ValueError(f"{run_dir} is not a run folder: it has no config.json")
    config = read_run_file(folder, "config.json", json_object)
    schedule = read_run_file(folder, "schedule.json", schedule_from_dict)
    if (folder / "result.json").exists():
        summary = read_run_file(folder, "result.json", json_object)
        if summary.get("status") not in RUN_STATUSES:
            raise ValueError(f"result.json: status {summary.get('status')!r} is not one of {', '.join(RUN_STATUSES)}")
    else:
        summary = {"status": UNFINISHED, "message": "no result.json: still running, or its launcher was killed"}
    numbers = result_numbers(summary)
    numbers.pop("started_at")
    outputs = read_outputs(folder)
    record = RunRecord(folder, summary["status"], str(summary.get("message", "")), config, schedule, outputs, **numbers)
    if record.measured_step_ms is None:
        record.measured_step_ms = median_step_ms(outputs.step_times_ms)
    return record
