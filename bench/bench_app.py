"""How fast the app answers: rerun time after a widget change, and first page load in a browser.

    python bench/bench_app.py              # both
    python bench/bench_app.py --no-browser # AppTest reruns only

Targets: a rerun after a widget change at most 300 ms for 8 ranks and 32
microbatches; the first page load in the browser (navigation to a drawn Gantt chart)
at most 3 s. Rerun times come from streamlit.testing's AppTest, which runs the page
script as the server would, without the websocket; the page-load time from Playwright
driving Chromium against `streamlit run app.py`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, streamlit_server  # noqa: E402

RERUN_TARGET_S = 0.300
LOAD_TARGET_S = 3.0


def _timed(action, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return times


def bench_reruns(repeat: int) -> dict[str, list[float]]:
    """Simulate page at 8 ranks x 32 microbatches: plain rerun, a toggle, a new schedule."""
    from streamlit.testing.v1 import AppTest

    app = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()
    app.number_input(key="sim-ranks").set_value(8)
    app.number_input(key="sim-microbatches").set_value(32)
    app.button(key="FormSubmitter:sim-form-Simulate").click()
    app.run()
    assert not app.exception and not app.error, (app.exception, app.error)

    def toggle() -> None:
        widget = app.toggle(key="sim-critical")
        widget.set_value(not widget.value)
        app.run()

    names = iter(["gpipe", "zb-h1", "zbv", "interleaved-1f1b", "zb-h2", "dualpipev", "naive", "looped-bfs"] * repeat)

    def change_schedule() -> None:  # a cache miss each time: build, simulate, draw
        app.selectbox(key="sim-schedule").set_value(next(names))
        app.button(key="FormSubmitter:sim-form-Simulate").click()
        app.run()

    def change_back() -> None:  # the same inputs again: cached
        app.selectbox(key="sim-schedule").set_value("1f1b")
        app.button(key="FormSubmitter:sim-form-Simulate").click()
        app.run()

    results = {"rerun (no change)": _timed(app.run, repeat)}
    results["toggle critical path"] = _timed(toggle, repeat)
    results["new schedule (uncached)"] = _timed(change_schedule, min(repeat, 8))
    results["schedule seen before (cached)"] = _timed(change_back, repeat)
    return results


# The floor any Streamlit page with a plotly chart pays on this machine (Streamlit's own
# bundle, plotly.js's 4.7 MB chunk, one bar chart): printed beside the app's figure so a
# busy or slow machine shows up as such rather than as a slow app.
BARE_APP = """
import plotly.graph_objects as go
import streamlit as st

st.title("bare")
st.plotly_chart(go.Figure(go.Bar(x=[1, 2, 3], y=[2, 1, 3], orientation="v")))
"""


def bench_page_load(repeat: int, script: Path | None = None) -> list[float]:
    """Navigation start to the first plotly bar drawn, in a fresh browser context (empty cache) each time.

    `script` None measures BARE_APP.
    """
    with tempfile.TemporaryDirectory() as runs:
        if script is None:
            script = Path(runs) / "bare_app.py"
            script.write_text(BARE_APP)
        return _load_times(Path(runs), script, repeat)


def _load_times(runs: Path, script: Path, repeat: int) -> list[float]:
    from playwright.sync_api import sync_playwright

    times = []
    with streamlit_server(runs, script) as url:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            warm = browser.new_page()  # the server's first session pays imports; a user's first load may too
            warm.goto(url)
            warm.wait_for_selector(".js-plotly-plot g.trace.bars path", timeout=60_000)
            warm.close()
            for _ in range(repeat):
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                start = time.perf_counter()
                page.goto(url)
                page.wait_for_selector(".js-plotly-plot g.trace.bars path", timeout=60_000)
                times.append(time.perf_counter() - start)
                page.close()
            browser.close()
    return times


def _line(name: str, times: list[float], target: float) -> str:
    median, worst = statistics.median(times), max(times)
    verdict = "ok" if median <= target else "OVER TARGET"
    return (
        f"{name:<32} median {median * 1000:7.1f} ms  max {worst * 1000:7.1f} ms  "
        f"(n={len(times)}, target {target * 1000:.0f} ms: {verdict})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--no-browser", action="store_true", help="skip the Playwright page-load measurement")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    print("AppTest reruns, Simulate page, 8 ranks x 32 microbatches, 1f1b:")
    for name, times in bench_reruns(args.repeat).items():
        print("  " + _line(name, times, RERUN_TARGET_S))
    if args.no_browser:
        return
    if not Path(CHROMIUM).exists():
        print(f"browser page load: skipped ({CHROMIUM} not found)")
        return
    repeat = max(3, args.repeat // 2)
    print("Browser, first page load to a drawn chart (Chromium, headless, empty cache):")
    print("  " + _line("app.py (Simulate, Gantt)", bench_page_load(repeat, ROOT / "app.py"), LOAD_TARGET_S))
    print("  " + _line("bare Streamlit + 1 plotly bar", bench_page_load(repeat), LOAD_TARGET_S))
    print(
        f"  (load average while measuring: {', '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs)"
    )


if __name__ == "__main__":
    main()
