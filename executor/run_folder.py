"""The run folder: the contract between the launcher, the ranks and every reader (CLI, app, benches).

    runs/NAME/config.json  schedule.json            written before any process starts
              measured.json cost.json reference.json written by the ranks (rank 0) and the reference run
              simulated.json                          the prediction (profile runs)
              result.json                             written last, by the launcher: status and summary
              logs/                                   torchrun's and each rank's output

Making a folder never overwrites one; reading one that is damaged says why instead of failing the listing.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from executor.config import RunConfig
from executor.predict import measured_step_ms
from executor.processes import run_processes
from pipesim.cost import CostModel
from pipesim.cost_file import load_cost
from pipesim.formats import read_json, schedule_from_dict, timeline_from_dict
from pipesim.ir import Schedule
from pipesim.timeline import Timeline

# --- making a run folder -----------------------------------------------------------------------------------------


def default_name(config: RunConfig) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{config.pipeline.schedule}-{config.pipeline.num_ranks}r"


def check_name(name: str) -> None:
    if not re.fullmatch(r"[\w.\-]+", name) or name in (".", ".."):
        raise ValueError(f"run name {name!r} may hold only letters, digits, '.', '-' and '_'")


def make_run_dir(runs_root: Path, name: str | None, config: RunConfig) -> Path:
    """Create the run folder. A taken explicit name is refused; a taken default name gets -2, -3, ..."""
    runs_root.mkdir(parents=True, exist_ok=True)
    if name is not None:
        try:
            (runs_root / name).mkdir()
        except FileExistsError:
            raise ValueError(f"run folder {runs_root / name} already exists; choose another name") from None
        return (runs_root / name).resolve()
    base = default_name(config)
    for suffix in range(1, 1000):
        candidate = runs_root / (base if suffix == 1 else f"{base}-{suffix}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate.resolve()
    raise ValueError(f"no free run folder name under {runs_root} for {base}")


# --- reading run folders back ----------------------------------------------------------------------------------


@dataclass
class RunResult:
    """Everything a run left in its folder. `config`/`schedule` are None only for a broken folder."""

    run_dir: Path
    status: str  # ok | failed | timeout | cancelled | running
    message: str
    config: RunConfig | None
    schedule: Schedule | None
    measured: Timeline | None = None
    step_times_ms: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    peak_memory_bytes: list[int] = field(default_factory=list)
    cost: CostModel | None = None
    simulated: Timeline | None = None
    predicted_step_ms: float | None = None
    measured_step_ms: float | None = None
    prediction_error: float | None = None
    reference: dict | None = None
    started_at: float | None = None


def _run_alive(run_dir: Path) -> bool:
    return bool(run_processes(run_dir))


def load_run(run_dir: str | Path) -> RunResult:
    """Read a run folder; raises ValueError when it is not one (list_runs turns that into a failed entry)."""
    run_dir = Path(run_dir).resolve()
    if not (run_dir / "config.json").exists():
        raise ValueError(f"{run_dir} is not a run folder: it has no config.json")
    config = RunConfig.from_dict(read_json(run_dir / "config.json"))
    schedule = schedule_from_dict(read_json(run_dir / "schedule.json"))
    result_path = run_dir / "result.json"
    if result_path.exists():
        summary = read_json(result_path)
    elif _run_alive(run_dir):
        summary = {"status": "running", "message": "still running"}
    else:
        summary = {"status": "failed", "message": "no result.json: the launcher was killed before the run ended"}
    result = RunResult(
        run_dir, str(summary.get("status", "failed")), str(summary.get("message", "")), config, schedule,
        predicted_step_ms=summary.get("predicted_step_ms"), measured_step_ms=summary.get("measured_step_ms"),
        prediction_error=summary.get("prediction_error"), started_at=summary.get("started_at"),
    )  # fmt: skip
    _load_outputs(result)
    return result


def _load_outputs(result: RunResult) -> None:
    run_dir = result.run_dir
    if (run_dir / "measured.json").exists():
        data = read_json(run_dir / "measured.json")
        result.measured = timeline_from_dict(data)
        result.step_times_ms = [float(t) for t in data.get("step_times_ms", [])]
        result.losses = [float(x) for x in data.get("losses", [])]
        result.peak_memory_bytes = [int(x) for x in data.get("peak_memory_bytes", [])]
        if result.measured_step_ms is None:
            result.measured_step_ms = measured_step_ms(result.step_times_ms)
    if (run_dir / "cost.json").exists():
        result.cost = load_cost(run_dir / "cost.json")
    if (run_dir / "simulated.json").exists():
        result.simulated = timeline_from_dict(read_json(run_dir / "simulated.json"))
    if (run_dir / "reference.json").exists():
        result.reference = read_json(run_dir / "reference.json")


def _started(run_dir: Path) -> float:
    try:
        return (run_dir / "config.json").stat().st_mtime
    except OSError:
        return run_dir.stat().st_mtime


def list_runs(runs_root: str | Path = Path("runs")) -> list[RunResult]:
    """Every run folder under `runs_root`, newest first; one that cannot be read is a failed entry saying why."""
    root = Path(runs_root)
    if not root.is_dir():
        return []
    folders = sorted((p for p in root.iterdir() if p.is_dir()), key=_started, reverse=True)
    results = []
    for folder in folders:
        try:
            results.append(load_run(folder))
        except (ValueError, OSError, KeyError, TypeError) as error:
            started = time.time() if not folder.exists() else _started(folder)
            message = f"broken run folder: {error}"
            results.append(RunResult(folder.resolve(), "failed", message, None, None, started_at=started))
    return results
