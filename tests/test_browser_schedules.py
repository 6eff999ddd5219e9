"""The schedules of 2024-26 in the real browser: the Simulate page opens each new family from a link, draws it
with the rank's copy engine and link as sub-lanes where it uses them, and keeps its knobs in the URL; the DAG page
draws an offloaded schedule's copies. One app server for the module (tests/test_browser.py's Chromium); skipped
cleanly where Chromium or Playwright is missing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from tests.test_browser import CHROMIUM, streamlit_server
from tests.test_browser_busy import _idle, browser, page  # noqa: F401, F811 - the busy-machine tests' fixtures

pytestmark = pytest.mark.browser

# family, extra URL values, the legend entries its Gantt must show
CASES = [
    ("v-half", "", ()),
    ("v-min", "", ()),
    ("seq1f1b", "&knob-seq=3&knob-seq-cut=balanced&knob-attn=0.3", ()),
    ("1f1b-overlap", "&knob-a2a=0.4&knob-moe=2", ("link",)),
    ("dualpipe", "&knob-a2a=0.4", ("link",)),
    ("1f1b", "&knob-offload=full&knob-host-lat=0.5", ("copy engine",)),
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium, or set BROWSER_PATH)")
    pytest.importorskip("playwright.sync_api")
    with streamlit_server(tmp_path_factory.mktemp("schedules-runs")) as url:
        yield url


def _legend(tab) -> list[str]:
    return tab.evaluate("() => [...document.querySelectorAll('.js-plotly-plot .legendtext')].map(t => t.textContent)")


@pytest.mark.timeout(600)
def test_each_new_family_opens_from_a_link_with_its_sub_lanes(page, served) -> None:  # noqa: F811
    for name, extra, lanes in CASES:
        page.goto(f"{served}/?schedule={name}&ranks=4&microbatches=12{extra}")
        page.wait_for_selector(".js-plotly-plot .legendtext")
        _idle(page)
        assert not page.get_by_test_id("stException").count(), name  # never a traceback
        text = page.inner_text("body")
        assert f"{name} (simulated)" in text or name in text, name
        legend = _legend(page)
        assert "forward (F)" in legend, (name, legend)
        for lane in lanes:
            assert lane in legend, (name, lane, legend)
        query = parse_qs(urlparse(page.url).query)
        assert query.get("schedule", ["1f1b"]) == [name]  # a default value leaves the URL
        for pair in filter(None, extra.split("&")):  # the knobs stay in the URL
            key, value = pair.split("=")
            assert query.get(key) == [value], (name, key, query)


@pytest.mark.timeout(300)
def test_the_dag_page_draws_an_offloaded_schedules_copies(page, served) -> None:  # noqa: F811
    page.goto(f"{served}/dag?schedule=1f1b&ranks=3&microbatches=4&knob-offload=full&knob-host-lat=0.5")
    page.wait_for_selector(".js-plotly-plot .legendtext")
    _idle(page)
    assert not page.get_by_test_id("stException").count()
    legend = _legend(page)
    assert "offload / reload" in legend and "memory move" in legend, legend
