"""`python -m pipesim stragglers`: which rank or link of a measured run is slow, by how much, what it cost.

Usage:
  python -m pipesim stragglers runs/NAME [--json OUT]
  python -m pipesim stragglers runs/NAME/traces/torch-rank0.json runs/NAME/traces/torch-rank1.json [--cost FILE]

A run folder gives its schedule, measured timeline and cost.json (the prices each stage and kind should take);
torch.profiler (Kineto) traces with `PP:<action>` labels give the schedule and timeline they recorded
(pipesim.io.kineto), compared among their own ranks unless --cost prices them. The analysis is
pipesim.analysis.stragglers'. --json writes {"stragglers": [{rank, factor, factor_low, factor_high, cost_ms}],
"links": [{src, dst, delay_ms, delay_low_ms, delay_high_ms, cost_ms}]}, listing only what it judges slow.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import MappingProxyType

from pipesim.flags import EXIT_STATUS_HELP, UsageError


def add_commands(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser(
        "stragglers",
        allow_abbrev=False,
        help="find the slow rank or link of a measured run (a run folder, or torch.profiler traces)",
        description=__doc__.split("\n\n")[2],
        epilog=EXIT_STATUS_HELP,
    )
    cmd.add_argument("inputs", nargs="+", type=Path, metavar="RUN_DIR|TRACE", help="a run folder, or Kineto traces")
    cmd.add_argument("--cost", type=Path, metavar="FILE", help="a pipesim cost file pricing each stage and kind")
    cmd.add_argument("--seed", type=int, default=0, metavar="N", help="the bootstrap's seed (default 0)")
    cmd.add_argument("--json", type=Path, metavar="OUT", help="write the stragglers and slow links found")


def cmd_stragglers(args: argparse.Namespace) -> int:
    from pipesim.analysis.stragglers import find_stragglers
    from pipesim.io.cost_file import load_cost
    from pipesim.io.formats import check_output, write_json

    if args.json is not None:
        check_output(args.json)
    cost = None if args.cost is None else load_cost(args.cost)
    if len(args.inputs) == 1 and args.inputs[0].is_dir():
        from pipesim.io.run_record import read_run
        from pipesim.records import injected_only

        record = read_run(args.inputs[0])
        if record.outputs.measured is None:
            raise UsageError(f"{args.inputs[0]} has no measured.json: the run measured no step")
        measured = injected_only(record.outputs.measured)  # steps that alternated: the injected ones
        schedule, cost = record.schedule, cost if cost is not None else record.outputs.cost
    else:
        from pipesim.io.kineto import import_traces

        for path in args.inputs:
            if path.is_dir():
                raise UsageError(f"{path} is a folder: give one run folder, or Kineto trace files")
        run = import_traces(args.inputs)
        schedule, measured = run.schedule, run.timeline
    report = find_stragglers(schedule, measured, cost, seed=args.seed)
    written = []
    if args.json is not None:
        write_json(report.to_dict(), args.json)
        written.append(f"wrote {args.json}")
    print("\n".join(report.lines() + written))
    return 0


COMMANDS = MappingProxyType({"stragglers": cmd_stragglers})
