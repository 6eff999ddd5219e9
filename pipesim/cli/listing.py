"""`pipesim list`: the registered schedules, what they are and their options.

Its own module so that `list` imports the registry alone (pipesim.cli.main answers it before the parser of every
other command, and with it numpy, plotly and the planner, is imported)."""

from __future__ import annotations

import argparse

from pipesim.schedules import schedule_info, schedule_names


def cmd_list(args: argparse.Namespace | None = None) -> int:
    """Print each registered schedule with its summary and options; exit status 0."""
    for name in schedule_names():
        info = schedule_info(name)
        options = ", ".join(info.options) or "none"
        split = " [splits backward into I and W]" if info.split_backward else ""
        print(f"{info.name:<18} {info.summary}{split}\n{'':<18} options: {options}")
    return 0
