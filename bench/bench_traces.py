"""Speed of the trace paths and of balancing, and how they grow: importing Kineto traces (pipesim.io.kineto), the
one-file Perfetto view (pipesim.io.chrome_trace.run_trace) and stage balancing (pipesim.cost.balance).

Usage:
    python bench/bench_traces.py            # about 2 minutes on 2 cores: growth up to 10^6 events and layers
    python bench/bench_traces.py --quick    # about 15 s: up to 10^5

Trace import is what `python -m pipesim import-trace` does: read the files, recover the schedule, replay it with
the traces' own times, attribute every step. Kineto-like files (tests/helpers/kineto_traces.py: PP: labels with a
torch op inside each, sends, one file per rank) are written for 10^4, 10^5 and 10^6 events in two shapes: more
steps of one schedule (1f1b, 8 ranks x 128 microbatches: about 5,900 events a step), and one step of a growing
schedule (1f1b, 8 ranks x M microbatches). Each size runs in a fresh process, which reports its wall time and
its peak memory (VmHWM: the whole process, Python and the parsed JSON included, and how much of it came with the
work). Balancing splits 10^4, 10^5 and 10^6 random layer times into 4 and into 1,024 stages, each size in a fresh
process likewise. Each series prints its growth per 10x more input: 10 is linear, 100 quadratic. Beside them a
control, plain Python work linear by construction on about as many objects, shows the machine's own growth at
those sizes (caches, page faults, other work's load): on a shared 2-core machine it is well above 10 too.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from pipesim.cost.model import CostModel  # noqa: E402
from pipesim.io.chrome_trace import run_trace  # noqa: E402
from pipesim.schedules import build_schedule  # noqa: E402
from pipesim.sim.simulate import simulate  # noqa: E402
from tests.helpers.kineto_traces import kineto_files  # noqa: E402

STEP_SHAPE = (8, 128)  # ranks, microbatches of the "more steps" series
EVENTS_PER_ACTION = 2.9  # a label and a torch op per action, a send label for most


def best_of(repeat: int, work) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - start)
    return best * 1e3, result


def _peak_mib() -> float:
    """This process's peak resident memory: VmHWM (its own address space's high-water mark; ru_maxrss would carry
    the parent's peak over fork and exec), else ru_maxrss."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kB


def one_import(paths: list[str]) -> dict:
    """In this (fresh) process: what `pipesim import-trace` does, timed; its peak memory."""
    from pipesim.analysis.attribution import attribute_run
    from pipesim.analysis.replay import replay
    from pipesim.io.kineto import import_traces

    before = _peak_mib()
    start = time.perf_counter()
    run = import_traces(paths)
    replay(run)
    attribute_run(run.schedule, run.timeline, run.step_times_ms)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "peak_mib": _peak_mib(), "base_mib": before, "spans": len(run.timeline.spans)}


def one_balance(layers: int, stages: int) -> dict:
    from pipesim.cost.balance import balance

    rng = random.Random(layers)
    costs = [rng.uniform(0.5, 2.0) for _ in range(layers)]
    before = _peak_mib()
    start = time.perf_counter()
    result = balance(costs, stages)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "peak_mib": _peak_mib(), "base_mib": before, "stages": len(result.stage_costs)}


def one_control(count: int) -> dict:
    """The control: plain Python work linear in `count` by construction (make `count` small tuples, walk them,
    index them), in a fresh process like the others. Its growth per 10x is what this machine's memory does to
    any linear Python code at that size (caches, page faults, other work's load): read the import's growth
    beside it, not beside 10."""
    import gc

    gc.disable()
    start = time.perf_counter()
    rows = [(k, str(k), float(k), float(k) + 1.0) for k in range(count)]
    total = sum(row[2] for row in rows)
    index = {row[1]: row for row in rows}
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "peak_mib": _peak_mib(), "base_mib": 0.0, "check": total + len(index)}


