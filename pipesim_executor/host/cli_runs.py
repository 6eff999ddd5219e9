"""`python -m executor list | show | cancel | verify-plan`: earlier runs, one run's results, cancelling a run of any
process, and a plan's top candidates run for real; and the run's summary in words, which `run` prints too.

Exit status: 0 done; 1 `cancel`: the run was still going after the timeout, `verify-plan`: no candidate ran, or
another timed job holds the machine (`--wait`: wait for it); 2 a usage error (one line on stderr), such as a
run folder that does not exist; 3 `verify-plan`: not comparable, the machine's speed changed during the
verification (its JSON's `status`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pipesim.flags import UsageError, float_flag, folder_flag, int_flag
from pipesim.limits import MAX_STEPS, MAX_TIMEOUT_S
from pipesim.programs import programs
from pipesim.progress_bar import ProgressBar
from pipesim_executor.config import DEVICES
from pipesim_executor.run_files import COST_FILE, TRACE_FILE

NOT_COMPARABLE = 3  # verify-plan's exit status when its own rounds show the machine moved


def _fmt(value: float | None, unit: str = " ms") -> str:
    return "-" if value is None else f"{value:.2f}{unit}"


def summary_lines(result) -> list[str]:
    """A human summary of a RunResult."""
    config = result.config
    lines = [f"run      {result.run_dir}", f"status   {result.status}"]
    if config is not None:
        lines.append(f"schedule {config.describe()}")
        if config.inject.inject:
            every = "alternate steps (uniform, injected, ...)" if config.inject.alternates else "every step"
            lines.append(f"inject   {config.inject.perturbation().describe()} on {every} (priced into the prediction)")
    if result.outcome:
        lines.append(f"outcome  {result.outcome}")
    if result.message:
        lines.append("message  " + result.message.replace("\n", "\n         "))
    if result.step_times_ms:
        steps = f"{len(result.step_times_ms)} steps"
        flags = (result.measured.meta if result.measured is not None else {}).get("injected_steps")
        if flags and not all(flags):  # steps that alternated: the median is the injected ones', like the prediction
            steps = f"the {sum(flags)} injected of {steps} (the uniform ones: result.json's paired)"
        lines.append(f"step     median {_fmt(result.measured_step_ms)} over {steps}")
    if result.losses:
        lines.append(f"loss     first {result.losses[0]:.4f}, last {result.losses[-1]:.4f}")
    if result.predicted_step_ms is not None:
        error = "-" if result.prediction_error is None else f"{100 * result.prediction_error:+.1f}%"
        predicted = (result.analysis or {}).get("prediction") or {}
        low, high = predicted.get("step_ms_p05"), predicted.get("step_ms_p95")
        interval = f", 90% interval {_fmt(low)} to {_fmt(high)}" if low is not None and high is not None else ""
        lines.append(f"predict  {_fmt(result.predicted_step_ms)}{interval} (error {error} against the measured median)")
    lines += _analysis_lines(result.analysis)
    if result.analysis is not None and "stragglers" in result.analysis:
        from pipesim.analysis.stragglers import describe

        lines += [f"straggle {line}" for line in describe(result.analysis["stragglers"])]
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
    from pipesim_executor.host.run_folder import profiler_traces

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


def cmd_list(args: argparse.Namespace) -> int:
    from pipesim_executor.host.run_folder import doctor_folders, list_runs, profile_folders

    results = list_runs(args.runs_root)
    doctors = [f"{folder}: the doctor's runs ({programs().executor} list --runs-root {folder})"
               for folder in doctor_folders(args.runs_root)]  # fmt: skip
    doctors += [_profile_line(folder) for folder in profile_folders(args.runs_root)]
    if not results:
        print("\n".join([f"no runs under {args.runs_root}", *doctors]))
        return 0
    print(f"{'run':40} {'status':10} {'schedule':18} {'ranks':>5} {'mb':>4} {'step ms':>9} {'pred ms':>9} {'err':>7}")
    for r in results:
        c = r.config.pipeline if r.config else None
        error = "-" if r.prediction_error is None else f"{100 * r.prediction_error:+.1f}%"
        numbers = f"{_fmt(r.measured_step_ms, ''):>9} {_fmt(r.predicted_step_ms, ''):>9} {error:>7}"
        setup = f"{c.schedule[:18]:18} {c.num_ranks:>5} {c.num_microbatches:>4} {numbers}" if c else r.message
        print(f"{r.run_dir.name[:40]:40} {r.status:10} {setup}")  # a damaged folder: why, in place of figures
    if doctors:
        print("\n".join(doctors))
    return 0


def _profile_line(folder: Path) -> str:
    """A unit profile's folder in one line: what plans from it, or that it holds no profile yet."""
    cost = folder / COST_FILE
    if cost.is_file():
        return f"{folder}: a unit profile ({programs().pipesim} plan --cost {cost} ...)"
    return f"{folder}: a unit profile without {COST_FILE} (unfinished or failed: {programs().executor} show {folder})"


