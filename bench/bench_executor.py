"""Our executor against torch.distributed.pipelining, and profile-then-predict, on the same runs.

Usage:
    OMP_NUM_THREADS=1 python bench/bench_executor.py                  # gpipe, 1f1b, interleaved-1f1b; 2 CPU ranks
    python bench/bench_executor.py --schedules 1f1b --repeats 3 --steps 20 --json out.json
    python bench/bench_executor.py --device cuda --backend nccl         # a machine with 2+ GPUs

For each schedule, one launch runs our executor (with the profile phase, so
cost.json and a prediction come out: "run ms", "pred ms", "pred err" against
that run's median step, target within 10%), then reference mode in
side-by-side form: the same processes train our executor and torch's own
schedule on the same stage modules, batches and optimizer, alternating step by
step ("ours ms", "torch ms", their ratio: target <= 1.05, aim < 1.0). A busy
machine drifts by the minute; alternating steps gives both sides the same
drift. `--repeats` runs everything several times and reports medians; the
largest loss difference between the two executors is in the JSON (loss_gap).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipesim.schedules import options_for  # noqa: E402
from pipesim_executor.config import (  # noqa: E402, run_config
    ModelConfig,
    RunConfig,
    run_config,  # noqa: E402
)
from pipesim_executor.host.launch import run  # noqa: E402
from pipesim_executor.host.predict import predict_step, replay_cost  # noqa: E402
from pipesim_executor.rank.reference import SIDE_BY_SIDE_ENV  # noqa: E402

SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", nargs="+", default=list(SCHEDULES))
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--microbatches", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--ffn", type=int, default=512)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup-steps", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--runs-root", type=Path, help="keep the run folders here (default: a temporary folder)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    return parser.parse_args(argv)


def config_for(args: argparse.Namespace, schedule: str) -> RunConfig:
    model = ModelConfig.of_transformer(num_layers=args.layers, hidden_size=args.d_model, num_heads=4, ffn_size=args.ffn,
                        seq_len=args.seq_len, vocab_size=args.vocab)  # fmt: skip
    return run_config(
        schedule=schedule, num_ranks=args.ranks, num_microbatches=args.microbatches,
        num_virtual_stages=options_for(schedule, num_virtual_stages=2).get("num_virtual_stages"),
        model=model, batch_size=args.batch_size, steps=args.steps, warmup_steps=args.warmup_steps,
        device=args.device, backend=args.backend, profile=True, reference=True, timeout_s=900,
    )  # fmt: skip


def median_or_none(values: list[float] | None) -> float | None:
    return statistics.median(values) if values else None


def measure(args: argparse.Namespace, schedule: str, runs_root: Path) -> dict:
    os.environ[SIDE_BY_SIDE_ENV] = "1"  # the launcher passes its environment to the reference ranks
    result = run(config_for(args, schedule), runs_root=runs_root)
    if result.status != "ok":
        raise SystemExit(f"{schedule}: run {result.status}: {result.message}")
    reference = result.reference or {}
    if reference.get("error"):
        raise SystemExit(f"{schedule}: reference run: {reference['error']}")
    return {
        "schedule": schedule, "ours_ms": median_or_none(reference.get("ours_step_times_ms")),
        "torch_ms": median_or_none(reference.get("step_times_ms")),
        "run_ms": result.measured_step_ms,
        "paired_ratio": paired_ratio(reference.get("ours_step_times_ms"), reference.get("step_times_ms")),
        "torch_schedule": reference.get("torch_schedule"), "predicted_ms": result.predicted_step_ms,
        "prediction_error": result.prediction_error, "run_dir": str(result.run_dir),
        "run_steps_ms": result.step_times_ms, "ours_steps_ms": reference.get("ours_step_times_ms", []),
        "torch_steps_ms": reference.get("step_times_ms", []),
        "loss_gap": loss_gap(result.losses, reference.get("losses", [])),
        "in_run_over_profile": in_run_over_profile(result),
        "replay_error": replay_error(result),
    }  # fmt: skip


def paired_ratio(ours: list[float] | None, theirs: list[float] | None) -> float | None:
    """Median over steps of ours/torch for the same step index: the two ran back to back, so the
    machine's drift cancels within a pair, which a ratio of two medians does not achieve."""
    if not ours or not theirs or len(ours) != len(theirs):
        return None
    return statistics.median(a / b for a, b in zip(ours, theirs, strict=True))


