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


COMPARED = ["1f1b", "seq1f1b", "dualpipe", "v-half"]


def _query_of(tab) -> dict[str, list[str]]:
    return parse_qs(urlparse(tab.url).query)


def _shown(combobox) -> str:
    """What a select box shows (an input's value, or its text, as Streamlit's version draws it)."""
    return combobox.input_value() if combobox.evaluate("e => 'value' in e") else combobox.inner_text()


def _tick_labels(tab) -> list[str]:
    return tab.evaluate("() => [...document.querySelectorAll('.js-plotly-plot .ytick text')].map(t => t.textContent)")


@pytest.mark.timeout(600)
def test_compare_opens_new_families_and_a_knob_from_a_link_and_keeps_them(page, served) -> None:  # noqa: F811
    """Compare from a shared link: the new families compared with the offload and sequence-chunk knobs applied (the
    Gantt of one of them shows its copy engine), seq1f1b's stashed memory said in microbatches' worth, and the
    link's values still in the URL after the page has drawn and after a reload."""
    chosen = "".join(f"&cmp-schedules={name}" for name in COMPARED)
    page.goto(f"{served}/compare?ranks=4&microbatches=8&knob-offload=full&knob-seq=3{chosen}")
    for _ in range(2):  # as opened, then reloaded from its own URL
        page.wait_for_selector("text=Gantt chart of one of them")
        page.wait_for_function(
            "() => [...document.querySelectorAll('.js-plotly-plot .legendtext')]"
            ".some(t => t.textContent === 'copy engine')",
            polling=200,
        )  # the offloaded schedule's Gantt, drawn last
        _idle(page)
        assert not page.get_by_test_id("stException").count()  # never a traceback
        assert not page.get_by_test_id("stAlertContentError").count(), page.inner_text("body")[:2000]
        ticks = _tick_labels(page)
        assert all(name in ticks for name in COMPARED), ticks  # each compared schedule has its bar
        assert "microbatches' worth" in page.inner_text("body")  # what seq1f1b's stashed column counts
        query = _query_of(page)
        assert sorted(query.get("cmp-schedules", [])) == sorted(COMPARED), query
        assert query.get("knob-offload") == ["full"] and query.get("knob-seq") == ["3"], query
        page.reload()


@pytest.mark.timeout(600)
def test_the_run_page_opens_a_new_family_and_offload_from_a_link(page, served) -> None:  # noqa: F811
    """The Run page from a link: DualPipe with the executor's `--offload full` in the form (nothing launched), both
    kept in the URL; seq1f1b with 'Profile first' on is named with the executor's own one-line refusal."""
    page.goto(f"{served}/run?schedule=dualpipe&ranks=2&microbatches=4&knob-offload=full&run-profile=false")
    sidebar = page.get_by_test_id("stSidebar")
    sidebar.get_by_role("button", name="Launch run").wait_for()
    _idle(page)
    assert not page.get_by_test_id("stException").count()
    assert _shown(sidebar.get_by_role("combobox", name="Schedule")) == "dualpipe"
    sidebar.get_by_text("Offload, sequence chunks").click()  # the expander holding the knobs
    offload = sidebar.get_by_role("combobox", name="Activation offload")
    offload.wait_for()
    assert _shown(offload) == "full"
    assert not sidebar.get_by_role("spinbutton", name="Sequence chunks").is_enabled()  # dualpipe takes none
    assert "refuses this run" not in page.inner_text("body")  # the executor runs it so
    query = _query_of(page)
    assert query.get("schedule") == ["dualpipe"] and query.get("knob-offload") == ["full"], query

    page.goto(f"{served}/run?schedule=seq1f1b&ranks=2&microbatches=4&run-profile=true")
    refusal = page.get_by_test_id("stSidebar").get_by_text("The executor refuses this run")
    refusal.wait_for()
    _idle(page)
    assert not page.get_by_test_id("stException").count()
    said = page.get_by_test_id("stSidebar").get_by_test_id("stAlert").filter(has_text="refuses this run").inner_text()
    lines = [line for line in said.splitlines() if line.strip() and line != "block"]  # "block": the icon's name
    assert len(lines) == 1 and lines[0].startswith("The executor refuses this run: schedule 'seq1f1b'"), said
    assert _query_of(page).get("schedule") == ["seq1f1b"]
