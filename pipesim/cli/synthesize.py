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
import math
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from pipesim.cli.common import UsageError, add_cost_args, check_outputs, cost_from_args, positive_int
from pipesim.cli.plan import parse_bytes
from pipesim.io.formats import schedule_to_csv, schedule_to_dict, write_file, write_json
from pipesim.schedules import PLACEMENTS

if TYPE_CHECKING:  # the synthesizer (and its solver) is imported by the command that runs it
    from pipesim.synth import Synthesis

MAX_TIME_LIMIT_S = 3600.0


def _positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return value


def _time_limit(text: str) -> float:
    value = _positive_number(text)
    if value > MAX_TIME_LIMIT_S:
        raise argparse.ArgumentTypeError(f"at most {MAX_TIME_LIMIT_S:g} seconds, got {text!r}")
    return value


def _byte_limit(text: str) -> float:
    value = parse_bytes(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a size > 0 such as 2GiB or 1e9, got {text!r}")
    return value


def add_commands(commands: argparse._SubParsersAction) -> None:
    syn = commands.add_parser(
        "synthesize",
        allow_abbrev=False,
        help="the fastest order under a per-rank memory limit, with a lower bound and the gap to it",
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
        "--time-limit",
        type=_time_limit,
        default=10.0,
        metavar="S",
        help=f"seconds the search may take (default 10, at most {MAX_TIME_LIMIT_S:g})",
    )
    outputs = syn.add_argument_group("outputs")
    outputs.add_argument("--csv", type=Path, required=True, metavar="OUT", help="torch's compute_only CSV")
    outputs.add_argument(
        "--json", type=Path, required=True, metavar="OUT", help="pipesim's schedule JSON with the results"
    )


def synthesis_document(result: Synthesis) -> dict:
    """pipesim's schedule document (any schedule reader takes it) with the synthesis results beside it."""
    return {**schedule_to_dict(result.schedule), **result.to_dict()}


def summary_lines(result: Synthesis, show_bytes: bool) -> list[str]:
    verdict = "optimal (proven)" if result.optimal else f"gap {result.gap:.2%} to the bound"
    lines = [
        f"{result.schedule.describe()}; {result.problem.describe()}",
        f"step time {result.makespan:.4f} ms, bubble_fraction {result.metrics.bubble_fraction:.2%}",
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

    if args.virtual_stages is not None and args.placement != "interleaved":
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
    )
    result = synthesize(problem, args.time_limit)
    lines = summary_lines(result, show_bytes=args.memory_limit_bytes is not None or args.cost is not None)
    # every file only after every check passed and the schedule is found
    write_file(schedule_to_csv(result.schedule, "compute_only"), args.csv)
    write_json(synthesis_document(result), args.json)
    print("\n".join(lines + [f"wrote {args.csv}", f"wrote {args.json}"]))
    return 0


COMMANDS = MappingProxyType({"synthesize": cmd_synthesize})