def _child(*argv: str) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, *argv], capture_output=True, text=True, check=True, cwd=ROOT, timeout=1800
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _traces(folder: Path, events: int, shape: str) -> tuple[list[str], int]:
    """Trace files of about `events` events: more steps of one schedule, or one step of a longer schedule."""
    ranks, microbatches = STEP_SHAPE
    if shape == "steps":
        schedule = build_schedule("1f1b", ranks, microbatches)
        steps = max(1, round(events / (EVENTS_PER_ACTION * schedule.num_actions)))
    else:
        microbatches = max(1, round(events / (EVENTS_PER_ACTION * 2 * ranks)))
        schedule, steps = build_schedule("1f1b", ranks, microbatches), 1
    paths, _ = kineto_files(folder, schedule, steps=steps)
    count = sum(len(json.loads(p.read_bytes())["traceEvents"]) for p in paths)
    return [str(p) for p in paths], count


def _growth(rows: list[tuple[int, dict]]) -> str:
    """Time growth per 10x more input between consecutive sizes (10: linear)."""
    ratios = []
    for (n0, a), (n1, b) in zip(rows, rows[1:], strict=False):
        ratios.append(f"{(b['seconds'] / a['seconds']) / (n1 / n0) * 10:.1f}")
    return "growth per 10x: " + ", ".join(ratios) + " (10 = linear)"


def control_growth(sizes: list[int]) -> None:
    rows = [(count, _child("--one-control", str(count))) for count in sizes]
    for count, result in rows:
        print(f"control (plain linear Python work): {count:>9,} objects: {result['seconds']:7.2f} s")
    print(f"control: {_growth(rows)}: this machine's own growth for linear work at these sizes")


def import_growth(sizes: list[int]) -> None:
    for shape, what in (("steps", "more steps of 1f1b 8x128"), ("schedule", "one step of 1f1b 8 x M")):
        rows = []
        for target in sizes:
            with tempfile.TemporaryDirectory() as folder:
                paths, count = _traces(Path(folder), target, shape)
                result = _child("--one-import", *paths)
            rows.append((count, result))
            print(
                f"import-trace ({what}): {count:>9,} events, {result['spans']:>8,} spans: "
                f"{result['seconds']:7.2f} s, peak {result['peak_mib']:6.0f} MiB "
                f"({result['peak_mib'] - result['base_mib']:.0f} MiB over the process before it)"
            )
        print(f"import-trace ({what}): {_growth(rows)}")


def balance_growth(sizes: list[int]) -> None:
    for stages in (4, 1024):
        rows = []
        for layers in sizes:
            result = _child("--one-balance", str(layers), str(stages))
            rows.append((layers, result))
            print(
                f"balance {layers:>9,} layers into {stages:>5} stages: {result['seconds'] * 1e3:8.1f} ms, "
                f"peak {result['peak_mib']:5.0f} MiB ({result['peak_mib'] - result['base_mib']:.0f} MiB over the "
                "process holding the layer times)"
            )
        print(f"balance into {stages} stages: {_growth(rows)}")


def run_trace_speed() -> None:
    schedule = build_schedule("interleaved-1f1b", 8, 64, num_virtual_stages=2)
    simulated = simulate(schedule, CostModel.uniform(comm_ms=0.1))
    ms, trace = best_of(3, lambda: run_trace(schedule, {"simulated": simulated, "measured": simulated}))
    flows = sum(e["ph"] == "s" for e in trace["traceEvents"])
    print(f"run_trace: {schedule.describe()}: {len(trace['traceEvents']):,} events, {flows:,} flows: {ms:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes up to 10^5 only")
    parser.add_argument("--one-import", nargs="+", metavar="TRACE", help=argparse.SUPPRESS)
    parser.add_argument("--one-balance", nargs=2, type=int, metavar=("LAYERS", "STAGES"), help=argparse.SUPPRESS)
    parser.add_argument("--one-control", type=int, metavar="COUNT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one_control:
        print(json.dumps(one_control(args.one_control)))
        return
    if args.one_import:
        print(json.dumps(one_import(args.one_import)))
        return
    if args.one_balance:
        print(json.dumps(one_balance(*args.one_balance)))
        return
    sizes = [10**4, 10**5] if args.quick else [10**4, 10**5, 10**6]
    control_growth([size // 3 for size in sizes])  # about as many objects as the import makes labels of
    import_growth(sizes)
    balance_growth(sizes)
    run_trace_speed()


if __name__ == "__main__":
    main()
