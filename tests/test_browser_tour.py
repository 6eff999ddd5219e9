"""The app as a newcomer walks it (issue 23, "done when"), in the real browser: the tour from the landing section
(no typing) through simulate -> compare, the DAG and the Custom page on the way, -> plan (the small preset,
verified for real with K = 2) -> run (profiled, cancelled, reattached after a reload) -> the overlay.

At every stop: no text cut off or drawn over other text, no number with more than the format's decimals
(tests/helpers/browser_checks.py), the same quantity with the same value wherever it is shown, and the page's
URL opening the same view in a new session. The stops' screenshots go to test-artifacts/ and, with
PIPESIM_UPDATE_SCREENSHOTS=1, to docs/img/ (the README's pictures).

It starts real runs (torchrun on the CPU): marked torchrun, with generous timeouts; every wait is on a condition.
"""

from __future__ import annotations

import re

import pytest

from tests.helpers.browser_checks import problems
from tests.test_browser import (  # noqa: F401  (fixtures)
    GANTT_BARS,
    VIEWPORT,
    _pick,
    _screenshot,
    app_url,
    browser,
    runs_root,
)

pytestmark = [pytest.mark.browser, pytest.mark.torchrun]
RUN_S = 420  # a real run on a busy machine: launch, profile, steps


def settled(page) -> None:
    """Every chart drawn and the script done (no 'running' indicator)."""
    page.wait_for_function(
        "() => [...document.querySelectorAll('.pipesim-plot')].every(p => p.dataset.theme"
        " && p.querySelector('g.trace, .imagelayer')) && !document.querySelector('[data-testid=stStatusWidget]')",
        polling=100,
        timeout=180_000,
    )


def titles(page) -> list[str]:
    return [t or "" for t in page.locator(".js-plotly-plot .gtitle").all_text_contents()]


def cards(page) -> dict[str, str]:
    """The metric cards: label -> value."""
    return page.evaluate(
        "Object.fromEntries([...document.querySelectorAll('[data-testid=stMetric]')].map(m => ["
        "m.querySelector('[data-testid=stMetricLabel]').textContent.trim(),"
        "m.querySelector('[data-testid=stMetricValue]').textContent.trim()]))"
    )


def table_cells(page, index: int = 0) -> dict[tuple[int, int], str]:
    """A table's cells as its accessible copy holds them (the canvas draws them formatted): (column, row) -> text."""
    grid = page.get_by_test_id("stDataFrame").nth(index)
    found = grid.evaluate("g => [...g.querySelectorAll('[id^=glide-cell]')].map(e => [e.id, e.textContent])")
    return {tuple(int(n) for n in name.split("-")[-2:]): text for name, text in found}


def check(page) -> None:
    settled(page)
    assert problems(page) == {}, page.url


def restores(browser, page, *, cards_too: bool = True) -> None:  # noqa: F811
    """The page's URL, opened in a new session (a reload, a shared link), shows the same view: the same charts
    (titles) and the same cards."""
    context = browser.new_context(viewport=VIEWPORT)
    other = context.new_page()
    other.set_default_timeout(180_000)
    try:
        other.goto(page.url)
        other.wait_for_selector(".js-plotly-plot g.trace, .js-plotly-plot .imagelayer image")
        settled(other)
        other.wait_for_function(f"() => document.querySelectorAll('.js-plotly-plot').length >= {len(titles(page))}")
        settled(other)
        assert titles(other) == titles(page), (page.url, titles(other), titles(page))
        if cards_too:
            assert cards(other) == cards(page), page.url
    finally:
        context.close()


def subtitle_step(title: str) -> str:
    """The step time a Gantt's subtitle gives ("step time 27.00 ms")."""
    found = re.search(r"step time ([0-9,.]+ ms)", title)
    assert found, title
    return found.group(1)


def tour_next(page, stop: str) -> None:
    page.get_by_role("button", name=f"Next: {stop}").click()


