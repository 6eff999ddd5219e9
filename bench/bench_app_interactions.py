"""The app's interactions that issue 23 timed, in headless Chromium against a fresh `streamlit run app.py`:

    python bench/bench_app_interactions.py [--rounds 3]

* drag: on the binned Gantt of 32 ranks x 800 microbatches (51,200 actions), a drag across a tenth of it, from
  the mouse's release to the window's exact bars drawn, and to the page idle (the Gantt is a fragment: nothing
  else reruns). Target: under 1 s (issue 23 item 15; 3.1 s before, under load).
* images: the Gantt's PNG from its Export popover, click to file, the first (the server starts its one
  Chromium) and the next ones (that browser kept); SVG and PDF likewise. Target: a later image under 1 s
  (5.5 s before for the three at once, a browser per request).
* html: the size of the HTML export of a 256-action Gantt (1f1b, 4 ranks x 32 microbatches). Target: under
  1.6 MB (4.9 MB before: plotly.js's full bundle inlined).

Each figure is printed with its ratio to its target and the machine's load (speed targets live here, never in
tests; the figures measured on a busy machine are noisy: the lead re-measures quiet).
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

BARS = ".js-plotly-plot g.trace.bars path"
IDLE = "() => !document.querySelector('[data-testid=stStatusWidget]')"
TARGETS = {"drag to bars": 1.0, "drag to idle": 1.0, "later image": 1.0, "html MB": 1.6}


def drag(page, url: str) -> tuple[float, float]:
    page.goto(f"{url}/?ranks=32&microbatches=800")
    page.wait_for_function(
        f"() => document.querySelector('.js-plotly-plot .imagelayer image') && !document.querySelector({BARS!r})",
        timeout=300_000,
    )
    page.wait_for_function(IDLE, timeout=300_000)
    plot = page.locator(".js-plotly-plot").first.locator(".nsewdrag").first
    plot.scroll_into_view_if_needed()
    box = plot.bounding_box()
    left, middle = box["x"] + box["width"] * 0.45, box["y"] + box["height"] / 2
    page.mouse.move(left, middle)
    page.mouse.down()
    for step in range(1, 6):
        page.mouse.move(left + box["width"] * 0.02 * step, middle + step)
        page.wait_for_timeout(50)
    start = time.perf_counter()
    page.mouse.up()
    page.wait_for_function(f"() => document.querySelectorAll({BARS!r}).length > 100", timeout=300_000, polling=20)
    bars = time.perf_counter() - start
    page.wait_for_function(IDLE, timeout=300_000, polling=20)
    return bars, time.perf_counter() - start


def images(page, url: str, out: Path) -> list[tuple[str, float]]:
    page.goto(url)
    page.wait_for_selector(BARS, timeout=300_000)
    page.wait_for_function(IDLE, timeout=300_000)
    times = []
    for fmt in ("PNG", "PNG", "SVG", "PDF"):
        page.get_by_role("button", name="Export chart").first.click()
        start = time.perf_counter()
        with page.expect_download(timeout=300_000) as download:
            page.get_by_role("button", name=fmt, exact=True).click()
        download.value.save_as(out / f"chart.{fmt.lower()}")
        times.append((fmt, time.perf_counter() - start))
        page.keyboard.press("Escape")
    return times


def html_megabytes() -> float:
    from app_pages.parts import plot
    from pipesim.charts import export
    from pipesim.charts.gantt import gantt_figure
    from pipesim.cost.model import CostModel
    from pipesim.schedules import build_schedule
    from pipesim.sim.steps import simulate_step

    timeline = simulate_step(build_schedule("1f1b", 4, 32), CostModel.uniform()).timeline
    return len(export.html_bytes(plot.styled(gantt_figure(timeline)), plot.bundle_text())) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from playwright.sync_api import sync_playwright

    found: dict[str, list[float]] = {"drag to bars": [], "drag to idle": [], "first image": [], "later image": []}
    print(f"load average at start: {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        for round_ in range(args.rounds):
            runs = Path(tmp) / f"runs-{round_}"
            runs.mkdir()
            with streamlit_server(runs) as url:  # a fresh server: its first image starts its browser
                context = browser.new_context(viewport={"width": 1440, "height": 900}, accept_downloads=True)
                page = context.new_page()
                bars, idle = drag(page, url)
                shots = images(page, url, Path(tmp))
                context.close()
            found["drag to bars"].append(bars)
            found["drag to idle"].append(idle)
            found["first image"].append(shots[0][1])
            found["later image"] += [t for _, t in shots[1:]]
            print(
                f"round {round_}: drag {bars:.2f} s to the bars, {idle:.2f} s to idle; images "
                + ", ".join(f"{fmt} {t:.2f} s" for fmt, t in shots),
                flush=True,
            )
        browser.close()
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    medians = {name: statistics.median(values) for name, values in found.items()}
    medians["html MB"] = html_megabytes()
    for name, value in medians.items():
        target = TARGETS.get(name)
        ratio = f" ({value / target:.2f}x the target {target})" if target else " (starts the server's browser)"
        print(f"{name:<13} median {value:.2f}{ratio}")


if __name__ == "__main__":
    main()
