"""Measured over simulated, rank by rank on one time axis: two lanes per rank, each measured action's hover
giving its simulated time and the difference (`pipesim.analysis.overlay`'s alignment and error); and a what-if
(a slow rank or link) over the uniform case, drawn the same way."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import plotly.graph_objects as go

from pipesim.analysis.overlay import align_step, pick_step, prediction_error
from pipesim.charts.lanes import (
    KIND_COLORS,
    SUB_LANES,
    by_kind,
    lane_layout,
    lane_rows,
    lighten,
    resource_bars,
    span_bars,
)
from pipesim.records import COPY_KINDS, LINK_KINDS, Timeline, select_replica
from pipesim.sim.metrics import makespan
from pipesim.units import MISSING, SIGNED_TIME_SPEC, format_ms, format_percent, hover_ms, hover_percent


def overlay_figure(simulated: Timeline, measured: Timeline, step: int | None = None) -> go.Figure:
    """Simulated and measured, rank by rank on one time axis: two rows per rank.

    `step` picks one measured step (None: the last, past warm-up); its times are
    shifted to start at 0 like the simulation's.
    """
    real = pick_step(select_replica(measured, 0), step)  # the simulation is of one replica
    deltas = {(d.rank, d.action): d for d in align_step(simulated, real)}
    hover = (
        f"<br>simulated {hover_ms('customdata[6]')}<br>predicted - measured "
        f"%{{customdata[7]:{SIGNED_TIME_SPEC}}} ms ({hover_percent('customdata[8]', signed=True)})"
    )
    traces = paired_traces(simulated, real, ("simulated", "measured"), lambda s: _delta_cells(deltas.get(s)), hover)
    for lane, (which, timeline) in enumerate((("simulated", simulated), ("measured", real))):
        for resource, kinds in (("copy", COPY_KINDS), ("link", LINK_KINDS)):  # what overlaps compute (offload)
            spans = [c for c in timeline.comm if c.kind in kinds]
            if spans:
                label = f"{SUB_LANES[resource][2]} {which}"
                traces.append(resource_bars(spans, resource, lambda rank, lane=lane: 2 * rank + lane, label))
    labels = _paired_labels(max(simulated.num_ranks, real.num_ranks), ("simulated", "measured"))
    return lane_layout(go.Figure(data=traces), labels, _overlay_title(simulated, real))


def whatif_figure(uniform: Timeline, slowed: Timeline, what: str) -> go.Figure:
    """A what-if (a slow rank, a slow link: `pipesim.cost.perturb`) drawn over the uniform case, rank by rank on one
    time axis: the uniform step light, the slowed one in full colour below it, each slowed action's hover giving
    its uniform time and how much longer it took. `what` says what was slowed ("rank 1 1.5x slower")."""
    deltas = {(d.rank, d.action): d for d in align_step(uniform, slowed)}
    hover = (
        f"<br>uniform {hover_ms('customdata[6]')}<br>slowed - uniform "
        f"%{{customdata[7]:{SIGNED_TIME_SPEC}}} ms ({hover_percent('customdata[8]', signed=True)})"
    )
    traces = paired_traces(uniform, slowed, ("uniform", "slowed"), lambda s: _growth_cells(deltas.get(s)), hover)
    base, grown = _step_of(uniform), _step_of(slowed)
    name = slowed.schedule_name or uniform.schedule_name or "schedule"
    growth = format_percent(grown / base - 1, signed=True) if base > 0 else MISSING
    title = (
        f"{name}: {what}, over the uniform case<br><sup>step time {format_ms(grown)} against {format_ms(base)} "
        f"uniform ({growth})</sup>"
    )
    labels = _paired_labels(max(uniform.num_ranks, slowed.num_ranks), ("uniform", "slowed"))
    return lane_layout(go.Figure(data=traces), labels, title)


def paired_traces(
    first: Timeline, second: Timeline, names: tuple[str, str], cells: Callable[[tuple], tuple], hover: str
) -> list[go.Bar]:
    """Two lanes per rank: `first` light on the upper lane, `second` in full colour on the lower one, each of its
    bars carrying three more hover cells, `cells((rank, action))` (read by `hover`, from customdata[6])."""
    traces = []
    for kind, spans in by_kind(first.spans).items():
        if spans:
            color = lighten(KIND_COLORS[kind], 0.55)
            name = f"{kind} {names[0]}"
            traces.append(span_bars(spans, lane_rows(spans, 2, 0), kind, name, color=color, legendgroup=kind))
    for kind, spans in by_kind(second.spans).items():
        if not spans:
            continue
        extra = np.array([cells((s.rank, s.action)) for s in spans], dtype=float).reshape(len(spans), 3)
        traces.append(
            span_bars(
                spans,
                lane_rows(spans, 2, 1),
                kind,
                f"{kind} {names[1]}",
                legendgroup=kind,
                extra_data=extra,
                extra_hover=hover,
            )
        )
    return traces


def _paired_labels(num_ranks: int, names: tuple[str, str]) -> list[str]:
    return [f"rank {r} · {which}" for r in range(num_ranks) for which in names]


def _step_of(timeline: Timeline) -> float:
    """A simulated step's step time (`pipesim.sim.steps`), else its makespan."""
    step = timeline.meta.get("step_ms")
    return float(step) if isinstance(step, (int, float)) else makespan(timeline)


