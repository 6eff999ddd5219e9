"""Synthesized schedules against ZB-H1 and ZB-H2 at their memory, on the issue's grid, and measured for real.

Usage:
    OMP_NUM_THREADS=1 python bench/bench_synth.py                        # the grid: P 2..8, M in {P, 2P, 4P}
    python bench/bench_synth.py --ranks 4,8 --time-limit 10 --json synth.json
    python bench/bench_synth.py --measure                                # also real CPU runs at 2 and 4 ranks

Grid (pipesim only): for each P, M, cost ratio (F = I = W; W < F; W > F, in the zero-bubble paper's terms: pipesim's
--b is I + W) and transfer time (0 and 0.2 F), the synthesized step at ZB-H1's memory (P microbatches' worth)
against zb-h1 and at ZB-H2's (2P - 1) against zb-h2, all simulated on the same costs; the lower bound, the gap,
whether proven optimal, and the seconds taken (each case within --time-limit, at most 30 s). The summary line
counts the cases never slower, and strictly faster among those where the bound leaves room below the named
schedule.

--measure: a profile run of zb-h1 gives the model's costs (cost.json; core sharing dropped: synthesis assumes
one device per rank), the schedule is synthesized for them at ZB-H1's memory, and the executor runs it, zb-h1
and zb-h2 on the same model and batches, alternating, --repeats times: median measured step times.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipesim.cost.convert import cost_from_times  # noqa: E402
from pipesim.cost.model import CostModel  # noqa: E402
from pipesim.schedules import build_schedule  # noqa: E402
from pipesim.sim.metrics import makespan  # noqa: E402
from pipesim.sim.simulate import simulate  # noqa: E402
from pipesim.synth import SynthesisProblem, synthesize  # noqa: E402

RATIOS = {"F=I=W": (1.0, 1.0, 1.0), "W<F": (1.0, 1.0, 0.5), "W>F": (1.0, 1.0, 2.0)}
COMMS = (0.0, 0.2)
TOL = 1e-9


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=_ints, default=list(range(2, 9)), help="P values (default 2..8)")
    parser.add_argument("--factors", type=_ints, default=[1, 2, 4], help="M = factor x P (default 1,2,4)")
    parser.add_argument("--time-limit", type=float, default=5.0, help="seconds per synthesis (at most 30)")
    parser.add_argument("--json", type=Path, help="write every row as JSON")
    parser.add_argument("--measure", action="store_true", help="also run on CPU at 2 and 4 ranks")
    parser.add_argument("--no-grid", action="store_true", help="skip the grid (with --measure)")
    parser.add_argument("--steps", type=int, default=8, help="measured steps per run (--measure)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each schedule, alternating (--measure)")
    args = parser.parse_args(argv)
    if not 0 < args.time_limit <= 30:
        parser.error("--time-limit must lie in (0, 30]")
    return args


def _cost(f: float, i: float, w: float, comm: float) -> CostModel:
    return cost_from_times([f], [i + w], [w], [comm])


def grid_case(ranks: int, microbatches: int, ratio: str, comm: float, time_limit: float) -> dict:
    cost = _cost(*RATIOS[ratio], comm)
    row: dict = {"P": ranks, "M": microbatches, "ratio": ratio, "comm": comm}
    for name, limit in (("zb-h1", ranks), ("zb-h2", 2 * ranks - 1)):
        named = makespan(simulate(build_schedule(name, ranks, microbatches), cost))
        started = time.monotonic()
        result = synthesize(SynthesisProblem(ranks, microbatches, cost, memory_limit=limit), time_limit)
        row[name] = {
            "named_ms": named,
            "synth_ms": result.makespan,
            "lower_bound": result.lower_bound,
            "gap": result.gap,
            "optimal": result.optimal,
            "seconds": time.monotonic() - started,
            "method": result.method,
            "never_slower": result.makespan <= named * (1 + TOL),
            "room": result.lower_bound < named * (1 - TOL),
            "faster": result.makespan < named * (1 - TOL),
        }
    return row


def grid_table(rows: list[dict]) -> str:
    lines = [
        "| P | M | F:I:W | comm | zb-h1 | synth @P | bound | gap | s | zb-h2 | synth @2P-1 | bound | gap | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = [str(row["P"]), str(row["M"]), row["ratio"], f"{row['comm']:g}"]
        for name in ("zb-h1", "zb-h2"):
            r = row[name]
            mark = "*" if r["optimal"] else ""
            cells += [f"{r['named_ms']:.2f}", f"{r['synth_ms']:.2f}{mark}", f"{r['lower_bound']:.2f}",
                      f"{r['gap']:.1%}", f"{r['seconds']:.1f}"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def grid_summary(rows: list[dict]) -> str:
    parts = []
    for name in ("zb-h1", "zb-h2"):
        results = [row[name] for row in rows]
        roomy = [r for r in results if r["room"]]
        parts.append(
            f"{name}'s memory: never slower in {sum(r['never_slower'] for r in results)}/{len(results)}, "
            f"strictly faster in {sum(r['faster'] for r in roomy)}/{len(roomy)} cases with room below {name}, "
            f"proven optimal in {sum(r['optimal'] for r in results)}/{len(results)}, "
            f"slowest case {max(r['seconds'] for r in results):.1f} s"
        )
    return "; ".join(parts)


# --- measured runs --------------------------------------------------------------------------------------------


def measure(ranks: int, args: argparse.Namespace, runs_root: Path) -> dict:
    from pipesim_executor.config import ModelConfig, run_config
    from pipesim_executor.host.launch import run

    # a small vocabulary keeps the head light, so the stages are balanced and the order matters
    model = ModelConfig.of_transformer(
        num_layers=4 * ranks, hidden_size=128, num_heads=4, ffn_size=512, seq_len=64, vocab_size=64
    )
    microbatches = 2 * ranks

    def config(name: str, profile: bool = False):
        return run_config(
            schedule=name, num_ranks=ranks, num_microbatches=microbatches, model=model, batch_size=4 * microbatches,
            steps=args.steps, warmup_steps=2, device="cpu", profile=profile, timeout_s=900,
        )  # fmt: skip

    profiled = run(config("zb-h1", profile=True), runs_root=runs_root)
    if profiled.status != "ok" or profiled.cost is None:
        raise SystemExit(f"profile run of zb-h1 at {ranks} ranks: {profiled.status}: {profiled.message}")
    cost = dataclasses.replace(profiled.cost, shared_cores=None)
    result = synthesize(SynthesisProblem(ranks, microbatches, cost, memory_limit=ranks), 10.0)
    schedules = {
        "synthesized": result.schedule,
        "zb-h1": build_schedule("zb-h1", ranks, microbatches),
        "zb-h2": build_schedule("zb-h2", ranks, microbatches),
    }
    steps: dict[str, list[float]] = {name: [] for name in schedules}
    losses: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for name, schedule in schedules.items():
            done = run(config(name), runs_root=runs_root, schedule=schedule)
            if done.status != "ok":
                raise SystemExit(f"{name} at {ranks} ranks: {done.status}: {done.message}")
            steps[name].append(done.measured_step_ms)
            losses[name] = done.losses
    simulated = {name: makespan(simulate(schedule, cost)) for name, schedule in schedules.items()}
    return {
        "ranks": ranks, "microbatches": microbatches,
        "measured_ms": {name: statistics.median(values) for name, values in steps.items()},
        "simulated_ms": simulated, "lower_bound": result.lower_bound, "gap": result.gap,
        "loss_gap": max(abs(a - b) for a, b in zip(losses["synthesized"], losses["zb-h1"], strict=True)),
    }  # fmt: skip


def measured_table(rows: list[dict]) -> str:
    lines = [
        "| P | M | schedule | simulated ms | measured ms (median) | measured / zb-h1 |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        base = row["measured_ms"]["zb-h1"]
        for name, value in row["measured_ms"].items():
            lines.append(f"| {row['ranks']} | {row['microbatches']} | {name} | {row['simulated_ms'][name]:.2f} | "
                         f"{value:.2f} | {value / base:.3f} |")  # fmt: skip
        lines.append(f"| {row['ranks']} | {row['microbatches']} | (lower bound) | {row['lower_bound']:.2f} | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"{platform.node()} {platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d %H:%M')}, "
          f"--time-limit {args.time_limit:g} s", flush=True)  # fmt: skip
    document: dict = {}
    if not args.no_grid:
        rows = []
        for ranks in args.ranks:
            for factor in args.factors:
                for ratio in RATIOS:
                    for comm in COMMS:
                        rows.append(grid_case(ranks, factor * ranks, ratio, comm, args.time_limit))
                        print(f"P={ranks} M={factor * ranks} {ratio} comm={comm}: done", file=sys.stderr, flush=True)
        print(grid_table(rows))
        print("(* proven optimal; bound and gap: pipesim.synth's lower bound)")
        print(grid_summary(rows))
        document["grid"] = rows
    if args.measure:
        with tempfile.TemporaryDirectory(prefix="bench-synth-") as scratch:
            measured = [measure(ranks, args, Path(scratch)) for ranks in (2, 4)]
        print(measured_table(measured))
        document["measured"] = measured
    if args.json:
        args.json.write_text(json.dumps(document, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
