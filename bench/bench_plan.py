"""Speed of the planner: candidates evaluated per second (`pipesim.plan.search.evaluate_all`), each one exact.

Usage:
    python bench/bench_plan.py            # the two grids below, best of 3
    python bench/bench_plan.py --quick    # one repeat of the typical grid (a smoke test)
    python bench/bench_plan.py --against /work/main   # this tree against another checkout, side by side

With --against, each grid runs in fresh processes that alternate between the other checkout's pipesim and this
one's (best of --repeat each), and the ratio is printed: a before/after comparison measured in one run, so a
busy machine slows both sides alike.

Grids (a 24-layer, 2048-wide model description, 8 devices, global batch 64, 80 GiB cap, Adam):
  typical: every registered schedule, pipeline depths 2/4/8 (the rest data parallel), microbatch sizes
           1/2/4/8, chunks 1/2/4, recompute off/on, W shares 0.3..0.7 by 0.1;
  10k:     the same with W shares 0.20..0.80 by 0.005 (121 values: a sensitivity sweep over the least known
           cost), which takes the space past 10,000 candidates.
Every candidate is simulated with the simulator's own sweep and its memory walked; nothing is sampled or pruned.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
# PIPESIM_TREE: the checkout whose pipesim is measured (--against runs this script once per tree)
sys.path.insert(0, os.environ.get("PIPESIM_TREE", str(Path(__file__).resolve().parents[1])))

from pipesim.cost.description import ModelDescription  # noqa: E402
from pipesim.plan.report import best_candidate, pareto_front  # noqa: E402
from pipesim.plan.search import PlanInputs, PlanSpace, evaluate_all  # noqa: E402
from pipesim.schedules import schedule_names  # noqa: E402

MODEL = ModelDescription(num_layers=24, hidden_size=2048, ffn_size=8192, num_heads=16, seq_len=2048)
INPUTS = PlanInputs.from_description(MODEL, devices=8, global_batch=64, memory_cap_bytes=80 * 2**30)


def grid(shares: tuple[float, ...]) -> PlanSpace:
    return PlanSpace(
        schedules=tuple(schedule_names()),
        microbatch_sizes=(1, 2, 4, 8),
        chunks=(1, 2, 4),
        recompute=(False, True),
        w_shares=shares,
        ranks=(2, 4, 8),
    )


def run(name: str, space: PlanSpace, repeat: int) -> None:
    best_s, candidates = float("inf"), []
    for _ in range(repeat):
        start = time.perf_counter()
        candidates = evaluate_all(INPUTS, space)
        front, best = pareto_front(candidates), best_candidate(candidates)
        best_s = min(best_s, time.perf_counter() - start)
    built = sum(c.error is None for c in candidates)
    actions = sorted(c.ranks * c.virtual_stages * c.microbatches * 3 for c in candidates if c.error is None)
    print(
        f"{name:8} {len(candidates):6} candidates ({built} built, {len(candidates) - built} cannot be built; "
        f"median {actions[len(actions) // 2]} actions) in {best_s:.2f} s: {len(candidates) / best_s:,.0f} "
        f"candidates/s; front {len(front)}, best {best.label if best else None}"
    )


GRIDS = {
    "typical": lambda: grid((0.3, 0.4, 0.5, 0.6, 0.7)),
    "10k": lambda: grid(tuple(round(0.2 + 0.005 * i, 3) for i in range(121))),
}


def child(name: str, repeat: int) -> None:
    """The best of `repeat` timed evaluations of a grid in this process, printed as JSON for --against's parent."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        candidates = evaluate_all(INPUTS, GRIDS[name]())
        best_candidate(candidates)
        pareto_front(candidates)
        best = min(best, time.perf_counter() - start)
    print(json.dumps({"seconds": best, "candidates": len(candidates)}))


def against(other: Path, names: list[str], repeat: int) -> None:
    """Each grid in fresh processes alternating three times between the other checkout's pipesim and this one's,
    each process timing `repeat` evaluations; the best of each side."""
    here = Path(__file__).resolve().parents[1]
    for name in names:
        best = {"other": float("inf"), "this": float("inf")}
        for _ in range(3):
            for side, tree in (("other", other), ("this", here)):
                env = {**os.environ, "PIPESIM_TREE": str(tree)}
                command = [sys.executable, __file__, "--child", name, "--repeat", str(repeat)]
                out = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
                best[side] = min(best[side], json.loads(out.stdout)["seconds"])
        print(
            f"{name:8} {other}: {best['other']:.3f} s, this tree: {best['this']:.3f} s, "
            f"this / other = {best['this'] / best['other']:.2f} (best of 3 x {repeat} each, alternating)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", type=Path, metavar="TREE", help="another checkout to compare with")
    parser.add_argument("--child", choices=sorted(GRIDS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.repeat)
        return
    repeat = 1 if args.quick else args.repeat
    names = ["typical"] if args.quick else ["typical", "10k"]
    if args.against is not None:
        against(args.against.resolve(), names, repeat)
        return
    for name in names:
        run(name, GRIDS[name](), repeat)


if __name__ == "__main__":
    main()
