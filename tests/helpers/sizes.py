"""Which sizes each registered schedule must build: the contract the generic property tests rely on.

A property test that skipped every schedule whose builder raised would pass with a broken builder. These
helpers build exactly the sizes a family promises and let a failure fail the test. A family registered
without an entry here fails too, so a new schedule must state its sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from pipesim.ir import Schedule
from pipesim.schedules import build_schedule, options_for, schedule_names


def _always(p: int, m: int) -> bool:
    return True


# (num_ranks, num_microbatches) -> whether the family must build them (chunks per rank 2 or 3 where it takes them)
MUST_BUILD: dict[str, Callable[[int, int], bool]] = {
    "naive": _always,
    "gpipe": _always,
    "1f1b": _always,
    "interleaved-1f1b": lambda p, m: m % max(1, m // p) == 0,  # torch's ScheduleInterleaved1F1B rule
    "zb-h1": _always,
    "zb-h2": _always,
    "zbv": _always,
    "dualpipev": lambda p, m: m >= 2 * p - 1,
    "looped-bfs": _always,
    "seq1f1b": _always,
    "1f1b-overlap": _always,
    "dualpipe": lambda p, m: p % 2 == 0 and m % 2 == 0 and m >= 2 * p,
    "v-half": _always,
    "v-min": _always,
}

SMALL_GRID = [(p, m) for p in (1, 2, 3, 4) for m in (1, 2, 3, 4, 6, 8)]


def must_build(name: str, num_ranks: int, num_microbatches: int) -> bool:
    if name not in MUST_BUILD:
        raise AssertionError(
            f"schedule {name!r} is registered but tests/helpers/sizes.py does not say which sizes "
            "it must build: add it to MUST_BUILD"
        )
    return MUST_BUILD[name](num_ranks, num_microbatches)


def build_checked(name: str, num_ranks: int, num_microbatches: int, chunks: int = 2) -> Schedule:
    """Build a size the family promises; any error fails the calling test with the sizes named."""
    options = options_for(name, num_virtual_stages=chunks)
    try:
        return build_schedule(name, num_ranks, num_microbatches, **options)
    except Exception as error:  # noqa: BLE001 - a promised size that does not build is a test failure
        raise AssertionError(
            f"{name} must build {num_ranks} ranks x {num_microbatches} microbatches "
            f"(options {options}) but raised {type(error).__name__}: {error}"
        ) from error


def registered_at(num_ranks: int, num_microbatches: int, chunks: int = 2) -> Iterator[Schedule]:
    """Every registered family that promises these sizes, built (failing loudly when one does not build)."""
    for name in schedule_names():
        if must_build(name, num_ranks, num_microbatches):
            yield build_checked(name, num_ranks, num_microbatches, chunks)


def built_schedules(name: str, grid: list[tuple[int, int]] = SMALL_GRID) -> list[Schedule]:
    """One family over a grid of small sizes: every size it promises, built."""
    built = [build_checked(name, p, m) for p, m in grid if must_build(name, p, m)]
    assert built, f"{name}: no size of the grid is promised; widen the grid"
    return built
