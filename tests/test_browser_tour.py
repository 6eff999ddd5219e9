"""Issue 33 item 6: the tour, scripted in the real browser (tests/test_browser.py's server and Chromium). Each stop
is screenshotted (under a temporary folder; with PIPESIM_UPDATE_SCREENSHOTS=1 also into docs/img/ for the
README), has no text cut off or drawn over (tests/helpers/browser_checks.py), and its URL, opened afresh in a
new tab, restores the stop: the same page with the same settings.

Skipped cleanly where Chromium or Playwright is missing (as tests/test_browser.py).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from app_pages.parts.guide import TOUR
from app_pages.parts.plan.presets import SMALL
from tests.helpers.browser_checks import problems
from tests.test_browser import (  # noqa: F401  (fixtures)
    DOCS_IMG,
    VIEWPORT,
    app_url,
    browser,
    page,
    runs_root,
)

pytestmark = pytest.mark.browser

# What each stop's page shows that its URL must bring back: a chart title's words, or a field's value.
RESTORED = {
    0: ("title", "zb-h1"),
    1: ("title", "schedule comparison"),
    2: ("field", ("Layers", "4")),
    3: ("field", ("Ranks", "2")),
    4: ("field", ("Ranks", "2")),
}


README_STOPS = (0, 2)  # the stops whose pictures the README shows (docs/img/tour-1-simulate.png, tour-3-plan.png)


def _settled(tab) -> None:
    tab.wait_for_function(
        "() => [...document.querySelectorAll('.pipesim-plot')].every(p => p.dataset.theme"
        " && p.querySelector('g.trace, .imagelayer')) && !document.querySelector('[data-testid=stStatusWidget]')",
        polling=100,
    )


def _shows(tab, index: int, wait_s: float = 60) -> bool:
    """Whether the tab shows stop `index`'s settings, polled while the page finishes drawing (a page with no
    chart, the Run page, has no plot to wait for)."""
    deadline = time.monotonic() + wait_s
    while not _shown(tab, index):
        if time.monotonic() > deadline:
            return False
        tab.wait_for_timeout(250)
    return True


def _shown(tab, index: int) -> bool:
    kind, what = RESTORED[index]
    if kind == "title":
        titles = tab.locator(".js-plotly-plot .gtitle").all_text_contents()
        return any(what in t for t in titles)
    label, value = what
    return tab.get_by_test_id("stSidebar").get_by_role("spinbutton", name=label).input_value() == value


def test_the_tour_walks_every_stop_and_each_url_restores_it(page, browser, app_url: str, tmp_path: Path) -> None:  # noqa: F811
    page.goto(f"{app_url}/")
    page.wait_for_selector(".js-plotly-plot g.trace", timeout=120_000)
    page.get_by_role("button", name="Take the tour").click()
    for index, stop in enumerate(TOUR):
        banner = page.locator(".st-key-tour-banner")
        banner.get_by_text(f"Tour, stop {index + 1} of {len(TOUR)}: {stop.title}.").wait_for(timeout=120_000)
        if stop.page != "run":
            page.wait_for_selector(".js-plotly-plot g.trace", timeout=120_000)
        _settled(page)
        page.wait_for_timeout(500)  # the URL follows the page's bound settings after its run
        assert _shows(page, index), f"stop {index + 1} does not show its settings"
        shot = tmp_path / f"tour-{index + 1}-{stop.title.lower()}.png"
        page.screenshot(path=str(shot), full_page=True)
        if os.environ.get("PIPESIM_UPDATE_SCREENSHOTS") == "1" and index in README_STOPS:
            shutil.copy(shot, DOCS_IMG / shot.name)
        assert problems(page) == {}, f"stop {index + 1}"
        url = page.url
        query = parse_qs(urlparse(url).query)
        if stop.page == "plan":  # item 6: stop 3 left a bare /plan, and a preset link showed the default model
            assert query.get("plan-preset") == [SMALL], url
        fresh = browser.new_context(viewport=VIEWPORT).new_page()
        try:
            fresh.set_default_timeout(120_000)
            fresh.goto(url)
            fresh.wait_for_selector("[data-testid=stSidebar]")
            if stop.page != "run":
                fresh.wait_for_selector(".js-plotly-plot g.trace")
            _settled(fresh)
            assert urlparse(fresh.url).path == urlparse(url).path
            assert _shows(fresh, index), f"the URL of stop {index + 1} ({url}) does not restore it"
        finally:
            fresh.context.close()
        if index + 1 < len(TOUR):
            banner.get_by_role("button", name=f"Next: {TOUR[index + 1].title}").click()
    page.locator(".st-key-tour-banner").get_by_role("button", name="End the tour").click()
    page.locator(".st-key-tour-banner").wait_for(state="detached")
