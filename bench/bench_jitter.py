"""Speed and size of a prediction's interval (issue 29): `pipesim.sim.jitter.step_interval`.

Usage:
    python bench/bench_jitter.py             # the target case and the penalty table
    python bench/bench_jitter.py --repeat 9  # best of 9 instead of best of 5

Prints, each the best of --repeat runs (the machine is shared; the minimum is the least disturbed figure):
  1. the target: 200 samples of a 2,000-action schedule (1f1b, 8 ranks x 125 microbatches) in at most 1 s, and the
     same at 8,000 actions; against it, the deterministic `simulate_step` of the same schedule, once;
  2. the jitter penalty (median of the sampled steps over the step of the medians) and the 90% interval's
     half-width, for 1F1B and GPipe at the issue's shapes and CVs (uniform F = 1, B = 2 ms): the issue measured
     2.5% (1F1B 2 x 4), 3.6% (2 x 8), 6.5% (4 x 16) and 8.7% (GPipe 4 x 16) at a CV of 20%, with its own costs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipesim.cost.model import CostModel  # noqa: E402
from pipesim.schedules import build_schedule  # noqa: E402
from pipesim.sim.jitter import step_interval  # noqa: E402
from pipesim.sim.spread import Spread  # noqa: E402
from pipesim.sim.steps import simulate_step  # noqa: E402

COST = CostModel.uniform(forward_ms=1.0, backward_ms=2.0, comm_ms=0.05)


def best_of(repeat: int, fn) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}")
    for ranks, microbatches in ((8, 125), (8, 500)):
        schedule = build_schedule("1f1b", ranks, microbatches)
        one, _ = best_of(args.repeat, lambda s=schedule: simulate_step(s, COST))
        took, interval = best_of(args.repeat, lambda s=schedule: step_interval(s, COST, Spread.uniform(0.2), 200))
        verdict = "ok" if took <= 1.0 or schedule.num_actions > 2000 else "OVER the 1 s target"
        print(
            f"1f1b {ranks} x {microbatches} ({schedule.num_actions:,} actions): 200 samples in {took:.3f} s "
            f"({verdict}); one deterministic simulate_step {one * 1e3:.1f} ms; point {interval.step_ms:.1f} ms "
            f"[{interval.p05_ms:.1f}, {interval.p95_ms:.1f}], deterministic {interval.deterministic_ms:.1f} ms"
        )
    print("\nschedule  ranks x mb   CV    penalty   90% half-width")
    for name, ranks, microbatches in (("1f1b", 2, 4), ("1f1b", 2, 8), ("1f1b", 4, 16), ("gpipe", 4, 16)):
        schedule = build_schedule(name, ranks, microbatches)
        for cv in (0.1, 0.2):
            interval = step_interval(schedule, CostModel.uniform(1.0, 2.0), Spread.uniform(cv), 1000, seed=0)
            penalty = interval.step_ms / interval.deterministic_ms - 1
            half = (interval.p95_ms - interval.p05_ms) / 2 / interval.step_ms
            print(f"{name:<8} {ranks:>3} x {microbatches:<5} {cv:>4.0%} {penalty:>9.1%} {half:>12.1%}")


if __name__ == "__main__":
    main()
