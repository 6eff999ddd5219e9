"""Speed of the schedules added with resources and memory moves, against 1F1B at the same number of actions.

Usage:
    python bench/bench_new_families.py            # 131,072 actions each, 7 interleaved rounds
    python bench/bench_new_families.py --quick    # 8,192 actions, 3 rounds (a smoke test)
    python bench/bench_new_families.py --families "1f1b offload 131k"   # 1F1B and the rows named (comma-separated)

Each round times, one after the other in a rotating order (A B C ... then B C ... A: the machine's drift falls on
every family alike), build + validate + simulate + metrics of about 131,072 actions each: 1f1b (64 ranks x 1024
microbatches), seq1f1b (64 x 512 x 2 chunks), 1f1b-overlap (64 x 1024: overlapped pairs, an MoE all-to-all priced
per pair), dualpipe (64 ranks, 1000 microbatches over both directions, split backward: 131,040 actions), v-half,
v-min and zbv (64 x 341, two chunks, split backward), and 1f1b with --offload full. OFFLOAD and RELOAD are actions
of the schedule (on the copy engine), so a row counts them among its actions: "1f1b offload 131k" runs 64 x 512
(65,536 compute actions plus 64,508 copies: 130,044 actions), and "1f1b offload 1024mb" the same microbatches as
1f1b, 64 x 1024 (131,072 compute actions plus 129,020 copies: 260,092 actions).
Prints each family's median time over the rounds, its ratio to 1F1B's in the same rounds with a 95% interval (the
ratio of each round, t-interval of their logs), its actions (compute and copies) and the time per action. The
target: within 1.2x of 1F1B for the same number of actions. `--clock cpu` times the process's CPU time rather than
the wall clock: on a machine that other work shares, the time this process waited for a core then stays out of
every row.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipesim.cost.model import CostModel  # noqa: E402
from pipesim.cost.stage import StageCost  # noqa: E402
from pipesim.schedules import build_schedule  # noqa: E402
from pipesim.semantics.dag import dependencies  # noqa: E402
from pipesim.semantics.validate import validate  # noqa: E402
from pipesim.sim.metrics import compute_metrics  # noqa: E402
from pipesim.sim.offload import with_offload  # noqa: E402
from pipesim.sim.simulate import simulate  # noqa: E402

T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
COST = CostModel(stages=(StageCost(1.0, 2.0, activation_bytes=1e6, output_bytes=1e5),), overlap_factor=1.0)
MOE = dataclasses.replace(COST, stages=(dataclasses.replace(COST.stages[0], a2a_ms=0.3, moe_layers=2),))


def cases(ranks: int, microbatches: int) -> dict[str, tuple]:
    from pipesim.cost.links import LinkCost

    host = dataclasses.replace(COST, host_link=LinkCost(0.01, 200.0))
    v = microbatches // 3  # a V with a split backward runs 6 actions per rank and microbatch: 6 p m/3 ~ 2 p m
    # both directions, split backward: about 2 p m + 47 p actions for m microbatches (1000 at 64 ranks: 131,040)
    dual = 2 * ((microbatches - microbatches * 3 // 128) // 2)
    return {
        "1f1b": (lambda: build_schedule("1f1b", ranks, microbatches), COST),
        "seq1f1b": (lambda: build_schedule("seq1f1b", ranks, microbatches // 2, seq_chunks=2), COST),
        "1f1b-overlap": (lambda: build_schedule("1f1b-overlap", ranks, microbatches), MOE),
        "dualpipe": (lambda: build_schedule("dualpipe", ranks, dual), COST),
        "v-half": (lambda: build_schedule("v-half", ranks, v), COST),
        "v-min": (lambda: build_schedule("v-min", ranks, v), COST),
        "zbv": (lambda: build_schedule("zbv", ranks, v), COST),
        "1f1b offload 131k": (lambda: _offloaded(ranks, microbatches // 2), host),  # copies count: ~131k in all
        "1f1b offload 1024mb": (lambda: _offloaded(ranks, microbatches), host),  # 1f1b's microbatches: ~2x actions
    }


def _offloaded(ranks: int, microbatches: int):
    schedule = build_schedule("1f1b", ranks, microbatches)
    validate(schedule)  # as `simulate --offload` does: the placement keeps a sound schedule's mark
    return with_offload(schedule, "full")


def run_once(build, cost: CostModel, clock=time.perf_counter) -> tuple[float, int]:
    start = clock()
    schedule = build()
    validate(schedule)
    priced = cost.for_schedule(schedule)
    compute_metrics(simulate(schedule, priced), priced)
    seconds = clock() - start
    return seconds, dependencies(schedule).num_ops  # compute actions and copies (the lowering, kept on the schedule)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="wall clock or process CPU time")
    parser.add_argument("--families", help="comma-separated rows to time beside 1f1b (default: every row)")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    ranks, microbatches = (16, 256) if args.quick else (64, 1024)
    rounds = min(args.rounds or (3 if args.quick else 7), 11)  # T95 holds the t quantiles up to 10 degrees
    table = cases(ranks, microbatches)
    if args.families is not None:
        asked = {name.strip() for name in args.families.split(",") if name.strip()}
        unknown = sorted(asked - set(table))
        if unknown:
            parser.error(f"unknown rows {', '.join(unknown)}; valid: {', '.join(table)}")
        table = {name: case for name, case in table.items() if name == "1f1b" or name in asked}  # 1f1b: the base
    names = list(table)
    times: dict[str, list[float]] = {name: [] for name in names}
    actions: dict[str, int] = {}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            seconds, count = run_once(*table[name], clock)
            times[name].append(seconds)
            actions[name] = count
    base = times["1f1b"]
    print(
        f"{ranks} ranks; {rounds} rounds, rotating order; median seconds ({args.clock}), ratio to 1f1b (95% CI), "
        "us per action"
    )
    for name in names:
        logs = [math.log(t / b) for t, b in zip(times[name], base, strict=True)]
        mean = statistics.fmean(logs)
        half = T95[len(logs) - 1] * statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else 0.0
        median = statistics.median(times[name])
        print(
            f"  {name:19s} {median:7.3f} s  x{math.exp(mean):.3f} [{math.exp(mean - half):.3f}, "
            f"{math.exp(mean + half):.3f}]  {actions[name]:>7,} actions  {median / actions[name] * 1e6:6.2f} us/action"
        )


if __name__ == "__main__":
    main()
