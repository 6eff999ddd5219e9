"""Issue 33 in the real browser (tests/test_browser.py's server and Chromium): the app tells the truth off the happy
path. The critical path is visible in the dark theme (lines, outlines and legend swatch); a refused form field
says why beside it and the chart is marked as not updated; a preset's link restores its model.

Skipped cleanly where Chromium or Playwright is missing (as tests/test_browser.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import parse_qs, quote, urlparse

import pytest
from playwright.sync_api import expect

from app_pages.parts.plan.presets import SMALL
from pipesim_executor.host import run_folder
from tests.helpers.browser_checks import problems
from tests.helpers.run_folders import write_run
from tests.test_browser import (  # noqa: F401  (fixtures)
    VIEWPORT,
    _pick,
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
    # the Gantt's title, beside the memory chart's: on a busy machine the page can look settled before the rerun
    # draws the Gantt again, so its title is waited for (it must then name 8 microbatches, not 16)
    page.wait_for_function(
        "() => [...document.querySelectorAll('.js-plotly-plot .gtitle')].some(t => /microbatches/.test(t.textContent))",
        timeout=90_000,
    )
    titles = page.locator(".js-plotly-plot .gtitle").all_text_contents()
    assert any("8 microbatches" in t for t in titles) and not any("16 microbatches" in t for t in titles), titles
    sidebar.get_by_role("spinbutton", name="F (ms)").fill("1")
    sidebar.get_by_role("button", name="Simulate").click()
    page.wait_for_function(
        "() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]"
        ".some(t => /16 microbatches/.test(t.textContent))"
    )
    assert page.get_by_text("Chart not updated").count() == 0
    assert problems(page) == {}


@pytest.mark.torchrun
@pytest.mark.timeout(600)
def test_a_timed_out_run_says_so_in_one_sentence(page, app_url: str) -> None:  # noqa: F811
    """Item 1: a timed-out run showed torchrun's shutdown traceback (venv paths, SignalException) instead of one
    sentence with the phase, what was measured and what to do."""
    # 1,000 steps of the medium model: minutes of work on any CPU, so the 10 s timeout always ends it
    page.goto(f"{app_url}/run?ranks=2&microbatches=8&run-size=medium&run-steps=1000&run-timeout=10&run-device=cpu")
    sidebar = page.get_by_test_id("stSidebar")
    sidebar.get_by_role("button", name="Launch run").wait_for()
    sidebar.get_by_role("button", name="Launch run").click()
    alert = page.get_by_test_id("stAlertContentError").filter(has_text="Timed out after 10 s while")
    alert.wait_for(timeout=300_000)
    said = alert.get_by_test_id("stMarkdownContainer").inner_text()
    assert "steps measured" in said and "raise the timeout" in said, said
    assert "Traceback" not in said and "SignalException" not in said and "\n" not in said.strip(), said


def test_a_running_job_never_takes_over_the_form(page, app_url: str, runs_root: Path) -> None:  # noqa: F811
    """Item 2: while another job ran (a Plan verification: 1f1b, 2 ranks, 4 microbatches, 2 steps), the Run form
    took its settings over the user's URL (zb-h1, 3 ranks, 6 microbatches, 7 steps) and Launch would start it."""
    folder = write_run(runs_root, "someone-elses-job", measured=False)
    (folder / "result.json").unlink()
    run_folder.write_progress(folder, {"status": "running", "progress": 0.2, "events": [], "log": []})  # this pid
    try:
        mine = "run?schedule=zb-h1&ranks=3&microbatches=6&run-steps=7"
        page.goto(f"{app_url}/{mine}")
        page.get_by_role("button", name="Cancel it").wait_for(timeout=120_000)  # the job is named in a banner
        page.get_by_text("Its settings: 1f1b, 2 ranks, 4 microbatches").wait_for()
        sidebar = page.get_by_test_id("stSidebar")
        # under load the sidebar may still be drawing its first pass (the widgets' defaults) when the banner shows:
        # the user's values must arrive, and the job's never
        expect(sidebar.get_by_role("spinbutton", name="Microbatches")).to_have_value("6", timeout=60_000)
        expect(sidebar.get_by_role("spinbutton", name="Steps", exact=True)).to_have_value("7", timeout=60_000)
        assert "zb-h1" in sidebar.get_by_role("combobox", name="Schedule").inner_text() or "zb-h1" in page.url
        query = parse_qs(urlparse(page.url).query)
        assert query.get("microbatches") == ["6"] and query.get("ranks") == ["3"], page.url
        assert query.get("run-steps") == ["7"] and query.get("schedule") == ["zb-h1"], page.url
    finally:
        (folder / "result.json").write_text(json.dumps({"status": "cancelled", "message": "", "started_at": 0}))


