"""Schedule builders behind a case-insensitive registry, with every fact about a family in its entry.

Each family lives in its own module, whose `SCHEDULES` lists its `ScheduleInfo` entries: a pure builder
`(num_ranks, num_microbatches, **options) -> Schedule` and the facts every surface reads (placement, split
backward, chunks per rank, torch's counterpart class, the in-situ class it represents, whether the planner tries
it by default). Registering a family is one line, its module's name in `FAMILY_MODULES` (docs/design.md has a
worked example). `build_schedule` answers an unknown name with the list of valid ones.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass

from pipesim._perf import paused_gc
from pipesim.ir import Schedule, loop_placement, v_placement
from pipesim.limits import check_sizes, require

Builder = Callable[..., Schedule]

# Where a family puts its stages: one per rank, v chunks per rank in a loop (stage s on rank s mod p), or two
# per rank in a V (stage s and 2p-1-s on one rank). Synthesis takes the same names (`stage_placement`).
PLACEMENTS = ("linear", "interleaved", "v")
# The placements whose chunks per rank are fixed; the others ("interleaved") take the caller's.
FIXED_CHUNKS = {"linear": 1, "v": 2}
DEFAULT_CHUNKS = 2  # chunks per rank of a placement that takes them when the caller names none


def placement_takes_chunks(placement: str) -> bool:
    """Whether the caller chooses the chunks per rank of `placement` (one of PLACEMENTS)."""
    return placement not in FIXED_CHUNKS


def placement_chunks(placement: str, requested: int | None = None, default: int = DEFAULT_CHUNKS) -> int:
    """Stages per rank under `placement`: its fixed count, else `requested` (`default` where None).

    >>> placement_chunks("v", 4), placement_chunks("interleaved"), placement_chunks("interleaved", 3)
    (2, 2, 3)
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}; valid placements: {', '.join(PLACEMENTS)}")
    if placement in FIXED_CHUNKS:
        return FIXED_CHUNKS[placement]
    return default if requested is None else requested


def stage_placement(placement: str, num_ranks: int, num_virtual_stages: int = 1) -> tuple[int, ...]:
    """`stage_to_rank` of `placement` (one of PLACEMENTS) for `num_ranks` ranks; `num_virtual_stages` counts
    only where the placement takes chunks (`placement_chunks`)."""
    chunks = placement_chunks(placement, num_virtual_stages)
    if placement == "v":
        return v_placement(num_ranks)
    return loop_placement(num_ranks, num_ranks * chunks)


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
    # Chunks per rank when the caller names none (a V always holds 2, a linear placement 1).
    default_chunks: int = DEFAULT_CHUNKS
    # torch.distributed.pipelining's class for the same order (the executor's reference runs), None: none.
    torch_class: str | None = None
    # Whether `executor profile` runs this family's in-situ steps for its class (split_backward x chunked): one
    # family per class.
    in_situ: bool = False
    # Whether the planner, `compare`'s and the Plan page's defaults include it.
    planned: bool = True
    min_chunks: int = 1  # the fewest chunks per rank the builder takes (with `num_virtual_stages`)
    # The builder's own refusals, without building: (num_ranks, num_microbatches, **options) -> None or ValueError.
    # None: the builder refuses nothing beyond pipesim.limits for positive counts. The planner asks it of
    # candidates it prunes unbuilt, so that they carry the reason they could not be built all the same.
    check: Callable[..., None] | None = None
    # Per rank, how many forwards (stage, microbatch) its order holds stashed at once at its fullest, for
    # (num_ranks, num_microbatches, chunks): at least this many (a lower bound; None: one per stage it holds).
    # The planner's memory bound reads it to discard a candidate before its schedule is built.
    stashed: Callable[[int, int, int], list[int]] | None = None
    # Why the planner cannot price this family (its candidates carry it as their error); None: it can.
    unplanned_because: str | None = None
    # Chains of stages side by side, each running the whole model (DualPipe's two directions: a copy of the weights
    # per chain); the planner cuts the model into num_stages / pipelines pieces and repeats them per chain.
    pipelines: int = 1

    def __post_init__(self) -> None:
        assert self.placement in PLACEMENTS, self.placement

    @property
    def takes_chunks(self) -> bool:
        """Whether the caller chooses the chunks per rank (`num_virtual_stages`); V shapes always hold 2."""
        return "num_virtual_stages" in self.options

    def chunks_per_rank(self, requested: int | None = None) -> int:
        """Stages per rank of a build: `requested` where the family takes chunks, else its fixed count."""
        return placement_chunks(self.placement, requested, self.default_chunks)

    def build_options(self, requested: int | None = None) -> dict[str, object]:
        """The keyword options of a build with `requested` chunks per rank (its default where None)."""
        return {"num_virtual_stages": self.chunks_per_rank(requested)} if self.takes_chunks else {}

    def stage_to_rank(self, num_ranks: int, requested: int | None = None) -> tuple[int, ...]:
        """Where this family puts its stages (what torch's counterpart class expects too)."""
        return stage_placement(self.placement, num_ranks, self.chunks_per_rank(requested))

    @property
    def chunked(self) -> bool:
        """Whether a rank holds several stages (with `split_backward`, the profile's in-situ class:
        `pipesim.cost.profile.schedule_class`)."""
        return placement_chunks(self.placement) > 1


