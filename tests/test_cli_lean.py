"""The command line does no work a command does not need: `list` imports the registry alone, and a
large JSON output is written by json's C encoder (compact), a small one indented for people who read it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pipesim.io.formats import READABLE_JSON_CHARS, json_text, write_json

ROOT = Path(__file__).resolve().parent.parent


def test_list_imports_no_numpy_plotly_or_planner() -> None:
    """Catches main.py importing every command's module before it answers `list` (the old 0.35 s path)."""
    code = (
        "import sys; from pipesim.cli.main import main; main(['list']); "
        "print(sorted(m for m in ('numpy', 'plotly', 'networkx', 'pipesim.plan', 'pipesim.synth', "
        "'pipesim.cli.commands') if m in sys.modules), file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "1f1b" in out.stdout and "zb-h1" in out.stdout
    assert out.stderr.strip().splitlines()[-1] == "[]"


def test_small_json_is_indented_and_large_json_compact(tmp_path: Path) -> None:
    small = {"rank": 0, "ms": [1.5, 2.5]}
    assert "\n" in json_text(small, "x.json")
    large = {"spans": [{"rank": i, "start": i * 0.5} for i in range(READABLE_JSON_CHARS // 20)]}
    text = json_text(large, "x.json")
    assert "\n" not in text and ", " not in text
    path = tmp_path / "large.json"
    write_json(large, path)
    assert json.loads(path.read_text()) == large
    assert "\n" not in json_text(small, "x.json", indent=None)


def test_simulate_json_is_the_bytes_of_the_timeline_dict_and_starts_without_numpy(tmp_path: Path) -> None:
    """`simulate --json` writes its spans as text (`timeline_text`) and builds only its own command's parser: the
    file must be byte for byte what json wrote from `timeline_to_dict` (the old path), small (indented) and large
    (compact); and `simulate` without --jitter must not import numpy (catches an eager import coming back)."""
    from pipesim.cli.main import build_parser
    from pipesim.cli.main import main as pipesim_main
    from pipesim.cost.model import CostModel
    from pipesim.io.cost_file import cost_to_dict
    from pipesim.io.formats import schedule_to_dict, timeline_to_dict
    from pipesim.schedules import build_schedule
    from pipesim.sim.metrics import compute_metrics, link_busy_ms, with_link_busy
    from pipesim.sim.steps import simulate_step

    for name, ranks, microbatches in (("1f1b", 2, 3), ("zb-h1", 8, 800)):  # indented, then past READABLE_JSON_CHARS
        out = tmp_path / f"{name}.json"
        argv = ["simulate", "--schedule", name, "--ranks", str(ranks), "--microbatches", str(microbatches)]
        assert pipesim_main([*argv, "--f", "1.1", "--b", "2.3", "--comm", "0.1", "--json", str(out)]) == 0
        schedule = build_schedule(name, ranks, microbatches)
        cost = CostModel.uniform(forward_ms=1.1, backward_ms=2.3, comm_ms=0.1).for_pipeline(ranks, ranks)
        step = simulate_step(schedule, cost)
        summary = {
            **with_link_busy(compute_metrics(step.timeline, cost), link_busy_ms(schedule, cost)).to_dict(),
            "step_ms": step.step_ms,
            "schedule": schedule_to_dict(schedule),
            "cost": cost_to_dict(cost),
        }
        assert out.read_text() == json_text(timeline_to_dict(step.timeline, summary), out)
    assert "\n" in (tmp_path / "1f1b.json").read_text() and "\n" not in (tmp_path / "zb-h1.json").read_text()
    full = build_parser()  # every command's flags for --help and the tests; a run parses the same
    assert full.parse_args([*argv, "--json", "x.json"]).json == Path("x.json")
    code = (
        "import sys; from pipesim.cli.main import main; "
        "main(['simulate', '--schedule', '1f1b', '--ranks', '2', '--microbatches', '2']); "
        "print('numpy' in sys.modules, file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "False"
