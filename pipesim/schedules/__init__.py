"""Schedule builders behind a case-insensitive registry.

Each family lives in its own module and registers pure builders
`(num_ranks, num_microbatches, **options) -> Schedule`. `build_schedule`
answers an unknown name with the list of valid ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pipesim.ir import Schedule, loop_placement, v_placement
from pipesim.limits import check_sizes

Builder = Callable[..., Schedule]

# Where a family puts its stages: one per rank, v chunks per rank in a loop (stage s on rank s mod p), or two
# per rank in a V (stage s and 2p-1-s on one rank). Synthesis takes the same names (`stage_placement`).
PLACEMENTS = ("linear", "interleaved", "v")


def stage_placement(placement: str, num_ranks: int, num_virtual_stages: int = 1) -> tuple[int, ...]:
    """`stage_to_rank` of `placement` (one of PLACEMENTS) for `num_ranks` ranks; only "interleaved" takes
    `num_virtual_stages` (chunks per rank; "linear" holds 1, "v" 2)."""
    if placement == "linear":
        return loop_placement(num_ranks, num_ranks)
    if placement == "interleaved":
        return loop_placement(num_ranks, num_ranks * num_virtual_stages)
    if placement == "v":
        return v_placement(num_ranks)
    raise ValueError(f"unknown placement {placement!r}; valid placements: {', '.join(PLACEMENTS)}")


@dataclass(frozen=True)
class ScheduleInfo:
    """A registered family: its builder and what a user needs to know to pick it."""

    name: str
    builder: Builder
    summary: str
    # Options the builder takes beyond (num_ranks, num_microbatches), e.g. ("num_virtual_stages",).
    options: tuple[str, ...] = ()
    split_backward: bool = False
    placement: str = "linear"  # one of PLACEMENTS
    # The builder's own refusals, without building: (num_ranks, num_microbatches, **options) -> None or ValueError.
    # None: the builder refuses nothing beyond pipesim.limits for positive counts. The planner asks it of
    # candidates it prunes unbuilt, so that they carry the reason they could not be built all the same.
    check: Callable[..., None] | None = None
    # Per rank, how many forwards (stage, microbatch) its order holds stashed at once at its fullest, for
    # (num_ranks, num_microbatches, chunks): at least this many (a lower bound; None: one per stage it holds).
    # The planner's memory bound reads it to discard a candidate before its schedule is built.
    stashed: Callable[[int, int, int], list[int]] | None = None

    def __post_init__(self) -> None:
        assert self.placement in PLACEMENTS, self.placement

    @property
    def takes_chunks(self) -> bool:
        """Whether the caller chooses the chunks per rank (`num_virtual_stages`); V shapes always hold 2."""
        return "num_virtual_stages" in self.options


def _registry() -> dict[str, ScheduleInfo]:
    # Imported here, not at module top, so each family module can import this
    # package's ScheduleInfo without a cycle.
    from pipesim.schedules import basic, interleaved, looped, v_shapes, zero_bubble

    families = [
        *basic.SCHEDULES,
        *interleaved.SCHEDULES,
        *zero_bubble.SCHEDULES,
        *v_shapes.SCHEDULES,
        *looped.SCHEDULES,
    ]
    return {info.name.lower(): info for info in families}


def schedule_names() -> list[str]:
    """Registered schedule names, in registration order."""
    return [info.name for info in _registry().values()]


def schedule_info(name: str) -> ScheduleInfo:
    """Look up a family by name (case-insensitive); unknown names list the valid ones."""
    registry = _registry()
    key = name.strip().lower()
    if key not in registry:
        raise ValueError(f"unknown schedule {name!r}; valid schedules: {', '.join(schedule_names())}")
    return registry[key]


def options_for(name: str, *, num_virtual_stages: int | None = None) -> dict[str, object]:
    """The options among those a caller offers that family `name` takes (chunks per rank only where the
    family lets the caller choose them). Every page, the CLI and the comparison ask here."""
    if num_virtual_stages is not None and schedule_info(name).takes_chunks:
        return {"num_virtual_stages": num_virtual_stages}
    return {}


def build_schedule(name: str, num_ranks: int, num_microbatches: int, **options: object) -> Schedule:
    """Build schedule `name`; options a family does not take are refused by name."""
    info = schedule_info(name)
    unknown = {key for key, value in options.items() if value is not None} - set(info.options)
    if unknown:
        valid = ", ".join(info.options) or "none"
        raise ValueError(f"schedule {info.name!r} does not take {', '.join(sorted(unknown))}; its options: {valid}")
    given = {key: value for key, value in options.items() if value is not None}
    _check_size(info, num_ranks, num_microbatches, given)
    return info.builder(num_ranks, num_microbatches, **given)


def check_shape(name: str, num_ranks: int, num_microbatches: int, **options: object) -> None:
    """Raise the ValueError `build_schedule` would raise for these sizes, without building the schedule."""
    info = schedule_info(name)
    given = {key: value for key, value in options.items() if value is not None}
    _check_size(info, num_ranks, num_microbatches, given)
    if info.check is not None:
        info.check(num_ranks, num_microbatches, **given)


def _check_size(info: ScheduleInfo, num_ranks: object, num_microbatches: object, options: dict) -> None:
    """Refuse sizes over pipesim.limits before the builder allocates anything (builders check the rest)."""
    chunks = options.get("num_virtual_stages", 2 if info.placement == "v" else 1)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (num_ranks, num_microbatches, chunks)):
        return  # the builder names the bad value
    kinds = 3 if info.split_backward else 2  # F and B, or F, I and W
    check_sizes(
        num_ranks=num_ranks,
        num_stages=num_ranks * chunks,
        num_microbatches=num_microbatches,
        num_actions=kinds * num_ranks * chunks * num_microbatches,
    )
