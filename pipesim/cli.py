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
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType

from pipesim.collectives import CollectiveCost
from pipesim.compare import compare_schedules, format_table
from pipesim.cost import CostModel, cost_from_times
from pipesim.cost_file import cost_to_dict, load_cost
from pipesim.export import ExportUnavailable, export_figures
from pipesim.formats import (
    save_chrome_trace,
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
from pipesim.timeline import Metrics, Timeline, compute_metrics
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
                       help="replicas each stage's gradients are reduced across (REDUCE_GRAD; default 1: free)")
    group.add_argument("--sharded", action="store_true", help="FSDP: UNSHARD all-gathers the stage's parameters")
    group.add_argument("--dp-latency", type=float, default=0.0, metavar="MS", help="per ring step (default 0)")
    group.add_argument("--dp-bandwidth", type=float, metavar="GB/S", help="ring bandwidth (default unlimited)")


def _add_figure_args(parser: argparse.ArgumentParser, what: str) -> None:
    for fmt in FIGURE_FORMATS:
        parser.add_argument(f"--{fmt}", type=Path, metavar="OUT", help=f"write the {what} as {fmt.upper()}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pipesim", description="Plan and explain pipeline-parallel schedules.", allow_abbrev=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="{list,simulate,compare}")
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
    if args.data_parallel is not None or args.sharded or args.dp_bandwidth is not None or args.dp_latency:
        bandwidth = math.inf if args.dp_bandwidth is None else args.dp_bandwidth
        extras["collectives"] = CollectiveCost(args.data_parallel or 1, args.sharded, args.dp_latency, bandwidth)
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


def cmd_simulate(args: argparse.Namespace) -> int:
    schedule = schedule_from_args(args)
    cost = cost_from_args(args)
    validate(schedule)
    timeline = simulate(with_collectives(schedule, cost), cost)  # data parallelism: torch's collectives too
    metrics = compute_metrics(timeline, cost)
    written = _write_simulation_files(args, schedule, cost, timeline, metrics)
    print("\n".join(_summary_lines(schedule, metrics, show_bytes=args.cost is not None)))
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


COMMANDS = MappingProxyType({"list": cmd_list, "simulate": cmd_simulate, "compare": cmd_compare})


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
