"""The run folder: the contract between the launcher, the ranks and every reader (CLI, app, benches).

    runs/NAME/config.json  schedule.json            written before any process starts
              measured.json cost.json reference.json written by the ranks (rank 0) and the reference run
              simulated.json                          the prediction (profile runs)
              trace.json  traces/                    the Perfetto view; torch.profiler traces (--torch-profile)
              result.json                             written last, by the launcher: status and summary
              logs/                                   torchrun's and each rank's output
              progress.json                           the launcher's pid, progress, latest events and log lines,
                                                      rewritten while it runs (any process can follow the run)
              cancel                                  a request to cancel, from anyone; the launcher obeys it

A run is running while it has no result.json and a process of it (torchrun, a rank) or its launcher is alive.

Making a folder never overwrites one; reading one that is damaged says why instead of failing the listing.
Every file is read through `pipesim.io.bounded`: regular files only (a FIFO as result.json is refused at once,
never waited on), each kind within its size limit (`pipesim.limits`: MAX_SMALL_FILE_BYTES for config, result and
progress, MAX_SCHEDULE_BYTES for the schedule, MAX_RESULT_BYTES for the rest), checked before reading.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from pipesim.io.formats import UnwritableOutput, read_json, schedule_from_dict, write_json
from pipesim.io.run_record import (
    RunOutputs,
    json_object,
    median_step_ms,
    read_outputs,
    read_run_file,
    result_numbers,
    run_folder,
)
from pipesim.ir import Schedule
from pipesim.limits import MAX_SMALL_FILE_BYTES
from pipesim_executor.config import RunConfig
from pipesim_executor.processes import run_processes
from pipesim_executor.run_files import (
    CANCEL_FILE,
    CONFIG_FILE,
    DOCTOR_FILE,
    PLAN_PREDICTION_FILE,
    PROFILE_REQUEST_FILE,
    PROGRESS_FILE,
    TRACES_DIR,
)

# --- making a run folder -----------------------------------------------------------------------------------------


def default_name(config: RunConfig) -> str:
    """Timestamp, schedule and ranks; the schedule's name (a file's stem, a user's text) is reduced to safe
    characters, so a name such as "../x" can never point outside the runs folder."""
    schedule = re.sub(r"[^\w.-]+", "_", config.pipeline.schedule).strip("._") or "schedule"
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{schedule[:40]}-{config.pipeline.num_ranks}r"


MAX_NAME_CHARS = 200  # a run's name: room under a file system's 255 bytes for the files named after it


def check_name(name: str) -> None:
    """The one check of a run folder's name (the command line's --out, the app's links): ValueError of one line."""
    if len(name) > MAX_NAME_CHARS:
        raise ValueError(f"run name {name[:40]!r}... is {len(name)} characters long; at most {MAX_NAME_CHARS}")
    if not re.fullmatch(r"[\w.\-]+", name) or name in (".", ".."):
        raise ValueError(f"run name {name!r} may hold only letters, digits, '.', '-' and '_'")


