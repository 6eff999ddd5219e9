"""Write a measurement variant of the app whose Simulate page draws the memory chart as a second row of the
Gantt figure (one st.plotly_chart instead of two), to time what one chart to mount saves on a first visit
(docs/benchmarks.md, first page load). Derived from app.py and app_pages/simulate.py as they are, so the variant
differs from the app in that one place only:

    python bench/variants/make_one_chart.py   # writes app_one_chart.py, simulate_one_chart.py (git-ignored)
    python bench/bench_app_load_ab.py --visits 7 app.py app_one_chart.py

Both files go to the repository root: Streamlit resolves a page's path from the main script's folder.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The page's two charts (the Gantt with its drag-to-window, then the memory chart) become one figure.
ONE_CHART = '''memory = cached.memory_chart(schedule, cost)
combined = go.Figure(gantt)
for trace in memory.data:
    combined.add_trace(go.Scatter(trace).update(yaxis="y2", xaxis="x", showlegend=False))
height = gantt.layout.height
combined.update_layout(height=height + 320, yaxis={"domain": [320 / (height + 320) + 0.04, 1]},
                       yaxis2={"domain": [0, 280 / (height + 320)], "anchor": "x", "title": "memory"},
                       xaxis={"anchor": "y2"})
st.plotly_chart(combined, key="sim-gantt", config={"displaylogo": False})
widgets.figure_downloads(gantt, f"{schedule.name}-gantt", "sim-gantt-export", sig)
widgets.figure_downloads(memory, f"{schedule.name}-memory", "sim-memory-export", sig)

'''


def _replace(text: str, start: str, end: str, new: str) -> str:
    """`text` with the part from `start` up to (not including) `end` replaced; both must be there."""
    if start not in text or end not in text:
        raise SystemExit(f"the page changed: {start!r} or {end!r} not found; update this variant")
    return text[:text.index(start)] + new + text[text.index(end):]


def main() -> None:
    page = (ROOT / "app_pages" / "simulate.py").read_text()
    page = page.replace("import streamlit as st\n", "import plotly.graph_objects as go\nimport streamlit as st\n", 1)
    page = _replace(page, "binned = bool(gantt.layout.images)", 'st.subheader("Data")', ONE_CHART)
    app = (ROOT / "app.py").read_text()
    if '"app_pages/simulate.py"' not in app:
        raise SystemExit("app.py no longer names app_pages/simulate.py; update this variant")
    (ROOT / "simulate_one_chart.py").write_text(page)
    (ROOT / "app_one_chart.py").write_text(app.replace('"app_pages/simulate.py"', '"simulate_one_chart.py"'))
    print(f"wrote {ROOT / 'app_one_chart.py'} and {ROOT / 'simulate_one_chart.py'}")


if __name__ == "__main__":
    main()
