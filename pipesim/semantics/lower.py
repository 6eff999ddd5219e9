"""What a schedule means for data, written once: dependencies, messages between ranks, activation liveness.

A `Schedule` only lists each rank's actions. Everything that follows from it is lowered here, as pure
functions of the schedule, and read by every consumer: the dependency graph and the simulator
(`pipesim.semantics.dag`, `pipesim.sim.simulate`), the memory metrics (`pipesim.sim.memory`) and the executor's runtime,
which moves exactly the messages of `comm_plan` in exactly its order. This is the role of
torch.distributed.pipelining's `_add_send_recv` pass: communication made explicit, then trusted.

The rules (what crosses a rank is the table `CROSSINGS`; messages and dependencies are both read off it):

* F(s, m) needs the activation that F(s-1, m) produces (stage 0 reads the microbatch).
* The first backward of (s, m), B or I, needs F(s, m)'s stash on its own rank and the gradient that the first
  backward of (s+1, m) produces (the last stage starts from the loss).
* W(s, m) needs I(s, m) on its own rank.
* A message crosses ranks when producer and consumer stages live on different ranks; otherwise it is a local
  hand-over. On each directed link the receiver expects messages in the order the sender produces them.
* Liveness: F stashes its stage's activations (only the stage input under recomputation) from its start;
  B frees them at its end; I frees all but the part only W needs, which W frees at its end.

torch's full order (`Schedule.order`, read from its compute_comms CSV) adds, when it states transfers:

* A message leaves its rank when that rank reaches the message's SEND in its order, not when its producer
  ends: the consumer waits for the last compute action before the SEND (`send_gates`), plus the transfer.
  A SEND placed after work that waits on the peer therefore deadlocks, and the cycle names that work.
* A RECV is posted where it stands and waited on by the action that needs it (torch's runtime: `irecv` at
  RECV, wait at the compute), so its place only has to come before that action (`pipesim.semantics.validate`).
* An overlapped group (OVERLAP_F_B) starts when every member's inputs are in, and runs as one.
* UNSHARD, RESHARD and REDUCE_GRAD occupy their rank for their collective's time (`collectives_before`).

The executor runs the compute actions with its own plan above (`compute_only` strips the rest): the same
messages, in the producers' order, which is the order torch's lowering sends them in.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from dataclasses import dataclass
from itertools import accumulate, chain, compress, repeat
from operator import is_, itemgetter, sub
from typing import NamedTuple

from pipesim.ir import (
    MEMORY_MOVES,
    Action,
    ActionKind,
    B,
    CommAction,
    CommKind,
    F,
    I,
    Overlap,
    Schedule,
    W,
    entry_actions,
)

ACT, GRAD = "act", "grad"


class Message(NamedTuple):
    """A tensor that one stage hands to another for one microbatch.

    `what` is ACT (the input activation of `stage`) or GRAD (the gradient of `stage`'s output).
    """

    what: str
    stage: int
    microbatch: int


# --- the rules, one table -----------------------------------------------------------------------------------


class Crossing(NamedTuple):
    """One tensor that passes from a stage to its neighbour, for every microbatch: the single statement of what
    crosses a rank. Messages (`produced_message`, `needed_message`, `comm_plan`: what the executor moves) and
    dependencies (`producers_of`, `producer_ids`: what the simulator, planner and synthesizer wait for) are
    both read off this table, so the two cannot disagree.

    `step` is the consumer's stage minus the producer's; `producers` are the kinds on the producing stage that
    hand it on, as alternatives in order of preference (B, or I when the backward is split); `consumers` the
    kinds that need it; `send` and `recv` torch's transfers that move it.
    """

    what: str
    step: int
    producers: tuple[ActionKind, ...]
    consumers: tuple[ActionKind, ...]
    send: CommKind
    recv: CommKind


CROSSINGS: tuple[Crossing, ...] = (
    Crossing(ACT, +1, (F,), (F,), CommKind.SEND_F, CommKind.RECV_F),  # F's output feeds the next stage's F
    Crossing(GRAD, -1, (B, I), (B, I), CommKind.SEND_B, CommKind.RECV_B),  # the first backward's input gradient
)
# What an action needs from its own stage (its rank): each entry is one need, as its alternatives.
LOCAL_NEEDS: dict[ActionKind, tuple[tuple[ActionKind, ...], ...]] = {B: ((F,),), I: ((F,),), W: ((I,),)}

# What a sequence chunk needs from its neighbour chunks of the same microbatch on its own stage (Seq1F1B): the
# forward of chunk j the forward of chunk j-1 (the keys and values it attends to); the first backward of chunk j
# the first backward of chunk j+1 (the gradients of its keys and values that the later chunks' attention made).
# Per kind: (the chunk offset, the producing kinds as alternatives).
SEQ_NEEDS: dict[ActionKind, tuple[int, tuple[ActionKind, ...]]] = {F: (-1, (F,)), B: (+1, (B, I)), I: (+1, (B, I))}

_BY_WHAT = {c.what: c for c in CROSSINGS}
_PRODUCES = {kind: c for c in CROSSINGS for kind in c.producers}
_NEEDS = {kind: c for c in CROSSINGS for kind in c.consumers}
_BY_TRANSFER = {kind: c for c in CROSSINGS for kind in (c.send, c.recv)}


def produced_message(action: Action, num_stages: int, pipeline_stages: int | None = None) -> Message | None:
    """The tensor `action` hands on: F's output to the next stage, a first backward's input gradient back.

    `pipeline_stages` (default all `num_stages`): the length of each chain of stages a microbatch runs through
    (`Schedule.pipeline_stages`); nothing crosses from the end of one chain to the start of the next."""
    stage, kind, mb = action
    crossing = _PRODUCES.get(kind)
    if crossing is not None and _within(stage, crossing.step, num_stages, pipeline_stages):
        return Message(crossing.what, stage + crossing.step, mb)
    return None


def needed_message(action: Action, num_stages: int, pipeline_stages: int | None = None) -> Message | None:
    """The tensor `action` needs from another stage before it can start (`pipeline_stages`: as produced_message)."""
    stage, kind, mb = action
    crossing = _NEEDS.get(kind)
    if crossing is not None and _within(stage, -crossing.step, num_stages, pipeline_stages):
        return Message(crossing.what, stage, mb)
    return None


def _within(stage: int, step: int, num_stages: int, pipeline_stages: int | None) -> bool:
    """Whether stage + step is a stage of `stage`'s own chain."""
    if pipeline_stages is None or pipeline_stages == num_stages:
        return 0 <= stage + step < num_stages
    return 0 <= stage % pipeline_stages + step < pipeline_stages


def consumer_kinds(message: Message) -> tuple[ActionKind, ...]:
    """The kinds on `message.stage` that need it, as alternatives (F for an activation; B, or I when the backward
    is split, for a gradient)."""
    return _BY_WHAT[message.what].consumers


def producer_stage(message: Message) -> int:
    """The stage whose action produces `message`."""
    return message.stage - _BY_WHAT[message.what].step


def producers_of(
    action: Action, num_stages: int, seq_chunks: int = 1, pipeline_stages: int | None = None
) -> list[tuple[Action, ...]]:
    """The producers `action` needs, each as its alternatives: its own stage's first, the message's last.

    The readable form of the rules; `producer_ids` is the same rules over a whole schedule at list speed.
    """
    stage, kind, mb = action
    needs = [tuple(Action(stage, k, mb) for k in options) for options in LOCAL_NEEDS.get(kind, ())]
    neighbour = _seq_neighbour(kind, mb, seq_chunks)
    if neighbour is not None:
        needs.append(tuple(Action(stage, k, neighbour) for k in SEQ_NEEDS[kind][1]))
    message = needed_message(action, num_stages, pipeline_stages)
    if message is not None:
        source = producer_stage(message)
        needs.append(tuple(Action(source, k, mb) for k in _BY_WHAT[message.what].producers))
    return needs


def _seq_neighbour(kind: ActionKind, mb: int, seq_chunks: int) -> int | None:
    """The chunk of the same microbatch that `kind` on chunk `mb` needs first (SEQ_NEEDS), or None."""
    if seq_chunks == 1 or kind not in SEQ_NEEDS:
        return None
    offset = SEQ_NEEDS[kind][0]
    chunk = mb % seq_chunks + offset
    return mb + offset if 0 <= chunk < seq_chunks else None


def action_ids(actions: list[Action], num_stages: int, num_microbatches: int) -> dict[ActionKind, list[list[int]]]:
    """Per kind, stage and microbatch, the position of that action in `actions` (-1: none; the last, where one
    repeats): lists, several times cheaper than hashing a key per lookup (10^5 actions)."""
    table = {kind: [[-1] * num_microbatches for _ in range(num_stages)] for kind in ActionKind}
    for i, (stage, kind, mb) in enumerate(actions):
        table[kind][stage][mb] = i
    return table


def producer_ids(
    actions: list[Action],
    num_stages: int,
    num_microbatches: int,
    unique: bool = False,
    seq_chunks: int = 1,
    pipeline_stages: int | None = None,
    ids: dict[ActionKind, list[list[int]]] | None = None,
) -> list[tuple[int, ...]]:
    """Per action (by position in `actions`), the positions of its producers; -1 where one is missing. `unique`:
    a ValueError where an action appears twice (counted at C speed over the id table, no action hashed). `ids`:
    `action_ids` of `actions`, where the caller reads it too.

    Hot loop (10^5 actions): ids live in `action_ids`' table, and each (kind, stage) gets its producers' rows
    once, from the same table as `producers_of` (which a test checks it against on every registered schedule).
    """
    table = action_ids(actions, num_stages, num_microbatches) if ids is None else ids
    if unique and sum(len(row) - row.count(-1) for rows in table.values() for row in rows) != len(actions):
        raise ValueError("an action appears twice")
    merged: dict[tuple[ActionKind, ...], list[list[int]]] = {}

    def rows_of(options: tuple[ActionKind, ...]) -> list[list[int]]:
        """Per stage, per microbatch: the first of `options` present (B, or I when the backward is split)."""
        if options not in merged:
            rows = table[options[0]]
            for other in options[1:]:
                pairs = zip(rows, table[other], strict=True)
                rows = [[a if a >= 0 else b for a, b in zip(xs, ys, strict=True)] for xs, ys in pairs]
            merged[options] = rows
        return merged[options]

    # per (kind, stage) present, each microbatch's producer tuple, zipped at C speed from the producers' rows;
    # then one lookup per action, no tuple built in Python (1f1b 64 x 1024: 25 -> 22 ms)
    present = {ActionKind(kind) for kind in set(map(itemgetter(1), actions))}  # the members, whatever was given
    needs: dict[ActionKind, list[list[tuple[int, ...]]]] = {}
    for kind in present:
        # a chunk's neighbour chunk on its own stage (SEQ_NEEDS): after its own stage's needs, before the message
        # (`producers_of`); chunks at the end of their microbatch have none, so two zips and a pick per action
        chained = seq_chunks > 1 and kind in SEQ_NEEDS
        if chained:
            offset, neighbour_options = SEQ_NEEDS[kind]
            at = len(LOCAL_NEEDS.get(kind, ()))
            has = [_seq_neighbour(kind, mb, seq_chunks) is not None for mb in range(num_microbatches)]  # per kind
        per_stage = []
        for stage in range(num_stages):
            found = [rows_of(options)[stage] for options in LOCAL_NEEDS.get(kind, ())]
            message = needed_message(Action(stage, kind, 0), num_stages, pipeline_stages)
            if message is not None:
                found.append(rows_of(_BY_WHAT[message.what].producers)[producer_stage(message)])
            plain = list(zip(*found, strict=True)) if found else [()] * num_microbatches
            if chained:
                source = rows_of(neighbour_options)[stage]
                shifted = source[offset:] + source[:offset]  # shifted[mb] = source[mb + offset], where it has one
                joined = zip(*found[:at], shifted, *found[at:], strict=True)
                plain = [j if h else t for j, t, h in zip(joined, plain, has, strict=True)]
            per_stage.append(plain)
        needs[kind] = per_stage
    return [needs[kind][stage][mb] for stage, kind, mb in actions]


def crossing_stage(action: Action) -> int:
    """The stage boundary a cross-rank producer of `action` sits across: boundary b joins stages b and b+1.

    F(s) hears from F(s-1) across boundary s-1; a backward of s hears from s+1 across boundary s (its other
    producers share its stage, hence its rank).
    """
    return action.stage + _BOUNDARY_OFFSET[action.kind]


def crossing_stages(actions: list[Action]) -> list[int]:
    """`crossing_stage` of every action, at list speed (the simulator asks for 10^5 at once)."""
    offset = _BOUNDARY_OFFSET
    return [stage + offset[kind] for stage, kind, _ in actions]


# The boundary b (between stages b and b+1) an action's message crosses, as an offset from its stage.
_BOUNDARY_OFFSET = {kind: min(0, -_NEEDS[kind].step) if kind in _NEEDS else 0 for kind in ActionKind}


# --- the communication plan ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommPlan:
    """Every message between ranks and who produces it.

    `links[(src, dst)]` lists the messages rank src sends to rank dst in the order src sends them, which is
    the order dst must post its receives in (and each message's index there is its tag on that link).
    `producer[message]` is the action that produces it, for every message, local hand-overs included.
    """

    num_stages: int
    stage_to_rank: tuple[int, ...]
    links: dict[tuple[int, int], tuple[Message, ...]]
    producer: dict[Message, Action]

    def sorted_links(self) -> list[tuple[int, int]]:
        return sorted(self.links)

    def incoming(self, rank: int) -> dict[int, tuple[Message, ...]]:
        """Per sending rank, the messages `rank` receives from it, in order."""
        return {src: keys for (src, dst), keys in self.links.items() if dst == rank}

    def send_tags(self, rank: int) -> dict[Message, int]:
        """Each message `rank` sends, with its position on its link (the tag the receiver expects)."""
        return {key: index for (src, _), keys in self.links.items() if src == rank for index, key in enumerate(keys)}

    def destination(self, message: Message) -> int:
        return self.stage_to_rank[message.stage]

    def source(self, message: Message) -> int:
        return self.stage_to_rank[producer_stage(message)]

    def is_local(self, message: Message) -> bool:
        return self.source(message) == self.destination(message)


def comm_plan(schedule: Schedule) -> CommPlan:
    """Lower a schedule to its messages: per directed link, what crosses it and in which order."""
    links: dict[tuple[int, int], list[Message]] = defaultdict(list)
    producer: dict[Message, Action] = {}
    placement, num_stages, chain = schedule.stage_to_rank, schedule.num_stages, schedule.pipeline_stages
    for src, actions in enumerate(schedule.actions):
        for action in actions:
            message = produced_message(action, num_stages, chain)
            if message is None:
                continue
            producer[message] = action
            dst = placement[message.stage]
            if dst != src:
                links[(src, dst)].append(message)
    return CommPlan(num_stages, placement, {link: tuple(keys) for link, keys in links.items()}, producer)


# --- torch's full order: explicit transfers, overlapped groups, collectives ------------------------------


def compute_only(schedule: Schedule) -> Schedule:
    """The schedule without torch's full order: its compute actions alone, what the executor runs."""
    return schedule if schedule.order is None else dataclasses.replace(schedule, order=None)


# Which stage a send or a receive talks to, read off CROSSINGS (validate, torch's lowering and the trace import
# read it here): a stage sends activations on to the next stage and gradients back to the previous one.
SENDS = tuple(c.send for c in CROSSINGS)


def transfer_message(transfer: CommAction) -> Message:
    """The message a SEND_F, SEND_B, RECV_F or RECV_B moves: a send names the stage it sends from, a receive
    the stage it receives for."""
    stage, kind, mb = transfer
    crossing = _BY_TRANSFER[kind]
    return Message(crossing.what, stage + crossing.step if kind is crossing.send else stage, mb)


def peer_stage(transfer: CommAction) -> int:
    """The stage at the other end of a SEND or RECV: a send's destination, a receive's producer."""
    message = transfer_message(transfer)
    return message.stage if transfer.kind in SENDS else producer_stage(message)


def served_kinds(transfer: CommAction) -> tuple[ActionKind, ...]:
    """The compute action a transfer serves on its own stage: F for SEND_F / RECV_F (produces, needs the
    activation), the first backward, B or I, for SEND_B / RECV_B."""
    crossing = _BY_TRANSFER[transfer.kind]
    return crossing.producers if transfer.kind is crossing.send else crossing.consumers


def transfers_of(message: Message) -> tuple[CommAction, CommAction]:
    """The SEND on the producing stage and the RECV on the receiving stage that move `message`."""
    crossing = _BY_WHAT[message.what]
    send = CommAction(producer_stage(message), crossing.send, message.microbatch)
    return send, CommAction(message.stage, crossing.recv, message.microbatch)


def send_gates(schedule: Schedule) -> dict[Message, Action | None] | None:
    """Where transfers are explicit: per message, the last compute action its rank runs before the SEND (None
    when the SEND comes before any compute). None when the schedule leaves the transfers to `comm_plan`."""
    if not states_comms(schedule) or not schedule.has_transfers:
        return None
    gates: dict[Message, Action | None] = {}
    for row in schedule.order or ():
        last: Action | None = None
        for entry in row:
            if isinstance(entry, CommAction):
                if entry.kind in SENDS:
                    gates[transfer_message(entry)] = last
            elif entry is not None:
                last = entry_actions(entry)[-1]
    return gates


def overlap_groups(schedule: Schedule) -> list[tuple[Action, ...]]:
    """The compute actions of every overlapped group, in order (each group runs as one)."""
    if _plain_order(schedule):
        return []
    return [e.actions for row in schedule.order or () for e in row if isinstance(e, Overlap)]


def overlap_ids(schedule: Schedule, offsets: list[int]) -> dict[int, tuple[int, ...]] | None:
    """Each overlapped group's first member -> its other members, as ids: positions in the ranks' `Schedule.actions`
    (the order's compute actions are the action lists, as `Schedule` checks), rank r's counted from `offsets[r]`.
    Empty without a group; None where an entry's type is a subclass (then find the groups by name)."""
    if _plain_order(schedule):
        return {}
    if not _entry_types(schedule) <= _KNOWN_ENTRIES:
        return None
    ids: dict[int, tuple[int, ...]] = {}
    for row, at in zip(schedule.order or (), offsets, strict=False):
        for entry in row:  # one plain loop: quicker than passes over the row at C speed, then over the groups
            kind = type(entry)
            if kind is Action:
                at += 1
            elif kind is Overlap:
                size = len(entry[0])
                ids[at] = (at + 1,) if size == 2 else tuple(range(at + 1, at + size))
                at += size
    return ids


_PLAIN_ENTRIES = frozenset({Action, CommAction, type(None)})
_KNOWN_ENTRIES = _PLAIN_ENTRIES | {Overlap}


def _plain_order(schedule: Schedule) -> bool:
    """Whether every entry of the order is a compute action, a CommAction or idle (no overlapped pair): read at
    C speed, so that the scans below skip an order of 10^5 entries without the kind they look for."""
    return _entry_types(schedule) <= _PLAIN_ENTRIES


def states_comms(schedule: Schedule) -> bool:
    """Whether the order holds any CommAction (a transfer, a memory move or a collective): the scans for each skip
    an order of compute actions and pairs alone (the overlapped families' 10^5 entries)."""
    return any(issubclass(kind, CommAction) for kind in _entry_types(schedule))


_ENTRY_TYPES = "_pipesim_entry_types"  # where a schedule keeps them (in its instance dict, as its lowering is kept)


def _entry_types(schedule: Schedule) -> frozenset[type]:
    """Every type among the order's entries, read once per schedule at C speed: the lowering asks four questions
    of them (`_plain_order`, `states_comms`)."""
    types = schedule.__dict__.get(_ENTRY_TYPES)
    if types is None:  # a frozen value, set as functools.cached_property sets one
        types = schedule.__dict__[_ENTRY_TYPES] = frozenset(map(type, chain.from_iterable(schedule.order or ())))
    return types


def _comm_kinds(schedule: Schedule) -> set[CommKind]:
    """The kinds of the order's CommActions, read at C speed."""
    kinds: set[CommKind] = set()
    for row in schedule.order or ():
        kinds.update(map(itemgetter(1), compress(row, map(is_, map(type, row), repeat(CommAction)))))
    return kinds


def back_to_back(schedule: Schedule) -> Schedule:
    """The schedule as a device that cannot overlap runs it: each overlapped group's members one after the
    other, each waiting only for its own inputs (pipesim's executor: one stream per rank). Kept as groups, the
    simulator starts a group once every member's inputs are in, which on a V schedule delays whole ranks."""
    if not overlap_groups(schedule):
        return schedule
    order = tuple(
        tuple(a for e in row for a in (e.actions if isinstance(e, Overlap) else (e,))) for row in schedule.order or ()
    )
    return dataclasses.replace(schedule, order=order)


def collectives_before(schedule: Schedule) -> tuple[dict[Action, list[CommAction]], list[list[CommAction]]]:
    """Per compute action, the collectives its rank runs right before it; per rank, those after its last.

    Transfers take no time of their rank (sends are asynchronous, receives waited on by their consumer), so
    only UNSHARD, RESHARD and REDUCE_GRAD are listed.
    """
    before: dict[Action, list[CommAction]] = {}
    tails: list[list[CommAction]] = []
    collective = (CommKind.UNSHARD, CommKind.RESHARD, CommKind.REDUCE_GRAD)
    if not states_comms(schedule) or (_plain_order(schedule) and not _comm_kinds(schedule).intersection(collective)):
        return before, [[] for _ in schedule.order or ()]  # none to place
    for row in schedule.order or ():
        waiting: list[CommAction] = []
        for entry in row:
            if isinstance(entry, CommAction):
                if entry.kind in (CommKind.UNSHARD, CommKind.RESHARD, CommKind.REDUCE_GRAD):
                    waiting.append(entry)
            elif entry is not None and waiting:
                before[entry_actions(entry)[0]] = waiting
                waiting = []
        tails.append(waiting)
    return before, tails


# --- memory moves: offload and reload on the copy engine -----------------------------------------------------


class Copy(NamedTuple):
    """One OFFLOAD or RELOAD as its rank's copy engine runs it.

    It is issued when its rank ends `gate`, the last compute action before it in the rank's order (None: before
    any), as torch posts a transfer where it stands; it moves data once `after` has ended (an OFFLOAD after the
    forward that saved the activations, a RELOAD after their OFFLOAD); a rank's copies run one at a time, in order.
    """

    entry: CommAction
    gate: Action | None
    after: Action | CommAction


def memory_moves(schedule: Schedule) -> list[list[Copy]]:
    """Per rank, its OFFLOADs and RELOADs in the order its copy engine runs them (empty without any)."""
    moves: list[list[Copy]] = []
    new, offload = tuple.__new__, CommKind.OFFLOAD  # 10^5 entries: no per-entry keyword call
    for actions, (entries, gates) in zip(schedule.actions, memory_move_gates(schedule), strict=True):
        row: list[Copy] = []
        for entry, gate in zip(entries, gates, strict=True):
            stage, move, mb = entry
            after = new(Action, (stage, F, mb)) if move is offload else new(CommAction, (stage, offload, mb))
            row.append(new(Copy, (entry, actions[gate] if gate >= 0 else None, after)))
        moves.append(row)
    return moves


def memory_move_gates(schedule: Schedule) -> list[tuple[list[CommAction], list[int]]]:
    """Per rank, its OFFLOADs and RELOADs in order, and the position of each one's gate (`Copy.gate`: the last
    compute action before it) in the rank's `Schedule.actions`, -1 where none comes before it. The engine's
    lowering reads ids off it, without hashing 10^5 actions."""
    rows = []
    for row in schedule.order if schedule.order is not None else ((),) * schedule.num_ranks:
        types = list(map(type, row))
        present = set(types)
        if present <= _MOVES_ROW:  # the k-th CommAction (from 0), at p, has p - k compute actions before it
            mask = list(map(is_, types, repeat(CommAction)))
            comms = list(compress(row, mask))
            if set(map(itemgetter(1), comms)) <= MEMORY_MOVES:  # every one a memory move (no transfer, collective)
                rows.append((comms, list(map(sub, compress(range(len(row)), mask), range(1, len(comms) + 1)))))
                continue
        if present <= _PLAIN_ENTRIES:  # no overlapped pair: each compute action one position, counted at C speed
            computed = list(accumulate(map(is_, types, repeat(Action))))  # compute actions up to each entry
            positions = list(compress(range(len(row)), map(is_, types, repeat(CommAction))))
            moved = map(MEMORY_MOVES.__contains__, map(itemgetter(1), map(row.__getitem__, positions)))
            at = list(compress(positions, moved))
            rows.append((list(map(row.__getitem__, at)), list(map(sub, map(computed.__getitem__, at), repeat(1)))))
            continue
        entries: list[CommAction] = []
        gates: list[int] = []
        position = -1
        for entry in row:
            if type(entry) is CommAction:
                if entry.kind in MEMORY_MOVES:
                    entries.append(entry)
                    gates.append(position)
            elif entry is not None:
                position += len(entry_actions(entry))  # an overlapped pair's last member is the gate after it
        rows.append((entries, gates))
    return rows


_MOVES_ROW = frozenset({Action, CommAction})


def has_memory_moves(schedule: Schedule) -> bool:
    return (
        schedule.order is not None
        and states_comms(schedule)
        and any(isinstance(e, CommAction) and e.kind in MEMORY_MOVES for row in schedule.order for e in row)
    )


# What waits for a RELOAD: the first backward of its (stage, microbatch), B or I (whichever the rank runs).
RELOAD_SERVES: tuple[ActionKind, ...] = (B, I)


def offload_change(kind: CommKind, sizes: StashSizes) -> tuple[float, float, bool]:
    """(device bytes delta, host bytes delta, at its start) of a memory move of a stage with `sizes`.

    An OFFLOAD holds host memory from its start and frees the device's at its end (the copy reads it until
    then); a RELOAD takes device memory at its start and frees the host's at its end. Both move the whole stash.
    """
    if kind is CommKind.OFFLOAD:
        return -sizes.stash, sizes.stash, False
    return sizes.stash, -sizes.stash, True


# --- activation liveness ------------------------------------------------------------------------------------


class StashSizes(NamedTuple):
    """Bytes a stage keeps per microbatch: what F stashes, and the part of it that only W still needs."""

    stash: float
    weight: float


def changes_at_start(kind: ActionKind) -> bool:
    """Whether the action's change to the stash happens at its start (F: the stash grows as it runs) or end."""
    return kind is F


def stash_table(sizes: dict[int, StashSizes]) -> dict[int, dict[ActionKind, tuple[int, float]]]:
    """`stash_change` for every (stage, kind), computed once: metrics look it up per span instead of calling."""
    return {stage: {kind: stash_change(kind, size) for kind in ActionKind} for stage, size in sizes.items()}


def stash_change(kind: ActionKind, sizes: StashSizes) -> tuple[int, float]:
    """(stashed microbatches delta, bytes delta) of running one action of `kind` on a stage with `sizes`.

    The count follows microbatches whose forward state is held: +1 at F, -1 at B or I (W holds only the part
    of the stash that computes weight gradients, counted in bytes).
    """
    if kind is F:
        return 1, sizes.stash
    if kind is B:
        return -1, -sizes.stash
    if kind is I:
        return -1, sizes.weight - sizes.stash
    return 0, -sizes.weight