def make_run_dir(runs_root: Path, name: str | None, config: RunConfig) -> Path:
    """Create the run folder. A taken explicit name is refused; a taken default name gets -2, -3, ...

    A multi-node run shares one folder on a shared filesystem: every node's launcher names the same folder
    (an explicit name is required, since default names carry each node's clock) and all but the first to
    arrive find it made.
    """
    try:
        runs_root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UnwritableOutput(f"cannot create the runs folder {runs_root}: {error.strerror or error}") from None
    shared = config.nodes.nnodes > 1
    if shared and name is None:
        raise ValueError("a multi-node run needs a run folder name (--out), the same on every node")
    if name is not None:
        try:
            (runs_root / name).mkdir(exist_ok=shared)
        except FileExistsError:
            raise ValueError(f"run folder {runs_root / name} already exists; choose another name") from None
        except OSError as error:
            raise UnwritableOutput(f"cannot create run folder {runs_root / name}: {error.strerror or error}") from None
        return (runs_root / name).resolve()
    base = default_name(config)
    for suffix in range(1, 1000):
        candidate = runs_root / (base if suffix == 1 else f"{base}-{suffix}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        except OSError as error:
            raise UnwritableOutput(f"cannot create run folder {candidate}: {error.strerror or error}") from None
        return candidate.resolve()
    raise ValueError(f"no free run folder name under {runs_root} for {base}")


# --- reading run folders back ----------------------------------------------------------------------------------


@dataclass
class RunResult(RunOutputs):
    """Everything a run left in its folder: its outputs (pipesim.io.run_record.RunOutputs' fields, keyword-only)
    and its config, schedule and result. `config`/`schedule` are None only for a broken folder."""

    run_dir: Path
    status: str  # one of STATUSES
    message: str
    config: RunConfig | None
    schedule: Schedule | None
    predicted_step_ms: float | None = None
    measured_step_ms: float | None = None
    prediction_error: float | None = None
    started_at: float | None = None
    prediction_source: str = ""  # where predicted_step_ms comes from, in words, when not this run's own profile
    outcome: str = ""  # the outcome in one sentence (pipesim_executor.progress.outcome_sentence); message has the log

    @property
    def headline(self) -> str:
        """What to show first: the outcome sentence, else (a run from before it was written) the message's first
        line, never a log tail."""
        first = self.message.splitlines()[0] if self.message else ""
        return self.outcome or (f"Run {self.status}: {first}" if first else "")


# --- a run in progress: the launcher's progress file, liveness, cancel requests ----------------------------------


def _process_start(pid: int) -> str | None:
    """When process `pid` started (Linux /proc, clock ticks since boot): a pid and its start name one process,
    so a pid reused by another program is not taken for the launcher. None: no such process (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def write_progress(run_dir: Path, state: dict[str, Any]) -> None:
    """The launcher's view of its run (`state`: status, progress, events, log), stamped with who wrote it and
    when; atomic, so a reader never sees half of it."""
    pid = os.getpid()
    write_json({**state, "pid": pid, "pid_start": _process_start(pid), "updated_at": time.time()},
               run_dir / PROGRESS_FILE)  # fmt: skip


def read_progress(run_dir: Path) -> dict[str, Any]:
    """progress.json, or {} when there is none (yet) or it cannot be read (a reader never fails on it)."""
    try:
        data = read_json(run_dir / PROGRESS_FILE, MAX_SMALL_FILE_BYTES)
    except (ValueError, OSError):
        return {}
    return data if isinstance(data, dict) else {}


def launcher_alive(run_dir: Path, progress: dict[str, Any] | None = None) -> bool:
    """Whether the process that wrote progress.json (the run's launcher) is still there."""
    progress = read_progress(run_dir) if progress is None else progress
    pid, start = progress.get("pid"), progress.get("pid_start")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    now = _process_start(pid)
    return now is not None and now == start


def run_alive(run_dir: Path) -> bool:
    """A process of the run (torchrun, a rank) or its launcher is alive."""
    return bool(run_processes(run_dir)) or launcher_alive(run_dir)


def request_cancel(run_dir: Path) -> None:
    """Ask the run's launcher, whichever process it is, to cancel the run (it watches for this file)."""
    (run_dir / CANCEL_FILE).write_text("cancel\n")


def cancel_requested(run_dir: Path) -> bool:
    return (run_dir / CANCEL_FILE).exists()


def read_setup(run_dir: Path) -> tuple[RunConfig, Schedule]:
    """A run folder's config and schedule (written before any process starts); ValueError naming the fault."""
    if not (run_dir / "config.json").exists():
        raise ValueError(f"{run_dir} is not a run folder: it has no config.json")
    config = read_run_file(run_dir, "config.json", lambda d: RunConfig.from_dict(json_object(d)))
    return config, read_run_file(run_dir, "schedule.json", schedule_from_dict)


STATUSES = ("ok", "partial", "failed", "timeout", "cancelled", "running", "damaged")


def _summary(run_dir: Path) -> dict[str, Any]:
    """result.json, or what the folder says without one: running, or failed (nothing of the run is left)."""
    if (run_dir / "result.json").exists():
        return read_run_file(run_dir, "result.json", json_object)
    if run_alive(run_dir):
        return {"status": "running", "message": "still running"}
    return {"status": "failed", "message": "no result.json: the launcher was killed before the run ended"}


def run_status(run_dir: Path) -> str:
    """The run's status alone (cheap: reads result.json only); "damaged" when result.json cannot be read."""
    try:
        status = _summary(run_dir).get("status")
    except (ValueError, OSError):
        return "damaged"
    return status if status in STATUSES else "damaged"


def load_run(run_dir: str | Path) -> RunResult:
    """Read a run folder; ValueError (naming the file and the fault) when it is not one or is damaged."""
    run_dir = run_folder(run_dir)
    config, schedule = read_setup(run_dir)
    summary = _summary(run_dir)
    status = summary.get("status")
    if status not in STATUSES:
        raise ValueError(f"result.json: status {status!r} is not one of {', '.join(STATUSES)}")
    numbers = result_numbers(summary)
    result = RunResult(run_dir, status, str(summary.get("message", "")), config, schedule, **numbers)
    result.outcome = str(summary.get("outcome") or "")
    _load_outputs(result)
    return result


def _load_outputs(result: RunResult) -> None:
    outputs = read_outputs(result.run_dir)  # pipesim's reader: one for the folder's files
    for output in fields(RunOutputs):
        setattr(result, output.name, getattr(outputs, output.name))
    if result.measured_step_ms is None:
        result.measured_step_ms = median_step_ms(result.step_times_ms)
    if result.predicted_step_ms is None:
        _plan_prediction(result)


def _plan_prediction(result: RunResult) -> None:
    """A verified plan's prediction for this run (plan-prediction.json), with the error the Plan page shows (one
    definition, pipesim.analysis.overlay.prediction_error) and what it rests on; absent or unreadable: none."""
    from pipesim.analysis.overlay import prediction_error

    path = result.run_dir / PLAN_PREDICTION_FILE
    try:
        plan = json_object(read_json(path, MAX_SMALL_FILE_BYTES)) if path.is_file() else None
    except (OSError, ValueError):
        return
    predicted = plan.get("predicted_step_ms") if plan else None
    if isinstance(predicted, bool) or not isinstance(predicted, (int, float)) or predicted <= 0:
        return
    result.predicted_step_ms = float(predicted)
    if result.measured_step_ms:
        result.prediction_error = prediction_error(result.predicted_step_ms, result.measured_step_ms)
    rate = plan.get("device_tflops")
    rests_on = (
        "a calibrated model"
        if plan.get("calibrated")
        else f"an assumed device rate ({rate:g} TFLOP/s), not a profile"
        if isinstance(rate, (int, float))
        else "an uncalibrated model description"
    )
    result.prediction_source = f"the plan's prediction for {plan.get('candidate', 'this candidate')}, from {rests_on}"


def profiler_traces(run_dir: str | Path) -> list[Path]:
    """The run's torch.profiler traces (--torch-profile): traces/rankR.json, traces/torch-rankR.json."""
    folder = Path(run_dir) / TRACES_DIR
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def profiler_trace_sets(run_dir: str | Path) -> dict[str, list[Path]]:
    """The run's profiler traces by who ran the schedule: "executor" (rankR.json), "torch" (torch-rankR.json)."""
    traces = profiler_traces(run_dir)
    sets = {
        "executor": [p for p in traces if p.name.startswith("rank")],
        "torch": [p for p in traces if p.name.startswith("torch-rank")],
    }
    return {side: paths for side, paths in sets.items() if paths}


def _started(run_dir: Path) -> float:
    """When the run started (its config's time), else the folder's, else the link's own: never raises."""
    for stat_of in (lambda: (run_dir / "config.json").stat(), run_dir.stat, run_dir.lstat):
        try:
            return stat_of().st_mtime
        except OSError:
            continue
    return 0.0


def _is_entry(path: Path) -> bool:
    """A folder, or a symbolic link (one that leads nowhere, or in a loop, is listed as damaged)."""
    try:
        return path.is_symlink() or path.is_dir()
    except OSError:
        return False


def is_doctor_folder(path: Path) -> bool:
    """A folder of the doctor's runs (its DOCTOR_FILE, and no run's config): listed apart, never as damaged."""
    try:
        return (path / DOCTOR_FILE).is_file() and not (path / CONFIG_FILE).exists()
    except OSError:
        return False


def is_profile_folder(path: Path) -> bool:
    """A unit profile's folder (`executor profile --out`: its PROFILE_REQUEST_FILE): listed apart, never as a
    damaged run (it has no schedule)."""
    try:
        return (path / PROFILE_REQUEST_FILE).is_file()
    except OSError:
        return False


def profile_folders(runs_root: str | Path) -> list[Path]:
    """The unit profiles' folders directly under `runs_root`."""
    root = Path(runs_root)
    return sorted(p for p in root.iterdir() if _is_entry(p) and is_profile_folder(p)) if root.is_dir() else []


def doctor_folders(runs_root: str | Path) -> list[Path]:
    """The doctor's folders directly under `runs_root` (each holds runs of its own: list them with that root)."""
    root = Path(runs_root)
    return sorted(p for p in root.iterdir() if _is_entry(p) and is_doctor_folder(p)) if root.is_dir() else []


def list_runs(runs_root: str | Path = Path("runs")) -> list[RunResult]:
    """Every run folder under `runs_root`, newest first; one that cannot be read (a damaged file, a file too
    large, a FIFO, a symbolic link loop) is a "damaged" entry saying why, and the others are still listed."""
    root = Path(runs_root)
    if not root.is_dir():
        return []
    folders = sorted(
        (p for p in root.iterdir() if _is_entry(p) and not is_doctor_folder(p) and not is_profile_folder(p)),
        key=_started,
        reverse=True,
    )
    results = []
    for folder in folders:
        try:
            results.append(load_run(folder))
        except (ValueError, OSError, RuntimeError) as error:  # one damaged folder must not hide the others
            where = Path(os.path.abspath(folder))
            message = f"damaged run folder: {error}".splitlines()[0]
            results.append(RunResult(where, "damaged", message, None, None, started_at=_started(folder)))
    return results
