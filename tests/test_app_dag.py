"""AppTest of the DAG page: lanes and edges, the critical path, a deadlock's cycle, the size cap."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from pipesim.analysis.critical_path import critical_path
from pipesim.cost.convert import cost_from_times
from pipesim.schedules import build_schedule
from pipesim.sim.simulate import simulate
from tests.helpers.app_charts import chart_figures

SUBMIT = "FormSubmitter:dag-form-Draw"


@pytest.fixture
def app(open_page) -> AppTest:
    return open_page("dag")


def figure(at: AppTest) -> dict:
    (chart,) = chart_figures(at)
    return chart


def trace_names(at: AppTest) -> list[str]:
    return [t.get("name") for t in figure(at)["data"]]


def test_default_graph_with_critical_path(app: AppTest) -> None:
    assert not app.error
    names = trace_names(app)
    assert "data dependency" in names and "order (same rank)" in names  # edge kinds told apart
    assert "critical path" in names
    schedule = build_schedule("1f1b", 4, 8)  # the schedule and costs every page shares (Simulate's)
    cost = cost_from_times([1.0], [2.0], [1.0], [0.0], activation_bytes=[2**20]).for_pipeline(4, 4)
    expected = critical_path(schedule, simulate(schedule, cost), cost)
    assert any(c.value == "Critical path: " + " → ".join(map(str, expected)) for c in app.caption)
    lanes = figure(app)["layout"]["yaxis"]["ticktext"]
    assert lanes == ["rank 0", "rank 1", "rank 2", "rank 3"]


def test_critical_path_can_be_hidden(app: AppTest) -> None:
    app.toggle(key="dag-critical").set_value(False).run()
    assert "critical path" not in trace_names(app)


def test_changing_the_schedule(app: AppTest) -> None:
    app.selectbox(key="schedule").set_value("zb-h1")
    app.button(key=SUBMIT).click().run()
    assert figure(app)["layout"]["title"]["text"].startswith("zb-h1")
    assert any("W" in (n or "") for n in trace_names(app))  # split backward nodes drawn


def test_deadlock_example_shows_the_cycle(app: AppTest) -> None:
    app.radio(key="dag-origin").set_value("Deadlock example").run()
    assert len(app.error) == 1 and "Deadlock" in app.error[0].value
    assert "waits at" in app.error[0].value  # who waits on whom
    names = trace_names(app)
    assert "deadlock cycle" in names and "critical path" not in names


def test_custom_schedule_from_the_custom_page(app: AppTest) -> None:
    app.session_state["custom_csv"] = "0F0,0F1,0B0,0B1\r\n1F0,1B0,1F1,1B1\r\n"
    app.radio(key="dag-origin").set_value("Custom schedule (Custom page)").run()
    assert not app.error
    assert figure(app)["layout"]["title"]["text"].startswith("custom")


def test_malformed_custom_schedule_is_explained(app: AppTest) -> None:
    app.session_state["custom_csv"] = "0F0,0F1,0B0\r\n1F0,1B0,1F1,1B1\r\n"  # 0B1 missing
    app.radio(key="dag-origin").set_value("Custom schedule (Custom page)").run()
    assert "not well formed" in app.error[0].value
    assert not chart_figures(app) and not app.exception


def test_large_schedules_are_capped(app: AppTest) -> None:
    app.number_input(key="ranks").set_value(16)
    app.number_input(key="microbatches").set_value(64)
    app.button(key=SUBMIT).click().run()
    assert any("1,500 actions" in w.value for w in app.warning)
    assert not chart_figures(app) and not app.exception


def test_impossible_parameters(app: AppTest) -> None:
    app.selectbox(key="schedule").set_value("interleaved-1f1b")
    app.number_input(key="microbatches").set_value(9)  # 4 ranks: 2 rounds of 4.5, which torch refuses too
    app.button(key=SUBMIT).click().run()
    assert "multiple of its number of rounds" in app.error[0].value
    assert not app.exception


def test_chunks_only_for_the_schedules_that_take_them(app: AppTest) -> None:
    """Issue 13 item 10 on the DAG page: "Chunks per rank" disabled beside 1f1b, with the reason."""
    assert app.number_input(key="chunks").disabled and "one stage per rank" in app.number_input(key="chunks").help
    app.selectbox(key="schedule").set_value("interleaved-1f1b")
    app.number_input(key="ranks").set_value(2)
    app.button(key="FormSubmitter:dag-form-Draw").click().run()
    assert not app.number_input(key="chunks").disabled
    assert not app.error
