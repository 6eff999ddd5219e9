"""Large Gantt charts in Chromium: the binned figure at 100k actions against one bar per action.

    python bench/bench_app_gantt.py [--actions 102400] [--bars 10240,32768] [--repeat 3]

Builds each figure in Python (timed), then in headless Chromium with plotly.js already loaded (as in the app,
where Streamlit's bundle holds it) times, per figure: Plotly.newPlot to the second animation frame after it
(first render), a zoom (x range to an eighth), a pan (shift by a quarter) and a hover (Plotly.Fx.hover on the
middle lane). The per-bar figures are the same code with `max_bars` raised, one bar per action, as the Gantt
was drawn before. The memory chart of the same 100k-action timeline is timed too, M4-reduced (as the app
draws it) and with every point; each figure's JSON size is what Streamlit sends to the browser. The
standalone HTML export of the 100k figure is also opened cold (plotly.js parsed too). Target: the 100k figure
drawn and each interaction answered in under 2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import plotly  # noqa: E402

from pipesim.charts import gantt as charts  # noqa: E402
from pipesim.charts import memory as charts_memory  # noqa: E402
from pipesim.cost.model import CostModel  # noqa: E402
from pipesim.schedules import build_schedule  # noqa: E402
from pipesim.sim.simulate import simulate  # noqa: E402
from tests.test_browser import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

TARGET_S = 2.0
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
HOST = f"""<html><head><meta charset="utf-8"><script src="file://{PLOTLY_JS}"></script></head>
<body style="margin:0"><div id="g" style="width:1400px;height:1200px"></div></body></html>"""
# One figure: render, zoom, pan, hover; each until two animation frames later (the screen has it).
TIMER = """async (fig) => {
  const g = document.getElementById('g');
  Plotly.purge(g);
  const frames = () => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const t = {};
  let start = performance.now();
  await Plotly.newPlot(g, fig.data, fig.layout, {displaylogo: false});
  await frames();
  t.render = performance.now() - start;
  const [a, b] = g._fullLayout.xaxis.range;
  start = performance.now();
  await Plotly.relayout(g, {'xaxis.range': [a, a + (b - a) / 8]});
  await frames();
  t.zoom = performance.now() - start;
  start = performance.now();
  await Plotly.relayout(g, {'xaxis.range': [a + (b - a) / 4, a + (b - a) * 3 / 8]});
  await frames();
  t.pan = performance.now() - start;
  const size = g._fullLayout._size;
  start = performance.now();
  Plotly.Fx.hover(g, {xpx: size.w / 2, ypx: size.h / 2});
  await frames();
  t.hover = performance.now() - start;
  t.hovered = g.querySelectorAll('.hoverlayer .hovertext').length;
  return t;
}"""


def timeline(actions: int):
    """1f1b on 32 ranks: 64 actions per microbatch."""
    return simulate(build_schedule("1f1b", 32, max(1, actions // 64)), CostModel.uniform(1.0, 2.0))


def build(actions: int, exact: bool, memory: bool = False) -> tuple[dict, float, int, int]:
    """The figure's spec, seconds to build it, actions, and bytes of JSON sent to the browser.

    `memory`: the memory chart of the same timeline instead (M4-reduced, or with `exact` every point).
    """
    tl = timeline(actions)
    start = time.perf_counter()
    if memory:
        cost = CostModel.uniform(1.0, 2.0, activation_bytes=2**20)
        fig = charts_memory.memory_figure(tl, cost, max_points=10**12 if exact else charts_memory.MAX_MEMORY_POINTS)
    else:
        fig = charts.gantt_figure(tl, title="bench", max_bars=10**9 if exact else charts.MAX_EXACT_BARS)
    text = fig.to_json()
    return json.loads(text), time.perf_counter() - start, len(tl.spans), len(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=102_400)
    parser.add_argument("--bars", default="10240,32768", help="sizes drawn one bar per action, for comparison")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from playwright.sync_api import sync_playwright

    cases = [(f"binned, {args.actions:,} actions", args.actions, False, False)]
    cases += [(f"one bar per action, {int(n):,}", int(n), True, False) for n in args.bars.split(",") if n]
    cases += [("memory, M4-reduced", args.actions, False, True), ("memory, every point", args.actions, True, True)]
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1440, "height": 1250})
        host = Path(tmp) / "host.html"
        host.write_text(HOST)
        page.goto(f"file://{host}")
        page.set_default_timeout(600_000)
        for name, actions, exact, memory in cases:
            spec, build_s, count, size = build(actions, exact, memory)
            runs = [page.evaluate(TIMER, spec) for _ in range(args.repeat)]
            med = {k: statistics.median(r[k] for r in runs) / 1000 for k in ("render", "zoom", "pan", "hover")}
            rows.append((name, count, build_s, med, runs[-1]["hovered"]))
            print(
                f"{name:<32} {count:>7,} actions  {size / 1e6:5.2f} MB  build {build_s:5.2f} s  "
                f"render {med['render']:5.2f} s  "
                f"zoom {med['zoom']:5.2f} s  pan {med['pan']:5.2f} s  hover {med['hover']:5.2f} s",
                flush=True,
            )
        # Cold: the exported HTML of the binned figure, plotly.js parsed as well.
        spec, _, _, _ = build(args.actions, False)
        import plotly.io as pio

        html = Path(tmp) / "big.html"
        pio.write_html(pio.from_json(json.dumps(spec)), html, include_plotlyjs=True)
        cold = browser.new_page(viewport={"width": 1440, "height": 1250})
        start = time.perf_counter()
        cold.goto(f"file://{html}", wait_until="commit", timeout=600_000)
        cold.wait_for_function(
            "() => { const g = document.querySelector('.js-plotly-plot');"
            " return g && g._fullLayout && g.querySelector('.layer-below image, image'); }",
            timeout=600_000,
        )
        cold_s = time.perf_counter() - start
        browser.close()
    print(f"standalone HTML of the binned figure, opened cold: {cold_s:.2f} s")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    binned = rows[0][3]
    worst = max(binned.values())
    print(
        f"binned {rows[0][1]:,} actions: slowest of render/zoom/pan/hover {worst:.2f} s "
        f"(target < {TARGET_S} s: {'ok' if worst < TARGET_S else 'OVER TARGET'})"
    )
    for name, _count, _, med, _ in rows[1:-2]:
        print(f"  {name}: render {med['render'] / binned['render']:.1f}x the binned 100k figure's time")


if __name__ == "__main__":
    main()
