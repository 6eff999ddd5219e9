"""Sleep mode over the new families: each case's measured step against pipesim's simulation of the same schedule.

Usage:
    OMP_NUM_THREADS=1 python bench/bench_sleep_new_families.py                 # the 20 cases at 4 ranks
    python bench/bench_sleep_new_families.py --cases dualpipe-a2a-long --steps 12 --markdown out/sleep.md

Each case is one `executor run --compute sleep` (real processes and gloo transfers, every action sleeping the
duration pipesim's simulation gives it: pipesim_executor.rank.inject.slept_ms) of v-half, v-min, dualpipe,
1f1b-overlap (overlapped forward-backward pairs, an expert all-to-all priced per pair by pipesim.cost.overlap) or
1f1b / v-half with --offload full|selective (copies on the copy engine's thread, each sleeping its priced time over
the host link), from a cost file written here. The cases include copies slower than the compute (the copy engine
the bottleneck) and all-to-alls longer than the other member's compute. The run predicts its own step (its cost.json:
the slept costs with the runtime it measured priced in, pipesim_executor.rank.sleep_calibrate); per case the
predicted step, the measured median step with its 95% interval (pipesim.analysis.stats.median_ci), the error, the
quickest step and its error (load only ever adds: a wrong rule moves the quickest step too), and the machine's load.
The summary: median and 90th percentile of |error| over the cases.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipesim.analysis.stats import median_ci  # noqa: E402
from pipesim.cost.convert import cost_from_times  # noqa: E402
from pipesim.cost.links import LinkCost  # noqa: E402
from pipesim.io.cost_file import save_cost  # noqa: E402
from pipesim_executor.config import run_config  # noqa: E402

MB = 1e6


class Case(NamedTuple):
    """One sleep-mode run: the family, its size and the costs each action sleeps (ms per microbatch and stage; an
    all-to-all's ms for one microbatch through the stage, over `moe_layers`; the stash's bytes over a host link of
    `host_gbps` GB/s with `host_latency` ms per copy)."""

    name: str
    schedule: str
    microbatches: int
    f: float
    b: float
    w: float
    a2a: float = 0.0
    moe_layers: int = 1
    offload: str = "none"
    stash_mb: float = 4.0
    host_gbps: float = 10.0
    host_latency: float = 0.05

    def cost(self):
        base = cost_from_times((self.f,), (self.b,), (self.w,))
        stage = dataclasses.replace(
            base.stages[0], a2a_ms=self.a2a, moe_layers=self.moe_layers, activation_bytes=self.stash_mb * MB
        )
        return dataclasses.replace(base, stages=(stage,), host_link=LinkCost(self.host_latency, self.host_gbps))


# Times per rank, as `pipesim simulate --f/--b/--w` reads them: a V schedule's two chunks take half each, so its
# costs are doubled here to keep each action at 10-40 ms, long beside the machine's late wake-ups (0.1-0.5 ms each
# at load 10 on 2 cores).
CASES = (
    Case("v-half", "v-half", 8, 40, 80, 40),
    Case("v-half-uneven", "v-half", 12, 20, 60, 20),
    Case("v-half-long-w", "v-half", 8, 30, 80, 50),
    Case("v-min", "v-min", 8, 40, 80, 40),
    Case("v-min-uneven", "v-min", 12, 20, 60, 20),
    Case("v-min-long-w", "v-min", 8, 30, 80, 50),
    Case("dualpipe", "dualpipe", 8, 20, 40, 20),
    Case("dualpipe-12", "dualpipe", 12, 10, 30, 10),
    Case("dualpipe-a2a", "dualpipe", 8, 20, 40, 20, a2a=8, moe_layers=2),
    Case("dualpipe-a2a-long", "dualpipe", 8, 10, 20, 10, a2a=25, moe_layers=2),
    Case("overlap-dense", "1f1b-overlap", 8, 20, 40, 20),
    Case("overlap-a2a", "1f1b-overlap", 8, 20, 40, 20, a2a=10, moe_layers=2),
    Case("overlap-a2a-long", "1f1b-overlap", 8, 10, 20, 10, a2a=30, moe_layers=1),
    Case("overlap-a2a-12", "1f1b-overlap", 12, 10, 20, 10, a2a=15, moe_layers=2),
    Case("offload-full", "1f1b", 8, 20, 40, 20, offload="full", host_gbps=2.0),
    Case("offload-full-slow", "1f1b", 8, 20, 40, 20, offload="full", host_gbps=0.1),
    Case("offload-full-even", "1f1b", 12, 15, 30, 15, offload="full", host_gbps=0.27),
    Case("offload-selective", "1f1b", 8, 20, 40, 20, offload="selective", host_gbps=0.5),
    Case("offload-selective-slow", "1f1b", 12, 20, 40, 20, offload="selective", host_gbps=0.2),
    Case("v-half-offload-slow", "v-half", 8, 40, 80, 40, offload="full", host_gbps=0.06),
)


def run_case(case: Case, ranks: int, steps: int, warmup: int, root: Path) -> dict:
    """One sleep-mode run of `case`; its prediction, its measured steps and their interval."""
    from pipesim_executor.host import launch

    folder = root / case.name
    folder.mkdir(parents=True, exist_ok=True)
    save_cost(case.cost(), folder / "cost-in.json")
    config = run_config(
        schedule=case.schedule, num_ranks=ranks, num_microbatches=case.microbatches, compute="sleep",
        sleep_cost=str(folder / "cost-in.json"), offload=case.offload, steps=steps, warmup_steps=warmup,
        device="cpu", timeout_s=600,
    )  # fmt: skip
    started = time.monotonic()
    result = launch.run(config, runs_root=folder, name="run", wait_for_machine=True)
    row = {"case": case.name, "status": result.status, "wall_s": time.monotonic() - started, "load": os.getloadavg()[0]}
    if result.status != "ok" or result.predicted_step_ms is None or not result.step_times_ms:
        return {**row, "message": result.message.splitlines()[0] if result.message else ""}
    ci = median_ci([result.step_times_ms])
    quickest = min(result.step_times_ms)
    predicted = result.predicted_step_ms
    return {
        **row,
        "predicted_ms": predicted,
        "measured_ms": ci.median,
        "low_ms": ci.low,
        "high_ms": ci.high,
        "error": predicted / ci.median - 1,
        "quickest_ms": quickest,
        "quickest_error": predicted / quickest - 1,
        "steps": len(result.step_times_ms),
    }


def percentile(values: list[float], q: float) -> float:
    """The q-quantile, linear between order statistics."""
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    lo, hi = math.floor(at), math.ceil(at)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (at - lo)


def table(rows: list[dict]) -> str:
    head = "| case | predicted ms | measured median ms [95% CI] | error | quickest ms | error vs quickest | load |"
    lines = [head, "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" not in r:
            lines.append(f"| {r['case']} | {r['status']}: {r.get('message', '')[:80]} | | | | | |")
            continue
        lines.append(
            f"| {r['case']} | {r['predicted_ms']:.1f} | {r['measured_ms']:.1f} [{r['low_ms']:.1f}, {r['high_ms']:.1f}]"
            f" | {r['error']:+.2%} | {r['quickest_ms']:.1f} | {r['quickest_error']:+.2%} | {r['load']:.1f} |"
        )
    return "\n".join(lines)


def summary(rows: list[dict]) -> str:
    done = [r for r in rows if "error" in r]
    if not done:
        return "no case finished"
    errors = [abs(r["error"]) for r in done]
    quick = [abs(r["quickest_error"]) for r in done]
    return (
        f"{len(done)} of {len(rows)} cases finished; |error| of the median step: median "
        f"{statistics.median(errors):.2%}, p90 {percentile(errors, 0.9):.2%}, max {max(errors):.2%}; "
        f"against the quickest step: median {statistics.median(quick):.2%}, p90 {percentile(quick, 0.9):.2%}"
    )


def main(argv: list[str] | None = None) -> int:
    names = [c.name for c in CASES]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", choices=names, default=names, metavar="CASE", help=", ".join(names))
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--markdown", type=Path, help="also write the table and summary as Markdown")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-sleep-") as scratch:
        for case in CASES:
            if case.name in args.cases:
                rows.append(run_case(case, args.ranks, args.steps, args.warmup_steps, Path(scratch)))
                row = rows[-1]
                detail = f"{row['error']:+.2%}" if "error" in row else row.get("message", "")
                print(f"{case.name}: {row['status']} {detail} ({row['wall_s']:.0f} s)", file=sys.stderr, flush=True)
    text = table(rows) + "\n\n" + summary(rows)
    print(text)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
