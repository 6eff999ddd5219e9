"""pipesim's command line entry point (`pipesim`, `python -m pipesim`); the commands are in pipesim.cli.commands.

`list` is answered here with the schedule registry alone: building the parser of every command imports numpy,
plotly's export, the planner and the synthesizer, five times what listing the schedules takes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status (pipesim.flags: 0 done, 1 the work failed, 2 a usage error)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments == ["list"]:
        from pipesim.cli.listing import cmd_list
        from pipesim.flags import run_main
        from pipesim.programs import programs

        return run_main(programs().pipesim, cmd_list)
    from pipesim.cli import commands

    return commands.main(arguments)


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command (for tests and documentation tools)."""
    from pipesim.cli import commands

    return commands.build_parser()
