"""Command line of the executor: run a schedule for real, list earlier runs, show one.

Usage:
    python -m executor run --schedule 1f1b --ranks 2 --microbatches 8 --model transformer|cnn|package.module:factory \\
        [--layers 4 --d-model 128 --heads 4 --ffn 512 --seq-len 64 --vocab 1000 | --cnn-channels 32 ...] \\
        [--batch-size 16] [--steps 5] [--warmup-steps 1] [--virtual-stages V] [--recompute] \\
        [--data-parallel D] [--dtype fp32|bf16] [--torch-profile] \\
        [--device auto|cpu|cuda] [--backend auto|gloo|nccl|staged] [--profile] [--reference] [--timeout S] \\
        [--nnodes N --node-rank K --rdzv-endpoint HOST:PORT] [--schedule-file custom.csv] [--out runs/NAME]
    python -m executor list [--runs-root runs]
    python -m executor show runs/NAME [--json]
    python -m executor cancel runs/NAME [--timeout S]   (a run of any process: its launcher stops it calmly)
    python -m executor verify-plan plan.json --top 3 [--steps 3] [--device cpu]   (executor/verify.py)
    python -m executor doctor [--device auto|cpu|cuda] [--out D]   (executor/host/doctor.py: does this machine work?)

`run` prints one JSON object per line while the run goes (progress events), then a human summary. Exit status: 0
ok, 1 the run failed or timed out, 2 bad input (one line on stderr; nothing was started), 130 interrupted.
`cancel` prints the run's status once it has ended: exit 0 when it ended, 1 when it was still running after the
timeout. Multi-node: run the same command on every node with its own --node-rank and the same --out name (it is
the rendezvous id); rank 0's node gets measured.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from executor.config import (
    BACKENDS,
    CUSTOM,
    DEVICES,
    DTYPES,
    MODEL_KINDS,
    OPTIMIZERS,
    SPEC_HELP,
    ModelConfig,
    PipelineConfig,
    RunConfig,
    run_config,
)
from executor.host import doctor
from pipesim.io.formats import dialect_note, load_schedule

# CLI flag -> ModelConfig field
MODEL_FLAGS = {
    "layers": "num_layers", "d_model": "d_model", "heads": "num_heads", "ffn": "ffn_size", "seq_len": "seq_len",
    "vocab": "vocab_size", "cnn_channels": "cnn_channels", "cnn_blocks": "cnn_blocks", "cnn_fc": "cnn_fc_size",
}  # fmt: skip


class _Parser(argparse.ArgumentParser):
    """Bad input is one line on stderr and exit status 2, never a usage dump or a traceback."""

    def error(self, message: str) -> NoReturn:
        fail(f"{self.prog}: {message}")


def fail(message: str) -> NoReturn:
    print(f"error: {message}".splitlines()[0], file=sys.stderr)
    raise SystemExit(2)


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _model_choice(text: str) -> str:
    if text in MODEL_KINDS or ":" in text:
        return text
    raise argparse.ArgumentTypeError(f"unknown model {text!r}; valid: {', '.join(MODEL_KINDS)} or {SPEC_HELP}")


def _add_run_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("--schedule", default="1f1b", help="registered schedule name (python -m pipesim list)")
    run.add_argument("--schedule-file", type=Path, help="a custom schedule: pipesim JSON or torch compute_only CSV")
    run.add_argument("--ranks", type=int, default=2)
    run.add_argument("--microbatches", type=int, default=4)
    run.add_argument("--virtual-stages", type=int, help="stages per rank for interleaved / looped schedules")
    run.add_argument(
        "--model",
        type=_model_choice,
        default="transformer",
        help=f"{', '.join(MODEL_KINDS)}, or your own: {SPEC_HELP} (executor/custom_model.py)",
    )
    for flag in MODEL_FLAGS:
        run.add_argument(f"--{flag.replace('_', '-')}", dest=flag, type=int)
    run.add_argument("--split-points", type=_int_list, help="stage boundaries as layer indices, e.g. 2,4,6")
    run.add_argument("--batch-size", type=int, default=16)
    run.add_argument("--steps", type=int, default=5)
    run.add_argument("--warmup-steps", type=int, default=1)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd")
    run.add_argument("--lr", type=float, default=0.01)
    run.add_argument("--recompute", action="store_true")
    run.add_argument(
        "--data-parallel",
        type=int,
        default=1,
        help="replicas of the pipeline: --ranks x this many processes, gradients all-reduced",
    )
    run.add_argument("--dtype", choices=DTYPES, default="fp32", help="bf16: autocast, fp32 master weights")
    run.add_argument("--device", choices=DEVICES, default="auto")
    run.add_argument("--backend", choices=BACKENDS, default="auto")
    run.add_argument("--profile", action="store_true", help="measure per-stage costs first, then predict")
    run.add_argument("--reference", action="store_true", help="also run torch.distributed.pipelining's schedule")
    run.add_argument(
        "--torch-profile",
        action="store_true",
        help="record a torch.profiler (Kineto) trace of the measured steps on every rank (traces/)",
    )
    run.add_argument("--timeout", type=float, default=600.0, help="seconds before every process is ended")
    run.add_argument("--nnodes", type=int, default=1)
    run.add_argument("--node-rank", type=int, default=0)
    run.add_argument("--rdzv-endpoint")
    run.add_argument("--out", type=Path, help="run folder runs/NAME (default: timestamp, schedule, ranks)")
    run.add_argument("--runs-root", type=Path, default=Path("runs"), help="parent of run folders without --out")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m executor", description="Run pipeline schedules for real under torchrun.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="{run,list,show,cancel,verify-plan,doctor}")
    _add_run_arguments(commands.add_parser("run", help="run a schedule under torchrun"))
    listing = commands.add_parser("list", help="earlier runs, newest first")
    listing.add_argument("--runs-root", type=Path, default=Path("runs"))
    show = commands.add_parser("show", help="one run's results")
    show.add_argument("run_dir", type=Path)
    show.add_argument("--json", action="store_true", help="print result.json-like JSON instead of text")
    cancel = commands.add_parser("cancel", help="cancel a running run, whoever started it")
    cancel.add_argument("run_dir", type=Path)
    cancel.add_argument("--timeout", type=float, default=None, help="seconds to wait for the run to end")
    verify = commands.add_parser("verify-plan", help="run a plan's top K candidates and compare with the prediction")
    verify.add_argument("plan", type=Path)
    verify.add_argument("--top", type=int, default=3)
    verify.add_argument("--steps", type=int, default=3)
    verify.add_argument("--warmup-steps", type=int, default=1)
    verify.add_argument("--device", choices=DEVICES, default="cpu")
    verify.add_argument("--timeout", type=float, default=300.0, help="seconds per candidate's run")
    verify.add_argument("--runs-root", type=Path, default=Path("runs"))
    doctor.add_arguments(commands.add_parser("doctor", help="check this machine with a few small runs (GPU or CPU)"))
    return parser


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """RunConfig from parsed flags; ValueError (from the configs' checks) on bad values."""
    model = {field: getattr(args, flag) for flag, field in MODEL_FLAGS.items() if getattr(args, flag) is not None}
    return run_config(
        schedule=args.schedule, num_ranks=args.ranks, num_microbatches=args.microbatches,
        num_virtual_stages=args.virtual_stages,
        model=_model_config(args, model), data_parallel=args.data_parallel, dtype=args.dtype,
        batch_size=args.batch_size, steps=args.steps, warmup_steps=args.warmup_steps, seed=args.seed,
        optimizer=args.optimizer, lr=args.lr, recompute=args.recompute, torch_profile=args.torch_profile,
        device=args.device, backend=args.backend,
        profile=args.profile, reference=args.reference, timeout_s=args.timeout,
        nnodes=args.nnodes, node_rank=args.node_rank, rdzv_endpoint=args.rdzv_endpoint,
    )  # fmt: skip


def _model_config(args: argparse.Namespace, sizes: dict) -> ModelConfig:
    if args.model in MODEL_KINDS:
        return ModelConfig(kind=args.model, split_points=args.split_points, **sizes)
    if sizes:
        raise ValueError(f"the size flags (--layers, --d-model, ...) size a built-in model; {args.model} sizes itself")
    return ModelConfig(kind=CUSTOM, spec=args.model, split_points=args.split_points)


def _fmt(value: float | None, unit: str = " ms") -> str:
    return "-" if value is None else f"{value:.2f}{unit}"


def summary_lines(result) -> list[str]:
    """A human summary of a RunResult."""
    config = result.config
    lines = [f"run      {result.run_dir}", f"status   {result.status}"]
    if config is not None:
        lines.append(
            f"schedule {config.pipeline.schedule}, {config.pipeline.num_ranks} ranks, "
            f"{config.pipeline.num_microbatches} microbatches, "
            f"{config.model.spec or config.model.kind} model, {config.devices.device}/{config.devices.backend}, "
            f"{config.pipeline.data_parallel} replica(s), {config.training.dtype}, "
            f"{config.training.steps} steps"
        )
    if result.message:
        lines.append("message  " + result.message.replace("\n", "\n         "))
    if result.step_times_ms:
        lines.append(f"step     median {_fmt(result.measured_step_ms)} over {len(result.step_times_ms)} steps")
    if result.losses:
        lines.append(f"loss     first {result.losses[0]:.4f}, last {result.losses[-1]:.4f}")
    if result.predicted_step_ms is not None:
        error = "-" if result.prediction_error is None else f"{100 * result.prediction_error:+.1f}%"
        lines.append(f"predict  {_fmt(result.predicted_step_ms)} (error {error} against the measured median)")
    lines += _analysis_lines(result.analysis)
    lines += _trace_lines(result.run_dir)
    reference = result.reference
    if reference:
        if reference.get("error"):
            lines.append(f"torch    {reference['error']}".splitlines()[0])
        elif reference.get("step_times_ms"):
            import statistics

            ref_ms = statistics.median(reference["step_times_ms"])
            ratio = "" if not result.measured_step_ms else f", ours/torch {result.measured_step_ms / ref_ms:.3f}"
            lines.append(f"torch    {reference.get('torch_schedule')}: median {_fmt(ref_ms)}{ratio}")
    return lines


def result_dict(result) -> dict:
    return {
        "run_dir": str(result.run_dir), "status": result.status, "message": result.message,
        "config": None if result.config is None else result.config.to_dict(),
        "step_times_ms": result.step_times_ms, "losses": result.losses,
        "peak_memory_bytes": result.peak_memory_bytes, "measured_step_ms": result.measured_step_ms,
        "predicted_step_ms": result.predicted_step_ms, "prediction_error": result.prediction_error,
        "reference": result.reference, **_trace_files(result.run_dir),
    }  # fmt: skip


def cmd_run(args: argparse.Namespace) -> int:
    from executor.host import launch

    try:
        config = config_from_args(args)
        schedule = None if args.schedule_file is None else load_schedule(args.schedule_file)
        if schedule is not None and (note := dialect_note(schedule)):
            print(note, flush=True)  # a file in torch's older dialect says so, once
        if schedule is not None:  # the file says what runs: its name, ranks and microbatches
            pipeline = PipelineConfig(
                schedule.name,
                schedule.num_ranks,
                schedule.num_microbatches,
                data_parallel=config.pipeline.data_parallel,
            )
            config = dataclasses.replace(config, pipeline=pipeline)
        runs_root, name = (args.out.parent, args.out.name) if args.out else (args.runs_root, None)
        handle = launch.start_run(config, runs_root=runs_root, name=name, schedule=schedule, on_event=_print_event)
    except ValueError as error:
        fail(str(error))
    previous = signal.signal(signal.SIGTERM, _raise_terminated)  # SIGTERM ends the run as Ctrl-C does
    try:
        result = handle.wait()
    except (KeyboardInterrupt, Terminated) as stop:
        handle.cancel()  # returns once every process of the run is gone and result.json says cancelled
        print("interrupted: every process of the run was ended (result.json: cancelled)", file=sys.stderr)
        return 143 if isinstance(stop, Terminated) else 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    print("\n".join(summary_lines(result)), flush=True)
    return 0 if result.status == "ok" else 1


class Terminated(BaseException):
    """SIGTERM arrived while a run was in progress (a BaseException, like KeyboardInterrupt)."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


def _analysis_lines(analysis: dict | None) -> list[str]:
    """The median step's time per rank, split (analysis.json): compute, schedule idle, comm wait, overhead."""
    if not analysis or not isinstance(analysis.get("ranks"), list):
        return []
    lines = [
        f"split    step {_fmt(analysis.get('step_ms'))} (step {analysis.get('median_step')}, the median) on each "
        "rank: compute + schedule idle + comm wait + overhead"
    ]
    for row in analysis["ranks"]:
        parts = [row.get(k) for k in ("compute_ms", "schedule_idle_ms", "comm_wait_ms", "overhead_ms")]
        if all(isinstance(p, (int, float)) for p in parts):
            lines.append(f"  rank {row.get('rank')}: " + " + ".join(f"{p:.2f}" for p in parts) + " ms")
    noise = analysis.get("spread")
    if isinstance(noise, dict) and isinstance(noise.get("step_cv"), (int, float)):
        verdict = "" if noise.get("reliable") else " - too noisy: the prediction error is not a fact about the model"
        load = noise.get("load_1min")
        load_text = f", machine load {load:.1f} at the end" if isinstance(load, (int, float)) else ""
        lines.append(
            f"noise    step times vary {noise['step_cv']:.1%} (coefficient of variation; reliable up to "
            f"{noise.get('threshold_step_cv', 0):.0%}{load_text}){verdict}"
        )
    predicted = analysis.get("prediction")
    if isinstance(predicted, dict) and isinstance(predicted.get("action_error_median"), (int, float)):
        rows = [r for r in predicted.get("actions", []) if isinstance(r, dict) and isinstance(r.get("error"), float)]
        worst = max(rows, key=lambda r: abs(r["error"]), default=None)
        worst_text = "" if worst is None else f"; largest rank {worst['rank']} {worst['action']} {worst['error']:+.0%}"
        lines.append(
            f"actions  median |error| {predicted['action_error_median']:.1%} over {len(rows)} actions "
            f"(simulated against the median measured duration{worst_text})"
        )
    return lines


def _trace_files(run_dir: Path) -> dict:
    """The run's traces: "trace", the one-file Perfetto view, and "profiler_traces" (--torch-profile)."""
    from executor.host.predict import TRACE_FILE
    from executor.host.run_folder import profiler_traces

    trace = run_dir / TRACE_FILE
    return {
        "trace": str(trace) if trace.is_file() else None,
        "profiler_traces": [str(path) for path in profiler_traces(run_dir)],
    }


def _trace_lines(run_dir: Path) -> list[str]:
    files = _trace_files(run_dir)
    lines = []
    if files["trace"]:
        lines.append(f"trace    {files['trace']} (simulated + measured, open in https://ui.perfetto.dev)")
    if files["profiler_traces"]:
        lines.append(
            f"profiler {len(files['profiler_traces'])} torch.profiler traces: "
            + ", ".join(str(Path(path).relative_to(run_dir)) for path in files["profiler_traces"])
        )
    return lines


def _print_event(event: dict) -> None:
    print(json.dumps(event, default=str), flush=True)


def cmd_list(args: argparse.Namespace) -> int:
    from executor.host.run_folder import list_runs

    results = list_runs(args.runs_root)
    if not results:
        print(f"no runs under {args.runs_root}")
        return 0
    print(f"{'run':40} {'status':10} {'schedule':18} {'ranks':>5} {'mb':>4} {'step ms':>9} {'pred ms':>9} {'err':>7}")
    for r in results:
        c = r.config.pipeline if r.config else None
        error = "-" if r.prediction_error is None else f"{100 * r.prediction_error:+.1f}%"
        numbers = f"{_fmt(r.measured_step_ms, ''):>9} {_fmt(r.predicted_step_ms, ''):>9} {error:>7}"
        setup = f"{c.schedule[:18]:18} {c.num_ranks:>5} {c.num_microbatches:>4} {numbers}" if c else r.message
        print(f"{r.run_dir.name[:40]:40} {r.status:10} {setup}")  # a damaged folder: why, in place of figures
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from executor.host.run_folder import load_run

    try:
        result = load_run(args.run_dir)
    except (ValueError, OSError) as error:
        fail(str(error))
    if args.json:
        print(json.dumps(result_dict(result), indent=1))
    else:
        print("\n".join(summary_lines(result)))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from executor.host import watch

    try:
        run = watch.FolderRun(args.run_dir)
    except (ValueError, OSError) as error:
        fail(str(error))
    if run.done():
        print(f"{run.run_dir.name}: not running ({run.status})")
        return 0
    run.cancel(**({} if args.timeout is None else {"timeout": args.timeout}))
    print(f"{run.run_dir.name}: {run.status}")
    return 0 if run.done() else 1


def cmd_verify_plan(args: argparse.Namespace) -> int:
    from executor.host import verify

    def progress(row: verify.VerifyRow) -> None:
        measured = "failed" if row.measured_ms is None else f"{row.measured_ms:.2f} ms"
        print(f"ran {row.label}: predicted {row.predicted_ms:.2f} ms, measured {measured}", flush=True)

    try:
        result = verify.verify_plan(
            args.plan,
            args.top,
            runs_root=args.runs_root,
            steps=args.steps,
            warmup_steps=args.warmup_steps,
            device=args.device,
            timeout_s=args.timeout,
            on_row=progress,
        )
    except (ValueError, OSError, KeyError) as error:
        fail(str(error))
    print("\n".join(verify.summary_lines(result)), flush=True)
    return 0 if any(r.measured_ms is not None for r in result.rows) else 1


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {"run": cmd_run, "list": cmd_list, "show": cmd_show, "cancel": cmd_cancel,
                "verify-plan": cmd_verify_plan, "doctor": doctor.main}  # fmt: skip
    return commands[args.command](args)