def in_run_over_profile(result) -> float | None:
    """Median over actions of (measured duration in the run) / (profiled duration): 1.0 when the
    profile represents the run; far from 1 points at the profile (or a drifting machine), not the simulator."""
    if result.measured is None or result.cost is None:
        return None
    ratios = []
    for span in result.measured.spans:
        expected = result.cost.duration_ms(span.action.stage, span.action.kind)
        if expected > 0:
            ratios.append((span.end - span.start) / expected)
    return statistics.median(ratios) if ratios else None


def replay_error(result) -> float | None:
    """Prediction error when the simulation uses the run's own median action times (see predict.replay_cost)."""
    if result.measured is None or result.cost is None or not result.measured_step_ms:
        return None
    replay = predict_step(result.schedule, replay_cost(result.measured, result.cost))
    return (replay.predicted_step_ms - result.measured_step_ms) / result.measured_step_ms


def loss_gap(ours: list[float], theirs: list[float]) -> float | None:
    """Largest difference of per-step losses: ~0 when both executors compute the same training."""
    if not ours or len(ours) != len(theirs):
        return None
    return max(abs(a - b) for a, b in zip(ours, theirs, strict=True))


def summarise(samples: list[dict]) -> dict:
    """Medians over repeats; the ratio is the median of the repeats' paired ratios."""

    def med(key: str):
        values = [s[key] for s in samples if s[key] is not None]
        return statistics.median(values) if values else None

    ratios = [s["paired_ratio"] for s in samples if s["paired_ratio"] is not None]
    return {
        "schedule": samples[0]["schedule"], "torch_schedule": samples[0]["torch_schedule"],
        "ours_ms": med("ours_ms"), "torch_ms": med("torch_ms"), "run_ms": med("run_ms"),
        "ratio": statistics.median(ratios) if ratios else None,
        "predicted_ms": med("predicted_ms"), "prediction_error": med("prediction_error"),
        "loss_gap": med("loss_gap"), "in_run_over_profile": med("in_run_over_profile"),
        "replay_error": med("replay_error"), "repeats": samples,
    }  # fmt: skip


def table(rows: list[dict]) -> str:
    def f(value, spec):
        return "-" if value is None else format(value, spec)

    lines = [f"{'schedule':18} {'ours ms':>9} {'torch ms':>9} {'ours/torch':>10} "
             f"{'run ms':>9} {'pred ms':>9} {'pred err':>9} {'run/prof':>9} {'replay err':>10}"]  # fmt: skip
    for r in rows:
        error = None if r["prediction_error"] is None else 100 * r["prediction_error"]
        replay = None if r["replay_error"] is None else 100 * r["replay_error"]
        lines.append(
            f"{r['schedule']:18} {f(r['ours_ms'], '9.2f')} {f(r['torch_ms'], '9.2f')} {f(r['ratio'], '10.3f')} "
            f"{f(r['run_ms'], '9.2f')} {f(r['predicted_ms'], '9.2f')} {f(error, '+8.1f')}% "
            f"{f(r['in_run_over_profile'], '9.2f')} {f(replay, '+9.1f')}%"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-executor-") as scratch:
        runs_root = args.runs_root or Path(scratch)
        samples: dict[str, list[dict]] = {name: [] for name in args.schedules}
        for repeat in range(args.repeats):
            for name in args.schedules:
                samples[name].append(measure(args, name, runs_root))
                print(f"repeat {repeat + 1}/{args.repeats} {name}: done", file=sys.stderr, flush=True)
        rows = [summarise(samples[name]) for name in args.schedules]
    print(f"{args.ranks} ranks, {args.microbatches} microbatches, batch {args.batch_size}, "
          f"{args.layers} layers d_model {args.d_model}, {args.device}/{args.backend}, "
          f"{args.steps} steps x {args.repeats} repeats (medians)")  # fmt: skip
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
