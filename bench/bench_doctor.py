"""The doctor end to end, all five launches (moved out of the test suite by issue 34: tests/test_doctor.py runs
its first run for real and answers the others with it).

Usage:
    python bench/bench_doctor.py          # five torchrun launches of 2 CPU ranks: a minute or two

Runs `python -m executor doctor --device cpu` with streamlit, plotly, kaleido and pandas blocked in every process
(a sitecustomize on PYTHONPATH; numpy stays: torch.distributed's gather_object needs it), prints its report, its
wall time and the machine's load, and exits 1 when the report is not the CPU half's expected one (5 passed, 0
failed, 1 skipped, the five run folders, report.txt and doctor.json written).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = ["fp32-1f1b", "fp32-zbv", "fp32-interleaved-1f1b", "bf16-zbv", "bf16-1f1b"]


def problems(done: subprocess.CompletedProcess, out: Path) -> list[str]:
    """What is wrong with the doctor's output and folder (empty: nothing)."""
    lines = done.stdout.splitlines()
    wrong = [] if done.returncode == 0 else [f"exit status {done.returncode}: {done.stderr[-2000:]}"]
    if not lines or lines[0] != "pipesim executor doctor: 5 passed, 0 failed, 1 skipped":
        wrong.append(f"first line {lines[:1]}")
    verdicts = [line[:8] for line in lines if line.startswith("[")]
    if verdicts != ["[PASS] 1", "[PASS] 2", "[PASS] 3", "[SKIP] 4", "[PASS] 5", "[PASS] 6"]:
        wrong.append(f"verdicts {verdicts}")
    if not any(line.startswith("predict   fp32-1f1b profiled: predicted") for line in lines):
        wrong.append("no prediction line")
    if not (out / "report.txt").is_file() or (out / "report.txt").read_text() != done.stdout:
        wrong.append("report.txt is not the report")
    if (out / "doctor.json").is_file() and json.loads((out / "doctor.json").read_text()).get("status") != "done":
        wrong.append("doctor.json does not say done")
    if sorted(p.name for p in out.iterdir() if p.is_dir()) != sorted(RUNS):
        wrong.append(f"run folders {sorted(p.name for p in out.iterdir())}")
    return wrong


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-doctor-") as tmp:
        blocker, out = Path(tmp) / "block", Path(tmp) / "doc"
        blocker.mkdir()
        names = ["streamlit", "plotly", "kaleido", "pandas"]
        (blocker / "sitecustomize.py").write_text(f"import sys\nfor name in {names!r}:\n    sys.modules[name] = None\n")
        path = os.pathsep.join(p for p in (str(blocker), str(ROOT), os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
        load = os.getloadavg()[0]
        started = time.perf_counter()
        command = [sys.executable, "-m", "executor", "doctor", "--device", "cpu", "--out", str(out)]
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
        seconds = time.perf_counter() - started
        print(done.stdout, end="")
        print(f"\n{seconds:.0f} s for the doctor's five launches; load {load:.2f} -> {os.getloadavg()[0]:.2f} "
              f"(1 min) on {os.cpu_count()} cores")  # fmt: skip
        wrong = problems(done, out)
    for line in wrong:
        print(f"failed: {line}", file=sys.stderr)
    return 1 if wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
