"""The schedule as plain data: actions, per-rank action lists, stage placement.

Every other part of pipesim and the executor reads a `Schedule`; nothing
re-encodes a schedule as control flow. The text form of an action
(`<stage><kind><microbatch>`, e.g. ``2F0``) is the same as
torch.distributed.pipelining's `_Action`, so schedules move between the two.

A schedule may also carry torch's full per-rank order (`Schedule.order`): the compute actions together
with torch's other action kinds (`CommAction`: SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD,
REDUCE_GRAD), overlapped groups (`Overlap`, torch's ``(0F3;3B1)OVERLAP_F_B``) and idle slots (None), so that
a file torch wrote is written back cell for cell. `Schedule.actions` is always the compute actions alone,
in the same order (an overlapped group's members in their written order).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from itertools import chain, compress, repeat
from operator import is_, itemgetter
from typing import NamedTuple

from pipesim.numbers import is_digits


class ActionKind(StrEnum):
    """What an action computes. `B` is the full backward; `I` and `W` split it."""

    FORWARD = "F"
    BACKWARD = "B"
    BACKWARD_INPUT = "I"
    BACKWARD_WEIGHT = "W"

    def __str__(self) -> str:  # "F", not "ActionKind.FORWARD"
        return self.value


F = ActionKind.FORWARD
B = ActionKind.BACKWARD
I = ActionKind.BACKWARD_INPUT  # noqa: E741 - the field's own name for it
W = ActionKind.BACKWARD_WEIGHT


class CommKind(StrEnum):
    """torch's action kinds that are not compute: transfers between ranks and per-stage collectives."""

    SEND_F = "SEND_F"
    RECV_F = "RECV_F"
    SEND_B = "SEND_B"
    RECV_B = "RECV_B"
    UNSHARD = "UNSHARD"  # all-gather a sharded (FSDP) stage's parameters
    RESHARD = "RESHARD"  # drop them again (frees memory, moves nothing)
    REDUCE_GRAD = "REDUCE_GRAD"  # reduce the stage's gradients across data-parallel replicas, once per step
    # Memory moves over the host link (PipeOffload; torch has no such action): a stage's saved activations of one
    # microbatch go to host memory after its forward and come back before its first backward.
    OFFLOAD = "OFFLOAD"
    RELOAD = "RELOAD"

    def __str__(self) -> str:
        return self.value


TRANSFER_KINDS = frozenset({CommKind.SEND_F, CommKind.RECV_F, CommKind.SEND_B, CommKind.RECV_B})
MEMORY_MOVES = frozenset({CommKind.OFFLOAD, CommKind.RELOAD})


class Resource(StrEnum):
    """What a rank has that works at the same time as the rest: actions on one resource run one after another,
    actions on different resources of a rank may overlap."""

    COMPUTE = "compute"  # the device's compute: F, B, I, W and torch's collectives placed between them
    LINK = "link"  # its links to other ranks: sends, receives, an MoE stage's all-to-all
    COPY = "copy"  # its copy engine to host memory: OFFLOAD and RELOAD

    def __str__(self) -> str:
        return self.value


def resource_of(entry: Entry) -> Resource:
    """The resource an entry of a rank's order holds while it runs."""
    if isinstance(entry, CommAction):
        if entry.kind in MEMORY_MOVES:
            return Resource.COPY
        if entry.kind in TRANSFER_KINDS:
            return Resource.LINK
    return Resource.COMPUTE


OVERLAP_WORD = "OVERLAP_F_B"
_KIND_BY_LETTER = {kind.value: kind for kind in ActionKind}
# 9 ASCII digits (re.ASCII: no full-width or Arabic-Indic digits): far past every limit, never slow
_ACTION_RE = re.compile(r"^\s*(\d{1,9})\s*([FBIW])\s*(\d{1,9})\s*$", re.ASCII)


