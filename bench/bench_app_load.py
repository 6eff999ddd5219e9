"""First page load of the app against a bare Streamlit page with one plotly chart, side by side.

    python bench/bench_app_load.py [--rounds 2] [--warm 3]

Each round starts a fresh `streamlit run` server for the bare page and for app.py (alternating, so load on the
machine hits both alike) and measures, in headless Chromium:
* cold: the server's first session (it imports the page's modules) from navigation to the first plotly bar;
* warm: later first visits in fresh browser contexts (empty cache) to the same server.
Targets: the app's warm first chart at most WARM_RATIO x the bare page's, its cold one at most
COLD_OVER_BARE_S over it. Beside it, "complete": navigation
to every chart of the page drawn (the bare page's one, the app's Gantt and memory charts) and every widget
of the sidebar there, so a faster first chart is not bought with a slower rest of the page.

With --breakdown, where a cold start's seconds go on the server, each part in a fresh Python process (the
app's imports, the first simulation, the first figures, their JSON, the styled copy an export makes), and in the
browser the plotly bundle's fetch.

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

WARM_RATIO = 1.5  # warm: the app's first chart within 1.5 x the bare page's
COLD_OVER_BARE_S = 2.0  # cold: the app's first chart within 2 s of the bare page's
FIRST_BAR = ".js-plotly-plot g.trace.bars path"


LARGE_QUERY = "/?sim-schedule=zb-h1&sim-ranks=32&sim-microbatches=1024"
BINNED_PICTURE = ".js-plotly-plot .imagelayer image"
KINDS = ("cold", "warm", "cold complete", "warm complete")


# Every plotly chart on the page drawn (its traces are in), and no widget still waiting for its code.
COMPLETE = """(charts) => document.querySelectorAll('.js-plotly-plot').length >= charts
    && [...document.querySelectorAll('.js-plotly-plot')].every(p => p.querySelector('g.trace, .imagelayer image'))
    && document.querySelectorAll('[data-testid="stSkeleton"]').length === 0"""


def _visit(browser, url: str, selector: str = FIRST_BAR, charts: int = 0) -> float | tuple[float, float]:
    """Seconds to `selector`; with `charts`, also seconds until that many charts are drawn (the page complete)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    start = time.perf_counter()
    page.goto(url)
    page.wait_for_selector(selector, timeout=300_000)
    elapsed = time.perf_counter() - start
    if charts:
        page.wait_for_function(COMPLETE, arg=charts, timeout=300_000, polling=20)
        elapsed = (elapsed, time.perf_counter() - start)
    page.close()
    return elapsed


def measure(script: Path, runs: Path, warm: int, browser, charts: int, large: bool = False) -> tuple:
    """(cold, complete cold), [(warm, complete warm)], [large page times]."""
    with streamlit_server(runs, script) as url:
        cold = _visit(browser, url, charts=charts)
        warm_times = [_visit(browser, url, charts=charts) for _ in range(warm)]
        big = [_visit(browser, url + LARGE_QUERY, BINNED_PICTURE, charts=2) for _ in range(2)] if large else []
        return cold, warm_times, big


BREAKDOWN = """
import json, sys, time
sys.path.insert(0, ROOT)
out = {}
t = time.perf_counter()
import streamlit
out["import streamlit"] = time.perf_counter() - t
t = time.perf_counter()
import numpy, plotly.graph_objects
out["import numpy + plotly (the bare page's too)"] = time.perf_counter() - t
t = time.perf_counter()
from app_pages.parts import cached, cost_inputs, guide, plot, schedule_inputs, widgets
from pipesim.charts import gantt, memory
from pipesim.cost.model import CostModel
from pipesim.schedules import build_schedule
from pipesim.sim.simulate import simulate
out["import pipesim + app_pages"] = time.perf_counter() - t
t = time.perf_counter()
schedule, cost = build_schedule("1f1b", 4, 8), CostModel.uniform(1.0, 2.0, 1.0)
timeline = simulate(schedule, cost)
out["first simulation (1f1b, 4 x 8)"] = time.perf_counter() - t
t = time.perf_counter()
figures = [gantt.gantt_figure(timeline), memory.memory_figure(timeline, cost)]
out["first Gantt + memory figures (plotly's lazy validators)"] = time.perf_counter() - t
t = time.perf_counter()
[plot.figure_json(f) for f in figures]
out["their JSON for the page"] = time.perf_counter() - t
t = time.perf_counter()
[plot.styled(f) for f in figures]
out["styled copies for export (now made on click only)"] = time.perf_counter() - t
print(json.dumps(out))
"""


