"""Synthesis against the Zero Bubble paper's searched schedule (ZB-2p) on every profile the paper publishes.

Usage:
    OMP_NUM_THREADS=1 python bench/bench_synth_published.py                  # all 12 cases, 30 s each
    python bench/bench_synth_published.py --time-limit 10 --models 1.5B,6.2B --json published.json

For each row of the paper's Table 9 (T_F, T_B, T_W, T_comm per model, p, m; pipesim.synth.published),
`synthesize` at ZB-2p's memory (2p microbatches' worth of activations per rank, W keeping Table 1's share of
a microbatch's stash) with the paper's cost (the longest stage's span: objective "span"), against Table 5's
ZB-2p bubble rate; zb-h1 and zb-h2 simulated on the same costs as a check of the definitions (they reproduce
Table 5's columns). Per case: the paper's bubble, ours, the difference, the memory-aware bound's bubble, what
was proven (optimal, or the gap to the bound), the seconds taken.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipesim.io.formats import write_json  # noqa: E402
from pipesim.schedules import build_schedule  # noqa: E402
from pipesim.sim.simulate import simulate  # noqa: E402
from pipesim.synth import SynthesisProblem, synthesize  # noqa: E402
from pipesim.synth.problem import longest_rank_span  # noqa: E402
from pipesim.synth.published import CASES, MODELS, SOURCE, PublishedCase, paper_bubble_rate  # noqa: E402

TARGET = 0.01  # the tolerance on the bubble rate


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=30.0, help="seconds per case (default 30, at most 60)")
    parser.add_argument("--models", default=",".join(MODELS), help=f"models to run (default {','.join(MODELS)})")
    parser.add_argument("--json", type=Path, help="write every row as JSON")
    args = parser.parse_args(argv)
    if not 0 < args.time_limit <= 60:
        parser.error(f"--time-limit must lie in (0, 60], got {args.time_limit:g}")
    chosen = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in MODELS]
    if unknown or not chosen:
        parser.error(f"--models: unknown {', '.join(unknown) or '(none given)'}; valid: {', '.join(MODELS)}")
    args.models = chosen
    return args


def run_case(case: PublishedCase, time_limit: float) -> dict:
    cost = case.cost()
    row: dict = {"case": case.label, "times": case.times, "paper_zb2p": case.published("zb-2p")}
    for name in ("zb-h1", "zb-h2"):
        timeline = simulate(build_schedule(name, case.num_stages, case.num_microbatches), cost)
        row[name] = paper_bubble_rate(longest_rank_span(timeline), case)
        row[f"paper_{name}"] = case.published(name)
    problem = SynthesisProblem(
        case.num_stages, case.num_microbatches, cost, memory_limit=2 * case.num_stages, objective="span"
    )
    started = time.monotonic()
    result = synthesize(problem, time_limit)
    row.update(
        seconds=time.monotonic() - started,
        ours=paper_bubble_rate(result.objective_ms, case),
        bound=paper_bubble_rate(result.lower_bound, case),
        gap=result.gap,
        optimal=result.optimal,
        method=result.method,
        peak_microbatches=max(result.peak_memory),
    )
    row["difference"] = row["ours"] - row["paper_zb2p"]
    row["within"] = row["difference"] <= TARGET
    return row


def table(rows: list[dict]) -> str:
    lines = [
        "| case | T_F / T_B / T_W / T_comm | zb-h1 (paper) | zb-h2 (paper) | ZB-2p paper | ours | diff | "
        "bound | proven | s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        proven = "optimal" if r["optimal"] else f"gap {r['gap']:.2%}"
        times = " / ".join(f"{t:g}" for t in r["times"])
        lines.append(
            f"| {r['case']} | {times} | {r['zb-h1']:.4f} ({r['paper_zb-h1']:.4f}) | "
            f"{r['zb-h2']:.4f} ({r['paper_zb-h2']:.4f}) | {r['paper_zb2p']:.4f} | {r['ours']:.4f} | "
            f"{r['difference']:+.4f} | {r['bound']:.4f} | {proven} | {r['seconds']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows = []
    for case in CASES:
        if case.model in args.models:
            rows.append(run_case(case, args.time_limit))
            print(f"{case.label}: done in {rows[-1]['seconds']:.1f} s", file=sys.stderr, flush=True)
    print(f"source: {SOURCE}")
    print(table(rows))
    within = sum(r["within"] for r in rows)
    print(
        f"within {TARGET} of the paper's ZB-2p in {within}/{len(rows)} cases; proven optimal in "
        f"{sum(r['optimal'] for r in rows)}/{len(rows)}; largest gap to the bound {max(r['gap'] for r in rows):.2%}; "
        f"slowest case {max(r['seconds'] for r in rows):.1f} s"
    )
    if args.json:
        write_json(rows, args.json)
    return 0 if within == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
