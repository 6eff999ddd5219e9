"""app_pages.parts.plot: every chart of the app drawn with plotly.js's cartesian bundle served from static/.

The bundle must be the plotly.js the plotly package writes figures for, and hold every trace type the pages
draw; without static serving the pages fall back to st.plotly_chart; a dragged range becomes the Simulate
page's time window. (The real browser draws through it in tests/test_browser.py.)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

import plotly.graph_objects as go
import plotly.offline
import pytest
from streamlit import config

from app_pages.parts import plot, widgets
from tests.helpers.app_charts import chart_figures

BUNDLE = plot.STATIC_DIR / plot.PLOTLY_JS
SUBMIT = "FormSubmitter:sim-form-Simulate"


def bundle_trace_types() -> set[str]:
    return set(re.findall(r'moduleType:"trace",name:"(\w+)"', BUNDLE.read_text()))


def test_the_bundle_is_the_plotly_js_that_the_plotly_package_writes_for() -> None:
    head = BUNDLE.read_text()[:200]
    assert f"plotly.js (cartesian - minified) v{plotly.offline.get_plotlyjs_version()}" in head, head
    assert {"bar", "scatter", "heatmap"} <= bundle_trace_types()
    assert (plot.STATIC_DIR / "plotly.js-LICENSE").read_text().startswith("MIT License")


@pytest.fixture
def static_serving() -> Callable[[bool], None]:
    """Set server.enableStaticServing for one test (the project's config turns it on) and restore it."""
    before = config.get_option("server.enableStaticServing")
    yield lambda on: config.set_option("server.enableStaticServing", on)
    config.set_option("server.enableStaticServing", before)


def test_every_page_draws_through_the_bundle_with_trace_types_it_holds(open_page, static_serving) -> None:
    static_serving(True)
    shown: set[str] = set()
    for page in (None, "compare", "dag", "custom", "plan"):
        at = open_page(page)
        assert not at.get("plotly_chart"), page
        figures = chart_figures(at)
        assert figures, page
        shown |= {trace.get("type", "scatter") for figure in figures for trace in figure["data"]}
    at = open_page()  # a binned Gantt: its hover cells are a heatmap
    at.number_input(key="ranks").set_value(32)
    at.number_input(key="microbatches").set_value(400)
    at.button(key=SUBMIT).click().run()
    shown |= {trace.get("type", "scatter") for trace in chart_figures(at)[0]["data"]}
    assert {"bar", "scatter", "heatmap"} <= shown
    assert shown <= bundle_trace_types(), shown - bundle_trace_types()


def test_without_static_serving_the_pages_use_st_plotly_chart(open_page, static_serving) -> None:
    static_serving(False)
    at = open_page()
    assert len(at.get("plotly_chart")) == 2 and not at.get("bidi_component")
    assert chart_figures(at)[0]["layout"]["title"]["text"].startswith("1f1b")


def test_the_component_gets_the_figure_in_the_light_theme_and_the_bundle_url(open_page, static_serving) -> None:
    static_serving(True)
    at = open_page()
    data = json.loads(at.get("bidi_component")[0].proto.json)
    assert data["src"] == f"/app/static/{plot.PLOTLY_JS}" and data["select"] is False
    figure = json.loads(data["figure"])
    assert figure["layout"]["template"] == plot.LIGHT_TEMPLATE
    # Streamlit's own template is placeholders (#000001 ...) that only its plotly element replaces.
    assert not re.search(r"#0000[0-9a-f]{2}\b", data["figure"])


def test_the_bundle_url_follows_the_server_base_path(static_serving) -> None:
    static_serving(True)
    before = config.get_option("server.baseUrlPath")
    try:
        config.set_option("server.baseUrlPath", "/tools/pipesim/")
        assert plot._static_url() == f"/tools/pipesim/app/static/{plot.PLOTLY_JS}"
    finally:
        config.set_option("server.baseUrlPath", before)


def test_a_binned_gantt_is_drawn_for_a_drag_select(open_page, static_serving) -> None:
    static_serving(True)
    at = open_page()
    at.number_input(key="ranks").set_value(32)
    at.number_input(key="microbatches").set_value(400)
    at.button(key=SUBMIT).click().run()
    data = json.loads(at.get("bidi_component")[0].proto.json)
    layout = json.loads(data["figure"])["layout"]
    assert data["select"] is True and layout["dragmode"] == "select" and layout["selectdirection"] == "h"


@pytest.mark.parametrize(
    ("state", "window"),
    [
        ({"select": [70.0, 20.0]}, (20.0, 70.0)),  # dragged right to left
        ({"select": [-5.0, 30.0]}, (0.0, 30.0)),  # clipped to the step
        ({"select": [90.0, 130.0]}, (90.0, 100.0)),
        ({"select": None}, None),  # a rerun that no drag caused
        ({"select": [150.0, 160.0]}, None),  # wholly past the step: nothing to show
    ],
)
def test_a_dragged_range_becomes_the_time_window(monkeypatch, state: dict, window: tuple | None) -> None:
    session: dict = {"sim-gantt": state}
    monkeypatch.setattr(widgets.st, "session_state", session)
    monkeypatch.setattr(plot.st, "session_state", session)
    widgets.take_selected_window("sim-gantt", "sim-window", 100.0)
    assert session.get("sim-window") == window


def test_figure_json_leaves_the_cached_figure_alone() -> None:
    fig = go.Figure(go.Bar(x=[1, 2], y=["a", "b"], orientation="h"))
    before = fig.to_json()
    spec = json.loads(plot.figure_json(fig, select=True))
    assert spec["layout"]["template"] == plot.LIGHT_TEMPLATE and spec["layout"]["dragmode"] == "select"
    assert fig.to_json() == before


def test_html_export_inlines_the_cartesian_bundle_once_styled_as_the_page() -> None:
    """Issue 23 item 16: the HTML export of a 256-action Gantt holds plotly.js once, the 1.4 MB cartesian bundle
    the app serves (not plotly's full 4.6 MB one), and the page's template (its title and fonts).

    Catches the 4.9 MB export (the full bundle inlined) and an export in plotly's default look."""
    from pipesim.charts import export
    from pipesim.charts.gantt import gantt_figure
    from pipesim.cost.model import CostModel
    from pipesim.schedules import build_schedule
    from pipesim.sim.steps import simulate_step

    timeline = simulate_step(build_schedule("1f1b", 4, 32), CostModel.uniform()).timeline
    assert len(timeline.spans) == 256
    page = export.html_bytes(plot.styled(gantt_figure(timeline)), plot.bundle_text()).decode()
    assert len(page) < 1.6e6, len(page)
    assert page.count("plotly.js (cartesian - minified)") == 1 and page.count("<script") == 2  # bundle, figure
    assert '"xanchor":"left"' in page and "Source Sans" in page  # the page's title placement and font
