"""`python -m pipesim import-trace`: a real run in, from torch.profiler (Kineto) traces with `PP:<action>` labels.

Usage:
  python -m pipesim import-trace runs/NAME/traces/torch-rank0.json runs/NAME/traces/torch-rank1.json \\
      --schedule-out sched.json --json imported.json --trace both.json --html overlay.html

The schedule each rank ran is recovered from the labels (and validated), simulated with the traces' own median
action times (or --f/--b/--cost), laid over the imported timeline and attributed (pipesim.io.kineto).
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from types import MappingProxyType

from pipesim.cli.common import (
    add_cost_args,
    add_figure_args,
    check_outputs,
    cost_from_args,
    summary_stream,
    write_figures,
    written_lines,
)
from pipesim.flags import EXIT_STATUS_HELP
from pipesim.io.formats import json_text, schedule_file_text, schedule_to_dict, timeline_to_dict, write_files
from pipesim.sim.metrics import makespan


def add_commands(commands: argparse._SubParsersAction) -> None:
    imp = commands.add_parser(
        "import-trace",
        allow_abbrev=False,
        help="torch.profiler traces (PP: labels) -> timeline, overlaid on the simulation",
        epilog=EXIT_STATUS_HELP,
    )
    imp.add_argument("traces", nargs="+", type=Path, metavar="TRACE", help="Kineto traces: one per rank, or merged")
    imp.add_argument("--name", default="imported", help="the recovered schedule's name")
    add_cost_args(imp)
    outputs = imp.add_argument_group("outputs")
    outputs.add_argument("--schedule-out", type=Path, metavar="OUT", help="the recovered schedule (.json or .csv)")
    outputs.add_argument(
        "--json",
        type=Path,
        metavar="OUT",
        help="the imported timeline with step times, analysis (- for standard output)",
    )
    outputs.add_argument("--trace", type=Path, metavar="OUT", help="Chrome trace: simulated + imported, with flows")
    add_figure_args(outputs, "overlay chart (simulated against imported)")


def cmd_import_trace(args: argparse.Namespace) -> int:
    """Recover the schedule and its timeline from the traces, simulate that schedule, overlay, attribute."""
    from pipesim.analysis.attribution import attribute_run
    from pipesim.analysis.overlay import pick_step
    from pipesim.analysis.replay import replay
    from pipesim.io.chrome_trace import run_trace
    from pipesim.io.kineto import import_traces

    check_outputs(args, ("schedule_out", "json", "trace"))
    run = import_traces(args.traces, args.name)
    own_times = not any(getattr(args, flag) is not None for flag in ("f", "b", "w", "comm", "cost"))
    simulated = replay(run, None if own_times else cost_from_args(args))
    analysis = attribute_run(run.schedule, run.timeline, run.step_times_ms)
    costs = "with the traces' own median action times" if own_times else "with the given costs"
    lines = [
        f"{run.schedule.describe()}; {len(run.step_times_ms)} steps recorded",
        f"imported step {statistics.median(run.step_times_ms):.3f} ms (median); simulated "
        f"{makespan(simulated):.3f} ms ({costs})",
    ]
    for row in analysis["ranks"]:
        lines.append(
            f"  rank {row['rank']}: compute {row['compute_ms']:.3f} + schedule idle {row['schedule_idle_ms']:.3f} "
            f"+ comm {row['comm_wait_ms']:.3f} + other {row['overhead_ms']:.3f} ms"
        )
    files: dict[Path, str] = {}  # written together, all or none (pipesim.io.atomic.write_files)
    if args.schedule_out is not None:
        files[args.schedule_out] = schedule_file_text(run.schedule, args.schedule_out)
    if args.json is not None:
        summary = {
            "step_times_ms": list(run.step_times_ms),
            "schedule": schedule_to_dict(run.schedule),
            "simulated_step_ms": makespan(simulated),
            "analysis": analysis,
        }
        files[args.json] = json_text(timeline_to_dict(run.timeline, summary), args.json)
    if args.trace is not None:
        views = {"simulated": simulated, "imported": pick_step(run.timeline, None)}
        files[args.trace] = json_text(run_trace(run.schedule, views), args.trace)
    write_files(files)
    written = [str(path) for path in files]
    from pipesim.charts.overlay import overlay_figure

    written += write_figures(lambda: overlay_figure(simulated, run.timeline), args)
    # after the files (a closed stdout loses none); on stderr when an output went to stdout (`-`)
    print("\n".join(lines + written_lines(*written)), file=summary_stream(*written))
    return 0


COMMANDS = MappingProxyType({"import-trace": cmd_import_trace})