class Action(NamedTuple):
    """One unit of work: `kind` for `microbatch` on `stage`.

    A NamedTuple rather than a dataclass: schedules of 10^5 actions are built,
    hashed and compared in hot loops, and tuples are the cheapest to do that with.
    """

    stage: int
    kind: ActionKind
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind._value_}{self.microbatch}"  # _value_: 2x faster than .value (10^5 spans)

    @classmethod
    def parse(cls, text: str) -> Action:
        """Parse the text form (``"2F0"``); raises ValueError naming the bad text."""
        match = _ACTION_RE.match(text) if isinstance(text, str) and len(text) <= 40 else None
        if match is None:
            shown = text[:24] + "..." if isinstance(text, str) and len(text) > 24 else text
            raise ValueError(
                f"cannot parse action {shown!r}: expected <stage><kind><microbatch> "
                f"such as '2F0', with kind one of F, B, I, W"
            )
        stage, letter, microbatch = match.groups()
        return cls(int(stage), _KIND_BY_LETTER[letter], int(microbatch))


def _action_index(value: object, name: str) -> int:
    """A stage or microbatch index: a whole number (a numpy integer becomes an int); else one line naming `name`.
    Its range is the schedule's to check (`validate` knows the counts and names the action)."""
    if type(value) is not int:
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise TypeError(f"Action {name} must be a whole number, got {type(value).__name__} {value!r:.40}")
        value = value.__index__()
    return value


def _checked_action(cls: type[Action], stage: int, kind: ActionKind, microbatch: int) -> Action:
    """Action(stage, kind, microbatch), each argument checked (a kind may be its letter, "F"). The builders make
    few Actions through here (their hot loops reuse or `_make` them), so the check costs them nothing measurable."""
    stage = _action_index(stage, "stage")
    if type(kind) is not ActionKind:
        letter = _KIND_BY_LETTER.get(kind) if isinstance(kind, str) else None
        if letter is None:
            raise TypeError(f"Action kind must be an ActionKind or one of F, B, I, W, got {kind!r:.40}")
        kind = letter
    return tuple.__new__(cls, (stage, kind, _action_index(microbatch, "microbatch")))


Action.__new__ = _checked_action  # type: ignore[method-assign]  # NamedTuple forbids defining __new__ in its body


class CommAction(NamedTuple):
    """A non-compute action of torch's: ``1SEND_F0``, ``3RECV_B2``, ``0UNSHARD``, ``0REDUCE_GRAD``.

    `microbatch` is None where torch writes none (collectives act on the whole stage).
    """

    stage: int
    kind: CommKind
    microbatch: int | None = None

    def __str__(self) -> str:
        return f"{self.stage}{self.kind.value}{'' if self.microbatch is None else self.microbatch}"


class Overlap(NamedTuple):
    """Compute actions that run as one (torch's OVERLAP_F_B: a forward and a backward overlapped)."""

    actions: tuple[Action, ...]

    def __str__(self) -> str:
        return "(" + ";".join(map(str, self.actions)) + ")" + OVERLAP_WORD


Entry = Action | CommAction | Overlap  # one cell of a rank's full order (None is an idle slot)

_COMM_RE = re.compile(r"^\s*(\d{1,9})\s*(" + "|".join(k.value for k in CommKind) + r")\s*(\d{0,9})\s*$", re.ASCII)
_OVERLAP_RE = re.compile(r"^\s*\(([^()]{0,200})\)\s*" + OVERLAP_WORD + r"\s*$")


def parse_entry(text: str) -> Entry | None:
    """Parse one cell of torch's CSV: a compute action, a CommAction, an Overlap, or None for an empty cell.

    ValueError names the bad text and the forms accepted.
    """
    if not isinstance(text, str) or len(text) > 220:  # bounded work whatever the input
        raise ValueError(f"cannot parse action {str(text)[:24]!r}...: too long for any action")
    if not text.strip():
        return None
    if is_digits(text.lstrip()[:1]) and (match := _COMM_RE.match(text)):
        stage, kind, microbatch = match.groups()
        return CommAction(int(stage), CommKind(kind), int(microbatch) if microbatch else None)
    if match := _OVERLAP_RE.match(text):
        parts = [part for part in match.group(1).split(";") if part.strip()]
        if len(parts) < 2:
            raise ValueError(f"{text.strip()!r}: an {OVERLAP_WORD} group needs at least two compute actions")
        return Overlap(tuple(Action.parse(part) for part in parts))
    try:
        return Action.parse(text)
    except ValueError:
        shown = text.strip() if len(text.strip()) <= 24 else text.strip()[:24] + "..."
        raise ValueError(
            f"cannot parse {shown!r}: expected <stage><kind><microbatch> such as 2F0 (kind F, B, I or W), "
            f"a transfer, collective or memory move such as 1SEND_F0, 2RECV_B3, 0REDUCE_GRAD or 0OFFLOAD3, "
            f"or an overlapped pair such as (0F3;3B1){OVERLAP_WORD}"
        ) from None


