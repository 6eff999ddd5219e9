"""The command line does no work a command does not need (issue 21): `list` imports the registry alone, and a
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
