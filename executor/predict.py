"""Profile-then-predict, and reading a run folder back.

Prediction: the profile phase of a run measures per-stage F/B/W times and
transfer costs (cost.json); simulating the run's schedule with them, plus the
per-step work outside the schedule's actions (optimizer step, gradient
zeroing), predicts the step time. Comparing with the measured median step
time tells how far the simulator can be trusted on this hardware.

Pure functions of files and values (no torch), so the app can call them too.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executor.config import RunConfig
from pipesim.cost import CostModel
from pipesim.formats import read_json, schedule_from_dict, timeline_from_dict, timeline_to_dict, write_json
from pipesim.ir import Schedule
from pipesim.timeline import Timeline

# cost.meta keys the profile phase writes for work outside the actions, each a number or one per rank.
OVERHEAD_KEYS = ("step_overhead_ms",)


# --- prediction ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    """Predicted step time from a simulated timeline; measured and error once compared."""

    predicted_step_ms: float
    simulated: Timeline
    overhead_ms: tuple[float, ...]  # per rank, added after that rank's last action
    measured_step_ms: float | None = None
    error: float | None = None  # (predicted - measured) / measured


def step_overhead_ms(cost: CostModel, num_ranks: int) -> tuple[float, ...]:
    """Per-rank time outside the schedule's actions that the profile recorded (0 when it recorded none)."""
    total = [0.0] * num_ranks
    for key in OVERHEAD_KEYS:
        value = cost.meta.get(key)
        if isinstance(value, (int, float)):
            total = [t + float(value) for t in total]
        elif isinstance(value, list) and len(value) == num_ranks:
            total = [t + float(v) for t, v in zip(total, value, strict=True)]
    return tuple(total)


def predict_step(schedule: Schedule, cost: CostModel) -> Prediction:
    """Simulate one step; the step ends when the last rank has finished its actions and its overhead."""
    from pipesim.simulate import simulate

    simulated = simulate(schedule, cost)
    overhead = step_overhead_ms(cost, schedule.num_ranks)
    start = min((s.start for s in simulated.spans), default=0.0)
    ends = [start] * schedule.num_ranks
    for span in simulated.spans:
        ends[span.rank] = max(ends[span.rank], span.end)
    predicted = max(end + extra for end, extra in zip(ends, overhead, strict=True)) - start
    return Prediction(predicted, simulated, overhead)


def replay_cost(measured: Timeline, cost: CostModel) -> CostModel:
    """`cost` with every stage's F, B, I and W replaced by the run's own median durations.

    Simulating with it tells the simulator's error apart from the profile's: when the replay
    matches the measured step but the prediction does not, the profile did not represent the
    run (a machine whose speed drifts, caches, contention), not the schedule's simulation.
    """
    from dataclasses import replace

    durations: dict[tuple[int, str], list[float]] = {}
    for span in measured.spans:
        durations.setdefault((span.action.stage, span.action.kind.value), []).append(span.end - span.start)
    num_stages = max((stage for stage, _ in durations), default=-1) + 1
    stages = []
    for stage in range(num_stages):
        base = cost.stage(stage)

        def med(kind: str, fallback: float, stage: int = stage) -> float:
            values = durations.get((stage, kind))
            return statistics.median(values) if values else fallback

        forward = med("F", base.forward_ms)
        extra = forward if cost.recompute else 0.0  # the cost model adds F back to B and I under recompute
        if (stage, "I") in durations:
            weight = med("W", base.w_ms)
            backward = max(med("I", base.i_ms + extra) - extra, 0.0) + weight
        else:
            backward = max(med("B", base.backward_ms + extra) - extra, 0.0)
            weight = min(base.w_ms, backward)
        stages.append(replace(base, forward_ms=forward, backward_ms=backward, weight_ms=min(weight, backward)))
    return replace(cost, stages=tuple(stages), source="replay")


def measured_step_ms(step_times_ms: list[float]) -> float | None:
    """The median: robust to the odd slow step a shared machine produces."""
    return statistics.median(step_times_ms) if step_times_ms else None


def compare(prediction: Prediction, step_times_ms: list[float]) -> Prediction:
    from pipesim.overlay import prediction_error

    measured = measured_step_ms(step_times_ms)
    if measured is None or measured <= 0:
        return prediction
    return Prediction(
        prediction.predicted_step_ms,
        prediction.simulated,
        prediction.overhead_ms,
        measured,
        prediction_error(prediction.predicted_step_ms, measured),
    )


def analyse_run(run_dir: Path, schedule: Schedule) -> dict[str, Any]:
    """After a successful run: median step time, and with cost.json the prediction (writes simulated.json)."""
    measured_path, cost_path = run_dir / "measured.json", run_dir / "cost.json"
    if not measured_path.exists():
        return {"message": "no measured.json on this node (rank 0 writes it)"}
    step_times = [float(t) for t in read_json(measured_path).get("step_times_ms", [])]
    out: dict[str, Any] = {"measured_step_ms": measured_step_ms(step_times)}
    if cost_path.exists():
        cost = CostModel.from_dict(read_json(cost_path))
        prediction = compare(predict_step(schedule, cost), step_times)
        summary = {"predicted_step_ms": prediction.predicted_step_ms, "overhead_ms": list(prediction.overhead_ms)}
        write_json(timeline_to_dict(prediction.simulated, summary), run_dir / "simulated.json")
        out.update(predicted_step_ms=prediction.predicted_step_ms, prediction_error=prediction.error)
    return out


# --- reading run folders -----------------------------------------------------------------------------------------


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
    from executor.launch import run_processes

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
        result.cost = CostModel.from_dict(read_json(run_dir / "cost.json"))
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
