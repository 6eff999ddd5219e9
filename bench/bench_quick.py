"""The speed guard: every speed target of the command line and the planner in under a minute, each
figure printed with its target and their ratio (<= 1.00 meets it), and the machine's load beside them.

Usage:
    python bench/bench_quick.py          # about 40 s on 2 cores
    python bench/bench_quick.py --json out/quick.json

Figures (best of --repeat, each command in a fresh process as a user runs it):
  list        `python -m pipesim list`, wall time; target 0.25 s
  simulate    `python -m pipesim simulate` 1f1b 64 ranks x 1024 microbatches (131,072 actions) with --json; 1.0 s
  torch       interleaved-1f1b 32 x 128 x 2 chunks through the CLI's own path with --json (in process, imports done)
              against torch's own dry run `_simulate_comms_compute` of the same order (in process, torch imported):
              pipesim at least 10x faster; the figure printed is pipesim / torch, target 0.1
  plan        issue 21's space: a 64-layer, 4096-wide model on 128 devices, global batch 1024, every schedule, depths
              2..64, microbatch sizes 1..32, chunks 1/2/4/8, recompute on and off, 5 W shares (2,232 candidates),
              `plan --json` (one process per core); 3 s, and 500 MB for the largest process
  interval    200 sampled steps of a 2,000-action 1f1b with their 90% interval, in process; 1.0 s
  trace       import-trace of 10^4 and 10^5 Kineto events: the growth per 10x events (10 is linear); target 12
Speed stays out of the tests: this prints, it does not fail.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

PYTHON = sys.executable
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}

# The nine families the 2,232-candidate space was defined over: a family registered later adds candidates, so the
# figure stays comparable across versions only over these (bench/bench_new_families.py times the newer ones).
PLAN_FAMILIES = ("naive", "gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zbv", "dualpipev", "looped-bfs")
PLAN_ARGS = [
    "plan", "--layers", "64", "--hidden", "4096", "--ffn", "16384", "--heads", "32", "--seq-len", "4096",
    "--devices", "128", "--global-batch", "1024", "--memory-cap", "80GiB",
    "--schedules", ",".join(PLAN_FAMILIES), "--ranks", "2,4,8,16,32,64", "--microbatch-sizes", "1,2,4,8,16,32",
    "--chunks", "1,2,4,8", "--recompute", "both", "--w-shares", "0.3,0.4,0.5,0.6,0.7",
]  # fmt: skip


def timed(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and the peak RSS (MiB) of the largest process that `argv` started (itself or a child it waited
    for): `wait4`'s usage of that one process, not the largest of every command run so far."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL)
    killer = threading.Timer(600, process.kill)
    killer.start()
    try:
        _, status, usage = os.wait4(process.pid, 0)
    finally:
        killer.cancel()
    process.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait for it again
    wall = time.perf_counter() - start
    if process.returncode != 0:
        raise subprocess.CalledProcessError(process.returncode, argv)
    return wall, usage.ru_maxrss / 1024


def best(repeat: int, argv: list[str]) -> tuple[float, float]:
    runs = [timed(argv) for _ in range(repeat)]
    return min(r[0] for r in runs), max(r[1] for r in runs)


def torch_dry_run_s(repeat: int) -> float | None:
    """torch's `_simulate_comms_compute` on interleaved 32 x 128 x 2 (its own order, with its sends and receives)."""
    try:
        from torch.distributed.pipelining import schedules as torch_schedules
    except ImportError:
        return None
    from pipesim.schedules import build_schedule

    schedule = build_schedule("interleaved-1f1b", 32, 128, num_virtual_stages=2)
    order = {r: [torch_schedules._Action.from_str(str(a)) for a in row] for r, row in enumerate(schedule.actions)}

    def placement(stage: int) -> int:
        return stage % 32

    with_comms = torch_schedules._add_send_recv(order, placement, schedule.num_stages)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        torch_schedules._simulate_comms_compute(with_comms, placement, schedule.num_stages)
        times.append(time.perf_counter() - start)
    return min(times)