def cmd_show(args: argparse.Namespace) -> int:
    from pipesim_executor.host.run_folder import load_run

    _check_run_dir(args.run_dir)
    result = load_run(args.run_dir)  # a damaged folder: a ValueError naming the file, a usage error
    if args.json:
        print(json.dumps(result_dict(result), indent=1))
    else:
        print("\n".join(summary_lines(result)))
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from pipesim_executor.host import watch

    _check_run_dir(args.run_dir)
    run = watch.FolderRun(args.run_dir)
    if run.done():
        print(f"{run.run_dir.name}: not running ({run.status})")
        return 0
    run.cancel(**({} if args.timeout is None else {"timeout": args.timeout}))
    print(f"{run.run_dir.name}: {run.status}")
    return 0 if run.done() else 1


def cmd_verify_plan(args: argparse.Namespace) -> int:
    import threading

    from pipesim.io.formats import check_output, is_standard_output
    from pipesim_executor.host import verify

    words = sys.stderr if is_standard_output(args.json) else sys.stdout  # `--json -`: stdout carries the JSON
    bar = ProgressBar("verify-plan")

    def progress(row: verify.VerifyRow) -> None:
        rounds = len(row.round_step_times_ms)
        measured = "failed" if row.measured_ms is None else f"median {row.measured_ms:.2f} ms after {rounds} round(s)"
        bar.write(f"ran {row.label}: predicted {row.predicted_ms:.2f} ms, measured {measured}")

    if args.json is not None:
        check_output(args.json)  # before any run: an unwritable output must not cost the user the runs
    cancel = threading.Event()
    try:
        result = verify.verify_with(
            args.plan,
            verify.VerifySettings.of(args),
            on_row=progress,
            on_progress=lambda where: bar.set(where.fraction, where.text),
            cancel=cancel,
            json_out=args.json,
            wait_for_machine=args.wait_for_machine,
            on_wait=say_waiting,
        )
    except (ValueError, OSError, KeyError) as error:
        raise UsageError(str(error)) from None
    except KeyboardInterrupt:
        cancel.set()
        raise
    finally:
        bar.close()
    print("\n".join(verify.summary_lines(result)), flush=True, file=words)
    if not any(r.measured_ms is not None for r in result.rows):
        return 1
    return NOT_COMPARABLE if result.status == "not_comparable" else 0


def _check_run_dir(run_dir: Path) -> None:
    """A usage error naming what `run_dir` is when it is no run folder (no such path, a link loop, a file)."""
    from pipesim_executor.host.run_folder import run_folder

    try:
        run_folder(run_dir)
    except ValueError as error:
        raise UsageError(f"{error} ({programs().executor} list shows the runs under a runs folder)") from None


def add_list_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runs-root", type=folder_flag, default=Path("runs"), metavar="DIR", help="the runs folder (default runs)"
    )


def add_show_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN", help="the run folder, e.g. runs/NAME")
    parser.add_argument("--json", action="store_true", help="print result.json-like JSON instead of text")


