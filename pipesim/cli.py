"""pipesim on the command line: list schedules, simulate one, compare several.

Usage:
  python -m pipesim list
  python -m pipesim simulate --schedule 1f1b --ranks 4 --microbatches 8
  python -m pipesim simulate --schedule interleaved-1f1b --ranks 4 --microbatches 8 --virtual-stages 2 \\
      --f 1.0 --b 2.0 --w 1.0 --comm 0.1 --json tl.json --csv sched.csv --trace trace.json --html gantt.html
  python -m pipesim simulate --csv-in my_schedule.csv --cost cost.json --png gantt.png
  python -m pipesim simulate --csv-in torch_dump.csv --overlap-factor 0.7 --data-parallel 8 --dp-bandwidth 50 \
      --csv comms.csv --csv-format compute_comms
  python -m pipesim compare --schedules 1f1b,zb-h1,zbv --ranks 4 --microbatches 8 --json rows.json --html cmp.html
  python -m pipesim balance --layer-ms 1,4,4,4,4,6 --stages 2          (see pipesim/cli_plan.py)
  python -m pipesim plan --layers 24 --devices 8 --memory-cap 80GiB --global-batch 64 --json plan.json
  python -m pipesim import-trace runs/NAME/traces/torch-rank0.json runs/NAME/traces/torch-rank1.json \\
      --schedule-out sched.json --json imported.json --trace both.json --html overlay.html

Times are milliseconds per stage and microbatch (per chunk when a rank holds several
stages); give one number for every stage or a comma-separated list, one per stage.
`--b` is the full backward, `--w` its weight-gradient part (so I = B - W; without
--w, half of B). `--comm` is the time of one cross-rank transfer. `--cost FILE` reads
a pipesim cost file instead (e.g. from an executor profile run). `--overlap-factor`
prices torch's overlapped forward-backward pairs (pair = factor x (F + B)); `--data-parallel`,
`--sharded`, `--dp-latency` and `--dp-bandwidth` price REDUCE_GRAD and UNSHARD (ring
all-reduce / all-gather of each stage's parameter bytes; zero with one replica).

`--csv-in` reads torch's CSV in either of its formats (compute_only, or compute_comms with
every send and receive; detected, or named with --csv-in-format); stated transfers set when
each message leaves its rank.

Outputs: --json the timeline document with a metrics summary, --csv the schedule in
torch.distributed.pipelining's CSV format (--csv-format compute_only or compute_comms;
by default the form the schedule has), --trace a Chrome trace
(open in https://ui.perfetto.dev), --html/--png/--svg/--pdf the Gantt chart
(images need Chromium). Bad arguments print one line on stderr and exit with 2.

`import-trace` reads torch.profiler (Kineto) traces whose actions carry torch's `PP:<action>` labels
(torch.distributed.pipelining's multi-stage runtime, or `python -m executor run --torch-profile`),
recovers the schedule each rank ran and its timeline (source "imported"), simulates that schedule (with
the given costs, else the traces' own median action times) and overlays the two; --trace writes both
into one Chrome trace.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

from pipesim import cli_plan
from pipesim.chrome_trace import save_chrome_trace
from pipesim.collectives import CollectiveCost
from pipesim.compare import compare_schedules, format_table
from pipesim.cost import CostModel, LinkCost, cost_from_times
from pipesim.cost_file import cost_to_dict, load_cost
from pipesim.export import ExportUnavailable, export_figures
from pipesim.formats import (
    save_schedule,
    save_timeline,
    schedule_from_csv,
    schedule_to_csv,
    schedule_to_dict,
    write_file,
    write_json,
)
from pipesim.ir import Schedule
from pipesim.schedules import build_schedule, schedule_info, schedule_names
from pipesim.simulate import simulate
from pipesim.timeline import Metrics, Timeline, compute_metrics, makespan
from pipesim.torch_csv import CSV_FORMATS
from pipesim.torch_order import with_collectives
from pipesim.validate import validate

USAGE_ERROR = 2
RUNTIME_ERROR = 1
FIGURE_FORMATS = ("html", "png", "svg", "pdf")


class UsageError(Exception):
    """A mistake in the command line; reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting, so main() reports one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        command = " ".join(self.prog.split()[1:])
        raise UsageError(f"{message} (see: python -m pipesim {command + ' ' if command else ''}--help)")


