"""The full install as a user does it (issue 25; moved out of the test suite by issue 34, which keeps a light
install in tests/test_install.py): the wheel into a fresh venv with pip, the core's dependencies from pip's cache
or the index at the versions requirements.txt pins, then uninstalled and installed again with the `run` extra over
a torch installed first (offline), as a user with their own CUDA build would; then a tiny real run of a shipped
example from a folder outside the checkout.

Usage:
    python bench/bench_install.py          # a minute or two; about 1 GB under a temporary folder, removed after

Prints each phase's wall time and the machine's load; exits 1 (with the failing command's output) when a phase
fails.

Catches: a core dependency on torch or streamlit; `run`'s torch pinned or ranged past the user's (the reinstall
is offline, so it fails rather than downloading another torch); a module that `pipesim list`, a simulation, the
README's example or a tiny real run needs but the wheel leaves out; a console script that points nowhere.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]
from tests.helpers.wheel import HEAVY, TINY_RUN, build_wheel, ok, readme_example, run_outside  # noqa: E402


def _torch_files(venv: Path) -> tuple:
    """What a reinstall of torch would change: its metadata folder and its files' identity."""
    site = next((venv / "lib").glob("python3*/site-packages"))
    stat = (site / "torch" / "__init__.py").stat()
    return sorted(p.name for p in site.glob("torch-*.dist-info")), stat.st_ino, stat.st_mtime_ns


def full_install(tmp_path: Path, lap) -> None:
    venv, work = tmp_path / "venv", tmp_path / "work"
    work.mkdir()
    wheel = build_wheel(tmp_path)
    lap("wheel built")
    # CI's versions of the core's dependencies (cached); torch left free, as a user's would be
    constraints = tmp_path / "constraints.txt"
    pins = (ROOT / "requirements.txt").read_text().splitlines()
    constraints.write_text("\n".join(line for line in pins if not line.startswith("torch")))

    ok(run_outside([sys.executable, "-m", "venv", venv], work))
    python, bin_dir = venv / "bin" / "python", venv / "bin"
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "-c", constraints]
    ok(run_outside([*pip, wheel], work))
    lap("core installed with its dependencies")
    present = ok(
        run_outside(
            [python, "-c", f"import importlib.util as u; print([m for m in {HEAVY!r} if u.find_spec(m)])"], work
        )  # noqa: E501
    )
    assert present.strip() == "['plotly', 'networkx']", present
    assert "zbv" in ok(run_outside([bin_dir / "pipesim", "list"], work))
    simulate = ["simulate", "--schedule", "1f1b", "--ranks", "4", "--microbatches", "8", "--f", "1", "--b", "2"]
    assert "makespan 33.000 ms" in ok(run_outside([bin_dir / "pipesim", *simulate], work))
    assert ok(run_outside([python, "-c", readme_example()], work)).strip() == "1f1b: 33.0 ms per step"
    assert "no runs under" in ok(run_outside([bin_dir / "pipesim-run", "list", "--runs-root", work / "runs"], work))
    needs_extra = {("pipesim-run", "run", "--schedule", "1f1b"): "pipesim[run]", ("pipesim", "app"): "pipesim[app]"}
    for command, extra in needs_extra.items():
        refused = run_outside([bin_dir / command[0], *command[1:]], work)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert extra in refused.stderr and "Traceback" not in refused.stderr
    lap("core checked")

    # The user's own torch first (here the project's CPU build, from the machine's local wheel), then
    # pipesim[run], offline: pip must find torch already satisfied and leave it as it is.
    ok(run_outside([python, "-m", "pip", "uninstall", "-y", "pipesim"], work))
    ok(run_outside([*pip, "torch==2.13.0"], work))
    before = _torch_files(venv)
    installed = ok(run_outside([*pip, "--no-index", f"{wheel}[run]"], work))
    assert "Uninstalling torch" not in installed and _torch_files(venv) == before, installed
    assert ok(run_outside([python, "-c", "import torch; print(torch.__version__)"], work)).strip() == "2.13.0+cpu"
    lap("[run] installed over the user's torch")
    example = ["--model", "pipesim_examples.gpt_small:build", *TINY_RUN, "--out", "runs/tiny"]
    ran = run_outside([bin_dir / "pipesim-run", "run", *example], work)
    assert ok(ran) and (work / "runs" / "tiny" / "measured.json").is_file(), ran.stdout[-2000:]
    lap("a shipped example ran")


def main() -> int:
    started = time.perf_counter()

    def lap(what: str) -> None:
        print(f"{time.perf_counter() - started:7.1f} s  {what}", flush=True)

    print(f"load average {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores", flush=True)
    tmp_path = Path(tempfile.mkdtemp(prefix="bench-install-"))
    try:
        full_install(tmp_path, lap)
    except AssertionError as error:
        print(f"failed: {error}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)  # about 1 GB
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
