"""Small UI pieces under every chart: downloads, metric cards, error messages."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import streamlit as st

from app_pages import plot
from pipesim.io import chrome_trace, formats
from pipesim.ir import Schedule
from pipesim.records import Timeline
from pipesim.sim.metrics import Metrics
from pipesim.units import format_bytes


def figure_downloads(fig: go.Figure, name: str, key: str, sig: str) -> None:
    """HTML at once (built on click); PNG/SVG/PDF only when asked, since Chromium takes seconds."""
    from pipesim.charts import export

    with st.popover("Export chart", icon=":material/download:"):
        st.download_button(
            "Interactive HTML",
            data=lambda: export.html_bytes(fig),
            file_name=f"{name}.html",
            mime="text/html",
            on_click="ignore",
            key=f"{key}-html",
            width="stretch",
        )
        stored = st.session_state["exports"].get(key)
        if stored is None or stored[0] != sig:
            if st.button("Prepare PNG, SVG and PDF", key=f"{key}-prepare", width="stretch"):
                with st.spinner("Rendering images in Chromium…"):
                    try:
                        files: dict[str, bytes] | str = export.export_figures([fig], export.IMAGE_FORMATS)[0]
                    except export.ExportUnavailable as error:
                        files = str(error)
                stored = (sig, files)
                st.session_state["exports"][key] = stored
        if stored is not None and stored[0] == sig:
            files = stored[1]
            if isinstance(files, str):
                st.warning(files)
            else:
                for fmt, data in files.items():
                    st.download_button(
                        fmt.upper(),
                        data=data,
                        file_name=f"{name}.{fmt}",
                        mime=export.MIME_TYPES[fmt],
                        on_click="ignore",
                        key=f"{key}-{fmt}",
                        width="stretch",
                    )


def data_downloads(
    timeline: Timeline,
    schedule: Schedule | None,
    metrics: Metrics | None,
    name: str,
    key: str,
    timeline_label: str = "",
) -> None:
    """Timeline JSON, schedule CSV (torch's format) and a Chrome trace for Perfetto; built on click.

    `timeline_label` (e.g. "measured") goes into the timeline and trace file names only: the CSV is the schedule.
    """
    label = f"{name}-{timeline_label}" if timeline_label else name
    summary = metrics.to_dict() if metrics is not None else None
    columns = st.columns(3)
    columns[0].download_button(
        "Timeline JSON",
        data=lambda: json.dumps(formats.timeline_to_dict(timeline, summary), indent=1),
        file_name=f"{label}-timeline.json",
        mime="application/json",
        on_click="ignore",
        key=f"{key}-tl",
        icon=":material/data_object:",
    )
    if schedule is not None:
        columns[1].download_button(
            "Schedule CSV (torch)",
            data=lambda: formats.schedule_to_csv(schedule, "auto"),
            file_name=f"{name}.csv",
            mime="text/csv",
            on_click="ignore",
            key=f"{key}-csv",
            icon=":material/table:",
        )
    columns[2].download_button(
        "Chrome trace (Perfetto)",
        data=lambda: json.dumps(chrome_trace.timeline_to_chrome_trace(timeline)),
        file_name=f"{label}-trace.json",
        mime="application/json",
        on_click="ignore",
        key=f"{key}-trace",
        icon=":material/timeline:",
    )


def metric_cards(metrics: Metrics, max_rank_cards: int = 8, inner_bubble: float | None = None) -> None:
    """Headline numbers, then each rank's bubble and peak activation memory."""
    peak = max(metrics.ranks, key=lambda r: r.peak_activation_bytes)
    top = st.columns(4 if inner_bubble is None else 5)
    top[0].metric("Makespan", f"{metrics.makespan:,.3f} ms")
    top[1].metric(
        "Bubble fraction",
        f"{metrics.bubble_fraction:.1%}",
        help="idle / (ranks × makespan): the whole step, with the start ramp and the drain",
    )
    top[2].metric("Bubble ratio", f"{metrics.bubble_ratio:.3f}", help="idle / busy")
    if inner_bubble is not None:
        top[4].metric(
            "Per-stage bubble",
            f"{inner_bubble:.1%}",
            help="idle between each rank's first and last action / the time between them: the "
            "zero-bubble paper's per-stage bubble, which leaves out the ramp and the drain",
        )
    top[3].metric(
        "Peak activations",
        format_bytes(peak.peak_activation_bytes),
        help=f"highest on rank {peak.rank}: {peak.peak_activations} microbatches stashed",
    )
    if len(metrics.ranks) <= max_rank_cards:
        cards = st.columns(len(metrics.ranks))
        for card, rank in zip(cards, metrics.ranks, strict=True):
            card.metric(
                f"Rank {rank.rank} peak",
                format_bytes(rank.peak_activation_bytes),
                f"{rank.peak_activations} stashed · idle {rank.bubble_fraction:.0%}",
                delta_color="off",
                delta_arrow="off",
            )
    else:
        # A markdown table in a closed expander, not st.dataframe: the data grid's code and pandas cost a
        # 32-rank page about half a second in the browser (bench/bench_app_load_ab.py --large).
        worst = max(metrics.ranks, key=lambda r: r.bubble_fraction)
        with st.expander(
            f"Each rank's bubble and peak memory ({len(metrics.ranks)} ranks; most idle: rank "
            f"{worst.rank}, {worst.bubble_fraction:.1%})"
        ):
            rows = [
                f"| {r.rank} | {r.bubble_fraction:.1%} | {r.peak_activations} | "
                f"{format_bytes(r.peak_activation_bytes)} |"
                for r in metrics.ranks
            ]
            st.markdown("\n".join(["| rank | bubble | peak stashed | peak memory |", "|---:|---:|---:|---:|", *rows]))


def show_error(error: Exception, what: str = "") -> None:
    """A plain message for bad input: no traceback, the problem and the valid choices."""
    st.error(f"{what}{': ' if what else ''}{error}", icon=":material/error:")


def take_selected_window(chart_key: str, window_key: str, total: float) -> None:
    """The x range just dragged across a binned Gantt (plot.show's select) becomes the time window of the slider
    `window_key`: the chart's on_select callback, which runs before the slider is drawn."""
    picked = plot.selected_range(chart_key)
    if picked is None:
        return
    window = (max(0.0, picked[0]), min(float(total), picked[1]))
    if window[1] > window[0]:
        st.session_state[window_key] = window


def reset_window(window_key: str, total: float) -> None:
    """Back to the whole step (a button's callback, so it runs before the slider is drawn)."""
    st.session_state[window_key] = (0.0, float(total))
