"""`pipesim compare`: several schedules simulated under one cost model, side by side (a table, the JSON rows, the
comparison chart); with `--slow-rank`/`--link-delay` a straggler priced in, with `--sensitivity` each schedule's
growth for one slower rank (pipesim.analysis.sensitivity), with `--jitter` each step sampled with its interval.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import MappingProxyType

from pipesim.cli import whatif
from pipesim.cli.common import (
    add_cost_args,
    add_figure_args,
    add_knob_args,
    add_sampling_args,
    check_outputs,
    cost_from_args,
    knob_options,
    name_list,
    positive_int,
    sampling_from_args,
    summary_stream,
    write_figures,
    written_lines,
)
from pipesim.flags import EXIT_STATUS_HELP, FAILURE
from pipesim.io.formats import write_json
from pipesim.schedules import schedule_info


def add_commands(commands: argparse._SubParsersAction) -> None:
    """The `compare` subcommand's flags."""
    cmp = commands.add_parser(
        "compare", allow_abbrev=False, help="simulate several schedules under one cost model", epilog=EXIT_STATUS_HELP
    )
    cmp.add_argument("--schedules", type=name_list, required=True, metavar="A,B,C", help="registered schedules (list)")
    cmp.add_argument("--ranks", type=positive_int, required=True, metavar="P", help="pipeline ranks")
    cmp.add_argument("--microbatches", type=positive_int, required=True, metavar="M", help="microbatches per step")
    cmp.add_argument("--virtual-stages", type=positive_int, metavar="V", help="for the interleaved families")
    add_knob_args(cmp)
    add_cost_args(cmp)
    add_sampling_args(cmp)
    whatif.add_perturbation_args(cmp)
    whatif.add_sensitivity_arg(cmp)
    cmp.add_argument("--json", type=Path, metavar="OUT", help="the comparison rows (- for standard output)")
    add_figure_args(cmp, "comparison chart")


def cmd_compare(args: argparse.Namespace) -> int:
    check_outputs(args, ("json",))
    for name in args.schedules:
        schedule_info(name)  # unknown names are a usage error, not a failed row
    cost = cost_from_args(args)
    from pipesim.analysis.compare import compare_schedules, format_table

    sampling = sampling_from_args(args)
    perturbation = whatif.perturbation_from_args(args, args.ranks)
    slowdown = None if args.sensitivity == 1 else args.sensitivity
    rows = compare_schedules(
        args.schedules, args.ranks, args.microbatches, cost, args.virtual_stages, sampling, perturbation, slowdown,
        options=knob_options(args), offload=args.offload,
    )  # fmt: skip
    written = []
    if args.json is not None:
        document = {
            "format": "pipesim.comparison",
            "version": 1,
            "ranks": args.ranks,
            "microbatches": args.microbatches,
            "perturbation": perturbation.to_dict(),
            "rows": [row.to_dict() for row in rows],
        }
        write_json(document, args.json)
        written.append(str(args.json))

    from pipesim.charts.compare import comparison_figure

    written += write_figures(lambda: comparison_figure(rows), args)
    table = format_table(rows, bytes_known=args.cost is not None)  # typed times carry no sizes
    print("\n".join([table, *whatif.sensitivity_lines(rows), *written_lines(*written)]), file=summary_stream(*written))
    return 0 if any(row.error is None for row in rows) else FAILURE


COMMANDS = MappingProxyType({"compare": cmd_compare})
