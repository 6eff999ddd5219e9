"""The one record type for simulated, measured and imported runs: spans of actions and transfers.

Charts, metrics and exporters read only a `Timeline`; whether it came from
the simulator, the executor or a profiler trace is its `source`. Metrics read
off a Timeline live in `pipesim.sim.metrics`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from itertools import compress, repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from pipesim.ir import Action, CommAction

if TYPE_CHECKING:
    from collections.abc import Callable

Source = Literal["simulated", "measured", "imported"]  # imported: read from a profiler trace (pipesim.io.kineto)
COLLECTIVE_KINDS = frozenset({"unshard", "reshard", "reduce_grad"})
COPY_KINDS = frozenset({"offload", "reload"})  # a copy engine's spans: activations to host memory and back
LINK_KINDS = frozenset({"a2a"})  # a link's spans in a simulated step: an MoE stage's expert-parallel all-to-alls


class Span(NamedTuple):
    """One action on one rank, from `start` to `end` (milliseconds).

    `step` numbers the training step for measured timelines that hold several. `replica` is the data-parallel
    replica the rank belongs to (a measured run with `--data-parallel D` holds every replica's ranks: `rank` is
    the pipeline rank, 0 to num_ranks - 1, in each); 0 without data parallelism and in simulations (one replica).
    """

    rank: int
    action: Action
    start: float
    end: float
    step: int = 0
    replica: int = 0

    @property
    def duration(self) -> float:
        return self.end - self.start


class CommSpan(NamedTuple):
    """Time a rank spent blocked on a transfer (measured runs): `kind` is "send" or "recv".

    `action` is the action whose tensor was being moved; `peer` the other rank. Simulated timelines also
    hold torch's per-stage collectives here (`kind` in COLLECTIVE_KINDS, `action` the CommAction, peer -1):
    the step time includes them, the bubble metrics count them as time not computing.
    """

    rank: int
    kind: str
    peer: int
    action: Action | CommAction
    start: float
    end: float
    step: int = 0
    replica: int = 0  # as Span.replica


@dataclass(frozen=True)
class Timeline:
    """Spans of one or more steps of a schedule on `num_ranks` ranks."""

    num_ranks: int
    spans: tuple[Span, ...]
    source: Source = "simulated"
    schedule_name: str = ""
    comm: tuple[CommSpan, ...] = ()
    meta: dict = field(default_factory=dict, compare=False)
    # A simulated step's spans as the engine's columns (`from_columns`); None otherwise. Not an init field, so a
    # Timeline re-made by `dataclasses.replace` holds its spans and no columns, which could then be stale.
    columns: SpanColumns | None = field(default=None, init=False, compare=False, repr=False)
    # A simulated step's comm spans not made yet (`from_columns`' `comm_later`); None once made, or otherwise.
    comm_later: LaterComm | None = field(default=None, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # the public constructor's types, in one line naming the argument (the spans' own are the engine's)
        if isinstance(self.num_ranks, bool) or not hasattr(self.num_ranks, "__index__"):
            raise TypeError(f"Timeline num_ranks must be a whole number, got {self.num_ranks!r:.40}")
        if isinstance(self.spans, (str, bytes)) or not hasattr(self.spans, "__len__"):
            raise TypeError(f"Timeline spans must be a tuple of Span, got {type(self.spans).__name__}")

    @classmethod
    def from_columns(
        cls, num_ranks: int, columns: SpanColumns, comm_later: LaterComm | None = None, **others: Any
    ) -> Timeline:
        """A timeline whose spans are built from `columns` on first read of `spans` (then kept): `simulate --json`
        reads 131k spans only as columns (metrics, the JSON writer), and 131k Span tuples cost a tenth of it.
        `comm_later`, when given, stands for `comm` until a reader asks for it (a simulation's 10^5 all-to-alls,
        which the metrics never read). `others`: the other init fields (source, schedule_name, comm, meta)."""
        timeline = cls(num_ranks, (), **others)
        object.__setattr__(timeline, "columns", columns)
        object.__delattr__(timeline, "spans")  # __getattr__ builds them when read
        if comm_later is not None:
            object.__setattr__(timeline, "comm_later", comm_later)
            object.__delattr__(timeline, "comm")
        return timeline

    def __getattr__(self, name: str) -> Any:
        """Called only where an attribute is missing: the spans or comm of a `from_columns` timeline, not built
        yet."""
        if name == "comm" and self.__dict__.get("comm_later") is not None:
            later = self.__dict__["comm_later"]
            comm = later.made + later.build()
            object.__setattr__(self, "comm", comm)
            object.__setattr__(self, "comm_later", None)
            return comm
        columns = self.__dict__.get("columns") if name == "spans" else None
        if columns is None:
            raise AttributeError(f"'Timeline' object has no attribute {name!r}")
        rows = zip(columns.ranks, columns.actions, columns.starts, columns.ends, repeat(0), repeat(0))
        spans = tuple(map(tuple.__new__, repeat(Span), rows))  # Span(...)'s Python __new__ per span spared
        object.__setattr__(self, "spans", spans)
        return spans

    def __getstate__(self) -> dict:
        """A pickle (st.cache_data) holds the comm spans made, not the means to make them."""
        if self.comm_later is not None:
            self.comm  # noqa: B018 (made on read)
        return self.__dict__


# dataclass sets a field's default on the class too: without it there, the comm a `from_columns` timeline has not
# made yet reaches `__getattr__` (`__init__` keeps its own default)
del Timeline.comm


class LaterComm(NamedTuple):
    """A timeline's comm spans made on first read of `Timeline.comm`: `made`, then those `build()` returns, every
    one of a kind in `kinds` (what lets a reader of other kinds skip them: `comm_of`)."""

    made: tuple[CommSpan, ...]
    kinds: frozenset[str]
    build: Callable[[], tuple[CommSpan, ...]]


class LaterList(Sequence):
    """A list made on first read: a meta value that few readers ask for (a simulation's 10^5 overlapped groups as
    text). It reads as the list; `plain_meta` puts the list in a document's place, and a pickle holds the list."""

    __slots__ = ("_build", "_items")

    def __init__(self, build: Callable[[], list]) -> None:
        self._build: Callable[[], list] | None = build
        self._items: list | None = None

    def made(self) -> list:
        if self._items is None:
            self._items, self._build = self._build(), None  # type: ignore[misc]
        return self._items

    def __len__(self) -> int:
        return len(self.made())

    def __getitem__(self, index: Any) -> Any:
        return self.made()[index]

    def __iter__(self) -> Any:
        return iter(self.made())

    def __eq__(self, other: object) -> bool:
        return self.made() == (other.made() if isinstance(other, LaterList) else other)

    __hash__ = None  # type: ignore[assignment]  # as a list's

    def __repr__(self) -> str:
        return repr(self.made())

    def __reduce__(self) -> tuple:
        return list, (self.made(),)


