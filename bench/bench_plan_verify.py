"""Plan my model, verified (issue 18): profile a model unit by unit, plan from the profile, run every candidate.

Usage (the full bench, for a quiet machine: about 15-25 minutes on 2 cores):
    OMP_NUM_THREADS=1 python bench/bench_plan_verify.py --json out/plan-verify.json --markdown out/plan-verify.md
A reduced run (checks the bench works; its figures under load say little):
    python bench/bench_plan_verify.py --quick

For each model (`examples.gpt_small:build` and the executor's built-in Transformer): `executor profile` at two
microbatch sizes on 2 ranks; `pipesim plan --cost` on 2 devices (schedules x microbatch sizes x recomputation,
each with its balanced split: a chunked schedule cuts 4 stages, a plain one 2); every built candidate verified by a
real run (`executor verify-plan`: the median of `--steps` steps). Printed per candidate: predicted and measured step,
the error, the measured steps' coefficient of variation, predicted against measured peak memory. Then each of the
issue's criteria, pass or fail:

* at least 12 candidates, whose measured step times spread by at least 30% (slowest / fastest - 1);
* median |prediction error| <= 5% and the largest <= 10%;
* Spearman rank correlation >= 0.9;
* the recommended candidate (the plan's best) within 3% of the measured best;
* predicted peak memory within 10% of the measured one, every rank of every candidate.

`--rounds R` verifies every candidate R times (R passes over all of them, one after another) and compares the
median of its rounds: a burst of load from other work on a shared machine then spoils one round, not the
figure. The machine's 1-minute load is printed at the start and the end: the criteria mean something only when it
stays well below the core count (other work steals the cores the ranks are timed on).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipesim.io.formats import write_json  # noqa: E402
from pipesim.plan.inputs import PlanInputs  # noqa: E402
from pipesim.plan.report import plan_document  # noqa: E402
from pipesim.plan.search import PlanSpace, evaluate_all  # noqa: E402
from pipesim_executor.config import ModelConfig  # noqa: E402
from pipesim_executor.host.unit_profile import ProfileConfig, start_profile  # noqa: E402
from pipesim_executor.host.verify import VerifyRow, compare, verify_plan  # noqa: E402

MODELS = {"gpt_small": "examples.gpt_small:build", "transformer": "transformer"}
SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv")
CRITERIA = {
    "candidates": "at least 12 candidates",
    "spread": "measured step times spread by >= 30%",
    "median_error": "median |prediction error| <= 5%",
    "max_error": "largest |prediction error| <= 10%",
    "spearman": "Spearman >= 0.9",
    "recommended": "recommended within 3% of the measured best",
    "memory": "peak memory within 10% on every rank",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--microbatch-sizes", default="1,2", help="the two (or more) sizes profiled and planned")
    parser.add_argument("--global-batch", type=int, default=16)
    parser.add_argument("--optimizer", default="sgd", choices=("sgd", "sgd-momentum", "adam"))
    parser.add_argument("--recompute", choices=("off", "both"), default="both")
    parser.add_argument("--steps", type=int, default=30, help="measured steps per candidate run")
    parser.add_argument("--rounds", type=int, default=1, help="runs per candidate, interleaved")
    parser.add_argument("--repeats", type=int, default=30, help="the profile's repetitions per measurement")
    parser.add_argument("--quick", action="store_true", help="a reduced run: 8 steps, 10 repeats, one round")
    parser.add_argument("--out", type=Path, default=Path("out/bench-plan-verify"), help="profiles, plans and runs")
    parser.add_argument("--json", type=Path, help="write every figure")
    parser.add_argument("--markdown", type=Path, help="write the tables as Markdown")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.repeats, args.rounds = 8, 10, 1
    return args


def load() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def model_config(spec: str) -> ModelConfig:
    return ModelConfig() if spec == "transformer" else ModelConfig(kind="custom", spec=spec)


def profile(name: str, spec: str, args: argparse.Namespace, folder: Path):
    sizes = tuple(int(s) for s in args.microbatch_sizes.split(","))
    config = ProfileConfig(
        model=model_config(spec), microbatch_sizes=sizes, ranks=2, repeats=args.repeats, device="cpu"
    )
    started = time.perf_counter()
    result = start_profile(config, folder / f"profile-{name}").wait()
    if result.profile is None:
        raise SystemExit(f"the profile of {spec} failed: {result.status}: {result.message}")
    return result.profile, time.perf_counter() - started


def plan(name: str, unit_profile, args: argparse.Namespace, folder: Path) -> tuple[Path, dict]:
    inputs = PlanInputs.from_profile(unit_profile, devices=2, global_batch=args.global_batch, optimizer=args.optimizer)
    space = PlanSpace(
        schedules=SCHEDULES,
        microbatch_sizes=unit_profile.microbatch_sizes,
        chunks=(2,),
        recompute=(False, True) if args.recompute == "both" else (False,),
    )
    document = plan_document(evaluate_all(inputs, space), {
        "optimizer": args.optimizer, "devices": 2, "global_batch": args.global_batch,
        "executor_model": dict(unit_profile.model), "run": {"device": "cpu", "dtype": "fp32"},
    }, None)  # fmt: skip
    document["calibration"] = inputs.calibration()
    path = folder / f"plan-{name}.json"
    write_json(document, path)
    return path, document


def verify(name: str, plan_path: Path, document: dict, args: argparse.Namespace, folder: Path) -> list[VerifyRow]:
    """Every built candidate, `rounds` times interleaved; a row per candidate with the median of its rounds."""
    count = sum(1 for c in document["candidates"] if c["error"] is None)
    rounds = []
    for number in range(args.rounds):
        runs = folder / f"runs-{name}-{number}"
        result = verify_plan(plan_path, count, runs_root=runs, steps=args.steps, device="cpu", timeout_s=600)
        rounds.append({row.label: row for row in result.rows})
        print(f"  round {number + 1}/{args.rounds} of {name} done (load {load():.2f})", flush=True)
    merged = []
    for label_, first in rounds[0].items():
        measured = [r[label_].measured_ms for r in rounds if r[label_].measured_ms is not None]
        cvs = [r[label_].measured_cv for r in rounds if r[label_].measured_cv is not None]
        first.measured_ms = statistics.median(measured) if measured else None
        first.measured_cv = statistics.median(cvs) if cvs else None
        merged.append(first)
    return sorted(merged, key=lambda r: (r.predicted_ms, r.label))


def criteria(rows: list[VerifyRow], uncertainty: float, best_label: str) -> dict:
    measured = [r for r in rows if r.measured_ms is not None]
    recommended = next((r for r in rows if r.label == best_label), rows[0])
    ordered = [recommended] + [r for r in rows if r is not recommended]
    verification = compare(ordered, uncertainty)
    summary = verification.to_dict()
    times = [r.measured_ms for r in measured]
    spread = max(times) / min(times) - 1 if times else 0.0
    memory = summary["max_abs_memory_error"]
    figures = {
        "candidates": len(measured),
        "spread": spread,
        "median_error": summary["median_abs_error"],
        "max_error": summary["max_abs_error"],
        "spearman": verification.spearman,
        "recommended": verification.recommended_gap,
        "memory": memory,
    }
    passed = {
        "candidates": len(measured) >= 12,
        "spread": spread >= 0.30,
        "median_error": figures["median_error"] is not None and figures["median_error"] <= 0.05,
        "max_error": figures["max_error"] is not None and figures["max_error"] <= 0.10,
        "spearman": figures["spearman"] is not None and figures["spearman"] >= 0.9,
        "recommended": figures["recommended"] is not None and figures["recommended"] <= 0.03,
        "memory": memory is not None and memory <= 0.10,
    }
    return {"figures": figures, "passed": passed, "notes": verification.notes}


def table(name: str, rows: list[VerifyRow]) -> list[str]:
    lines = [
        f"| {name}: candidate | predicted ms | measured ms | error | cv | memory pred / meas (MiB, max rank) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        error = "-" if r.error_fraction is None else f"{r.error_fraction:+.1%}"
        cv = "-" if r.measured_cv is None else f"{r.measured_cv:.1%}"
        measured = "-" if r.measured_ms is None else f"{r.measured_ms:.2f}"
        pred_mem = max(r.predicted_memory_bytes, default=0) / 2**20
        meas_mem = max(r.measured_memory_bytes, default=0) / 2**20
        lines.append(
            f"| {r.label} | {r.predicted_ms:.2f} | {measured} | {error} | {cv} | {pred_mem:.2f} / {meas_mem:.2f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    folder = args.out / time.strftime("%Y%m%d-%H%M%S")
    folder.mkdir()
    report: dict = {"started_load_1min": load(), "settings": {k: str(v) for k, v in vars(args).items()}, "models": {}}
    print(f"load at the start: {load():.2f} on {os.cpu_count()} cores", flush=True)
    markdown: list[str] = []
    all_passed = True
    for name in args.models:
        spec = MODELS[name]
        unit_profile, seconds = profile(name, spec, args, folder)
        print(f"{name}: profiled in {seconds:.0f} s (load {load():.2f})", flush=True)
        plan_path, document = plan(name, unit_profile, args, folder)
        rows = verify(name, plan_path, document, args, folder)
        best = document["best"]
        best_label = next(r.label for r in rows if r.candidate == best)
        verdict = criteria(rows, document["calibration"]["uncertainty"], best_label)
        lines = table(name, rows)
        lines.append("")
        for key, text in CRITERIA.items():
            value = verdict["figures"][key]
            shown = "-" if value is None else f"{value:.3f}" if key == "spearman" else str(value)
            if isinstance(value, float) and key != "spearman":
                shown = f"{value:.1%}"
            lines.append(f"- {text}: {shown} **{'pass' if verdict['passed'][key] else 'FAIL'}**")
        lines += [f"- note: {n}" for n in verdict["notes"]]
        print("\n".join(lines), flush=True)
        markdown += [f"### {name} ({spec})", "", *lines, ""]
        all_passed &= all(verdict["passed"].values())
        report["models"][name] = {
            "spec": spec,
            "profile_seconds": seconds,
            "profile": {
                "provenance": dict(unit_profile.provenance),
                "dispatch_ms": unit_profile.dispatch_ms,
                "tail_ms": unit_profile.tail_ms,
            },  # fmt: skip
            "candidates": [r.to_dict() for r in rows],
            **verdict,
        }
    report["ended_load_1min"] = load()
    print(f"load at the end: {load():.2f}; every criterion passed: {all_passed}", flush=True)
    if args.json:
        write_json(report, args.json)
    if args.markdown:
        args.markdown.write_text("\n".join(markdown) + "\n")
    return 0 if all_passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