# --- argument types --------------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _ms_list(text: str) -> list[float]:
    """One time in ms, or a comma-separated list of them (one per stage)."""
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected milliseconds as a number or a comma-separated list (one per stage), got {text!r}"
        ) from None
    if any(not value >= 0 for value in values):
        raise argparse.ArgumentTypeError(f"times must be >= 0 ms, got {text!r}")
    return values


def _name_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected comma-separated schedule names, e.g. 1f1b,zb-h1")
    return names


# --- parser ---------------------------------------------------------------------------


def _add_cost_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("costs (ms per stage and microbatch; one value or one per stage)")
    group.add_argument("--f", type=_ms_list, metavar="T", help="forward time (default 1)")
    group.add_argument("--b", type=_ms_list, metavar="T", help="full backward time (default 2)")
    group.add_argument("--w", type=_ms_list, metavar="T", help="weight-gradient part of --b (default half of it)")
    group.add_argument("--comm", type=_ms_list, metavar="T", help="cross-rank transfer time (default 0)")
    group.add_argument("--cost", type=Path, metavar="FILE", help="pipesim cost file instead of --f/--b/--w/--comm")
    group.add_argument("--recompute", action="store_true", help="recompute activations in the backward")
    group.add_argument("--overlap-factor", type=float, metavar="X",
                       help="an OVERLAP_F_B pair takes X x (F + B), 0 < X <= 1 (default 1: no overlap)")
    group.add_argument("--data-parallel", type=_positive_int, metavar="D",
                       help="D replicas of the pipeline: each stage's gradients ring all-reduced across them, after "
                            "its last backward as pipesim's executor does (pipesim.data_parallel), or where the "
                            "schedule states REDUCE_GRAD (default 1: none)")
    group.add_argument("--sharded", action="store_true",
                       help="FSDP: parameters sharded across the replicas (torch's UNSHARD all-gathers, REDUCE_GRAD "
                            "reduce-scatters)")
    group.add_argument("--dp-latency", type=float, metavar="MS", help="ring latency per step (default 0)")
    group.add_argument("--dp-bandwidth", type=float, metavar="GB/S", help="ring bandwidth (default unlimited)")