def plain_meta(meta: dict) -> dict:
    """`meta` with each `LaterList` made into its list (what a JSON writer takes); `meta` itself when it has none."""
    if not any(isinstance(value, LaterList) for value in meta.values()):
        return meta
    return {key: value.made() if isinstance(value, LaterList) else value for key, value in meta.items()}


_kind_of = itemgetter(1)  # CommSpan.kind


def comm_of(tl: Timeline, kinds: frozenset[str]) -> list[CommSpan]:
    """The timeline's comm spans of `kinds`, in order, without making those not made yet when none is of `kinds`."""
    later = tl.comm_later
    spans = later.made if later is not None and not later.kinds & kinds else tl.comm
    return list(compress(spans, map(kinds.__contains__, map(_kind_of, spans))))  # 10^5 copies: at C speed


class SpanColumns(NamedTuple):
    """A simulated step's spans as columns, in span order (each rank's actions one after another, as the engine
    laid them; step and replica 0): what the engine filled, read by the metrics and the JSON writer without a
    Span per action. `Timeline.columns` holds them; `spans_built` says whether a reader built the Span tuples."""

    ranks: list[int]
    actions: list[Action]
    starts: list[float]
    ends: list[float]


def spans_built(tl: Timeline) -> bool:
    """Whether `tl.spans` exists already (always, except for a `from_columns` timeline no one read them of)."""
    return "spans" in tl.__dict__


