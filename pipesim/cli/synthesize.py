"""`python -m pipesim synthesize`: the fastest per-rank order under a memory limit (pipesim.synth).

Usage:
  python -m pipesim synthesize --ranks 4 --microbatches 8 --f 1 --b 2 --w 1 --comm 0.1 --memory-limit 4 \\
      --csv synth.csv --json synth.json
  python -m pipesim synthesize --ranks 4 --microbatches 16 --cost cost.json --memory-limit-bytes 2GiB \\
      --placement v --time-limit 30 --csv synth.csv --json synth.json

Costs as for `simulate` (`--b` the full backward, `--w` its weight-gradient part; or `--cost FILE`). The memory
limit is per rank, of stashed activations: `--memory-limit N` in microbatches' worth (one microbatch's
activations across the rank's stages; ZB-H1 holds N = ranks, ZB-H2 2 x ranks - 1), or `--memory-limit-bytes B`.
`--placement`: linear (one stage per rank), interleaved (`--virtual-stages V` per rank, stage s on rank
s mod P; default 2) or v (stage s and 2P-1-s on one rank). `--time-limit S` bounds the search (default 10 s).

Prints the simulated step time, the bubble, the peak memory per rank, a lower bound no order can beat and the
gap to it (0 proves the order optimal). Writes the schedule as torch's compute_only CSV (`--csv`) and as
pipesim's schedule JSON with the results beside it (`--json`: makespan, bubble_fraction, lower_bound, gap,
optimal, peak_memory per rank); `simulate --csv-in`, the app, torch's runtime and `python -m executor run
--schedule-file` read either file.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from pipesim.cli.common import (
    UsageError,
    add_cost_args,
    check_outputs,
    cost_from_args,
    positive_int,
    summary_stream,
    written_lines,
)
from pipesim.cli.plan import parse_bytes
from pipesim.flags import EXIT_STATUS_HELP, float_flag, shown
from pipesim.io.formats import json_text, schedule_to_csv, schedule_to_dict, write_files
from pipesim.limits import MAX_MICROBATCHES
from pipesim.progress_bar import ProgressBar
from pipesim.schedules import PLACEMENTS, placement_takes_chunks

if TYPE_CHECKING:  # the synthesizer (and its solver) is imported by the command that runs it
    from pipesim.synth import Synthesis

MAX_TIME_LIMIT_S = 3600.0


_positive_number = float_flag(above=0, maximum=MAX_MICROBATCHES)  # --memory-limit: microbatches' worth
_time_limit = float_flag(above=0, maximum=MAX_TIME_LIMIT_S)


def _byte_limit(text: str) -> float:
    value = parse_bytes(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a size > 0 such as 2GiB or 1e9, got {shown(text)}")
    return value


def add_commands(commands: argparse._SubParsersAction) -> None:
    syn = commands.add_parser(
        "synthesize",
        allow_abbrev=False,
        help="the fastest order under a per-rank memory limit, with a lower bound and the gap to it",
        description="The fastest order of one pipeline's actions under a per-rank memory limit, found within "
        "--time-limit seconds, with a lower bound no order can beat and the gap to it; written as torch's CSV "
        "(--csv) and pipesim's schedule JSON (--json).",
        epilog=EXIT_STATUS_HELP,
    )
    syn.add_argument("--ranks", type=positive_int, required=True, metavar="P", help="pipeline ranks (devices)")
    syn.add_argument("--microbatches", type=positive_int, required=True, metavar="M", help="microbatches per step")
    add_cost_args(syn)
    memory = syn.add_argument_group("memory limit per rank (stashed activations; give one)")
    limit = memory.add_mutually_exclusive_group(required=True)
    limit.add_argument(
        "--memory-limit",
        type=_positive_number,
        metavar="N",
        help="microbatches' worth of activations (ZB-H1 holds P, ZB-H2 2P-1)",
    )
    limit.add_argument("--memory-limit-bytes", type=_byte_limit, metavar="B", help="bytes, e.g. 2GiB or 1.5e9")
    syn.add_argument("--placement", choices=PLACEMENTS, default="linear", help="where the stages sit (default linear)")
    syn.add_argument(
        "--virtual-stages", type=positive_int, metavar="V", help="stages per rank, interleaved only (default 2)"
    )
    syn.add_argument(
        "--objective",
        choices=("makespan", "span"),
        default="makespan",
        help="what to minimise: makespan, the step from the first action's start to the last one's end (default); "
        "span, the longest rank's time from its first action's start to its last one's end: the step once steps "
        "overlap without an optimizer synchronisation (the Zero Bubble paper's cost, its ZB-1p and ZB-2p)",
    )
    syn.add_argument(
        "--time-limit",
        type=_time_limit,
        default=10.0,
        metavar="S",
        help=f"seconds the search may take (default 10, at most {MAX_TIME_LIMIT_S:g})",
    )
    outputs = syn.add_argument_group("outputs")
    outputs.add_argument(
        "--csv", type=Path, required=True, metavar="OUT", help="torch's compute_only CSV (- for standard output)"
    )
    outputs.add_argument(
        "--json",
        type=Path,
        required=True,
        metavar="OUT",
        help="pipesim's schedule JSON with the results (-: standard output)",
    )


def synthesis_document(result: Synthesis) -> dict:
    """pipesim's schedule document (any schedule reader takes it) with the synthesis results beside it."""
    return {**schedule_to_dict(result.schedule), **result.to_dict()}


