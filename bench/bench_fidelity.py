"""The fidelity table: profile-then-predict against the measured step, for every schedule, with the attribution.

Usage:
    OMP_NUM_THREADS=1 python bench/bench_fidelity.py                      # every schedule, 2 and 4 CPU ranks
    python bench/bench_fidelity.py --schedules 1f1b zb-h1 --ranks 2 --steps 10 --markdown out/fidelity.md

For each schedule and rank count, one real run with the profile phase (executor run --profile): the
measured median step, the prediction (simulated with cost.json: in-situ calibrated action times, dispatch
gaps and per-rank tails; see pipesim_executor/rank/calibrate.py), its error, the same prediction from the isolated
profile alone (each stage timed on its own, optimizer timed on its own, no gaps: what the profile gave
before the calibration steps), the median |error| over actions, the run's noise (step-time CV; more than 5%
and the error is marked unreliable) and the machine's 1-minute load at the end, and the attribution of the
median step averaged over ranks (compute, schedule idle, comm wait, overhead, in ms).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipesim.cost.runtime import RankRuntime  # noqa: E402
from pipesim.schedules import options_for, schedule_names  # noqa: E402
from pipesim_executor.config import ModelConfig, run_config  # noqa: E402
from pipesim_executor.host.launch import run  # noqa: E402
from pipesim_executor.host.predict import predict_step  # noqa: E402

PARTS = ("compute_ms", "schedule_idle_ms", "comm_wait_ms", "overhead_ms")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", nargs="+", default=list(schedule_names()))
    parser.add_argument("--ranks", nargs="+", type=int, default=[2, 4])
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown")
    return parser.parse_args(argv)


def isolated_prediction(result) -> float | None:
    """The step the isolated profile alone predicts (stages and optimizer timed on their own, no gaps)."""
    from pipesim_executor.rank.profile import stage_cost

    measured = result.cost.meta.get("measured") or {}
    optimizer = (result.cost.meta.get("in_situ") or {}).get("optimizer_ms")
    if not measured or not optimizer:
        return None
    split = result.schedule.uses_split_backward
    stages = tuple(
        stage_cost(measured[str(s)], split, result.cost.recompute) for s in range(result.schedule.num_stages)
    )
    cost = replace(result.cost, stages=stages, runtime=RankRuntime(step_overhead_ms=tuple(optimizer)))
    return predict_step(result.schedule, cost).predicted_step_ms


def measure(args: argparse.Namespace, schedule: str, ranks: int, runs_root: Path) -> dict:
    model = ModelConfig.of_transformer(
        num_layers=args.layers, hidden_size=args.d_model, num_heads=4, ffn_size=4 * args.d_model
    )
    config = run_config(
        schedule=schedule, num_ranks=ranks, num_microbatches=args.microbatches,
        num_virtual_stages=options_for(schedule, num_virtual_stages=2).get("num_virtual_stages"),
        model=model, batch_size=args.batch_size, steps=args.steps, warmup_steps=args.warmup_steps,
        device="cpu", profile=True, timeout_s=900,
    )  # fmt: skip
    result = run(config, runs_root=runs_root)
    row = {"schedule": schedule, "ranks": ranks, "status": result.status, "message": result.message}
    if result.status != "ok" or result.measured_step_ms is None:
        return row
    analysis = result.analysis or {}
    prediction = analysis.get("prediction") or {}
    isolated = isolated_prediction(result) if result.cost is not None else None
    ranks_rows = analysis.get("ranks") or []
    row.update(
        measured_ms=result.measured_step_ms,
        predicted_ms=result.predicted_step_ms,
        error=result.prediction_error,
        isolated_error=None if isolated is None else (isolated - result.measured_step_ms) / result.measured_step_ms,
        action_error=prediction.get("action_error_median"),
        step_cv=(analysis.get("spread") or {}).get("step_cv"),
        load=(analysis.get("spread") or {}).get("load_1min"),
        **{part: statistics.fmean(r[part] for r in ranks_rows) if ranks_rows else None for part in PARTS},
    )
    return row


def f(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def pct(value, spec: str) -> str:
    return "-" if value is None else format(100 * value, spec) + "%"


def table(rows: list[dict]) -> str:
    head = (
        "| schedule | ranks | measured ms | predicted ms | error | isolated-profile error "
        "| action median abs error | step CV | load | compute | schedule idle | comm wait | overhead |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['schedule']} | {r['ranks']} | {r['status']}: {r['message'][:60]} |" + " |" * 11)
            continue
        noisy = " (noisy)" if (r["step_cv"] or 0) > 0.05 else ""
        cells = [
            r["schedule"],
            str(r["ranks"]),
            f(r["measured_ms"], ".2f"),
            f(r["predicted_ms"], ".2f"),
            pct(r["error"], "+.1f") + noisy,
            pct(r["isolated_error"], "+.1f"),
            pct(r["action_error"], ".1f"),
            pct(r["step_cv"], ".1f"),
            f(r["load"], ".1f"),
            *(f(r[p], ".1f") for p in PARTS),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-fidelity-") as scratch:
        for ranks in args.ranks:
            for schedule in args.schedules:
                rows.append(measure(args, schedule, ranks, Path(scratch)))
                print(f"{schedule} x {ranks}: {rows[-1]['status']}", file=sys.stderr, flush=True)
    errors = [abs(r["error"]) for r in rows if r.get("error") is not None]
    text = table(rows)
    summary = (
        f"{len(errors)} runs; |error| median {100 * statistics.median(errors):.1f}%, "
        f"max {100 * max(errors):.1f}%; within 3%: {sum(e <= 0.03 for e in errors)} of {len(errors)}"
        if errors
        else "no run finished"
    )
    print(text)
    print(summary)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text + "\n\n" + summary + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
