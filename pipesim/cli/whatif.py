"""The what-if flags of `simulate`, `compare` and `plan`: a slow rank, a slow link, and `compare`'s
sensitivity to a slower rank. The rule they describe is `pipesim.cost.perturb.Perturbation`; this module only reads
the flags, strictly (one line naming the value and what is valid, exit 2)."""

from __future__ import annotations

import argparse
import math

from pipesim.cost.perturb import Perturbation, parse_link_delay, parse_slow_rank
from pipesim.flags import UsageError, shown


def _slow_rank(text: str) -> tuple:
    try:
        return parse_slow_rank(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _link_delay(text: str) -> tuple[int, int, float]:
    try:
        return parse_link_delay(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _slowdown(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 1 <= value <= 1000):
        raise argparse.ArgumentTypeError(f"expected a slowdown factor from 1 to 1000 (1: off), got {shown(text)}")
    return value


def add_perturbation_args(parser: argparse.ArgumentParser, devices: bool = False) -> None:
    """--slow-rank and --link-delay (repeatable). With `devices` (plan), ranks are device numbers, each read as
    the pipeline position device mod depth of every candidate."""
    where = "device" if devices else "rank"
    group = parser.add_argument_group(
        "what-if: stragglers (pipesim.cost.perturb)",
        f"A slow {where} computes every action FACTOR times slower; a delayed link adds MS to every transfer "
        "between its two ranks. Both repeatable."
        + (" A device d is rank d mod P of a candidate with P ranks." if devices else ""),
    )
    group.add_argument(
        "--slow-rank",
        type=_slow_rank,
        action="append",
        default=[],
        metavar="R:FACTOR[:KINDS]",
        help=f"{where} R computes FACTOR times slower (a finite number in (0, 1000]; e.g. 2:1.5); R:FACTOR:KINDS "
        "slows only those kinds (letters of FBIW: B is the whole backward, I and W its parts; e.g. 2:1.5:W)",
    )
    group.add_argument(
        "--link-delay",
        type=_link_delay,
        action="append",
        default=[],
        metavar="A-B:MS",
        help="every transfer between ranks A and B takes MS (finite, >= 0) longer (e.g. 1-2:5)",
    )


def add_sensitivity_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sensitivity",
        type=_slowdown,
        default=1.2,
        metavar="X",
        help="report each schedule's step growth when one rank computes X times slower, per rank and for the worst "
        "(default 1.2; 1: off)",
    )


def perturbation_from_args(args: argparse.Namespace, num_ranks: int | None) -> Perturbation:
    """The flags' perturbation, its ranks checked against `num_ranks` (None: not known yet)."""
    perturbation = Perturbation.of(args.slow_rank, args.link_delay)
    if num_ranks is not None:
        try:
            perturbation.check_ranks(num_ranks)
        except ValueError as error:
            raise UsageError(f"--slow-rank / --link-delay: {error}") from None
    return perturbation


def sensitivity_lines(rows: list) -> list[str]:
    """Per schedule, the step's growth when each rank in turn is slower (compare's table, below the numbers)."""
    lines = []
    for row in rows:
        s = row.sensitivity
        if row.error is not None or s is None:
            continue
        if not lines:
            lines.append(f"sensitivity: step growth with one rank {s['slowdown']:g}x slower")
        per_rank = " ".join(f"{g:+.1%}" for g in s["rank_growth"])
        lines.append(f"  {row.schedule:<18} worst rank {s['worst_rank']} {s['worst_growth']:+.1%}; per rank {per_rank}")
    return lines
