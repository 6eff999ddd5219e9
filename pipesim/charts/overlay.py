"""Measured over simulated, rank by rank on one time axis: two lanes per rank, each measured action's hover
giving its simulated time and the difference (`pipesim.analysis.overlay`'s alignment and error)."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go

from pipesim.analysis.overlay import align_step, pick_step, prediction_error
from pipesim.charts.lanes import KIND_COLORS, by_kind, lane_layout, lane_rows, lighten, span_bars
from pipesim.records import Timeline, select_replica
from pipesim.sim.metrics import makespan
from pipesim.units import SIGNED_TIME_SPEC, format_ms, format_percent, hover_ms, hover_percent


def overlay_figure(simulated: Timeline, measured: Timeline, step: int | None = None) -> go.Figure:
    """Simulated and measured, rank by rank on one time axis: two rows per rank.

    `step` picks one measured step (None: the last, past warm-up); its times are
    shifted to start at 0 like the simulation's.
    """
    real = pick_step(select_replica(measured, 0), step)  # the simulation is of one replica
    num_ranks = max(simulated.num_ranks, real.num_ranks)
    labels = [f"rank {r} · {which}" for r in range(num_ranks) for which in ("simulated", "measured")]
    deltas = {(d.rank, d.action): d for d in align_step(simulated, real)}
    traces = []
    for kind, spans in by_kind(simulated.spans).items():
        if spans:
            traces.append(
                span_bars(
                    spans,
                    lane_rows(spans, 2, 0),
                    kind,
                    f"{kind} simulated",
                    color=lighten(KIND_COLORS[kind], 0.55),
                    legendgroup=kind,
                )
            )
    for kind, spans in by_kind(real.spans).items():
        if not spans:
            continue
        extra = np.array([_delta_cells(deltas.get((s.rank, s.action))) for s in spans], dtype=float)
        extra = extra.reshape(len(spans), 3)
        traces.append(
            span_bars(
                spans,
                lane_rows(spans, 2, 1),
                kind,
                f"{kind} measured",
                legendgroup=kind,
                extra_data=extra,
                extra_hover=f"<br>simulated {hover_ms('customdata[6]')}<br>predicted - measured "
                f"%{{customdata[7]:{SIGNED_TIME_SPEC}}} ms ({hover_percent('customdata[8]', signed=True)})",
            )
        )
    return lane_layout(go.Figure(data=traces), labels, _overlay_title(simulated, real))


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
