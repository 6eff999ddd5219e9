"""Write the page variants that docs/benchmarks.md ("first page load") times against the app with
bench/bench_app_load_ab.py, derived from the app's own files so each differs from it in one way only:

    python bench/make_load_variants.py
    python bench/bench_app_load_ab.py --visits 7 app.py variant_bare_bundle.py variant_nav_bare.py \
        variant_sidebar_gantt.py

* variant_bare_bundle.py: the bare page (one title, one bar chart) drawn through app_pages.parts.plot.show, the
  cartesian bundle, where bench_app_load_ab's own bare page uses st.plotly_chart;
* variant_nav_bare.py: the app's navigation (its six pages) with the bare page as Simulate;
* variant_sidebar_gantt.py: the Simulate page without its metric cards, downloads and memory chart (its sidebar
  and the Gantt).

The files go to the repository root, where Streamlit finds the pages' paths and static/ (served next to the main
script); they are git-ignored. `--remove` deletes them.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_app import BARE_APP  # noqa: E402

BARE_BUNDLE = BARE_APP.replace(
    "import streamlit as st\n", "import streamlit as st\n\nfrom app_pages.parts import plot\n"
).replace(
    'st.plotly_chart(go.Figure(go.Bar(x=[1, 2, 3], y=[2, 1, 3], orientation="v")))',
    'plot.show(go.Figure(go.Bar(x=[1, 2, 3], y=[2, 1, 3], orientation="v")), "bare")',
)
NAMES = (
    "variant_bare_bundle.py",
    "variant_nav_bare.py",
    "variant_nav_bare_page.py",
    "variant_sidebar_gantt.py",
    "variant_sidebar_gantt_page.py",
)


def _cut(text: str, line: str) -> str:
    """`text` without `line`, which must be there: the variant stays one change away from the app."""
    if line not in text:
        raise SystemExit(f"the page changed: {line!r} not found; update this script")
    return text.replace(line, "")


def main() -> None:
    if "--remove" in sys.argv[1:]:
        for name in NAMES:
            (ROOT / name).unlink(missing_ok=True)
        return
    if "plot.show(" not in BARE_BUNDLE:
        raise SystemExit("bench_app.BARE_APP changed; update this script")
    app = (ROOT / "app.py").read_text()
    if '"app_pages/simulate.py"' not in app:
        raise SystemExit("app.py no longer names app_pages/simulate.py; update this script")
    page = (ROOT / "app_pages" / "simulate.py").read_text()
    page = _cut(page, "widgets.metric_cards(metrics, inner_bubble=cached.inner_bubble(schedule, cost))\n")
    page = _cut(page, 'widgets.figure_downloads(gantt, f"{schedule.name}-gantt", "sim-gantt-export", sig)\n')
    page = page[: page.index("memory = cached.memory_chart")]
    files = {
        "variant_bare_bundle.py": BARE_BUNDLE,
        "variant_nav_bare_page.py": BARE_APP,
        "variant_nav_bare.py": app.replace('"app_pages/simulate.py"', '"variant_nav_bare_page.py"'),
        "variant_sidebar_gantt_page.py": page,
        "variant_sidebar_gantt.py": app.replace('"app_pages/simulate.py"', '"variant_sidebar_gantt_page.py"'),
    }
    for name, text in files.items():
        (ROOT / name).write_text(text)
    print("wrote " + ", ".join(files))


if __name__ == "__main__":
    main()
