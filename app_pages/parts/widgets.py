"""Small UI pieces under every chart: downloads, metric cards, error messages."""

from __future__ import annotations

import functools
import json
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from app_pages.parts import plot
from pipesim.io import schedule_to_csv, timeline_to_chrome_trace, timeline_to_dict
from pipesim.ir import Schedule
from pipesim.records import Timeline
from pipesim.sim import Metrics
from pipesim.units import (
    BYTES_DECIMALS,
    PERCENT_DECIMALS,
    RATIO_DECIMALS,
    TIME_DECIMALS,
    format_bytes,
    format_count,
    format_ms,
    format_percent,
    format_ratio,
    quantity,
)


@st.cache_resource(show_spinner=False)
def _export_browser() -> bool:
    """One Chromium for every image this server renders (kaleido's shared server), started on the first image a
    user asks for: a browser per image cost seconds each. True once it runs."""
    from pipesim.charts import export

    export.start_export_server()
    return True


def image_bytes(fig: go.Figure, fmt: str) -> bytes:
    """`fig` as a PNG, SVG or PDF as the page shows it (plot.styled), rendered when the user clicks its download
    (the button's deferred data)."""
    from pipesim.charts import export

    _export_browser()
    return export.figure_bytes(plot.styled(fig), fmt)


def figure_downloads(fig: go.Figure, name: str, key: str, sig: str) -> None:
    """The chart as the user sees it (the page's template: title, fonts, colours), as HTML (plotly.js's cartesian
    bundle inlined once) or as an image; each file is made only when its button is clicked. `sig` is kept for the
    callers' signature of what is drawn. The styled copy is made on click too: made on every rerun it cost
    about 130 ms per chart (a full validation of the figure and the template)."""
    from pipesim.charts import export

    with st.popover("Export chart", icon=":material/download:"):
        st.download_button(
            "Interactive HTML",
            data=lambda: export.html_bytes(plot.styled(fig), plot.bundle_text()),
            file_name=f"{name}.html",
            mime="text/html",
            on_click="ignore",
            key=f"{key}-html",
            width="stretch",
        )
        if not export.images_available():
            st.warning(export.unavailable_reason() or export.NO_BROWSER_MESSAGE, icon=":material/warning:")
            return
        st.caption("Images are drawn when clicked (a few seconds for the first one).")
        for column, fmt in zip(st.columns(len(export.IMAGE_FORMATS)), export.IMAGE_FORMATS, strict=True):
            column.download_button(
                fmt.upper(),
                data=functools.partial(image_bytes, fig, fmt),
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
        data=lambda: json.dumps(timeline_to_dict(timeline, summary), indent=1),
        file_name=f"{label}-timeline.json",
        mime="application/json",
        on_click="ignore",
        key=f"{key}-tl",
        icon=":material/data_object:",
    )
    if schedule is not None:
        columns[1].download_button(
            "Schedule CSV (torch)",
            data=lambda: schedule_to_csv(schedule, "auto"),
            file_name=f"{name}.csv",
            mime="text/csv",
            on_click="ignore",
            key=f"{key}-csv",
            icon=":material/table:",
        )
    columns[2].download_button(
        "Chrome trace (Perfetto)",
        data=lambda: json.dumps(timeline_to_chrome_trace(timeline)),
        file_name=f"{label}-trace.json",
        mime="application/json",
        on_click="ignore",
        key=f"{key}-trace",
        icon=":material/timeline:",
    )


def time_column(key: str, label: str | None = None) -> Any:
    """A table column of milliseconds, titled and formatted as every page shows the quantity `key`."""
    what = quantity(key)
    return st.column_config.NumberColumn(label or what.heading, format=f"%.{TIME_DECIMALS}f", help=what.meaning)


def text_column(key: str, label: str | None = None) -> Any:
    """A column of figures already formatted (pipesim.units), under the quantity `key`'s name and meaning."""
    what = quantity(key)
    return st.column_config.TextColumn(label or what.name, help=what.meaning)


