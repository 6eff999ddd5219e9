"""AppTest of a newcomer's way in: the landing section in the order a user works, the tour
that runs without typing, the glossary, the Plan page's presets, and the Run page's empty state."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from app_pages.parts.guide import TOUR
from pipesim.units import QUANTITIES
from tests.helpers.app_charts import chart_titles


@pytest.fixture
def app(open_page) -> AppTest:
    return open_page()


def test_the_landing_section_lists_the_pages_in_the_order_a_user_works(app: AppTest) -> None:
    [landing] = [e for e in app.expander if e.label.startswith("New here?")]
    links = [link.label for link in app.get("page_link")]
    assert links[:4] == ["1. Simulate", "2. Compare", "3. Plan", "4. Run"]
    assert any("overlay" in m.value for m in landing.markdown)
    assert app.button(key="tour-start") is not None


def test_the_tour_walks_every_stop_by_buttons_alone(app: AppTest) -> None:
    """Simulate (zb-h1), Compare, Plan (the small preset), Run (the form set for a short CPU run), the overlay:
    each Next opens its page with its settings; nothing is typed. Catches a Next that only changes the banner
    (a button's callback cannot switch pages) and a stop whose settings never reach its page's widgets."""
    app.button(key="tour-start").click().run()
    assert any(m.value.startswith("**Tour, stop 1 of 5: Simulate.**") for m in app.markdown)
    assert chart_titles(app)[0].startswith("zb-h1: 4 ranks")
    pages = []
    for index in range(1, len(TOUR)):
        app.button(key="tour-next").click().run()
        assert not app.exception, app.exception
        stop = TOUR[index]
        assert any(m.value.startswith(f"**Tour, stop {index + 1} of 5: {stop.title}.**") for m in app.markdown)
        pages.append(app.title[0].value)
        if stop.page == "plan":
            assert app.number_input(key="plan-devices").value == 2 and app.selectbox(key="plan-dtype").value == "fp32"
        if stop.title == "Run":
            assert app.number_input(key="ranks").value == 2 and app.selectbox(key="run-size").value == "tiny"
            assert app.selectbox(key="run-device").value == "cpu" and app.toggle(key="run-profile").value
    assert pages == ["Compare schedules", "Plan a pipeline", "Run a schedule for real", "Run a schedule for real"]
    app.button(key="tour-end").click().run()
    assert not any(m.value.startswith("**Tour") for m in app.markdown)


def test_the_glossary_names_each_quantity_once(app: AppTest) -> None:
    text = "\n".join(m.value for m in app.sidebar.markdown)
    for quantity in QUANTITIES.values():
        assert f"**{quantity.name}**" in text
    assert text.count("**step time**") == 1 and "step_ms" in text


def test_plan_presets_fill_the_form(open_page) -> None:
    """A small model that runs here, a 7B-class and a 70B-class one; each fills the form and plans."""
    at = open_page("plan")
    for preset, devices in (
        ("small (runs here in seconds)", 2),
        ("7B-class on 8 GPUs", 8),
        ("70B-class on 32 GPUs", 32),
    ):
        at.selectbox(key="plan-preset").set_value(preset).run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        assert at.number_input(key="plan-devices").value == devices
        assert any(m.value.startswith("- ") and "best:" in m.value for m in at.markdown)


def test_the_run_pages_empty_state_points_at_the_launch_button(open_page) -> None:
    at = open_page("run")
    assert any("press **Launch run**" in i.value for i in at.info)
