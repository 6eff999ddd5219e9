"""First page load (issue 13): the Simulate page's modules must not pull in what only other pages need.

networkx (DAG page), the executor (Run page), kaleido (image export), torch and pandas (tables) each cost
start-up time that a first visit to the Simulate page would pay for nothing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_simulate_page_modules_load_no_heavy_extras() -> None:
    code = (
        "import sys; import app_pages.parts.cached, app_pages.parts.widgets, app_pages.parts.cost_inputs, "
        "app_pages.parts.state, app_pages.parts.guide, app_pages.parts.schedule_inputs, app_pages.parts.plot, "
        "pipesim.charts.gantt, pipesim.charts.lod, pipesim.sim.simulate, pipesim.analysis.critical_path; "
        "print(sorted(m for m in ('networkx', 'pipesim_executor', 'kaleido', 'torch', 'pandas', 'highspy', "
        "'pipesim.synth')"
        " if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout
