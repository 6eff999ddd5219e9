"""The app while something else times on the machine, and the rough edges a new user sees, in the real browser
(tests/test_browser.py's Chromium; one app server for the module, with a machine lock of its own).

* A long sleep-mode `executor run` holds the machine: the Run page names it in a banner (progress, a link), keeps
  the user's form and URL, and Launch waits with the reason; once it is cancelled the run's sentence and card
  say one median, and its table row, cards and trace button say what it has.
* Links: a preset by its short key, an unknown preset or profile named, an overlong run name said plainly.
* Field errors full width, every bad field named; numbers with separators, round ticks, sensible decimals;
  words that match the page; no cut text; DAG labels clear of edges.

Skipped cleanly where Chromium or Playwright is missing (as tests/test_browser.py).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from app_pages.parts.guide import TOUR
from app_pages.parts.plan.presets import SMALL
from pipesim.units import MISSING
from pipesim_executor.host import machine
from pipesim_executor.host.machine import LOCK_ENV
from tests.helpers.browser_checks import problems
from tests.helpers.run_folders import write_run
from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, ROOT, VIEWPORT, streamlit_server

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    """(url, runs folder, machine lock) of one app server for the module."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} not found (apt-get install chromium, or set BROWSER_PATH)")
    pytest.importorskip("playwright.sync_api")
    runs = tmp_path_factory.mktemp("busy-runs")
    lock = runs.parent / "machine.lock"
    with pytest.MonkeyPatch.context() as env:
        env.setenv(LOCK_ENV, str(lock))  # the server's (copied when it starts) and this module's commands'
        with streamlit_server(runs) as url:
            yield url, runs, lock


@pytest.fixture(scope="module")
def browser(served):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport=VIEWPORT)
    tab = context.new_page()
    tab.set_default_timeout(90_000)
    yield tab
    context.close()


def _idle(tab) -> None:
    tab.wait_for_function("() => !document.querySelector('[data-testid=stStatusWidget]')", polling=100)


def _query(tab) -> dict[str, list[str]]:
    return parse_qs(urlparse(tab.url).query)


def _sleep_run(runs: Path, lock: Path) -> subprocess.Popen:
    """A sleep-mode run of thousands of steps (minutes of work), from the command line."""
    argv = [sys.executable, "-m", "executor", "run", "--schedule", "1f1b", "--ranks", "2", "--microbatches", "4",
            "--compute", "sleep", "--f", "4", "--b", "8", "--steps", "20000", "--warmup-steps", "1",
            "--timeout", "600", "--device", "cpu", "--runs-root", str(runs), "--events"]  # fmt: skip
    env = dict(os.environ, **{LOCK_ENV: str(lock)}, OMP_NUM_THREADS="1")
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