def add_cancel_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, metavar="RUN", help="the run folder of a running run, e.g. runs/NAME")
    parser.add_argument(
        "--timeout",
        type=float_flag(minimum=0, maximum=MAX_TIMEOUT_S),
        default=None,
        metavar="S",
        help="seconds to wait for the run to end (default: its launcher's grace)",
    )


def add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    from pipesim_executor.host.verify import (
        DEFAULT_MIN_SECONDS,
        DEFAULT_ROUNDS,
        DEFAULT_STEPS,
        DEFAULT_TIMEOUT_S,
        DEFAULT_TOP,
        DEFAULT_WARMUP,
        MAX_MIN_SECONDS,
        MAX_STEPS_FACTOR,
    )

    parser.add_argument("plan", type=Path, metavar="PLAN", help=f"a plan file from {programs().pipesim} plan --json")
    parser.add_argument(
        "--top",
        type=_positive,
        default=DEFAULT_TOP,
        metavar="K",
        help=f"run the K best candidates (default {DEFAULT_TOP})",
    )
    parser.add_argument(
        "--steps",
        type=_positive,
        default=DEFAULT_STEPS,
        metavar="N",
        help=f"measured steps per run (default {DEFAULT_STEPS})",
    )
    parser.add_argument(
        "--warmup-steps",
        type=int_flag(0, MAX_STEPS),
        default=DEFAULT_WARMUP,
        metavar="N",
        help=f"unmeasured steps before them, in every run (default {DEFAULT_WARMUP})",
    )
    parser.add_argument(
        "--min-seconds",
        type=float_flag(0, MAX_MIN_SECONDS),
        default=DEFAULT_MIN_SECONDS,
        metavar="S",
        help="measure each run for at least this long: a candidate of short steps runs more than --steps, as many "
        f"as its predicted step takes to fill it, up to {MAX_STEPS_FACTOR} times --steps (a plan calibrated by a "
        f"profile; others run --steps) (default {DEFAULT_MIN_SECONDS:g})",
    )
    parser.add_argument(
        "--rounds",
        type=_positive,
        default=DEFAULT_ROUNDS,
        metavar="R",
        help=f"interleaved rounds: every candidate runs once per round, A B C, A B C, ... (default {DEFAULT_ROUNDS})",
    )
    parser.add_argument(
        "--device", choices=DEVICES, default=None, help="where the runs go (default: the plan's profile's, else cpu)"
    )
    parser.add_argument(
        "--timeout",
        type=_timeout,
        default=DEFAULT_TIMEOUT_S,
        dest="timeout_s",
        metavar="S",
        help=f"seconds per candidate's run (default {DEFAULT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--runs-root", type=folder_flag, default=Path("runs"), metavar="DIR", help="where the runs go (default runs)"
    )
    parser.add_argument(
        "--launch-history",
        metavar="PATH|none",
        default=None,
        help="add how far each candidate's rounds landed apart to this machine's record, which plan's intervals "
        "read (default $PIPESIM_LAUNCH_HISTORY or ~/.cache/pipesim/launch_spread.jsonl; a verification that is not "
        "comparable adds nothing); none: keep no record",
    )
    add_wait_flag(parser)
    parser.add_argument(
        "--json",
        type=Path,
        metavar="OUT",
        help="write the comparison (- for standard output): candidates (predicted_ms, predicted_p05_ms, "
        "predicted_p95_ms, extrapolated, measured_ms, measured_ci_low_ms, measured_ci_high_ms, measured_cv, memory), "
        "indistinguishable (groups), spearman, recommended_gap",
    )


def add_wait_flag(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--wait",
        dest="wait_for_machine",
        action="store_true",
        help="when another timed run, profile or verification holds this machine, wait for it to end (default: "
        "refuse at once, exit status 1, with one line naming it)",
    )


def say_waiting(holder: object) -> None:
    """The one line a job that waits for the machine prints, once."""
    said = holder.line() if holder is not None else "the machine is held by another timed job"  # type: ignore[attr-defined]
    print(f"waiting: {said}", file=sys.stderr, flush=True)


_positive = int_flag(1, MAX_STEPS)
_timeout = float_flag(above=0, maximum=MAX_TIMEOUT_S)