# The modules that register families, in the order `list` shows them: each holds `SCHEDULES`, a list of
# ScheduleInfo. Registering a family is adding its module here.
FAMILY_MODULES: list[str] = [
    "pipesim.schedules.basic",
    "pipesim.schedules.interleaved",
    "pipesim.schedules.zero_bubble",
    "pipesim.schedules.v_shapes",
    "pipesim.schedules.v_memory",
    "pipesim.schedules.looped",
    "pipesim.schedules.sequence",
    "pipesim.schedules.overlapped",
]


def _registry() -> dict[str, ScheduleInfo]:
    # Imported here, not at module top, so each family module can import this
    # package's ScheduleInfo without a cycle.
    # sys.modules first: the planner looks families up 10^4 times a plan, and import_module's own checks cost
    # more than the lookup (a module not imported yet, or one a test put in the list, goes through it)
    loaded = sys.modules
    families = [
        info for module in FAMILY_MODULES for info in (loaded.get(module) or importlib.import_module(module)).SCHEDULES
    ]
    return {info.name.lower(): info for info in families}


def schedule_names() -> list[str]:
    """Registered schedule names, in registration order."""
    return [info.name for info in _registry().values()]


def planned_schedule_names() -> tuple[str, ...]:
    """The families the planner, the comparison page and the Plan page try unless told otherwise."""
    return tuple(info.name for info in _registry().values() if info.planned)


def names_taking_chunks() -> list[str]:
    """The families whose chunks per rank the caller chooses (the help of every chunks field names them)."""
    return [info.name for info in _registry().values() if info.takes_chunks]


def in_situ_representatives() -> list[ScheduleInfo]:
    """The family that stands for each in-situ class in `executor profile`'s steps, in registration order."""
    return [info for info in _registry().values() if info.in_situ]


def schedule_info(name: str) -> ScheduleInfo:
    """Look up a family by name (case-insensitive); unknown names list the valid ones."""
    registry = _registry()
    if not isinstance(name, str):  # the valid names listed only when needed
        require(name, "the schedule name", str, f"a string, one of {', '.join(schedule_names())}")
    key = name.strip().lower()
    if key not in registry:
        raise ValueError(f"unknown schedule {name!r}; valid schedules: {', '.join(schedule_names())}")
    return registry[key]


def options_for(name: str, *, num_virtual_stages: int | None = None) -> dict[str, object]:
    """The options among those a caller offers that family `name` takes (chunks per rank only where the
    family lets the caller choose them). Every page, the CLI and the comparison ask here."""
    info = schedule_info(name)
    return info.build_options(num_virtual_stages) if num_virtual_stages is not None else {}


@paused_gc()
def build_schedule(name: str, num_ranks: int, num_microbatches: int, **options: object) -> Schedule:
    """Build schedule `name`; options a family does not take are refused by name. The collector is paused: a
    builder makes 10^5 tuples in no cycle, which it would otherwise re-scan as they pile up."""
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
    chunks = info.chunks_per_rank(options.get("num_virtual_stages"))
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (num_ranks, num_microbatches, chunks)):
        return  # the builder names the bad value
    kinds = 3 if info.split_backward else 2  # F and B, or F, I and W
    check_sizes(
        num_ranks=num_ranks,
        num_stages=num_ranks * chunks,
        num_microbatches=num_microbatches,
        num_actions=kinds * num_ranks * chunks * num_microbatches,
    )
