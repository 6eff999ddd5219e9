"""plotly figures (they draw what they are given) and their export.

Its face is its figure modules themselves (gantt, dag, memory, compare, overlay, attribution, plan, verify: one
figure each; export: images and HTML) and the constants and records below, which the app reads beside them."""

from __future__ import annotations

from pipesim._face import lazy_exports

# The package's face (docs/design.md, "The app through pipesim's faces"): each name and the module defining it,
# loaded on first use.
FACE = {
    "COLOR_BY": "pipesim.charts.gantt",
    "MAX_EXACT_BARS": "pipesim.charts.gantt",
    "CRITICAL_COLOR": "pipesim.charts.lanes",
    "mark_stragglers": "pipesim.charts.overlay",
    "IntervalRow": "pipesim.charts.verify",
}
__all__ = sorted(FACE)
__getattr__ = lazy_exports(__name__, FACE)
