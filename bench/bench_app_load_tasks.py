"""Where a first visit's time goes in the browser: the main thread's long tasks and when each kind of element
appears, on the bare page and on the app, side by side.

    python bench/bench_app_load_tasks.py [--visits 4]

For each page (a fresh `streamlit run` server, visited once to warm it, then `--visits` times in fresh browser
contexts): the median time from navigation to the first of each element kind (title, sidebar, metric card,
plotly chart element, first bar), when the plotly code (Streamlit's chunk on the bare page, the cartesian
bundle on the app) was requested and received, and, for the last
visit, every long task (PerformanceObserver "longtask": start and duration, ms). The largest long task on both
pages is that code's evaluation.
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
sys.path.insert(0, str(ROOT / "bench"))

from bench_app import BARE_APP  # noqa: E402

from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, streamlit_server  # noqa: E402

FIRST_BAR = ".js-plotly-plot g.trace.bars path"
MARKS = {  # name -> selector whose first appearance is marked
    "title": "h1",
    "sidebar": '[data-testid="stSidebar"]',
    "metric": '[data-testid="stMetric"]',
    "chart element": '[data-testid="stPlotlyChart"], .pipesim-plot',
    "first bar": FIRST_BAR,
}
OBSERVER = """
window.__marks = {}; window.__long = [];
new PerformanceObserver(list => list.getEntries().forEach(
    e => window.__long.push([Math.round(e.startTime), Math.round(e.duration)])))
  .observe({type: 'longtask', buffered: true});
new MutationObserver(() => {
  for (const [name, selector] of Object.entries(%s))
    if (!(name in window.__marks) && document.querySelector(selector)) window.__marks[name] = performance.now();
}).observe(document, {subtree: true, childList: true});
"""
# Streamlit's plotly chunk (the bare page) or the cartesian bundle from static/ (the app, app_pages/parts/plot.py).
CHUNK = """performance.getEntriesByType('resource')
    .filter(r => r.name.includes('/PlotlyChart.') || r.name.includes('/app/static/plotly-'))
    .map(r => [Math.round(r.startTime), Math.round(r.responseEnd)])[0] || null"""


def _visit(browser, url: str) -> tuple[dict, list, list | None]:
    import json

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(OBSERVER % json.dumps(MARKS))
    page = context.new_page()
    page.goto(url)
    page.wait_for_selector(FIRST_BAR, timeout=120_000)
    page.wait_for_timeout(300)  # the long task that drew the bar is reported after it ends
    marks, tasks, chunk = page.evaluate("window.__marks"), page.evaluate("window.__long"), page.evaluate(CHUNK)
    context.close()
    return marks, tasks, chunk


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--visits", type=int, default=4)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from playwright.sync_api import sync_playwright

    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        bare = Path(tmp) / "bare_app.py"
        bare.write_text(BARE_APP)
        for name, script in (("bare", bare), ("app", ROOT / "app.py")):
            runs = Path(tmp) / f"runs-{name}"
            runs.mkdir()
            with streamlit_server(runs, script) as url:
                _visit(browser, url)
                visits = [_visit(browser, url) for _ in range(args.visits)]
                time.sleep(0.5)
            marks = {
                key: statistics.median(v[0][key] for v in visits if key in v[0])
                for key in MARKS
                if any(key in v[0] for v in visits)
            }
            chunks = [v[2] for v in visits if v[2]]
            ordered = sorted(marks.items(), key=lambda kv: kv[1])
            print(f"{name}: " + "  ".join(f"{key} {ms:.0f}" for key, ms in ordered))
            if chunks:
                print(
                    f"  plotly code requested {statistics.median(c[0] for c in chunks):.0f}, "
                    f"received {statistics.median(c[1] for c in chunks):.0f} (ms, medians)"
                )
            tasks = visits[-1][1]
            print(
                f"  long tasks of the last visit (start, ms): {tasks}; main thread busy in them "
                f"{sum(d for _, d in tasks)} ms"
            )
        browser.close()
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