def _growth_cells(diff) -> tuple[float, float, float]:
    """Uniform duration, slowed - uniform and the relative growth; NaN where the action is not in both."""
    if diff is None:
        return (math.nan, math.nan, math.nan)
    growth = diff.delta_ms / diff.simulated_ms if diff.simulated_ms > 0 else math.nan
    return (diff.simulated_ms, diff.delta_ms, growth)


def _delta_cells(diff) -> tuple[float, float, float]:
    """Simulated duration, predicted - measured and the prediction error (the sign of the run's prediction error:
    positive where the simulation is slower); NaN where the action was not simulated or took no time."""
    if diff is None:
        return (math.nan, math.nan, math.nan)
    error = diff.error if diff.measured_ms > 0 else math.nan
    return (diff.simulated_ms, diff.simulated_ms - diff.measured_ms, error)


def _overlay_title(simulated: Timeline, real: Timeline) -> str:
    name = simulated.schedule_name or real.schedule_name or "schedule"
    if not (simulated.spans and real.spans):
        return f"{name}: simulated vs measured"
    predicted, actual = makespan(simulated), makespan(real)
    error = prediction_error(predicted, actual) if actual > 0 else float("nan")
    # The makespan of the drawn step's actions, not the run's median step time (which adds the optimizer step):
    # named as such, with its own error, so it is not taken for the step's prediction error on the cards.
    return (
        f"{name}: simulated vs measured<br><sup>makespan of this step's actions: {format_ms(predicted)} simulated, "
        f"{format_ms(actual)} measured (makespan error {format_percent(error, signed=True)})</sup>"
    )


def mark_stragglers(figure: go.Figure, found: dict, per_rank: int = 2, lane: int = 1) -> go.Figure:
    """Each slow rank's measured lane named with its factor ("rank 1 · measured · 1.52x slower"), from the
    stragglers found in the run (`pipesim.analysis.stragglers`' document, analysis.json's "stragglers"): the lane
    `lane` of the rank's `per_rank` (the overlay's measured lane by default). The figure is changed and returned."""
    labels = list(figure.layout.yaxis.ticktext or ())
    for straggler in found.get("stragglers", ()):
        row = int(straggler["rank"]) * per_rank + lane
        if 0 <= row < len(labels):
            labels[row] = f"{labels[row]} · {float(straggler['factor']):.2f}x slower"
    if labels:
        width = 20 + 7 * max(len(label) for label in labels)  # as lane_layout sizes the margin for its labels
        figure.update_yaxes(ticktext=labels)
        figure.update_layout(margin={"l": max(width, figure.layout.margin.l or 0)})
    return figure