def test_a_finished_run_reads_true(page, app_url: str, runs_root: Path) -> None:  # noqa: F811
    """Items 7 and 8 on a finished run: the legend off "where the step went"'s axis title (no overlap anywhere),
    no lost-time mark before 0 ms, the loss chart on whole steps, and "Open a run" at the run shown (a newer run
    exists)."""
    write_run(runs_root, "shown-run", step_factors=(1.0, 1.5))
    write_run(runs_root, "zz-newer-run")
    page.goto(f"{app_url}/run?run=shown-run")
    page.wait_for_function("() => document.querySelectorAll('.pipesim-plot g.trace').length >= 3", timeout=120_000)
    _settled(page)
    assert problems(page) == {}
    bases = page.evaluate(
        "[...document.querySelectorAll('.js-plotly-plot')].flatMap(p => p._fullData || [])"
        ".filter(t => /^lost: /.test(t.name)).flatMap(t => Array.from(t.base || []))"
    )
    assert bases and min(bases) >= 0, bases
    ticks = page.evaluate(
        "[...document.querySelectorAll('.js-plotly-plot')].filter(p => /loss per step/.test(p.textContent))"
        ".flatMap(p => [...p.querySelectorAll('.xtick text')].map(t => t.textContent))"
    )
    assert ticks == ["0", "1"], ticks
    picker = page.get_by_role("combobox", name="Open a run")
    picker.scroll_into_view_if_needed()
    shown = picker.input_value() if picker.evaluate("e => 'value' in e") else picker.inner_text()
    assert shown == "shown-run", shown


def test_the_plan_says_what_its_predictions_rest_on(page, app_url: str) -> None:  # noqa: F811
    """Items 5 and 6: the small preset's link restores its model, and the predictions say they rest on an assumed
    0.01 TFLOP/s, with the way to calibrate them."""
    page.goto(f"{app_url}/plan?plan-preset={quote(SMALL)}")
    page.wait_for_selector(".js-plotly-plot g.trace", timeout=120_000)
    _settled(page)
    sidebar = page.get_by_test_id("stSidebar")
    # the preset lands with the page's rerun: a busy machine can draw the defaults first (Layers 8), so wait for it
    expect(sidebar.get_by_role("spinbutton", name="Layers")).to_have_value("4", timeout=60_000)
    _settled(page)
    assert sidebar.get_by_role("spinbutton", name="Layers").input_value() == "4"
    assert sidebar.get_by_role("spinbutton", name="Devices").input_value() == "2"
    notice = page.get_by_test_id("stAlert").filter(has_text="assumed device rate (0.01 TFLOP/s)")
    assert notice.count() == 1 and "--calibrate-from" in notice.inner_text()
    assert sidebar.get_by_role("combobox", name="Calibrate from a run").count() == 1


def test_compare_custom_dag_and_separators(page, app_url: str) -> None:  # noqa: F811
    """Items 7 and 8: the log switch sets the trade-off chart's scales too; the broken example reports each of its
    problems; DAG labels do not sit on each other; a huge size is printed with separators."""
    page.goto(f"{app_url}/compare?cmp-log=true")
    page.wait_for_function("() => document.querySelectorAll('.pipesim-plot g.trace').length >= 2", timeout=120_000)
    _settled(page)
    scales = page.evaluate(
        "[...document.querySelectorAll('.js-plotly-plot')].filter(p => /trade-off/.test(p.textContent))"
        ".map(p => [p._fullLayout.xaxis.type, p._fullLayout.yaxis.type])"
    )
    assert scales == [["log", "log"]], scales

    page.goto(f"{app_url}/custom")
    page.get_by_role("button", name="Start from a template").click()
    _pick(page, "Template", "broken example")
    page.get_by_role("button", name="Load", exact=True).click()
    page.get_by_text("4 problems").wait_for(timeout=60_000)
    # each problem named (the lines may arrive in a later delta than the count on a busy machine: waited for, not
    # counted at once; a missing line still fails after the timeout)
    page.get_by_text("1B1").first.wait_for(state="attached", timeout=60_000)

    page.goto(f"{app_url}/dag")
    page.wait_for_selector(".js-plotly-plot g.trace", timeout=120_000)
    _settled(page)
    overlaps = page.evaluate(LABELS_OVERLAPPING)
    assert overlaps == [], overlaps

    # a link's huge value is named in the URL notice; the same value typed is refused beside its field,
    # printed with separators
    page.goto(f"{app_url}/?microbatches=100000000")
    page.get_by_test_id("stAlert").filter(has_text="microbatches").first.wait_for(timeout=60_000)
    sidebar = page.get_by_test_id("stSidebar")
    sidebar.get_by_role("spinbutton", name="Microbatches").fill("100000000")
    sidebar.get_by_role("button", name="Simulate").click()
    page.get_by_text("Microbatches = 100,000,000 is above its maximum 1,024").first.wait_for(timeout=60_000)


LABELS_OVERLAPPING = """() => {
  const boxes = [...document.querySelectorAll('.js-plotly-plot .textpoint text')]
    .filter(t => t.textContent.trim()).map(t => [t.textContent, t.getBoundingClientRect()]);
  const found = [];
  for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
    const [a, r] = boxes[i], [b, q] = boxes[j];
    const w = Math.min(r.right, q.right) - Math.max(r.left, q.left);
    const h = Math.min(r.bottom, q.bottom) - Math.max(r.top, q.top);
    if (w > 2 && h > 2) found.push(`${a} / ${b}`);
  }
  return found;
}"""
