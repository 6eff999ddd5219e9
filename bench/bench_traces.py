"""Speed of the trace paths: importing Kineto traces (pipesim.kineto) and the one-file Perfetto view
(pipesim.chrome_trace.run_trace).

Usage:
    python bench/bench_traces.py      # about 5 s on 2 cores

Writes Kineto-like trace files (tests/helpers/kineto_traces.py: PP: labels with torch ops inside, one file per
rank) of interleaved-1f1b, 8 ranks x 64 microbatches x 2 chunks, 5 steps, then times (best of 3) the import
and the run trace of the simulated timeline shown twice (as simulated and as measured).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent.parent)]

from pipesim.cost.model import CostModel  # noqa: E402
from pipesim.io.chrome_trace import run_trace  # noqa: E402
from pipesim.io.kineto import import_traces  # noqa: E402
from pipesim.schedules import build_schedule  # noqa: E402
from pipesim.sim.simulate import simulate  # noqa: E402
from tests.helpers.kineto_traces import kineto_files  # noqa: E402


def best_of(repeat: int, work) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - start)
    return best * 1e3, result


def main() -> None:
    schedule = build_schedule("interleaved-1f1b", 8, 64, num_virtual_stages=2)
    with tempfile.TemporaryDirectory() as folder:
        paths, _ = kineto_files(Path(folder), schedule, steps=5)
        size = sum(p.stat().st_size for p in paths)
        ms, run = best_of(3, lambda: import_traces(paths))
        print(f"import_traces: {len(paths)} files, {size / 1e6:.1f} MB, {len(run.timeline.spans):,} spans: {ms:.0f} ms")
    simulated = simulate(schedule, CostModel.uniform(comm_ms=0.1))
    ms, trace = best_of(3, lambda: run_trace(schedule, {"simulated": simulated, "measured": simulated}))
    flows = sum(e["ph"] == "s" for e in trace["traceEvents"])
    print(f"run_trace: {schedule.describe()}: {len(trace['traceEvents']):,} events, {flows:,} flows: {ms:.0f} ms")


if __name__ == "__main__":
    main()
