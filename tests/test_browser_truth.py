"""Issue 33 in the real browser (tests/test_browser.py's server and Chromium): the app tells the truth off the happy
path. The critical path is visible in the dark theme (lines, outlines and legend swatch); a refused form field
says why beside it and the chart is marked as not updated; a preset's link restores its model.

Skipped cleanly where Chromium or Playwright is missing (as tests/test_browser.py).
"""

from __future__ import annotations

import re

import pytest

from tests.helpers.browser_checks import problems
from tests.test_browser import (  # noqa: F401  (fixtures)
    VIEWPORT,
    app_url,
    browser,
    page,
    runs_root,
)

pytestmark = pytest.mark.browser

# The colours the critical path is drawn with in the dark theme, from the plot's drawn SVG (legend swatch included).
CRITICAL_STROKES = """() => {
  const out = [];
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    for (const item of plot.querySelectorAll('.legend .traces')) {
      if (!/critical path/.test(item.textContent)) continue;
      for (const p of item.querySelectorAll('.legendpoints path, .legendlines path, .legendsymbols path'))
        out.push(getComputedStyle(p).stroke);
    }
  }
  return out;
}"""


def _settled(tab) -> None:
    tab.wait_for_function(
        "() => [...document.querySelectorAll('.pipesim-plot')].every(p => p.dataset.theme"
        " && p.querySelector('g.trace, .imagelayer')) && !document.querySelector('[data-testid=stStatusWidget]')",
        polling=100,
    )


def _brightness(css: str) -> int:
    return sum(map(int, re.findall(r"\d+", css)[:3]))


@pytest.mark.parametrize("view", ["?sim-critical=true", "dag"])
def test_the_critical_path_shows_in_the_dark_theme(browser, app_url: str, view: str) -> None:  # noqa: F811
    """Item 4: drawn near-black, the critical path (and its legend swatch) vanished on the dark page."""
    context = browser.new_context(viewport=VIEWPORT, color_scheme="dark")
    tab = context.new_page()
    tab.set_default_timeout(90_000)
    try:
        tab.goto(f"{app_url}/{view}")
        tab.wait_for_selector(".js-plotly-plot g.trace", timeout=120_000)
        _settled(tab)
        assert tab.evaluate("document.querySelector('.pipesim-plot').dataset.theme") == "dark"
        strokes = tab.evaluate(CRITICAL_STROKES)
        assert strokes and all(_brightness(s) > 3 * 150 for s in strokes), strokes
        drawn = tab.evaluate(
            "[...document.querySelector('.js-plotly-plot')._fullData].filter(t => /critical path/.test(t.name))"
            ".map(t => (t.marker && t.marker.line && t.marker.line.width ? t.marker.line.color : t.line.color))"
        )
        assert drawn and all(c.lower() != "#111111" for c in drawn), drawn
    finally:
        context.close()


def test_a_refused_field_is_said_beside_it_and_the_chart_marked(page, app_url: str) -> None:  # noqa: F811
    """Item 3: microbatches 16 and F = -5 used to leave the 8-microbatch chart with only a small red "!"."""
    page.goto(f"{app_url}/")
    page.wait_for_selector(".js-plotly-plot g.trace", timeout=120_000)
    _settled(page)
    sidebar = page.get_by_test_id("stSidebar")
    sidebar.get_by_role("spinbutton", name="Microbatches").fill("16")
    sidebar.get_by_role("spinbutton", name="F (ms)").fill("-5")
    sidebar.get_by_role("button", name="Simulate").click()
    page.get_by_text("Chart not updated").wait_for()
    assert sidebar.get_by_text("F (ms) = -5 is below its minimum 0").is_visible()
    warning = page.get_by_test_id("stAlert").filter(has_text="Chart not updated").inner_text()
    assert "8 microbatches" in warning, warning
    _settled(page)
    assert "8 microbatches" in page.locator(".js-plotly-plot .gtitle").first.text_content()
    sidebar.get_by_role("spinbutton", name="F (ms)").fill("1")
    sidebar.get_by_role("button", name="Simulate").click()
    page.wait_for_function(
        "() => /16 microbatches/.test(document.querySelector('.js-plotly-plot .gtitle').textContent)"
    )
    assert page.get_by_text("Chart not updated").count() == 0
    assert problems(page) == {}