def remake(tl: Timeline, **changes: Any) -> Timeline:
    """`dataclasses.replace(tl, **changes)` that keeps a columnar timeline's columns (and its spans unbuilt)
    where `changes` leaves the spans as they are, and its comm spans not made yet where it leaves them too."""
    if tl.columns is None or "spans" in changes:
        return replace(tl, **changes)
    later = None if "comm" in changes else tl.comm_later
    unread = {"spans"} if later is None else {"spans", "comm"}
    kept = {f.name: getattr(tl, f.name) for f in fields(tl) if f.init and f.name not in unread}
    timeline = Timeline.from_columns(columns=tl.columns, comm_later=later, **(kept | changes))
    if spans_built(tl):
        object.__setattr__(timeline, "spans", tl.spans)
    return timeline


def replicas(tl: Timeline) -> int:
    """How many data-parallel replicas the timeline holds spans of (1 unless a measured run kept them all)."""
    return 1 + max((s.replica for s in tl.spans), default=0)


def select_replica(tl: Timeline, replica: int) -> Timeline:
    """The spans of one replica (what a per-replica simulation is compared with); the timeline itself when it
    holds one replica."""
    if replicas(tl) == 1 and replica == 0:
        return tl
    spans = tuple(s for s in tl.spans if s.replica == replica)
    if not spans:
        raise ValueError(f"the timeline has no replica {replica}; it holds replicas 0 to {replicas(tl) - 1}")
    comm = tuple(c for c in tl.comm if c.replica == replica)
    return Timeline(tl.num_ranks, spans, tl.source, tl.schedule_name, comm, {**tl.meta, "replica": replica})


def replica_lanes(tl: Timeline) -> tuple[Timeline, list[str]]:
    """Every replica's ranks as lanes of their own, for a figure or a trace that draws one lane per rank: lane
    replica x num_ranks + rank (replica 0's ranks first), with their labels ("replica d · rank r"). One replica:
    the timeline as it is, labelled "rank r"."""
    count = replicas(tl)
    if count == 1:
        return tl, [f"rank {r}" for r in range(tl.num_ranks)]
    n = tl.num_ranks
    spans = tuple(s._replace(rank=s.replica * n + s.rank) for s in tl.spans)
    comm = tuple(
        c._replace(
            rank=c.replica * n + c.rank, peer=c.peer if c.kind == "allreduce" or c.peer < 0 else c.replica * n + c.peer
        )
        for c in tl.comm
    )
    labels = [f"replica {d} · rank {r}" for d in range(count) for r in range(n)]
    return Timeline(n * count, spans, tl.source, tl.schedule_name, comm, {**tl.meta, "replica_lanes": count}), labels


def select_step(tl: Timeline, step: int) -> Timeline:
    """The spans of one step, shifted so that the step starts at 0."""
    spans = [s for s in tl.spans if s.step == step]
    if not spans:
        steps = sorted({s.step for s in tl.spans})
        raise ValueError(f"the timeline has no step {step}; steps present: {steps}")
    origin = min(s.start for s in spans)
    comm = tuple(c._replace(start=c.start - origin, end=c.end - origin) for c in tl.comm if c.step == step)
    return Timeline(
        num_ranks=tl.num_ranks,
        spans=tuple(s._replace(start=s.start - origin, end=s.end - origin) for s in spans),
        source=tl.source,
        schedule_name=tl.schedule_name,
        comm=comm,
        meta={**tl.meta, "step": step},
    )


def keep_steps(tl: Timeline, steps: list[int]) -> Timeline:
    """Only the spans of `steps`, renumbered 0, 1, ... in that order (times untouched: each step's own): the steps
    of a run that carried its injection, when its steps alternated uniform and injected, for an analysis that must
    not mix the two."""
    renumber = {step: n for n, step in enumerate(steps)}
    return replace(
        tl,
        spans=tuple(s._replace(step=renumber[s.step]) for s in tl.spans if s.step in renumber),
        comm=tuple(c._replace(step=renumber[c.step]) for c in tl.comm if c.step in renumber),
        meta={**tl.meta, "kept_steps": list(steps)},
    )


def injected_only(tl: Timeline) -> Timeline:
    """A measured timeline whose run alternated uniform and injected steps (meta "injected_steps", one flag per
    measured step, as pipesim.io.run_record reads measured.json): its injected steps only; any other timeline as it
    is."""
    flags = tl.meta.get("injected_steps")
    if not isinstance(flags, list) or all(flags) or not any(flags):
        return tl
    return keep_steps(tl, [step for step, on in enumerate(flags) if on])
