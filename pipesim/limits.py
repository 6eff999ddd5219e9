"""Sizes pipesim accepts, checked before anything is allocated, so no input can take the machine down.

The engine handles about 130,000 actions a second on one core (docs/benchmarks.md), so the largest schedule
accepted here simulates in about fifteen seconds; anything beyond is refused at once with a one-line error
naming the limit. The app draws far less (app_pages.state); these are the command line's and the files'.
"""

from __future__ import annotations

MAX_RANKS = 1024
MAX_STAGES = 8192
MAX_MICROBATCHES = 65536
MAX_ACTIONS = 2_000_000
MAX_TRACE_BYTES = 256 * 1024**2  # one profiler trace file (pipesim.kineto): parsed JSON takes ~10x its size
MAX_PROBLEMS = 1000  # validation problems collected at most (the app marks each on its cell)
MAX_PROBLEMS_SHOWN = 5  # validation errors listed in full before "and N more"


def check_sizes(
    *,
    num_ranks: int | None = None,
    num_stages: int | None = None,
    num_microbatches: int | None = None,
    num_actions: int | None = None,
) -> None:
    """ValueError naming the first size over its limit."""
    for what, value, limit in (
        ("ranks", num_ranks, MAX_RANKS),
        ("stages", num_stages, MAX_STAGES),
        ("microbatches", num_microbatches, MAX_MICROBATCHES),
        ("actions", num_actions, MAX_ACTIONS),
    ):
        if value is not None and value > limit:
            raise ValueError(
                f"{value} {what} is more than pipesim handles (at most {limit:,} {what}; see pipesim/limits.py)"
            )


def summarize(problems: list[str], shown: int = MAX_PROBLEMS_SHOWN) -> str:
    """The first `shown` problems, one per line, then how many more there are."""
    lines = problems[:shown]
    if len(problems) > shown:
        lines.append(f"... and {len(problems) - shown} more")
    return "\n".join(lines)