def breakdown(repeat: int = 3) -> None:
    """The server side of a cold start, part by part, each run in a fresh process (median of `repeat`)."""
    import json
    import subprocess

    runs = []
    for _ in range(repeat):
        code = BREAKDOWN.replace("ROOT", repr(str(ROOT)))
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    for part in runs[0]:
        print(f"  {part:<58} {statistics.median(r[part] for r in runs):6.3f} s")


def bundle_fetch(browser, url: str) -> str:
    """The plotly bundle's fetch on a first visit (fresh context): its size and how long it took."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(url)
    page.wait_for_selector(FIRST_BAR, timeout=300_000)
    entries = page.evaluate(
        "performance.getEntriesByType('resource').filter(e => /plotly/.test(e.name))"
        ".map(e => [e.name.split('/').pop(), e.encodedBodySize || e.transferSize, e.duration])"
    )
    page.close()
    return "; ".join(f"{name}: {size / 2**20:.2f} MiB in {ms / 1000:.2f} s" for name, size, ms in entries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--large", action="store_true", help="also open the app on a 98,304-action schedule")
    parser.add_argument("--breakdown", action="store_true", help="also say where a cold start's seconds go")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from playwright.sync_api import sync_playwright

    results: dict[str, dict[str, list[float]]] = {name: {kind: [] for kind in KINDS} for name in ("bare", "app")}
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    if args.breakdown:
        print("server side of a cold start, median of 3 fresh processes:")
        breakdown()
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        bare = Path(tmp) / "bare_app.py"
        bare.write_text(BARE_APP)
        for round_ in range(args.rounds):
            for name, script, charts in (("bare", bare, 1), ("app", ROOT / "app.py", 2)):
                runs = Path(tmp) / f"runs-{name}-{round_}"
                runs.mkdir()
                cold, warm, big = measure(script, runs, args.warm, browser, charts, args.large and name == "app")
                if args.breakdown and round_ == 0:
                    with streamlit_server(runs, script) as url:
                        print(f"{name}: plotly code fetched on a first visit: {bundle_fetch(browser, url)}")
                for kind, (first, complete) in [("cold", cold)] + [("warm", times) for times in warm]:
                    results[name][kind].append(first)
                    results[name][f"{kind} complete"].append(complete)
                print(
                    f"round {round_}: {name:<4} cold {cold[0]:5.2f} s (complete {cold[1]:5.2f})  warm "
                    + " ".join(f"{a:.2f} ({b:.2f})" for a, b in warm)
                    + "".join(
                        f"  98,304 actions {what}: Gantt {a:.2f} s, complete {b:.2f} s"
                        for what, (a, b) in zip(("first (simulates)", "again"), big[:2], strict=False)
                    ),
                    flush=True,
                )
        browser.close()
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    for kind in KINDS:
        bare_s, app_s = (statistics.median(results[n][kind]) for n in ("bare", "app"))
        if kind == "warm":
            target = f" (target <= {WARM_RATIO}x: {'ok' if app_s <= WARM_RATIO * bare_s else 'OVER TARGET'})"
        elif kind == "cold":
            ok = app_s - bare_s <= COLD_OVER_BARE_S
            target = f" (target <= +{COLD_OVER_BARE_S} s: {'ok' if ok else 'OVER TARGET'})"
        else:
            target = ""
        print(
            f"{kind:<13} median: bare {bare_s:.2f} s, app {app_s:.2f} s, app - bare {app_s - bare_s:+.2f} s, "
            f"app / bare {app_s / bare_s:.2f}x{target}"
        )


if __name__ == "__main__":
    main()