def _compute_actions(entries: tuple[Entry | None, ...]) -> tuple[Action, ...]:
    """Every compute action of a rank's order, in order: at C speed where no entry is an overlapped pair."""
    kinds = set(map(type, entries))
    if kinds <= {Action, CommAction, type(None)}:
        return tuple(compress(entries, map(is_, map(type, entries), repeat(Action))))
    actions: list[Action] = []
    add, splice = actions.append, actions.extend
    if kinds <= {Action, Overlap}:  # 10^4 pairs and actions alone (the overlapped families): two cases per entry
        for entry in entries:
            if type(entry) is Overlap:
                splice(entry[0])  # its actions
            else:
                add(entry)
        return tuple(actions)
    if kinds <= {Action, Overlap, CommAction, type(None)}:  # 10^4 pairs: a plain loop, no call per entry
        for entry in entries:
            kind = type(entry)
            if kind is Action:
                add(entry)
            elif kind is Overlap:
                splice(entry[0])  # its actions
        return tuple(actions)
    return tuple(chain.from_iterable(map(entry_actions, entries)))


def entry_actions(entry: Entry | None) -> tuple[Action, ...]:
    """The compute actions an entry runs, in order (none for communication, collectives and idle slots)."""
    if isinstance(entry, Overlap):
        return entry.actions
    if isinstance(entry, Action):
        return (entry,)
    return ()


SEQ_CUTS = ("even", "balanced")  # equal tokens per sequence chunk, or equal compute (Seq1F1B's balanced cut)


def loop_placement(num_ranks: int, num_stages: int) -> tuple[int, ...]:
    """Stage s on rank s mod p: the placement of GPipe, 1F1B and interleaved 1F1B."""
    return tuple(stage % num_ranks for stage in range(num_stages))


def v_placement(num_ranks: int) -> tuple[int, ...]:
    """Two stages per rank in a V: stage s and 2p-1-s share a rank (ZBV, DualPipeV)."""
    return tuple(s if s < num_ranks else 2 * num_ranks - 1 - s for s in range(2 * num_ranks))


