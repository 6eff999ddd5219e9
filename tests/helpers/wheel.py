"""pipesim built as a wheel and installed into a fresh venv, outside the checkout: for tests/test_install.py
(the light venv: the wheel alone, its dependencies read from this interpreter's environment) and for
bench/bench_install.py (the full install: dependencies from the index or pip's cache, a user's torch kept)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "streamlit", "plotly", "networkx", "pandas", "kaleido")
NOT_SHIPPED = shutil.ignore_patterns(
    ".git", ".venv", "runs", "out", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".ruff_cache",
    ".hypothesis", "test-artifacts", ".whl", ".gl", "variant_*.py",
)  # fmt: skip
# A tiny run of a shipped example: 2 ranks, 2 microbatches, 2 measured steps on the CPU.
TINY_RUN = ["--schedule", "1f1b", "--ranks", "2", "--microbatches", "2", "--steps", "2", "--warmup-steps", "0",
            "--device", "cpu", "--batch-size", "2"]  # fmt: skip


def readme_example() -> str:
    """The README's Python example: its first python block."""
    match = re.search(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert match, "README.md has no ```python block"
    return match.group(1)


def run_outside(command: list[str | Path], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """In `cwd` (outside the checkout) and without PYTHONPATH: only what the venv holds can be imported."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    return subprocess.run(
        [str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, f"{done.args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def build_wheel(tmp_path: Path) -> Path:
    """The checkout's wheel, built from a copy (the build writes build/ and egg-info, not into the checkout)."""
    source, wheels = tmp_path / "src", tmp_path / "wheels"
    shutil.copytree(ROOT, source, ignore=NOT_SHIPPED)
    ok(
        run_outside(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", wheels, source], tmp_path
        )
    )
    (wheel,) = wheels.glob("pipesim-*.whl")
    return wheel


def light_venv(tmp_path: Path, wheel: Path, extras: str = "") -> Path:
    """A fresh venv holding the wheel alone (no pip of its own, no dependencies installed: seconds, offline),
    with this environment's site-packages after its own on the path (a .pth line, whose own .pth files are not
    read: the checkout is not importable from there), so torch, numpy and the rest import as installed."""
    venv = tmp_path / "venv"
    ok(run_outside([sys.executable, "-m", "venv", "--without-pip", venv], tmp_path))
    python = venv / "bin" / "python"
    target = f"{wheel}[{extras}]" if extras else str(wheel)
    ok(run_outside([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", target], tmp_path))
    site = Path(run_outside([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path)
                .stdout.strip())  # fmt: skip
    (site / "zz-outer-environment.pth").write_text(str(Path(sysconfig.get_paths()["purelib"]).resolve()) + "\n")
    return venv
