"""First-visit load of several app scripts side by side, interleaved: the way to see a 0.1-0.3 s difference on a
shared machine whose own load moves more than that between two runs.

    python bench/bench_app_load_ab.py [--visits 8] app.py my_variant.py ...

Every server is started first (a bare page with one plotly chart, then each script given; a variant is any
copy of app.py, placed in the repository root so its page paths resolve), each visited once to warm it; then
the visits go round-robin, one per server in turn, each in a fresh browser context (empty cache), timed from
navigation to the first plotly bar drawn. Prints each script's median and its visits.
"""

from __future__ import annotations

import argparse
import contextlib
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
from bench_app_load import BINNED_PICTURE, LARGE_QUERY  # noqa: E402

from tests.test_browser import CHROMIUM, CHROMIUM_ARGS, streamlit_server  # noqa: E402

FIRST_BAR = ".js-plotly-plot g.trace.bars path"


def _visit(browser, url: str, selector: str = FIRST_BAR) -> float:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    start = time.perf_counter()
    page.goto(url)
    page.wait_for_selector(selector, state="attached", timeout=300_000)
    elapsed = time.perf_counter() - start
    context.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scripts", nargs="+", help="app scripts, relative to the repository root")
    parser.add_argument("--visits", type=int, default=8)
    parser.add_argument(
        "--large",
        action="store_true",
        help="open the scripts (not the bare page) on bench_app_load's 98,304-action URL, timed "
        "to the binned Gantt drawn",
    )
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from playwright.sync_api import sync_playwright

    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright, contextlib.ExitStack() as servers:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        bare = Path(tmp) / "bare_app.py"
        bare.write_text(BARE_APP)
        urls: dict[str, str] = {}
        for index, (name, script) in enumerate([("bare", bare)] + [(s, ROOT / s) for s in args.scripts]):
            runs = Path(tmp) / f"runs-{index}"
            runs.mkdir()
            urls[name] = servers.enter_context(streamlit_server(runs, script))
            _visit(browser, urls[name])  # the server's first session imports the page's modules
        times: dict[str, list[float]] = {name: [] for name in urls}
        for _ in range(args.visits):
            for name, url in urls.items():
                large = args.large and name != "bare"
                times[name].append(
                    _visit(browser, url + LARGE_QUERY if large else url, BINNED_PICTURE if large else FIRST_BAR)
                )
        browser.close()
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    bare_s = statistics.median(times["bare"])
    for name, visits in times.items():
        median = statistics.median(visits)
        print(
            f"{name:<24} median {median:.2f} s ({median - bare_s:+.2f} over bare)  "
            + " ".join(f"{t:.2f}" for t in visits)
        )


if __name__ == "__main__":
    main()