def _add_figure_args(parser: argparse.ArgumentParser, what: str) -> None:
    for fmt in FIGURE_FORMATS:
        parser.add_argument(f"--{fmt}", type=Path, metavar="OUT", help=f"write the {what} as {fmt.upper()}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pipesim", description="Plan and explain pipeline-parallel schedules.", allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True,
                                     metavar="{list,simulate,compare,import-trace,balance,plan}")
    commands.add_parser("list", allow_abbrev=False, help="registered schedules, what they are and their options")

    sim = commands.add_parser("simulate", allow_abbrev=False, help="simulate one schedule and write its timeline")
    source = sim.add_mutually_exclusive_group(required=True)
    source.add_argument("--schedule", metavar="NAME", help="registered schedule (see `list`)")
    source.add_argument("--csv-in", type=Path, metavar="FILE", help="torch's schedule CSV (either format)")
    sim.add_argument("--ranks", type=_positive_int, metavar="P")
    sim.add_argument("--microbatches", type=_positive_int, metavar="M")
    sim.add_argument("--virtual-stages", type=_positive_int, metavar="V", help="stages per rank (interleaved)")
    sim.add_argument("--csv-in-format", choices=CSV_FORMATS, default="auto",
                     help="the format of --csv-in (default: auto, compute_comms when it has sends or receives)")
    _add_cost_args(sim)
    steps = sim.add_argument_group("steps (the step as a training loop runs it; see pipesim.steady_state)")
    steps.add_argument("--overhead", type=_ms_list, metavar="T",
                       help="per-step time after each rank's last action: optimizer, zeroing (one value or per rank)")
    steps.add_argument("--dispatch", type=_ms_list, metavar="T",
                       help="gap before each action a rank starts (one value or per rank; default 0)")
    steps.add_argument("--shared-cores", type=_positive_int, metavar="N",
                       help="the ranks share N cores (CPU ranks on one machine): at most N compute at full speed")
    steps.add_argument("--grad-bytes", type=_ms_list, metavar="BYTES",
                       help="with --data-parallel: gradient bytes per stage (one value or per stage)")
    steps.add_argument("--steps", type=_positive_int, default=1, metavar="N", help="simulate N steps in a row")
    steps.add_argument("--no-barrier", action="store_true",
                       help="with --steps: a rank starts the next step when its own optimizer is done (default: "
                            "every rank waits for the last, as pipesim's executor does)")
    outputs = sim.add_argument_group("outputs")
    outputs.add_argument("--json", type=Path, metavar="OUT", help="timeline document with a metrics summary")
    outputs.add_argument("--csv", type=Path, metavar="OUT", help="the schedule as torch's CSV")
    outputs.add_argument("--csv-format", choices=CSV_FORMATS, default="auto",
                         help="format of --csv: compute_only, or compute_comms with torch's sends, receives "
                              "and collectives (default: auto, the form the schedule has)")
    outputs.add_argument("--trace", type=Path, metavar="OUT", help="Chrome trace (Perfetto)")
    _add_figure_args(outputs, "Gantt chart")

    cmp = commands.add_parser("compare", allow_abbrev=False, help="simulate several schedules under one cost model")
    cmp.add_argument("--schedules", type=_name_list, required=True, metavar="A,B,C")
    cmp.add_argument("--ranks", type=_positive_int, required=True, metavar="P")
    cmp.add_argument("--microbatches", type=_positive_int, required=True, metavar="M")
    cmp.add_argument("--virtual-stages", type=_positive_int, metavar="V", help="for the interleaved families")
    _add_cost_args(cmp)
    cmp.add_argument("--json", type=Path, metavar="OUT", help="the comparison rows")
    _add_figure_args(cmp, "comparison chart")

    imp = commands.add_parser("import-trace", allow_abbrev=False,
                              help="torch.profiler traces (PP: labels) -> timeline, overlaid on the simulation")
    imp.add_argument("traces", nargs="+", type=Path, metavar="TRACE", help="Kineto traces: one per rank, or merged")
    imp.add_argument("--name", default="imported", help="the recovered schedule's name")
    _add_cost_args(imp)
    outputs = imp.add_argument_group("outputs")
    outputs.add_argument("--schedule-out", type=Path, metavar="OUT", help="the recovered schedule (.json or .csv)")
    outputs.add_argument("--json", type=Path, metavar="OUT", help="the imported timeline with step times, analysis")
    outputs.add_argument("--trace", type=Path, metavar="OUT", help="Chrome trace: simulated + imported, with flows")
    _add_figure_args(outputs, "overlay chart (simulated against imported)")
    cli_plan.add_commands(commands)
    return parser


# --- building inputs ----------------------------------------------------------------


def cost_from_args(args: argparse.Namespace) -> CostModel:
    """The cost model the flags describe: a cost file, or uniform / per-stage times."""
    given = [flag for flag in ("f", "b", "w", "comm") if getattr(args, flag) is not None]
    if args.cost is not None:
        if given:
            raise UsageError(f"--cost cannot be combined with {', '.join('--' + f for f in given)}")
        cost = load_cost(args.cost)
    else:
        try:
            cost = cost_from_times(args.f or [1.0], args.b, args.w, args.comm or [0.0])
        except ValueError as error:
            raise UsageError(str(error).replace("forward_ms", "--f").replace("backward_ms", "--b")
                             .replace("weight_ms", "--w")) from None
    cost = cost.with_recompute(True) if args.recompute else cost
    extras: dict = {}
    if args.overlap_factor is not None:
        extras["overlap_factor"] = args.overlap_factor
    if args.data_parallel is not None or args.sharded or args.dp_bandwidth is not None or args.dp_latency is not None:
        # One data-parallel group, priced two ways from the same link: torch's stated collectives
        # (CollectiveCost) and the executor's bucketed all-reduce after each stage's last backward (data_parallel).
        latency = cost.dp_link.latency_ms if args.dp_latency is None else args.dp_latency
        bandwidth = cost.dp_link.bandwidth_gbps if args.dp_bandwidth is None else args.dp_bandwidth
        replicas = args.data_parallel or cost.data_parallel
        try:
            extras["dp_link"] = LinkCost(latency_ms=latency, bandwidth_gbps=bandwidth)
            extras["collectives"] = CollectiveCost(replicas, args.sharded, latency, bandwidth)
        except ValueError as error:
            raise UsageError(f"--dp-latency / --dp-bandwidth: {error}") from None
        extras["data_parallel"] = replicas
    return dataclasses.replace(cost, **extras) if extras else cost