def interleaved_in_process_s(repeat: int, out: Path) -> float:
    """The CLI's own path for interleaved 32 x 128 x 2 with --json, in this process (imports done): build, check,
    simulate, metrics, JSON written, summary printed. Process start and imports (about 0.15 s, what `list` shows)
    are left out, as torch's figure leaves out importing torch."""
    import contextlib
    import io

    from pipesim.cli.main import main as pipesim_main

    argv = ["simulate", "--schedule", "interleaved-1f1b", "--ranks", "32", "--microbatches", "128"]
    argv += ["--virtual-stages", "2", "--json", str(out)]
    times = []
    for _ in range(repeat + 1):  # the first warms the imports
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()):
            pipesim_main(argv)
        times.append(time.perf_counter() - start)
    return min(times[1:])


def trace_growth(folder: Path) -> tuple[float, float]:
    """Seconds to import 10^4 and 10^5 events (one fresh process each, bench_traces' own files and child)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_traces import _child, _traces

    seconds = []
    for events in (10**4, 10**5):
        (folder / str(events)).mkdir()
        paths, _ = _traces(folder / str(events), events, "steps")
        seconds.append(_child("--one-import", *paths)["seconds"])
    return seconds[0], seconds[1]


def jitter_s(repeat: int) -> float:
    """200 sampled steps of a 2,000-action schedule with their interval (`pipesim.sim.jitter.step_interval`: issue
    29's target, in process)."""
    from pipesim.cost.model import CostModel
    from pipesim.schedules import build_schedule
    from pipesim.sim.jitter import step_interval
    from pipesim.sim.spread import Spread

    schedule, cost = build_schedule("1f1b", 8, 125), CostModel.uniform(1.0, 2.0, comm_ms=0.05)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        step_interval(schedule, cost, Spread.uniform(0.2), 200)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, metavar="OUT")
    args = parser.parse_args()
    rows: list[tuple[str, float, float, str]] = []  # name, figure, target, unit
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        pipesim = [PYTHON, "-m", "pipesim"]
        rows.append(("list", best(args.repeat * 3, [*pipesim, "list"])[0], 0.25, "s"))
        simulate = [*pipesim, "simulate", "--schedule", "1f1b", "--ranks", "64", "--microbatches", "1024"]
        simulate_s = best(args.repeat, [*simulate, "--json", str(folder / "a.json")])[0]
        rows.append(("simulate 131k e2e", simulate_s, 1.0, "s"))
        # the plan before torch is imported here: a child's peak RSS counts this process's pages copied at fork
        plan_s, plan_mib = best(1, [*pipesim, *PLAN_ARGS, "--json", str(folder / "plan.json")])
        theirs = torch_dry_run_s(args.repeat)
        if theirs is not None:
            ours = interleaved_in_process_s(args.repeat, folder / "b.json")
            rows.append(("interleaved e2e / torch", ours / theirs, 0.1, "x"))
        rows += [("plan 2,232 candidates", plan_s, 3.0, "s"), ("plan largest process", plan_mib, 500.0, "MiB")]
        rows.append(("interval 200 x 2,000 actions", jitter_s(args.repeat), 1.0, "s"))
        small, large = trace_growth(folder)
        rows.append(("trace import growth 10^4->10^5", large / small, 12.0, "x"))
    print(f"load average {load:.2f} (1 min) on {os.cpu_count()} cores")
    print(f"{'figure':32} {'measured':>10} {'target':>8}  ratio (<= 1 meets)")
    for name, value, target, unit in rows:
        print(f"{name:32} {value:10.3f} {target:8.2f}  {value / target:5.2f}  {unit}")
    if args.json is not None:
        args.json.write_text(json.dumps({"load": load, "rows": [r[:3] for r in rows]}, indent=1))


if __name__ == "__main__":
    main()