@dataclass(frozen=True)
class Schedule:
    """One training step of a pipeline: an ordered action list per rank.

    `stage_to_rank[s]` is the rank that holds stage s. `actions[r]` is the
    order in which rank r runs its actions. `params` records the builder's
    arguments so a schedule can say how it was made.
    """

    name: str
    num_ranks: int
    num_stages: int
    num_microbatches: int
    stage_to_rank: tuple[int, ...]
    actions: tuple[tuple[Action, ...], ...]
    params: dict = field(default_factory=dict, compare=False)
    order: tuple[tuple[Entry | None, ...], ...] | None = None
    # Sequence chunks (Seq1F1B): each microbatch cut into this many pieces of its sequence, which the actions
    # name as microbatch m * seq_chunks + j (chunk j of microbatch m). A chunk's forward needs the earlier
    # chunk's (its keys and values) and its backward the later chunk's (their gradients): the lowering's
    # `SEQ_NEEDS`. `seq_cut` is how the sequence is cut: "even" (equal tokens) or "balanced" (equal compute).
    seq_chunks: int = 1
    seq_cut: str = "even"
    # Pipelines that run at once over the stages (DualPipe: 2, one per direction): the stages are that many
    # chains of `pipeline_stages` in a row, each fed its own microbatches from its first stage, and a message
    # never crosses from one chain to the next. A microbatch id names one microbatch in each chain.
    pipelines: int = 1

    @property
    def has_transfers(self) -> bool:
        """Whether the order states its sends and receives (torch's compute_comms form)."""
        for row in self.order or ():
            if not set(map(type, row)) <= {Action, CommAction, Overlap, type(None)}:  # a subclass: entry by entry
                if any(isinstance(e, CommAction) and e.kind in TRANSFER_KINDS for e in row):
                    return True
                continue
            comms = compress(row, map(is_, map(type, row), repeat(CommAction)))  # at C speed: 10^5 entries
            if any(map(TRANSFER_KINDS.__contains__, map(itemgetter(1), comms))):
                return True
        return False

    def order_rows(self) -> list[list[Entry | None]]:
        """Per rank, every cell: the full order when the schedule has one, else the compute actions."""
        if self.order is None:
            return [list(row) for row in self.actions]
        return [list(row) for row in self.order]

    def __post_init__(self) -> None:
        _check_types(self)
        if self.num_ranks < 1:
            raise ValueError(f"num_ranks must be at least 1, got {self.num_ranks}")
        if self.num_microbatches < 1:
            raise ValueError(f"num_microbatches must be at least 1, got {self.num_microbatches}")
        if len(self.stage_to_rank) != self.num_stages:
            raise ValueError(f"stage_to_rank has {len(self.stage_to_rank)} entries for {self.num_stages} stages")
        if len(self.actions) != self.num_ranks:
            raise ValueError(f"actions has {len(self.actions)} rank lists for {self.num_ranks} ranks")
        for stage, rank in enumerate(self.stage_to_rank):
            if not 0 <= rank < self.num_ranks:
                raise ValueError(f"stage {stage} is placed on rank {rank}, outside 0..{self.num_ranks - 1}")
        if not isinstance(self.seq_chunks, int) or isinstance(self.seq_chunks, bool) or self.seq_chunks < 1:
            raise ValueError(f"seq_chunks must be a whole number >= 1, got {self.seq_chunks!r}")
        if self.num_microbatches % self.seq_chunks:
            raise ValueError(
                f"{self.num_microbatches} actions' microbatches do not split into sequence chunks of "
                f"{self.seq_chunks}: the count must be a multiple of seq_chunks"
            )
        if not isinstance(self.pipelines, int) or isinstance(self.pipelines, bool) or self.pipelines < 1:
            raise ValueError(f"pipelines must be a whole number >= 1, got {self.pipelines!r}")
        if self.num_stages % self.pipelines:
            raise ValueError(f"{self.num_stages} stages do not form {self.pipelines} pipelines of equal length")
        if self.seq_cut not in SEQ_CUTS:
            raise ValueError(f"unknown seq_cut {self.seq_cut!r}; valid: {', '.join(SEQ_CUTS)}")
        if self.order is not None:
            if len(self.order) != self.num_ranks:
                raise ValueError(f"order has {len(self.order)} rank lists for {self.num_ranks} ranks")
            for rank, (row, entries) in enumerate(zip(self.actions, self.order, strict=True)):
                if row != _compute_actions(entries):
                    raise ValueError(f"rank {rank}: the order's compute actions differ from the action list")

    @property
    def pipeline_stages(self) -> int:
        """Stages in a row that one microbatch runs through (all of them, but in DualPipe's two directions)."""
        return self.num_stages // self.pipelines

    @property
    def num_actions(self) -> int:
        return sum(len(rank_actions) for rank_actions in self.actions)

    @property
    def stages_per_rank(self) -> int:
        """Chunks per rank (1 for plain pipelines, v for interleaved, 2 for V shapes)."""
        return max(1, self.num_stages // self.num_ranks)

    @property
    def uses_split_backward(self) -> bool:
        return any(a.kind is I or a.kind is W for rank_actions in self.actions for a in rank_actions)

    def stages_of_rank(self, rank: int) -> tuple[int, ...]:
        """The stages rank `rank` holds, in order (computed once for all ranks: callers ask per rank)."""
        return self._stages_by_rank[rank]

    @cached_property
    def _stages_by_rank(self) -> tuple[tuple[int, ...], ...]:
        by_rank: list[list[int]] = [[] for _ in range(self.num_ranks)]
        for stage, rank in enumerate(self.stage_to_rank):
            by_rank[rank].append(stage)
        return tuple(tuple(stages) for stages in by_rank)

    def rank_of(self, action: Action) -> int:
        return self.stage_to_rank[action.stage]

    def text_rows(self) -> list[list[str]]:
        """Per rank, the text form of each action (the CSV `compute_only` rows)."""
        # each (stage, kind)'s text and each microbatch's made once, then joined: 1.5x quicker than formatting
        # every action (Action.__str__ inline), which stays for actions outside the schedule's counts (a KeyError)
        microbatches = {mb: str(mb) for mb in range(self.num_microbatches)}
        heads = {stage: {kind: f"{stage}{kind._value_}" for kind in ActionKind} for stage in range(self.num_stages)}
        try:
            return [[heads[stage][kind] + microbatches[mb] for stage, kind, mb in row] for row in self.actions]
        except KeyError:
            return [[f"{stage}{kind._value_}{mb}" for stage, kind, mb in row] for row in self.actions]

    def describe(self) -> str:
        microbatches = (
            f"{self.num_microbatches} microbatches"
            if self.seq_chunks == 1
            else f"{self.num_microbatches // self.seq_chunks} microbatches x {self.seq_chunks} sequence chunks"
        )
        if self.pipelines > 1:
            microbatches += f" in each of {self.pipelines} directions"
        return (
            f"{self.name}: {self.num_ranks} ranks, {self.num_stages} stages, {microbatches}, {self.num_actions} actions"
        )


def _check_types(schedule: Schedule) -> None:
    """The public constructor's arguments, each of the type it takes, or one TypeError naming it (builders pass
    tuples of Actions; a wrong type would otherwise surface as a comparison error deep in a check)."""
    if not isinstance(schedule.name, str):
        raise TypeError(f"Schedule name must be a string, got {type(schedule.name).__name__} {schedule.name!r:.40}")
    for field_name in ("num_ranks", "num_stages", "num_microbatches"):
        value = getattr(schedule, field_name)
        if type(value) is not int:
            raise TypeError(f"Schedule {field_name} must be a whole number, got {type(value).__name__} {value!r:.40}")
    for field_name in ("stage_to_rank", "actions"):
        value = getattr(schedule, field_name)
        if not isinstance(value, tuple):
            raise TypeError(
                f"Schedule {field_name} must be a tuple (make_schedule freezes lists), got {type(value).__name__}"
            )
    if not all(type(rank) is int for rank in schedule.stage_to_rank):
        raise TypeError("Schedule stage_to_rank must hold whole numbers, one rank per stage")
    if not all(isinstance(row, tuple) for row in schedule.actions):
        raise TypeError("Schedule actions must hold one tuple of Actions per rank")


def make_schedule(
    name: str,
    num_ranks: int,
    num_microbatches: int,
    stage_to_rank: Iterable[int],
    actions: Iterable[Iterable[Action]],
    **params: object,
) -> Schedule:
    """Convenience constructor that freezes lists into tuples."""
    placement = tuple(stage_to_rank)
    return Schedule(
        name=name,
        num_ranks=num_ranks,
        num_stages=len(placement),
        num_microbatches=num_microbatches,
        stage_to_rank=placement,
        actions=tuple(tuple(rank_actions) for rank_actions in actions),
        params=dict(params),
    )


def schedule_from_order(
    name: str,
    num_ranks: int,
    num_microbatches: int,
    stage_to_rank: Iterable[int],
    order: Iterable[Iterable[Entry | None]],
    **params: object,
) -> Schedule:
    """A schedule from torch's full per-rank order; the compute action lists are derived from it.

    An order of plain compute actions only (no idle slots either) is kept as the action lists alone.
    """
    rows = tuple(tuple(row) for row in order)
    actions = [_compute_actions(row) for row in rows]
    schedule = make_schedule(name, num_ranks, num_microbatches, stage_to_rank, actions, **params)
    plain = all(type(e) is Action for row in rows for e in row)
    return schedule if plain else dataclasses.replace(schedule, order=rows)