def schedule_from_args(args: argparse.Namespace) -> Schedule:
    if args.csv_in is not None:
        if args.ranks or args.microbatches or args.virtual_stages:
            raise UsageError(
                "--csv-in takes ranks, microbatches and stages from the CSV: "
                "drop --ranks, --microbatches and --virtual-stages"
            )
        return schedule_from_csv(args.csv_in.read_text(), name=args.csv_in.stem, csv_format=args.csv_in_format)
    if args.ranks is None or args.microbatches is None:
        raise UsageError("--schedule needs --ranks and --microbatches")
    options = {} if args.virtual_stages is None else {"num_virtual_stages": args.virtual_stages}
    return build_schedule(args.schedule, args.ranks, args.microbatches, **options)


# --- commands -------------------------------------------------------------------------


def _summary_lines(schedule: Schedule, metrics: Metrics, show_bytes: bool) -> list[str]:
    """Headline numbers; bytes only when the costs carry real sizes (a cost file), not the 1-per-microbatch default."""
    lines = [
        schedule.describe(),
        f"makespan {metrics.makespan:.3f} ms, bubble_fraction {metrics.bubble_fraction:.1%} "
        f"(idle/busy {metrics.bubble_ratio:.3f})",
    ]
    for rank in metrics.ranks:
        plural = "" if rank.peak_activations == 1 else "es"
        size = f" ({rank.peak_activation_bytes:,.0f} bytes)" if show_bytes else ""
        lines.append(
            f"  rank {rank.rank}: bubble {rank.bubble_fraction:.1%}, "
            f"peak memory {rank.peak_activations} stashed microbatch{plural}{size}"
        )
    return lines


def _write_figures(fig_factory, args: argparse.Namespace) -> list[str]:
    """Write the requested figure files; images go through one kaleido session."""
    wanted = {fmt: getattr(args, fmt) for fmt in FIGURE_FORMATS if getattr(args, fmt) is not None}
    if not wanted:
        return []
    fig = fig_factory()
    html = {"html": wanted["html"]} if "html" in wanted else {}
    written = []
    for fmt, path in html.items():  # HTML first: it works even when images cannot
        write_file(export_figures([fig], [fmt])[0][fmt], path)
        written.append(str(path))
    images = [fmt for fmt in wanted if fmt != "html"]
    if images:
        rendered = export_figures([fig], images)[0]
        for fmt in images:
            write_file(rendered[fmt], wanted[fmt])
            written.append(str(wanted[fmt]))
    return written


def cmd_list(args: argparse.Namespace) -> int:
    for name in schedule_names():
        info = schedule_info(name)
        options = ", ".join(info.options) or "none"
        split = " [splits backward into I and W]" if info.split_backward else ""
        print(f"{info.name:<18} {info.summary}{split}\n{'':<18} options: {options}")
    return 0


def _with_step_costs(cost: CostModel, args: argparse.Namespace, num_ranks: int) -> CostModel:
    """--overhead, --dispatch and --shared-cores replace what the cost model (or cost file) says."""
    changes = {}
    for flag, field in (("overhead", "step_overhead_ms"), ("dispatch", "dispatch_ms")):
        values = getattr(args, flag)
        if values is None:
            continue
        if len(values) not in (1, num_ranks):
            raise UsageError(f"--{flag} has {len(values)} values for {num_ranks} ranks: give 1 or {num_ranks}")
        changes[field] = tuple(values)
    if args.shared_cores is not None:
        changes["shared_cores"] = args.shared_cores
    cost = replace(cost, **changes) if changes else cost
    return _with_data_parallel(cost, args)