@pytest.mark.timeout(1800)
def test_the_tour(browser, app_url: str) -> None:  # noqa: F811
    context = browser.new_context(viewport=VIEWPORT, accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(180_000)
    sidebar = page.get_by_test_id("stSidebar")
    try:
        # --- the landing section, open on a first visit; the tour starts from it --------------------------------
        page.goto(app_url)
        page.get_by_text("New here? What each page is for").wait_for()
        page.get_by_role("button", name="Take the tour").click()

        # --- 1. simulate: ZB-H1, 4 ranks, 8 microbatches ----------------------------------------------------
        page.get_by_text("Tour, stop 1 of 5").wait_for()
        page.wait_for_function(
            "() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]"
            ".some(t => t.textContent.startsWith('zb-h1: 4 ranks'))"
        )
        check(page)
        step = cards(page)["Step time"]
        assert subtitle_step(titles(page)[0]) == step  # the card and the chart: one value
        _screenshot(page, "simulate")
        restores(browser, page)

        # --- 2. compare ----------------------------------------------------------------------------------------
        tour_next(page, "Compare")
        page.get_by_text("Tour, stop 2 of 5").wait_for()
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 3")
        check(page)
        gantt = next(t for t in titles(page) if t.startswith("zb-h1: 4 ranks"))  # Simulate's schedule, shared
        assert subtitle_step(gantt) == step
        cells = table_cells(page)
        row = next(r for (c, r), text in cells.items() if c == 0 and text == "zb-h1")
        assert f"{float(cells[(1, row)]):,.2f} ms" == step  # the table's step time column
        _screenshot(page, "compare")
        restores(browser, page, cards_too=False)

        # --- on the way: the DAG of the same schedule, a deadlock, the Custom page --------------------------------
        sidebar.get_by_role("link", name="DAG").click()
        page.wait_for_function(
            "() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]"
            ".some(t => t.textContent.startsWith('zb-h1: dependency graph'))"
        )
        check(page)
        _screenshot(page, "dag")
        restores(browser, page, cards_too=False)
        page.get_by_text("Deadlock example").click()
        page.get_by_text("Deadlock.").wait_for()
        page.wait_for_function(
            "() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]"
            ".some(t => t.textContent.includes('deadlock'))"
        )
        check(page)
        _screenshot(page, "dag-deadlock")

        sidebar.get_by_role("link", name="Custom schedule").click()
        page.wait_for_selector(GANTT_BARS)
        check(page)
        _screenshot(page, "custom")
        edit_cell(page, column=3, row=0, text="0X1")  # rank 0, cell 2: a typo
        page.wait_for_function(
            "() => (document.querySelector('#glide-cell-3-0') || {}).textContent === '⚠ 0X1'"
        )  # what was typed, marked
        page.get_by_text("problem in this schedule").wait_for()
        assert sidebar.get_by_role("button", name="Simulate").is_visible()  # the costs stay
        check(page)
        _screenshot(page, "custom-errors")

        # --- 3. plan: the small preset, verified for real -------------------------------------------------------
        sidebar.get_by_role("link", name="Compare").click()
        page.get_by_text("Tour, stop 2 of 5").wait_for()
        tour_next(page, "Plan")
        page.get_by_text("Tour, stop 3 of 5").wait_for()
        page.wait_for_function(
            "() => [...document.querySelectorAll('.js-plotly-plot .gtitle')].some(t => t.textContent.startsWith("
            "'candidates:')) && document.querySelectorAll('.js-plotly-plot').length >= 4"
        )
        check(page)
        best = re.search(r"best: (.+?): ([0-9,.]+ ms) per step", page.get_by_text("best:").first.text_content())
        assert best, page.get_by_text("best:").first.text_content()
        gantt = next(t for t in titles(page) if "(simulated)" in t)
        assert subtitle_step(gantt) == best.group(2)  # the summary and the chosen candidate's chart: one value
        _screenshot(page, "plan")
        restores(browser, page, cards_too=False)
        page.get_by_role("button", name="Verify the top candidates").click()
        page.get_by_text("Verifying: candidate").first.wait_for()  # progress while the candidates run
        assert page.get_by_role("button", name="Cancel verification").is_visible()
        page.get_by_text("Recommended vs measured best").wait_for(timeout=2 * RUN_S * 1000)
        settled(page)
        assert not page.get_by_test_id("stAlertContentError").all_text_contents()
        assert "Planner's order" in cards(page) or "Rank correlation (Spearman)" in cards(page)
        check(page)
        _screenshot(page, "plan-verify")

        # --- 4. run: profiled, cancelled, reattached after a reload ------------------------------------------------
        tour_next(page, "Run")
        page.get_by_text("Tour, stop 4 of 5").wait_for()
        sidebar.get_by_role("button", name="Launch run").wait_for()
        assert sidebar.get_by_role("spinbutton", name="Ranks").input_value() == "2"  # the tour set the form
        sidebar.get_by_role("spinbutton", name="Steps", exact=True).fill("500")  # long enough to cancel
        sidebar.get_by_role("button", name="Launch run").click()
        page.get_by_role("button", name="Cancel run").wait_for(timeout=RUN_S * 1000)
        page.reload()  # a reload during the run finds it again, with its own settings in the form
        page.get_by_role("button", name="Cancel run").wait_for(timeout=RUN_S * 1000)
        assert page.get_by_test_id("stProgress").count() == 1
        assert sidebar.get_by_role("spinbutton", name="Steps", exact=True).input_value() == "500"
        assert sidebar.get_by_role("spinbutton", name="Ranks").input_value() == "2"
        page.get_by_text(re.compile(r": step \d+/500")).first.wait_for(timeout=RUN_S * 1000)  # training, profiled
        _screenshot(page, "run-live")
        page.get_by_role("button", name="Cancel run").click()
        page.get_by_text("Run cancelled").wait_for(timeout=RUN_S * 1000)
        assert not page.get_by_test_id("stAlertContentError").all_text_contents()
        check(page)

        # --- 5. a run to its end, and the overlay ---------------------------------------------------------------
        sidebar.get_by_role("spinbutton", name="Steps", exact=True).fill("3")
        sidebar.get_by_role("button", name="Launch run").click()
        page.wait_for_function(
            "() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]"
            ".some(t => t.textContent.includes('simulated vs measured'))"
            " || [...document.querySelectorAll('[data-testid=stAlertContentError]')]"
            ".some(e => e.textContent.startsWith('Run '))",
            timeout=RUN_S * 1000,
        )
        assert not page.get_by_test_id("stAlertContentError").all_text_contents()
        if page.get_by_role("button", name="Next: Overlay").count():
            tour_next(page, "Overlay")
            page.get_by_text("Tour, stop 5 of 5").wait_for()
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 2")
        check(page)
        shown = cards(page)
        assert shown["Predicted step time"].endswith(" ms") and shown["Measured step time"].endswith(" ms")
        assert "run=" in page.url
        _screenshot(page, "run")
        restores(browser, page)
    finally:
        context.close()


def edit_cell(page, column: int, row: int, text: str) -> None:
    """Type `text` into the table's cell (column, row) as a user does: select it (from the row's name, with the
    arrow keys), type over it, Enter. Column 0 is the rank's name, 1 the problem note, 2 "cell 1"."""
    grid = page.get_by_test_id("stDataFrame").first
    box = grid.locator("canvas").first.bounding_box()
    page.mouse.click(box["x"] + 20, box["y"] + 35 * (row + 1) + 17)  # the row's name (rows are 35 px)
    for _ in range(column):
        page.keyboard.press("ArrowRight")
    page.keyboard.type(text[0])  # opens the cell's editor with that character
    page.wait_for_function("() => document.activeElement && document.activeElement.tagName === 'TEXTAREA'")
    page.keyboard.type(text[1:])
    page.keyboard.press("Enter")
