"""First page load of the app against a bare Streamlit page with one plotly chart, side by side (issue 13).

    python bench/bench_app_load.py [--rounds 2] [--warm 3]

Each round starts a fresh `streamlit run` server for the bare page and for app.py (alternating, so load on the
machine hits both alike) and measures, in headless Chromium:
* cold: the server's first session (it imports the page's modules) from navigation to the first plotly bar;
* warm: later first visits in fresh browser contexts (empty cache) to the same server.
Target: the app's cold and warm loads at most 0.5 s over the bare page's.

With --large, each app server is also opened on a shared URL of a large schedule (zb-h1, 32 ranks x 1024
microbatches: 98,304 actions, simulated on the first visit, cached after): navigation to the binned Gantt drawn.
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

TARGET_OVER_BARE_S = 0.5
FIRST_BAR = ".js-plotly-plot g.trace.bars path"


LARGE_QUERY = "/?sim-schedule=zb-h1&sim-ranks=32&sim-microbatches=1024"
BINNED_PICTURE = ".js-plotly-plot .imagelayer image"


def _visit(browser, url: str, selector: str = FIRST_BAR) -> float:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    start = time.perf_counter()
    page.goto(url)
    page.wait_for_selector(selector, timeout=300_000)
    elapsed = time.perf_counter() - start
    page.close()
    return elapsed


def measure(script: Path, runs: Path, warm: int, browser, large: bool = False) -> tuple[float, list, list]:
    with streamlit_server(runs, script) as url:
        cold = _visit(browser, url)
        warm_times = [_visit(browser, url) for _ in range(warm)]
        big = [_visit(browser, url + LARGE_QUERY, BINNED_PICTURE) for _ in range(2)] if large else []
        return cold, warm_times, big


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--large", action="store_true", help="also open the app on a 98,304-action schedule")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from playwright.sync_api import sync_playwright

    results: dict[str, dict[str, list[float]]] = {"bare": {"cold": [], "warm": []}, "app": {"cold": [], "warm": []}}
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        bare = Path(tmp) / "bare_app.py"
        bare.write_text(BARE_APP)
        for round_ in range(args.rounds):
            for name, script in (("bare", bare), ("app", ROOT / "app.py")):
                runs = Path(tmp) / f"runs-{name}-{round_}"
                runs.mkdir()
                cold, warm, big = measure(script, runs, args.warm, browser, args.large and name == "app")
                results[name]["cold"].append(cold)
                results[name]["warm"].extend(warm)
                print(f"round {round_}: {name:<4} cold {cold:6.2f} s  warm " + " ".join(f"{t:.2f}" for t in warm)
                      + ("  98,304 actions: first (simulates) {:.2f} s, again {:.2f} s".format(*big) if big else ""),
                      flush=True)
        browser.close()
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    for kind in ("cold", "warm"):
        bare_s, app_s = (statistics.median(results[n][kind]) for n in ("bare", "app"))
        verdict = "ok" if app_s - bare_s <= TARGET_OVER_BARE_S else "OVER TARGET"
        print(f"{kind:<4} median: bare {bare_s:.2f} s, app {app_s:.2f} s, app - bare {app_s - bare_s:+.2f} s "
              f"(target <= +{TARGET_OVER_BARE_S} s: {verdict})")


if __name__ == "__main__":
    main()