def _with_data_parallel(cost: CostModel, args: argparse.Namespace) -> CostModel:
    """--grad-bytes onto the cost model (the data-parallel group itself comes from `cost_from_args`)."""
    changes: dict = {}
    if args.grad_bytes is not None:
        values, stages = list(args.grad_bytes), cost.stages
        if len(values) > 1 and len(stages) == 1:  # a uniform model, per-stage gradients: one entry per stage
            stages = stages * len(values)
        if len(values) not in (1, len(stages)):
            raise UsageError(f"--grad-bytes has {len(values)} values for {len(stages)} stage costs: give 1 or "
                             f"{len(stages)}")
        values = values * len(stages) if len(values) == 1 else values
        changes["stages"] = tuple(replace(stage, param_bytes=v) for stage, v in zip(stages, values, strict=True))
    return replace(cost, **changes) if changes else cost


def _steps_lines(schedule: Schedule, cost: CostModel, args: argparse.Namespace) -> list[str]:
    """The step time as a training loop sees it (overhead included), and over --steps N steps in a row."""
    from pipesim.steady_state import simulate_steps

    several = simulate_steps(schedule, cost, args.steps, barrier=not args.no_barrier).meta
    times = several["step_times_ms"]
    lines = [f"step time {times[0]:.3f} ms (actions, dispatch gaps and the last rank's overhead)"]
    from pipesim.data_parallel import grad_sync

    sync = grad_sync(simulate(schedule, cost), cost)
    if sync.spans:
        lines.append(f"data parallel x{cost.data_parallel}: {len(sync.spans)} stage all-reduces, "
                     f"{sum(s.end - s.start for s in sync.spans):.3f} ms in all; not hidden by the backward: "
                     + ", ".join(f"rank {r} {x:.3f} ms" for r, x in enumerate(sync.extra_ms)))
    if args.steps > 1:
        sync = "no barrier: ranks run into the next step" if args.no_barrier else "a barrier opens every step"
        lines.append(f"{args.steps} steps ({sync}): {several['total_ms']:.3f} ms in all, "
                     f"steady step {statistics.median(times[1:]):.3f} ms")
    return lines


def cmd_simulate(args: argparse.Namespace) -> int:
    schedule = schedule_from_args(args)
    cost = _with_step_costs(cost_from_args(args), args, schedule.num_ranks)
    validate(schedule)
    # Sharded parameters: torch's UNSHARD / REDUCE_GRAD placed as torch places them. Replicated: the gradient
    # all-reduce is priced after each stage's last backward, as the executor runs it (pipesim.data_parallel),
    # unless the schedule states its REDUCE_GRAD (then that is the price, once).
    scheduled = with_collectives(schedule, cost) if args.sharded else schedule
    timeline = simulate(scheduled, cost)
    metrics = compute_metrics(timeline, cost)
    written = _write_simulation_files(args, schedule, cost, timeline, metrics)
    print("\n".join(_summary_lines(schedule, metrics, show_bytes=args.cost is not None)))
    if (args.steps > 1 or any(cost.overhead_ms(schedule.num_ranks)) or any(cost.dispatch_per_rank(schedule.num_ranks))
            or cost.data_parallel > 1):
        print("\n".join(_steps_lines(scheduled, cost, args)))
    for path in written:
        print(f"wrote {path}")
    return 0


