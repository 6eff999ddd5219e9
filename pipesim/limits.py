"""Sizes pipesim accepts, checked before anything is allocated, so no input can take the machine down.

The engine handles about 130,000 actions a second on one core (docs/benchmarks.md), so the largest schedule
accepted here simulates in about fifteen seconds; anything beyond is refused at once with a one-line error
naming the limit. The app draws far less (app_pages.parts.state); these are the command line's and the files'.

Every limit is documented in the README's "Limits" table; the costs of work that grows with them (balancing,
trace import) are measured in docs/benchmarks.md.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

MAX_RANKS = 1024
MAX_STAGES = 8192
MAX_MICROBATCHES = 65536
MAX_ACTIONS = 2_000_000
# Units to balance into stages (layers of a model description, per-layer times): balancing is linear in them
# (pipesim.cost.balance) and a million take about a second; a model description's layers are bounded likewise.
MAX_LAYERS = 1_000_000
# Trace events in one import (every event of every file, torch ops included): a profiler trace of a training
# step holds 10^5 to 10^6; import is linear in them (docs/benchmarks.md).
MAX_TRACE_EVENTS = 4_000_000
# Data-parallel replicas of one pipeline: far past any cluster built, small enough that every price stays finite.
MAX_REPLICAS = 1_000_000
# Units of one profiled model (executor profile: a model's layers): planning is linear in them, and 10,000 plan in
# seconds; a model's stages in a cost file are bounded by MAX_STAGES.
MAX_PROFILE_UNITS = 10_000
# Candidates of one plan verify-plan reads (the planner's spaces are hundreds to thousands).
MAX_PLAN_CANDIDATES = 50_000
# Devices one plan spans (pipeline ranks x replicas): 2^20, past any cluster built.
MAX_DEVICES = 1 << 20
# Any one time given in ms (a latency, a layer's time): 10^12 ms is 31 years. Bounded inputs give finite results.
MAX_TIME_MS = 1e12
# Seconds any command waits for a run, a candidate or a cancel (a week): past it a timeout means nothing.
MAX_TIMEOUT_S = 7 * 24 * 3600.0
# Steps of one run (measured or warm-up), and a run's seed (what torch and numpy both take).
MAX_STEPS = 1_000_000
MAX_SEED = 2**32 - 1
# Bytes of one tensor, gradient or stage (an exabyte), and the slowest link (one byte a second): with the time and
# replica limits, every transfer and collective priced from them stays a finite number of ms.
MAX_BYTES = 1e18
MIN_BANDWIDTH_GBPS = 1e-9

# Files, checked by their size before a byte is read (pipesim.io.bounded): the largest thing each kind can hold.
MAX_TRACE_BYTES = 256 * 1024**2  # one profiler trace file (pipesim.io.kineto): parsed JSON takes ~10x its size
MAX_SCHEDULE_BYTES = 64 * 1024**2  # a schedule (CSV or JSON): MAX_ACTIONS actions with torch's transfers
MAX_RESULT_BYTES = 256 * 1024**2  # a timeline, cost, plan or run-folder file (measured.json of a long run)
MAX_COST_BYTES = 32 * 1024**2  # a cost file or unit profile: a few kB per stage or unit, at most MAX_PROFILE_UNITS
MAX_COST_VALUES = 2_000_000  # values in one cost file, counted before it is parsed
MAX_PLAN_BYTES = 64 * 1024**2  # a plan (pipesim plan --json): about 1.3 kB per candidate, at most MAX_PLAN_CANDIDATES
MAX_SMALL_FILE_BYTES = 16 * 1024**2  # a run folder's config, result, progress: a few kB when sound

MAX_PROBLEMS = 1000  # validation problems collected at most (the app marks each on its cell)
MAX_PROBLEMS_SHOWN = 5  # validation errors listed in full before "and N more"


def check_sizes(
    *,
    num_ranks: int | None = None,
    num_stages: int | None = None,
    num_microbatches: int | None = None,
    num_actions: int | None = None,
    num_layers: int | None = None,
    num_replicas: int | None = None,
) -> None:
    """ValueError naming the first size over its limit."""
    for what, value, limit in (
        ("ranks", num_ranks, MAX_RANKS),
        ("stages", num_stages, MAX_STAGES),
        ("microbatches", num_microbatches, MAX_MICROBATCHES),
        ("actions", num_actions, MAX_ACTIONS),
        ("layers", num_layers, MAX_LAYERS),
        ("data-parallel replicas", num_replicas, MAX_REPLICAS),
    ):
        if value is not None and value > limit:
            shown = str(value) if value < 10**30 else "so many"  # a 5,000-digit count cannot even be printed
            raise ValueError(
                f"{shown} {what} is more than pipesim handles (at most {limit:,} {what}; see pipesim/limits.py)"
            )


def summarize(problems: list[str], shown: int = MAX_PROBLEMS_SHOWN) -> str:
    """The first `shown` problems, one per line, then how many more there are."""
    lines = problems[:shown]
    if len(problems) > shown:
        lines.append(f"... and {len(problems) - shown} more")
    return "\n".join(lines)


PATH_TYPES = (str, os.PathLike)
PATH_TAKES = "a file path (str or pathlib.Path)"


def require(value: object, name: str, kind: type | tuple[type, ...], takes: str) -> None:
    """The public entry points' type check: a TypeError naming the argument and what it takes (`simulate("1f1b")`
    says `schedule` must be a Schedule, instead of an AttributeError from deep inside)."""
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        value_ok = False
    else:
        value_ok = isinstance(value, kind)
    if not value_ok:
        simple = value is None or isinstance(value, (str, int, float))
        shown = repr(value) if simple and len(repr(value)) <= 40 else type(value).__name__
        raise TypeError(f"{name} must be {takes}, got {shown}")


def require_items(values: object, name: str, kind: type | tuple[type, ...], takes: str) -> None:
    """`require` for a sequence of `kind` (a list, a tuple, an array; a bare string is not a list of names)."""
    is_sequence = isinstance(values, Sequence) or hasattr(values, "__array__")
    if not is_sequence or isinstance(values, (str, bytes)):
        require(values, name, (list, tuple), f"a list of {takes}")  # raises, naming what was given
    for index, value in enumerate(values):  # type: ignore[arg-type]
        require(value, f"{name}[{index}]", kind, takes)