@pytest.mark.torchrun
@pytest.mark.timeout(600)
def test_a_run_holding_the_machine_is_a_banner_and_launch_waits(page, served, monkeypatch) -> None:
    url, runs, lock = served
    monkeypatch.setenv(LOCK_ENV, str(lock))
    proc = _sleep_run(runs, lock)
    try:
        deadline = time.monotonic() + 120
        while (held := machine.holder()) is None or not held.run_dir:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.2)
        name = Path(held.run_dir).name
        # the user's own settings, in their URL; medium is the Size box's longest value
        page.goto(f"{url}/run?ranks=2&microbatches=4&run-steps=7&run-size=medium")
        banner = page.get_by_test_id("stAlert").filter(has_text="executor run has held this machine")
        banner.wait_for()
        assert "Launch waits" in banner.inner_text()
        sidebar = page.get_by_test_id("stSidebar")
        sidebar.get_by_text("Launch waits: another job is timing on this machine").wait_for()  # the form: after
        assert sidebar.get_by_role("button", name="Launch run").is_disabled()
        link = page.get_by_role("link", name="Open its run").get_attribute("href")
        assert parse_qs(urlparse(link).query)["run"] == [name] and "run-steps=7" in link
        # measured steps going: the banner's progress follows the run's own
        page.get_by_text(re.compile(rf"{re.escape(name)}: step \d+/20000 \(measure\)")).wait_for(timeout=180_000)
        page.wait_for_timeout(2500)  # a few polls of the banner: the page must not switch to the run
        _idle(page)
        query = _query(page)
        assert "run" not in query and query["run-steps"] == ["7"] and query["run-size"] == ["medium"], page.url
        assert sidebar.get_by_role("spinbutton", name="Steps", exact=True).input_value() == "7"
        assert problems(page) == {}  # nothing cut ("mediun" in the Size box)

        # the command line too: a second run is refused in one line naming the first
        second = subprocess.run(
            [sys.executable, "-m", "executor", "run", "--ranks", "2", "--runs-root", str(runs)],
            cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert second.returncode == 1 and len(second.stderr.strip().splitlines()) == 1, second.stderr
        assert name in second.stderr and "--wait" in second.stderr

        proc.send_signal(signal.SIGTERM)  # as Ctrl-C: every process ends, result.json says cancelled
        assert proc.wait(timeout=120) == 143
        page.wait_for_function(
            "() => { const b = [...document.querySelectorAll('[data-testid=stSidebar] button')]"
            ".find(e => e.innerText.includes('Launch run')); return b && !b.disabled; }",
            timeout=60_000,
        )
        banner.wait_for(state="detached")
        assert "run" not in _query(page)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

    # the cancelled run: its sentence and its card say one median, a missing figure is one placeholder
    page.goto(f"{url}/run?run={name}")
    sentence = page.get_by_test_id("stAlert").filter(has_text="Run cancelled after").inner_text()
    median = re.search(r"median step ([\d,.]+) ms", sentence).group(1)
    card = page.get_by_test_id("stMetric").filter(has_text="Measured step time").inner_text()
    assert f"{median} ms" in card, (sentence, card)
    predicted = page.get_by_test_id("stMetric").filter(has_text="Predicted step time").inner_text()
    assert MISSING in predicted and "n/a" not in page.inner_text("body")
    page.get_by_role("button", name="Perfetto trace: measured").wait_for()  # drawn after the chart
    _idle(page)
    assert page.get_by_text("simulated + measured").count() == 0
    assert problems(page) == {}


def test_links_name_what_they_cannot_open(page, served) -> None:
    url, runs, _ = served
    page.goto(f"{url}/plan?plan-preset=small")
    sidebar = page.get_by_test_id("stSidebar")
    sidebar.get_by_role("spinbutton", name="Layers").wait_for()
    _idle(page)
    box = sidebar.get_by_test_id("stSelectbox").filter(has_text="Preset")
    assert SMALL in box.inner_text() + " ".join(box.locator("input").evaluate_all("e => e.map(i => i.value)")), (
        box.inner_text()
    )
    assert sidebar.get_by_role("spinbutton", name="Layers").input_value() == "4"
    assert _query(page)["plan-preset"] == [SMALL]
    # no profile under the runs folder: said, with the command that makes one
    assert sidebar.get_by_text(f"No profile found under {runs}/").is_visible()
    assert sidebar.get_by_text("profile --model transformer --microbatch-sizes 1,2,4").is_visible()

    page.goto(f"{url}/plan?plan-preset=huge&plan-profile=nosuch")
    page.get_by_text("left at their defaults").wait_for()
    notice = page.get_by_test_id("stAlert").filter(has_text="left at their defaults").inner_text()
    assert "plan-preset" in notice and "huge" in notice and "small" in notice
    # drawn later in the run than the link's notice: waited for, never counted at once
    page.get_by_test_id("stAlert").filter(has_text="The link's profile 'nosuch' is not under").wait_for()

    long_name = "r" * 300
    page.goto(f"{url}/run?run={long_name}")
    page.get_by_text("left at their defaults").wait_for()
    body = page.inner_text("body")
    assert "Errno" not in body and "at most 200 characters" in body
    page.goto(f"{url}/run?run={'q' * 150}")
    page.get_by_text("Cannot open the run").wait_for()
    assert "Errno" not in page.inner_text("body")


def test_field_errors_are_full_width_and_every_bad_field_is_named(page, served) -> None:
    url, _, _ = served
    page.goto(f"{url}/")
    page.wait_for_selector(".js-plotly-plot g.trace", timeout=120_000)
    sidebar = page.get_by_test_id("stSidebar")
    sidebar.get_by_role("spinbutton", name="Ranks").fill("0")
    sidebar.get_by_role("spinbutton", name="Microbatches").fill("99999999")
    sidebar.get_by_role("button", name="Simulate").click()
    page.get_by_text("Chart not updated").wait_for()
    form = sidebar.locator("[data-testid=stForm]").first.bounding_box()
    for said in ("Ranks = 0 is below its minimum 1", "Microbatches = 99,999,999 is above its maximum 1,024"):
        error = sidebar.get_by_test_id("stAlert").filter(has_text=said)
        error.wait_for()
        assert error.bounding_box()["width"] > 0.8 * form["width"], said  # not a half-width column
        # its words, beside the alert's icon: in a half column they had 50 px, a syllable a line ("Rank s = 0")
        text = error.get_by_test_id("stMarkdownContainer").bounding_box()
        assert text["width"] > 0.6 * form["width"], (said, text, form)
    warning = page.get_by_test_id("stAlert").filter(has_text="Chart not updated").inner_text()
    assert "Ranks = 0" in warning and "Microbatches = 99,999,999" in warning


def test_numbers_read_alike(page, served) -> None:
    url, runs, _ = served
    page.goto(f"{url}/?schedule=1f1b&ranks=16&microbatches=1024")  # 32,768 actions: binned
    page.wait_for_selector(".js-plotly-plot .imagelayer image", timeout=180_000)
    _idle(page)
    title = next(t for t in page.locator(".js-plotly-plot .gtitle").all_text_contents() if "binned" in t)
    assert "1,024 microbatches, 32,768 actions" in title and "32,768 actions binned" in title, title
    shown = page.get_by_test_id("stSliderThumbValue").all_inner_texts()
    assert shown and all(re.fullmatch(r"\d+", v.strip()) for v in shown), shown  # 3103, never 3103.00

    write_run(runs, "long", step_factors=tuple(1.0 + 0.01 * (k % 7) for k in range(673)))
    page.goto(f"{url}/run?run=long")
    page.wait_for_function(
        "() => [...document.querySelectorAll('.js-plotly-plot .gtitle')]"
        ".some(t => /loss per step/.test(t.textContent))",
        timeout=120_000,
    )
    ticks = page.evaluate(
        "() => { const p = [...document.querySelectorAll('.js-plotly-plot')]"
        ".find(p => /loss per step/.test(p.querySelector('.gtitle').textContent));"
        " return [...p.querySelectorAll('.xtick text')].map(t => t.textContent); }"
    )
    values = [int(t.replace(",", "")) for t in ticks]
    assert values and all(v % 100 == 0 for v in values), ticks  # 0, 100, 200, never 0, 67, 134


def test_words_match_the_page(page, served, tmp_path: Path) -> None:
    url, _, _ = served
    page.goto(f"{url}/custom")
    page.get_by_role("button", name="Upload a CSV").click()
    binary = tmp_path / "model.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    page.locator("input[type=file]").set_input_files(str(binary))
    page.get_by_text("Not a schedule CSV").wait_for()
    body = page.inner_text("body")
    assert "the CSV is empty" not in body and "problem" not in body.split("Not a schedule CSV")[1][:200]

    stop = next(s for s in TOUR if s.page == "compare")
    page.goto(f"{url}/compare")
    page.wait_for_selector(".js-plotly-plot g.trace", timeout=120_000)
    _idle(page)
    dashed = page.evaluate(
        "() => [...document.querySelectorAll('.js-plotly-plot')].some(p => (p._fullData || [])"
        ".some(t => t.name === 'Pareto front' && /lines/.test(t.mode) && t.line && t.line.dash === 'dash'))"
    )
    assert dashed or "dashed" not in stop.text, stop.text

    page.goto(f"{url}/dag")
    page.wait_for_selector(".js-plotly-plot .textpoint text", timeout=120_000)
    shadows = page.evaluate(
        "() => [...document.querySelectorAll('.js-plotly-plot .textpoint text')]"
        ".map(t => getComputedStyle(t).textShadow)"
    )
    assert shadows and all(s and s != "none" for s in shadows), shadows[:3]  # a halo: edges never cross a label