def ratio_column(key: str) -> Any:
    what = quantity(key)
    return st.column_config.NumberColumn(what.heading, format=f"%.{RATIO_DECIMALS}f", help=what.meaning)


def bytes_column(key: str, unit: str) -> Any:
    """A column of byte values already divided into `unit` (pipesim.units.binary_unit)."""
    what = quantity(key)
    return st.column_config.NumberColumn(f"{what.name} ({unit})", format=f"%.{BYTES_DECIMALS}f", help=what.meaning)


def percent_column(key: str, label: str | None = None, signed: bool = False) -> Any:
    """A column of percentages (the caller multiplies fractions by 100) with the app's decimals: "11.9%"."""
    what = quantity(key)
    return st.column_config.NumberColumn(
        label or what.name, format=f"%{'+' if signed else ''}.{PERCENT_DECIMALS}f%%", help=what.meaning
    )


def card(column: Any, key: str, value: str, note: str = "") -> None:
    """One headline number under its glossary name (pipesim.units.QUANTITIES), its meaning as the help."""
    what = quantity(key)
    column.metric(what.label, value, help=what.meaning + (f" {note}" if note else ""))


def metric_cards(metrics: Metrics, step_ms: float, inner_bubble: float | None = None) -> None:
    """Headline numbers, then each rank's bubble and peak activation memory in a table (cards truncate past a
    handful of ranks; a table keeps each number whole with its unit and its words)."""
    peak = max(metrics.ranks, key=lambda r: r.peak_activation_bytes)
    top = st.columns(4 if inner_bubble is None else 5)
    card(top[0], "step_time", format_ms(step_ms))
    card(top[1], "bubble_fraction", format_percent(metrics.bubble_fraction))
    card(top[2], "bubble_ratio", format_ratio(metrics.bubble_ratio))
    if inner_bubble is not None:
        card(top[3], "inner_bubble", format_percent(inner_bubble))
    card(
        top[-1],
        "peak_activations",
        format_bytes(peak.peak_activation_bytes),
        f"Highest on rank {peak.rank}: {format_count(peak.peak_activations, 'microbatch')} stashed.",
    )
    rank_table(metrics)


def rank_table(metrics: Metrics) -> None:
    """Each rank's idle share, peak activations and the microbatches stashed at that peak, in a closed expander
    under the cards (a markdown table, not st.dataframe: the data grid's code and pandas cost a 32-rank page
    about half a second in the browser, bench/bench_app_load_ab.py --large)."""
    worst = max(metrics.ranks, key=lambda r: r.bubble_fraction)
    rows = [
        f"| {r.rank} | {format_percent(r.bubble_fraction)} | {format_bytes(r.peak_activation_bytes)} | "
        f"{format_count(r.peak_activations, 'microbatch')} |"
        for r in metrics.ranks
    ]
    header = "| rank | idle | peak activations | stashed at that peak |"
    with st.expander(
        f"Each rank: idle share and peak activations ({format_count(len(metrics.ranks), 'rank')}; most idle: "
        f"rank {worst.rank}, {format_percent(worst.bubble_fraction)})",
    ):
        st.markdown("\n".join([header, "|---:|---:|---:|---:|", *rows]))


def show_error(error: Exception, what: str = "") -> None:
    """A plain message for bad input: no traceback, the problem and the valid choices."""
    st.error(f"{what}{': ' if what else ''}{error}", icon=":material/error:")


def slider_format(total_ms: float) -> str:
    """A time slider's number format: as many decimals as a step of `total_ms` needs to be told apart on a slider
    (3,103 ms reads 3103, 42 ms reads 42.0, 0.8 ms reads 0.80); the unit is in its label."""
    return "%.0f" if total_ms >= 100 else "%.1f" if total_ms >= 10 else "%.2f"


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