def _write_simulation_files(
    args: argparse.Namespace, schedule: Schedule, cost: CostModel, timeline: Timeline, metrics: Metrics
) -> list[str]:
    from pipesim.charts import gantt_figure  # plotly only when a figure is asked for

    written = []
    if args.json is not None:
        summary = {**metrics.to_dict(), "schedule": schedule_to_dict(schedule), "cost": cost_to_dict(cost)}
        save_timeline(timeline, args.json, summary)
        written.append(str(args.json))
    if args.csv is not None:
        write_file(schedule_to_csv(schedule, args.csv_format), args.csv)  # CSV whatever the file's suffix
        written.append(str(args.csv))
    if args.trace is not None:
        save_chrome_trace(timeline, args.trace)
        written.append(str(args.trace))
    written += _write_figures(lambda: gantt_figure(timeline, title=schedule.name), args)
    return written


def cmd_compare(args: argparse.Namespace) -> int:
    for name in args.schedules:
        schedule_info(name)  # unknown names are a usage error, not a failed row
    cost = cost_from_args(args)
    rows = compare_schedules(args.schedules, args.ranks, args.microbatches, cost, args.virtual_stages)
    print(format_table(rows))
    if args.json is not None:
        write_json({"format": "pipesim.comparison", "version": 1, "ranks": args.ranks,
                    "microbatches": args.microbatches, "rows": [row.to_dict() for row in rows]}, args.json)
        print(f"wrote {args.json}")

    from pipesim.charts_compare import comparison_figure

    for path in _write_figures(lambda: comparison_figure(rows), args):
        print(f"wrote {path}")
    return 0 if any(row.error is None for row in rows) else RUNTIME_ERROR


def cmd_import_trace(args: argparse.Namespace) -> int:
    """Recover the schedule and its timeline from the traces, simulate that schedule, overlay, attribute."""
    from pipesim.attribution import attribute_run
    from pipesim.chrome_trace import save_run_trace
    from pipesim.kineto import import_traces, replay
    from pipesim.overlay import pick_step

    run = import_traces(args.traces, args.name)
    own_times = not any(getattr(args, flag) is not None for flag in ("f", "b", "w", "comm", "cost"))
    simulated = replay(run, None if own_times else cost_from_args(args))
    analysis = attribute_run(run.schedule, run.timeline, run.step_times_ms)
    print(f"{run.schedule.describe()}; {len(run.step_times_ms)} steps recorded")
    costs = "with the traces' own median action times" if own_times else "with the given costs"
    print(f"imported step {statistics.median(run.step_times_ms):.3f} ms (median); simulated "
          f"{makespan(simulated):.3f} ms ({costs})")
    for row in analysis["ranks"]:
        print(f"  rank {row['rank']}: compute {row['compute_ms']:.3f} + schedule idle {row['schedule_idle_ms']:.3f} "
              f"+ comm {row['comm_wait_ms']:.3f} + other {row['overhead_ms']:.3f} ms")
    written = []
    if args.schedule_out is not None:
        save_schedule(run.schedule, args.schedule_out)
        written.append(str(args.schedule_out))
    if args.json is not None:
        summary = {"step_times_ms": list(run.step_times_ms), "schedule": schedule_to_dict(run.schedule),
                   "simulated_step_ms": makespan(simulated), "analysis": analysis}
        save_timeline(run.timeline, args.json, summary)
        written.append(str(args.json))
    if args.trace is not None:
        save_run_trace(run.schedule, {"simulated": simulated, "imported": pick_step(run.timeline, None)}, args.trace)
        written.append(str(args.trace))
    from pipesim.charts import overlay_figure

    written += _write_figures(lambda: overlay_figure(simulated, run.timeline), args)
    for path in written:
        print(f"wrote {path}")
    return 0


COMMANDS = MappingProxyType({"list": cmd_list, "simulate": cmd_simulate, "compare": cmd_compare,
                             "import-trace": cmd_import_trace, **cli_plan.COMMANDS})


def _one_line(error: BaseException) -> str:
    return " | ".join(line.strip() for line in str(error).splitlines() if line.strip())


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, build, run; user mistakes become one line on stderr and exit status 2."""
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except (UsageError, ValueError, OSError) as error:
        print(f"pipesim: error: {_one_line(error)}", file=sys.stderr)
        return USAGE_ERROR
    except ExportUnavailable as error:
        print(f"pipesim: error: {_one_line(error)}", file=sys.stderr)
        return RUNTIME_ERROR