def summary_lines(result: Synthesis, show_bytes: bool) -> list[str]:
    verdict = "optimal (proven)" if result.optimal else f"gap {result.gap:.2%} to the bound"
    span = f", longest rank span {result.objective_ms:.4f} ms" if result.problem.objective == "span" else ""
    lines = [
        f"{result.schedule.describe()}; {result.problem.describe()}",
        f"step time {result.makespan:.4f} ms{span}, bubble_fraction {result.metrics.bubble_fraction:.2%}",
        f"lower bound {result.lower_bound:.4f} ms: {verdict} (found by {result.method} in {result.seconds:.1f} s)",
    ]
    for rank, unit, limit in zip(result.metrics.ranks, result.unit_bytes, result.limit_bytes, strict=True):
        worth = rank.peak_activation_bytes / unit if unit > 0 else 0.0
        size = f", {rank.peak_activation_bytes:,.0f} of {limit:,.0f} bytes" if show_bytes else ""
        lines.append(f"  rank {rank.rank}: peak memory {worth:.3g} microbatches{size}")
    named = {name: ms for name, ms in result.tried.items() if name not in ("list scheduling",)}
    if named:
        lines.append("started from: " + ", ".join(f"{name} {ms:.4f} ms" for name, ms in named.items()))
    return lines


def cmd_synthesize(args: argparse.Namespace) -> int:
    from pipesim.synth import SynthesisProblem, synthesize

    if args.virtual_stages is not None and not placement_takes_chunks(args.placement):
        raise UsageError(f"--virtual-stages applies to --placement interleaved only (got --placement {args.placement})")
    check_outputs(args, ("csv", "json"))  # both writable, and not the same file, before any search
    cost = cost_from_args(args)
    if cost.dp_group.replicas > 1 or cost.dp_group.sharded:
        raise UsageError(
            "synthesize orders one pipeline's actions: the data-parallel flags (--data-parallel, --sharded, "
            "--dp-latency, --dp-bandwidth, --grad-bytes) do not change that order; drop them"
        )
    problem = SynthesisProblem(
        num_ranks=args.ranks,
        num_microbatches=args.microbatches,
        cost=cost,
        placement=args.placement,
        num_virtual_stages=args.virtual_stages,
        memory_limit=args.memory_limit,
        memory_limit_bytes=args.memory_limit_bytes,
        objective=args.objective,
    )
    with ProgressBar.ticking("synthesize", args.time_limit):  # the search stops at the time limit
        result = synthesize(problem, args.time_limit)
    lines = summary_lines(result, show_bytes=args.memory_limit_bytes is not None or args.cost is not None)
    # every file only after every check passed and the schedule is found
    # both files or neither: a CSV that cannot be written keeps the JSON that was there
    write_files(
        {
            args.json: json_text(synthesis_document(result), args.json),
            args.csv: schedule_to_csv(result.schedule, "compute_only"),
        }
    )
    print("\n".join(lines + written_lines(args.csv, args.json)), file=summary_stream(args.csv, args.json))
    return 0


COMMANDS = MappingProxyType({"synthesize": cmd_synthesize})
