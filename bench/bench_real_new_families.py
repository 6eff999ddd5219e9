"""Real compute: each new family's measured step against its profile-based prediction, judged by the trust rules.

Usage:
    OMP_NUM_THREADS=1 python bench/bench_real_new_families.py                    # 6 families, 2 ranks, 3 rounds
    python bench/bench_real_new_families.py --families v-half dualpipe --rounds 3 --markdown out/real.md

Each run is `executor run --profile` of the built-in Transformer on CPU ranks: the stages profiled in situ, the step
predicted from that profile (pipesim_executor.host.predict: the point, and its 90% interval where the profile
measured a spread), then the steps measured. DualPipe, which the executor does not profile, is predicted from the
profile of a zb-h1 run of the same model launched just before it, and Seq1F1B (2 chunks) from a 1f1b run's
(`PROFILED_BY`). The families run in interleaved rounds (A B C .., then B C .. A). Per family: the rounds' median
prediction and interval, the measured median over every round's steps with its 95% interval
(pipesim.analysis.stats.median_ci), the error, and the verdict by the rules verify-plan applies
(pipesim_executor.host.verify_compare): a predicted interval wider than +-25% is "not informative" and not counted;
a hit is the measured median inside the predicted interval; where the rounds moved together by more than the
tolerated drift (pipesim.analysis.round_effect) the whole table is "not comparable".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipesim.analysis.round_effect import round_effect  # noqa: E402
from pipesim.analysis.stats import MAX_INFORMATIVE_HALF_WIDTH, informative, median_ci  # noqa: E402
from pipesim_executor.config import ModelConfig, run_config  # noqa: E402

# DualPipe runs without --profile (the executor profiles one copy of the weights): it is predicted from the profile
# of zb-h1 run just before it in the same round, the same model cut the same way (one stage per rank, each of
# DualPipe's chains a whole model) with the same split backward.
PROFILED_BY = {"dualpipe": "zb-h1", "seq1f1b": "1f1b"}
# Seq1F1B runs without --profile too (the profile times whole microbatches): it is predicted from 1f1b's profile of
# the same model, each chunk priced by its share under the model's own attention (pipesim.cost.seq_chunks).
SEQ_CHUNKS = 2
FAMILIES = {  # label -> (schedule, offload)
    "v-half": ("v-half", "none"),
    "v-min": ("v-min", "none"),
    "dualpipe": ("dualpipe", "none"),
    "1f1b-overlap": ("1f1b-overlap", "none"),
    "1f1b-offload-full": ("1f1b", "full"),
    "seq1f1b": ("seq1f1b", "none"),
}


def _model(args: argparse.Namespace) -> ModelConfig:
    return ModelConfig.of_transformer(
        num_layers=args.layers, hidden_size=args.d_model, num_heads=4, ffn_size=4 * args.d_model
    )


def _launch(schedule: str, offload: str, profile: bool, args: argparse.Namespace, root: Path, name: str):
    from pipesim_executor.host import launch

    chunks = {"seq_chunks": SEQ_CHUNKS} if schedule == "seq1f1b" else {}
    config = run_config(
        schedule=schedule, num_ranks=args.ranks, num_microbatches=args.microbatches, model=_model(args),
        batch_size=args.batch_size, steps=args.steps, warmup_steps=2, device="cpu", profile=profile,
        offload=offload, timeout_s=900, **chunks,
    )  # fmt: skip
    return launch.run(config, runs_root=root, name=name, wait_for_machine=True)


def run_once(label: str, args: argparse.Namespace, root: Path, round_: int) -> dict:
    from pipesim.io.cost_file import load_cost
    from pipesim_executor.host.predict import predict_step

    schedule, offload = FAMILIES[label]
    profiler = PROFILED_BY.get(label)
    if profiler is not None:
        profiled = _launch(profiler, "none", True, args, root, f"{label}-{round_}-profile")
        if profiled.status != "ok" or not (profiled.run_dir / "cost.json").exists():
            return {"status": profiled.status, "message": [f"{profiler} profile: {profiled.headline}"]}
    result = _launch(schedule, offload, profiler is None, args, root, f"{label}-{round_}")
    out = {"status": result.status, "message": (result.message or "").splitlines()[:1]}
    if result.status != "ok" or not result.step_times_ms:
        return out
    if profiler is not None:
        cost = load_cost(profiled.run_dir / "cost.json")
        if result.schedule.seq_chunks > 1:  # a later chunk's dearer attention: the model's own share
            from pipesim.cost.description import ModelDescription

            shape = _model(args).transformer
            cost = dataclasses.replace(cost, attention_fraction=ModelDescription.of_shape(shape).attention_fraction())
        cost = cost.for_schedule(result.schedule)
        prediction = predict_step(result.schedule, cost)
        point, low, high = prediction.predicted_step_ms, prediction.p05_ms, prediction.p95_ms
    elif result.predicted_step_ms is None:
        return {**out, "status": "no prediction"}
    else:
        simulated = json.loads((result.run_dir / "simulated.json").read_text())
        point, low, high = result.predicted_step_ms, simulated.get("step_ms_p05"), simulated.get("step_ms_p95")
    return {
        **out,
        "predicted_ms": point,
        "p05_ms": low,
        "p95_ms": high,
        "steps_ms": list(result.step_times_ms),
        "load": os.getloadavg()[0],
        "profile": profiler or "its own",
    }


def verdict(row: dict) -> str:
    """The trust rules on one family: a measurement or a prediction too wide to inform, no interval, or whether the
    measured median is inside the predicted interval."""
    if not informative(row["measured_ms"], row["low_ms"], row["high_ms"]):
        return f"not informative (measured interval wider than +-{MAX_INFORMATIVE_HALF_WIDTH:.0%}), not counted"
    if row["p05_ms"] is None:
        return "no predicted interval (point only)"
    if not informative(row["predicted_ms"], row["p05_ms"], row["p95_ms"]):
        return f"not informative (interval wider than +-{MAX_INFORMATIVE_HALF_WIDTH:.0%}), not counted"
    inside = row["p05_ms"] <= row["measured_ms"] <= row["p95_ms"]
    return "hit: measured inside the predicted interval" if inside else "miss: measured outside the predicted interval"


def summarise(label: str, runs: list[dict]) -> dict:
    done = [r for r in runs if "predicted_ms" in r]
    if not done:
        return {"family": label, "status": runs[-1]["status"] if runs else "not run", "message": runs[-1]["message"]}
    ci = median_ci([r["steps_ms"] for r in done])
    lows = [r["p05_ms"] for r in done if r["p05_ms"] is not None]
    highs = [r["p95_ms"] for r in done if r["p95_ms"] is not None]
    predicted = statistics.median(r["predicted_ms"] for r in done)
    row = {
        "family": label,
        "status": "ok",
        "rounds": len(done),
        "predicted_ms": predicted,
        "p05_ms": statistics.median(lows) if len(lows) == len(done) else None,
        "p95_ms": statistics.median(highs) if len(highs) == len(done) else None,
        "measured_ms": ci.median,
        "low_ms": ci.low,
        "high_ms": ci.high,
        "error": predicted / ci.median - 1,
        "load": statistics.fmean(r["load"] for r in done),
        "rounds_ms": [statistics.median(r["steps_ms"]) for r in done],
        # each launch against its own steps: what the machine did between the rounds left out
        "round_errors": [r["predicted_ms"] / statistics.median(r["steps_ms"]) - 1 for r in done],
        "profile": done[0]["profile"],
    }
    row["verdict"] = verdict(row)
    return row


def table(rows: list[dict]) -> str:
    head = (
        "| family | profile | predicted ms [90%] | measured median ms [95% CI] | error | verdict | round medians ms "
        "| each round's own error | load |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"| {r['family']} | | {r['status']}: {' '.join(r['message'])[:80]} | | | | | | |")
            continue
        interval = "" if r["p05_ms"] is None else f" [{r['p05_ms']:.1f}, {r['p95_ms']:.1f}]"
        lines.append(
            f"| {r['family']} | {r['profile']} | {r['predicted_ms']:.1f}{interval} | {r['measured_ms']:.1f} "
            f"[{r['low_ms']:.1f}, {r['high_ms']:.1f}] | {r['error']:+.1%} | {r['verdict']} | "
            f"{', '.join(f'{m:.1f}' for m in r['rounds_ms'])} | {', '.join(f'{e:+.1%}' for e in r['round_errors'])} "
            f"| {r['load']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--markdown", type=Path, help="also write the table as Markdown")
    args = parser.parse_args(argv)
    runs: dict[str, list[dict]] = {label: [] for label in args.families}
    with tempfile.TemporaryDirectory(prefix="bench-real-") as scratch:
        for round_ in range(args.rounds):
            shift = round_ % len(args.families)
            for label in args.families[shift:] + args.families[:shift]:
                started = time.monotonic()
                runs[label].append(run_once(label, args, Path(scratch), round_))
                took = time.monotonic() - started
                print(f"round {round_ + 1} {label}: {runs[label][-1]['status']} ({took:.0f} s)", file=sys.stderr)
    rows = [summarise(label, runs[label]) for label in args.families]
    effect = round_effect([[r["steps_ms"] for r in runs[label] if "steps_ms" in r] for label in args.families])
    lines = [table(rows), ""]
    if effect is not None:
        lines.append(effect.line())
    counted = [r for r in rows if r["status"] == "ok" and r["verdict"].startswith(("hit", "miss"))]
    hits = sum(r["verdict"].startswith("hit") for r in counted)
    if effect is not None and effect.moved:
        lines.append("not comparable: no hit or miss is counted")
    else:
        lines.append(f"{hits} of {len(counted)} informative predictions hit")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
