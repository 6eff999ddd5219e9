"""A model description calibrated from a measured run (`pipesim plan --calibrate-from RUN_DIR`).

A description prices compute as FLOPs over an assumed rate (`--tflops`) and counts nothing per action, so its
step times are not any machine's. A run of the executor's built-in Transformer on the devices to plan for holds
what is needed to fix both:

* the device's achieved rate and the per-action cost inside each action: every action's median duration
  (over steps and microbatches, per stage and kind, replica 0) against the FLOPs the description counts for it,
  fitted as duration = constant + FLOP time at the rate (least squares over every stage and kind);
* the dispatch gap before each action (its start less the previous action's end, less the time blocked in a
  receive, as the executor's in-situ calibration measures it) and the step's tail after the last action (step
  time less the latest action's end), medians over the measured steps.

The fitted rate replaces the description's `device_tflops`; the per-action constant joins the dispatch gap (both
are paid once per action), and the tail holds the run's optimizer step (`RuntimeTerms`). Read from the run folder
(config.json, measured.json): the run's own shape, microbatch size, dtype, recomputation and split points.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from pipesim.cost.description import ModelDescription
from pipesim.cost.runtime import RuntimeTerms
from pipesim.cost.shape import TransformerShape
from pipesim.io.formats import read_json, timeline_from_dict
from pipesim.ir import ActionKind
from pipesim.limits import MAX_SMALL_FILE_BYTES
from pipesim.programs import programs
from pipesim.records import Timeline, select_replica

MIN_TFLOPS = 1e-6


@dataclass(frozen=True)
class Calibration:
    """What a run says about its device: the achieved rate, the per-action terms, and how well the fit held."""

    device_tflops: float
    action_ms: float  # inside each action, beyond its FLOPs
    dispatch_ms: float  # before each action
    tail_ms: float  # after the step's last action
    residual: float  # the fit's RMS error relative to the mean action
    run_dir: str
    points: int

    def apply(self, description: ModelDescription) -> tuple[ModelDescription, RuntimeTerms]:
        """`description` on the calibrated device, and the per-rank terms the planner adds."""
        return (
            replace(description, device_tflops=self.device_tflops),
            RuntimeTerms(dispatch_ms=self.dispatch_ms + self.action_ms, tail_ms=self.tail_ms),
        )

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _run_description(config: dict[str, Any]) -> tuple[ModelDescription, tuple[int, ...] | None, bool]:
    """The run's model as a description at 1 TFLOP/s (so a FLOP time in ms is its FLOPs / 1e9), its split
    points from config.json (None when the executor chose them) and whether it recomputed."""
    model = config.get("model") or {}
    if model.get("kind", "transformer") != "transformer":
        raise ValueError(
            f"the run trained a {model.get('kind')!r:.40} model: a description is calibrated from a run of the "
            f"built-in Transformer ({programs().executor} run --model transformer), whose FLOPs it counts"
        )
    shape = model.get("transformer") or {}
    pipeline, training = config.get("pipeline") or {}, config.get("training") or {}
    try:
        sizes = {f.name: shape[f.name] for f in fields(TransformerShape)}
        microbatch = training["batch_size"] // pipeline["num_microbatches"]
        description = ModelDescription(
            **sizes, microbatch_size=microbatch, dtype=training.get("dtype", "fp32"), device_tflops=1.0
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"the run's config.json does not describe a Transformer run: {error}") from None
    points = model.get("split_points")
    return description, None if points is None else tuple(points), bool(training.get("recompute", False))


def _fit(points: list[tuple[float, float]]) -> tuple[float, float, float]:
    """(constant, slope, relative RMS residual) of duration = constant + slope x FLOP time, least squares; the
    constant clamped at 0 (a fit through the origin then)."""
    n = len(points)
    mean_x, mean_y = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    if sxx > 0:
        slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
        constant = mean_y - slope * mean_x
    else:
        slope, constant = 0.0, mean_y
    if constant < 0 or slope <= 0:
        constant, slope = 0.0, sum(x * y for x, y in points) / max(sum(x * x for x, _ in points), 1e-300)
    rms = (sum((constant + slope * x - y) ** 2 for x, y in points) / n) ** 0.5
    return constant, slope, rms / mean_y if mean_y > 0 else 0.0


def _runtime_terms(measured: Timeline, step_times: list[float]) -> tuple[float, float]:
    """(dispatch gap, tail): medians of each action's gap (less the receive wait inside it) and of each step's
    time after its latest action."""
    gaps, tails = [], []
    for step, step_ms in enumerate(step_times):
        spans = sorted((s for s in measured.spans if s.step == step), key=lambda s: (s.rank, s.start))
        waits: dict[int, list[tuple[float, float]]] = {}
        for c in measured.comm:
            if c.step == step and c.kind == "recv":
                waits.setdefault(c.rank, []).append((c.start, c.end))
        previous: dict[int, float] = {}
        for span in spans:
            before = previous.get(span.rank, 0.0)
            blocked = sum(
                max(0.0, min(end, span.start) - max(start, before)) for start, end in waits.get(span.rank, [])
            )
            gaps.append(max(0.0, span.start - before - blocked))
            previous[span.rank] = span.end
        if spans:
            tails.append(max(0.0, step_ms - max(s.end for s in spans)))
    if not gaps:
        raise ValueError("the run's measured.json holds no measured step to calibrate from")
    return statistics.median(gaps), statistics.median(tails) if tails else 0.0


def calibrate_from_run(run_dir: str | Path) -> Calibration:
    """Fit the device's rate and the per-action terms to a finished run (see the module docstring)."""
    folder = Path(run_dir)
    config = read_json(folder / "config.json", MAX_SMALL_FILE_BYTES, "run config")
    data = read_json(folder / "measured.json", what="measured timeline")
    if not isinstance(config, dict) or not isinstance(data, dict):
        raise ValueError(f"{folder} is not a run folder (config.json and measured.json are JSON objects)")
    description, points_given, recompute = _run_description(config)
    measured = select_replica(timeline_from_dict(data), 0)  # every replica ran the same; replica 0 is enough
    split = points_given if points_given is not None else (data.get("meta") or {}).get("split_points")
    if split is None:
        raise ValueError(
            f"{folder}: the run's split points are unknown (older runs do not record them): "
            "run it again, or with --split-points"
        )
    step_times = [float(t) for t in data.get("step_times_ms", [])]
    units = description.unit_costs()
    starts = [0, *split, len(units)]
    num_stages = len(starts) - 1
    per_stage = {}
    for stage, (a, b) in enumerate(zip(starts, starts[1:], strict=False)):
        f = sum(u.forward_ms for u in units[a:b])
        backward = sum(u.backward_ms for u in units[a:b])
        weight = sum(u.w_ms for u in units[a:b])
        extra = f if recompute else 0.0
        per_stage[stage] = {
            ActionKind.FORWARD: f,
            ActionKind.BACKWARD: backward + extra,
            ActionKind.BACKWARD_INPUT: backward - weight + extra,
            ActionKind.BACKWARD_WEIGHT: weight,
        }
    durations: dict[tuple[int, ActionKind], list[float]] = {}
    for span in measured.spans:
        if span.action.stage >= num_stages:
            raise ValueError(f"{folder}: the timeline has stage {span.action.stage}, the split {num_stages} stages")
        durations.setdefault((span.action.stage, span.action.kind), []).append(span.duration)
    points = [(per_stage[stage][kind], statistics.median(values)) for (stage, kind), values in durations.items()]
    if len(points) < 2:
        raise ValueError(f"{folder}: too few measured actions to fit a rate (need two kinds or stages)")
    constant, slope, residual = _fit(points)
    dispatch, tail = _runtime_terms(measured, step_times)
    return Calibration(max(MIN_TFLOPS, 1.0 / slope), constant, dispatch, tail, residual, str(folder), len(points))
