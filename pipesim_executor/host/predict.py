"""Profile-then-predict: simulate the run's schedule with its profiled costs and compare with the measured step.

Prediction: the profile phase of a run measures per-stage F/B/W times and
transfer costs (cost.json); simulating the run's schedule with them, plus the
per-step work outside the schedule's actions (optimizer step, gradient
zeroing), predicts the step time. Comparing with the measured median step
time tells how far the simulator can be trusted on this hardware.

With the spread the run's in-situ steps measured (the cost file's meta "spread"), the prediction is the median of
sampled steps with its 90% interval (`pipesim.sim.jitter`: step_ms, step_ms_p05, step_ms_p95 in simulated.json
and analysis.json), as the planner's.

Pure functions of files and values (no torch), so the app can call them too. Reading a whole run folder
back is pipesim_executor.host.run_folder's job.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pipesim.analysis.attribution import attribute_run
from pipesim.analysis.overlay import replay_cost  # noqa: F401 - the replay lives with the overlay; callers use it here too
from pipesim.cost.model import CostModel
from pipesim.io.cost_file import load_cost, save_cost
from pipesim.io.formats import read_json, timeline_from_dict, timeline_to_dict, write_json
from pipesim.io.run_record import median_step_ms
from pipesim.ir import Schedule
from pipesim.records import Timeline, keep_steps
from pipesim.semantics.lower import back_to_back
from pipesim_executor.config import RunConfig
from pipesim_executor.run_files import TRACE_FILE


@dataclass(frozen=True)
class Prediction:
    """Predicted step time from a simulated timeline; measured and error once compared."""

    predicted_step_ms: float
    simulated: Timeline
    overhead_ms: tuple[float, ...]  # per rank, added after that rank's last action (all-reduce tail included)
    measured_step_ms: float | None = None
    error: float | None = None  # (predicted - measured) / measured
    sharing: str | None = None  # how ranks sharing cores or a GPU were simulated, in words (None: they do not)
    p05_ms: float | None = None  # with the profile's spread: the 90% interval of the sampled steps, whose median
    p95_ms: float | None = None  # predicted_step_ms then is (pipesim.sim.jitter); None: no spread was measured
    deterministic_ms: float | None = None  # the step of the actions' medians, where predicted_step_ms is sampled

    def interval_fields(self) -> dict[str, float]:
        """step_ms, step_ms_p05, step_ms_p95 and the deterministic step, for simulated.json and analysis.json."""
        if self.p05_ms is None:
            return {}
        return {
            "step_ms": self.predicted_step_ms,
            "step_ms_p05": self.p05_ms,
            "step_ms_p95": self.p95_ms,
            "step_ms_deterministic": self.deterministic_ms,
        }


def sharing_of(cost: CostModel) -> str | None:
    """What the simulation assumes about ranks sharing a device: the profile's words (pipesim_executor.rank.calibrate:
    CPU cores, or a GPU that staged ranks take turns on), or None when every rank has its own."""
    if cost.shared_cores is None:
        return None
    in_situ = cost.meta.get("in_situ") if isinstance(cost.meta, dict) else None
    note = in_situ.get("sharing") if isinstance(in_situ, dict) else None
    return note if isinstance(note, str) else f"ranks share {cost.shared_cores} slot(s): processor sharing"


def predict_step(schedule: Schedule, cost: CostModel, overlapped: bool = False) -> Prediction:
    """Simulate one step as `pipesim simulate` does (`simulate_step`: the gradient all-reduces drawn on the
    simulated timeline, as the measured one has them); the step ends when the last rank has finished its
    actions, its unhidden all-reduce and its overhead. `overlapped`: the run ran its overlapped groups at once
    (measured.json's meta says so), else one member after the other."""
    from pipesim.sim.jitter import step_interval
    from pipesim.sim.spread import cost_spread
    from pipesim.sim.steps import simulate_step

    ran = ran_as(schedule, overlapped)
    step = simulate_step(ran, cost)
    prediction = Prediction(step.step_ms, step.timeline, step.tail_ms, sharing=sharing_of(cost))
    spread = cost_spread(cost)  # the run's in-situ steps' spread: the point is the sampled median, with its interval
    if spread is None:
        return prediction
    interval = step_interval(back_to_back(schedule), cost, spread)  # the sampler draws one action at a time
    return replace(
        prediction,
        predicted_step_ms=interval.step_ms,
        p05_ms=interval.p05_ms,
        p95_ms=interval.p95_ms,
        deterministic_ms=interval.deterministic_ms,
    )


def ran_as(schedule: Schedule, overlapped: bool) -> Schedule:
    """The schedule as the executor ran it: its overlapped groups at once where the run says it overlapped them
    (the MoE model's pairs, pipesim_executor.rank.runtime), else each group's members one after the other."""
    return schedule if overlapped else back_to_back(schedule)


def measured_step_ms(step_times_ms: list[float]) -> float | None:
    """The median: robust to the odd slow step a shared machine produces (the one definition is pipesim's)."""
    return median_step_ms(step_times_ms)


def compare(prediction: Prediction, step_times_ms: list[float]) -> Prediction:
    from pipesim.analysis.overlay import prediction_error

    measured = measured_step_ms(step_times_ms)
    if measured is None or measured <= 0:
        return prediction
    return replace(
        prediction, measured_step_ms=measured, error=prediction_error(prediction.predicted_step_ms, measured)
    )


def analyse_run(run_dir: Path, schedule: Schedule, config: RunConfig | None = None) -> dict[str, Any]:
    """After a successful run: median step time, and with cost.json the prediction (writes simulated.json). Under
    --compute sleep the cost model is the slept costs with the runtime the run measured priced in (cost.json,
    written by pipesim_executor.rank.sleep_calibrate; the slept costs alone where the run wrote none); an injection
    (--inject) is priced into the prediction by pipesim.cost.perturb's rule, so the error compares like with like."""
    measured_path, cost_path = run_dir / "measured.json", run_dir / "cost.json"
    if not measured_path.exists():
        return {"message": "no measured.json on this node (rank 0 writes it)"}
    measured = read_json(measured_path)
    step_times = [float(t) for t in measured.get("step_times_ms", [])]
    timeline = timeline_from_dict(measured)
    paired = None
    if config is not None and config.inject.alternates:  # the injected steps are the run's; the others its twin
        paired, step_times, timeline = split_alternate(measured.get("injected_steps"), step_times, timeline)
    out: dict[str, Any] = {"measured_step_ms": measured_step_ms(step_times)}
    # the run's overlapped groups ran at once: the MoE model's pairs where the run says so, and every group in sleep
    # mode (each member sleeps its share of the pair's timeline); otherwise their members one after the other
    overlapped = bool(timeline.meta.get("overlapped")) or (config is not None and config.compute.sleeps)
    prediction, priced = None, None
    if config is not None and config.compute.sleeps and not cost_path.exists():
        save_cost(config.compute.cost_model(schedule), cost_path)
    if cost_path.exists():
        cost = priced = load_cost(cost_path).for_pipeline(schedule.num_stages, schedule.num_ranks)
        if config is not None and config.inject.inject:
            cost = config.inject.perturbation().apply(cost, schedule.stage_to_rank)
        prediction = compare(predict_step(schedule, cost, overlapped), step_times)
        summary = {
            "predicted_step_ms": prediction.predicted_step_ms,
            "overhead_ms": list(prediction.overhead_ms),
            **prediction.interval_fields(),
        }
        if config is not None and config.inject.inject:  # the prediction prices what was injected
            summary["injection"] = config.inject.perturbation().to_dict()
        if prediction.sharing:  # ranks on shared cores or a shared GPU: the prediction says how it modelled them
            summary["sharing"] = prediction.sharing
        write_json(timeline_to_dict(prediction.simulated, summary), run_dir / "simulated.json")
        out.update(predicted_step_ms=prediction.predicted_step_ms, prediction_error=prediction.error)
        if paired is not None:  # the uniform twin priced by the same calibrated costs, without the injection
            uniform = predict_step(schedule, priced, overlapped).predicted_step_ms
            paired.update(
                predicted_uniform_step_ms=uniform, predicted_growth=prediction.predicted_step_ms / uniform - 1
            )
        if prediction.p05_ms is not None:
            out.update(predicted_p05_ms=prediction.p05_ms, predicted_p95_ms=prediction.p95_ms)
    if paired is not None:
        out["paired"] = paired
    try:  # where every millisecond of a step went (pipesim.analysis.attribution); a problem here must not fail the run
        # read on the graph of what ran (`ran_as`)
        write_json(
            analysis(ran_as(schedule, overlapped), timeline, step_times, prediction, priced), run_dir / "analysis.json"
        )
    except ValueError as error:
        out["analysis_error"] = str(error)
    simulated = None if prediction is None else prediction.simulated
    try:  # a view for Perfetto; like the analysis, a problem here must not fail the run
        write_json(combined_trace(schedule, simulated, timeline), run_dir / TRACE_FILE)
    except ValueError as error:
        out["trace_error"] = str(error)
    return out


def split_alternate(
    flags: Any, step_times: list[float], timeline: Timeline
) -> tuple[dict[str, Any], list[float], Timeline]:
    """A run whose steps alternated uniform and injected (`--inject-steps alternate`): its pairing in short
    (`paired`: the uniform and injected medians, the measured growth, the number of step pairs), and the injected
    steps' times and timeline (renumbered from 0), which the prediction, its error and the analysis then read: the
    injection is priced into the prediction, so only the steps that carried it compare like with like."""
    if not isinstance(flags, list) or len(flags) != len(step_times) or not any(flags) or all(flags):
        raise ValueError(
            f"measured.json: injected_steps must flag each of the {len(step_times)} measured steps, some injected "
            f"and some not (--inject-steps alternate), got {flags!r}"
        )
    injected = [i for i, on in enumerate(flags) if on]
    uniform_times = [t for t, on in zip(step_times, flags, strict=True) if not on]
    injected_times = [step_times[i] for i in injected]
    uniform_ms, injected_ms = median_step_ms(uniform_times), median_step_ms(injected_times)
    paired = {
        "uniform_step_ms": uniform_ms,
        "injected_step_ms": injected_ms,
        "measured_growth": injected_ms / uniform_ms - 1,
        "pairs": sum(1 for i in injected if i > 0 and not flags[i - 1]),
    }
    return paired, injected_times, keep_steps(timeline, injected)


def analysis(
    schedule: Schedule,
    measured: Timeline,
    step_times: list[float],
    prediction: Prediction | None,
    cost: CostModel | None = None,
) -> dict:
    """analysis.json: the attribution, the machine's load as the run ended, the stragglers found (priced by `cost`,
    the run's cost.json, when there is one: pipesim.analysis.stragglers), and with a prediction its error step by
    step and action by action (pipesim.analysis.overlay's definitions, the ones the CLI and the app show)."""
    from pipesim.analysis.overlay import action_errors, median_abs_error
    from pipesim.analysis.stragglers import find_stragglers

    doc = attribute_run(schedule, measured, step_times)
    doc["stragglers"] = find_stragglers(schedule, measured, cost).to_dict()
    doc["spread"]["load_1min"] = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    if prediction is not None:
        rows = action_errors(prediction.simulated, measured)
        doc["prediction"] = {
            "predicted_step_ms": prediction.predicted_step_ms,
            "error": prediction.error,
            "action_error_median": median_abs_error(rows),
            "actions": rows,
            "sharing": prediction.sharing,
            **prediction.interval_fields(),
        }
    return doc


def combined_trace(
    schedule: Schedule, simulated: Timeline | None, measured: Timeline, step: int | None = None
) -> dict[str, Any]:
    """One Chrome trace with the simulated step (when there is one) and a measured step (the last by default,
    past the warm-up, as the overlay shows), each as a process with compute, send and recv tracks per rank."""
    from pipesim.analysis.overlay import pick_step
    from pipesim.io.chrome_trace import run_trace

    views = {} if simulated is None else {"simulated": simulated}
    views["measured"] = pick_step(measured, step)
    return run_trace(schedule, views)
