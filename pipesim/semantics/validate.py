"""Structural checks on a schedule; every error says what is wrong and where.

`find_problems` lists every problem (the app shows them in place);
`validate` raises the first. The checks are the contract the simulator and
the executor rely on:

* every action names a stage and microbatch that exist, on the rank that
  holds that stage (a stage lives on one rank);
* every (stage, microbatch) has exactly one F and one backward: either B, or
  I followed by W;
* on a rank, the F of a (stage, microbatch) comes before its backward, and I
  before W.

Where the schedule carries torch's full order (`Schedule.order`), its other
actions are checked too: a SEND after the action that produces its message, a
RECV before the action that needs it, each once and only across ranks, every
cross-rank message sent and received when the order states transfers at all,
and REDUCE_GRAD after its stage's last backward.

Cross-rank ordering problems are not structural: they show up as a cycle in
the dependency graph (`pipesim.sim.simulate.find_deadlock`).
"""

from __future__ import annotations

from collections import Counter
from itertools import compress, repeat
from operator import eq, is_, itemgetter, lt

from pipesim._perf import paused_gc
from pipesim.ir import MEMORY_MOVES, TRANSFER_KINDS, Action, B, CommAction, CommKind, F, I, Schedule, W, entry_actions
from pipesim.limits import MAX_PROBLEMS, summarize
from pipesim.semantics.lower import (
    RELOAD_SERVES,
    SENDS,
    peer_stage,
    produced_message,
    served_kinds,
    states_comms,
    transfers_of,
)
from pipesim.semantics.screen import compute_rules_hold, is_validated, mark_validated, row_is_clean


class ScheduleError(ValueError):
    """A schedule breaks a rule. `index` is the position in that rank's action list."""

    def __init__(
        self,
        rule: str,
        detail: str,
        rank: int | None = None,
        index: int | None = None,
        action: Action | None = None,
    ) -> None:
        self.rule = rule
        self.detail = detail
        self.rank = rank
        self.index = index
        self.action = action
        where = []
        if rank is not None:
            where.append(f"rank {rank}")
        if action is not None:
            # counted from 1, as the CSV's cells and the app's columns are
            where.append(f"action {action}" + (f" (its #{index + 1})" if index is not None else ""))
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {rule}: {detail}" if prefix else f"{rule}: {detail}")


def validate(schedule: Schedule) -> None:
    """Raise `ScheduleError` for the first problem found; return None when the schedule is sound (and mark it so:
    a schedule validated once is not checked again, by this or by `dependencies`)."""
    if is_validated(schedule):
        return
    problems = find_problems(schedule, limit=1)
    if problems:
        raise problems[0]
    mark_validated(schedule)


@paused_gc()
def find_problems(schedule: Schedule, limit: int | None = None) -> list[ScheduleError]:
    """Every structural problem, in rank order: at most `limit`, and never more than MAX_PROBLEMS (a schedule
    with a billion missing actions is reported by its first thousand, found in bounded time)."""
    problems: list[ScheduleError] = []
    misplaced: set[Action] = set()
    cap = MAX_PROBLEMS if limit is None else min(limit, MAX_PROBLEMS)  # work stops at the cap, whatever the sizes
    if compute_rules_hold(schedule):  # proved in list passes (a third off 131k actions): only the order is left
        if schedule.order is not None:
            _check_order(schedule, problems, cap)
        return problems if limit is None else problems[:limit]
    position = _scan_actions(schedule, problems, misplaced, cap)
    if len(problems) < cap:
        _check_pairs(schedule, position, misplaced, problems)
        if not problems or limit is None:
            _check_missing(schedule, position, misplaced, problems, cap)
    if schedule.order is not None and len(problems) < cap and (not problems or limit is None):
        _check_order(schedule, problems, cap)
    return problems if limit is None else problems[:limit]


def describe_problems(problems: list[ScheduleError]) -> str:
    """The first few problems, one per line, then how many more (for messages that must stay short)."""
    return summarize([str(p) for p in problems])


def _scan_actions(
    schedule: Schedule, problems: list[ScheduleError], misplaced: set[Action], cap: int
) -> dict[Action, int]:
    """One pass over every action: range, placement, duplicates. Returns action -> index in its rank's list.

    Every action kept sits on its stage's rank, so its rank is `stage_to_rank[stage]`.

    Actions on the wrong rank go to `misplaced` instead: reported once, not again as missing.
    """
    placement = schedule.stage_to_rank
    num_stages, num_mb = schedule.num_stages, schedule.num_microbatches
    position: dict[Action, int] = {}
    for rank, row in enumerate(schedule.actions):
        if row_is_clean(row, set(schedule.stages_of_rank(rank)), num_mb):
            before = len(position)  # a rank's own stages are no other rank's: its actions are new keys
            position.update(zip(row, range(len(row)), strict=True))
            if len(position) == before + len(row):  # no repeats: each action hashed once, not twice
                continue
            for action in row:  # a repeat: take them back, and name it in the per-action pass below
                position.pop(action, None)
        for index, action in enumerate(row):
            if len(problems) >= cap:
                return position
            stage, _, mb = action
            if not (0 <= stage < num_stages and 0 <= mb < num_mb):
                problems.append(
                    ScheduleError(
                        "out of range",
                        f"stages are 0..{num_stages - 1} and microbatches 0..{num_mb - 1}",
                        rank,
                        index,
                        action,
                    )
                )
                continue
            if placement[stage] != rank:
                problems.append(
                    ScheduleError(
                        "stage on two ranks",
                        f"stage {stage} lives on rank {placement[stage]} (stage_to_rank) "
                        f"but rank {rank} runs {action}; "
                        "each stage lives on exactly one rank",
                        rank,
                        index,
                        action,
                    )
                )
                misplaced.add(action)
                continue
            if action in position:
                problems.append(
                    ScheduleError(
                        f"duplicate {action.kind}",
                        f"{action} already runs as its #{position[action] + 1}; each (stage, microbatch) "
                        f"has exactly one {action.kind}",
                        rank,
                        index,
                        action,
                    )
                )
                continue
            position[action] = index
    return position


def _check_pairs(
    schedule: Schedule, position: dict[Action, int], misplaced: set[Action], problems: list[ScheduleError]
) -> None:
    """Order on the rank: F before its backward, I before W; B and I never both. A backward whose forward runs
    nowhere is named here, on its own rank, before other ranks' missing actions: a row off by one (torch 2.13's
    1F1B dump on its last rank: 3F1 .. 3F8, no 3F0) is the row to fix, not the ranks that lack 0F8."""
    for rank, row in enumerate(schedule.actions):
        if _forwards_first(row) or _split_in_order(row, position):
            continue
        for index, action in enumerate(row):
            if action[1] is not F and position.get(action) == index:
                _check_action(action, index, rank, position, problems)
                forward = Action(action[0], F, action[2])
                if action[1] is not W and forward not in position and forward not in misplaced:
                    problems.append(_orphan_backward(row, rank, index, action))
                    misplaced.add(forward)  # reported here, not again as missing


def _orphan_backward(row: tuple[Action, ...], rank: int, index: int, action: Action) -> ScheduleError:
    """A backward whose forward runs nowhere, named on its own rank (saying so when the rank's forwards of the
    stage do not start at microbatch 0)."""
    stage, _, mb = action
    firsts = [a[2] for a in row if a[0] == stage and a[1] is F] or [0]
    hint = f"; its forwards of stage {stage} run microbatches {min(firsts)}..{max(firsts)}: is its row off by one?"
    detail = f"{stage}F{mb} never runs, but {action} (rank {rank}'s #{index + 1}) does"
    return ScheduleError(
        "missing forward", detail + (hint if min(firsts) > 0 else ""), rank, None, Action(stage, F, mb)
    )


def _forwards_first(row: tuple[Action, ...]) -> bool:
    """C-speed screen of one rank: only F and B, each B after the F of its (stage, microbatch).

    Ranks that pass need no per-action check; the others get the detailed one.
    """
    kinds = list(map(itemgetter(1), row))
    is_forward = list(map(is_, kinds, repeat(F)))
    is_backward = list(map(is_, kinds, repeat(B)))
    if is_forward.count(True) + is_backward.count(True) != len(row):  # a split backward: check in detail
        return False
    key, places = itemgetter(0, 2), range(len(row))
    forward_at = dict(zip(map(key, compress(row, is_forward)), compress(places, is_forward), strict=True))
    needed = map(forward_at.get, map(key, compress(row, is_backward)), repeat(len(row)))
    return all(map(lt, needed, compress(places, is_backward)))


def _split_in_order(row: tuple[Action, ...], position: dict[Action, int]) -> bool:
    """C-speed screen of a rank with a split backward: every action there once in the schedule, each B and I after
    the F of its (stage, microbatch), each W after its I, no B beside an I and each I's W present. A rank that
    passes would give `_check_action` nothing to report; the others get the detailed check."""
    places = range(len(row))
    if not all(map(eq, map(position.get, row), places)):  # a repeat: position then names another copy
        return False
    kinds = list(map(itemgetter(1), row))
    flags = {kind: list(map(is_, kinds, repeat(kind))) for kind in (F, B, I, W)}
    if sum(flag.count(True) for flag in flags.values()) != len(row):
        return False
    key, late = itemgetter(0, 2), repeat(len(row))
    forward_at = dict(zip(map(key, compress(row, flags[F])), compress(places, flags[F]), strict=True))
    input_at = dict(zip(map(key, compress(row, flags[I])), compress(places, flags[I]), strict=True))
    for table, kind in ((forward_at, B), (forward_at, I), (input_at, W)):
        keys = map(key, compress(row, flags[kind]))
        if not all(map(lt, map(table.get, keys, late), compress(places, flags[kind]))):
            return False
    stages = list(map(itemgetter(0), compress(row, flags[I])))
    microbatches = list(map(itemgetter(2), compress(row, flags[I])))
    if any(map(position.__contains__, zip(stages, repeat(B), microbatches))):
        return False
    return all(map(position.__contains__, zip(stages, repeat(W), microbatches)))


def _check_action(
    action: Action, index: int, rank: int, position: dict[Action, int], problems: list[ScheduleError]
) -> None:
    """The detailed order checks for one backward-side action (B, I or W)."""
    stage, kind, mb = action
    if kind is W:
        before = position.get((stage, I, mb))
        if before is None:
            problems.append(
                ScheduleError(
                    "W without I",
                    f"{action} needs {stage}I{mb} (the input-gradient half) on the same rank",
                    rank,
                    index,
                    action,
                )
            )
        elif before > index:
            problems.append(
                ScheduleError(
                    "W before I",
                    f"{action} runs before {stage}I{mb} (its #{before + 1}); W needs I's result",
                    rank,
                    index,
                    action,
                )
            )
        return
    if kind is I and (stage, B, mb) in position:
        problems.append(
            ScheduleError(
                "both B and I",
                f"{stage}B{mb} and {action} both run; a backward is either B, or I then W",
                rank,
                index,
                action,
            )
        )
    if kind is I and (stage, W, mb) not in position:
        problems.append(
            ScheduleError(
                "I without W",
                f"{action} splits the backward but {stage}W{mb} never runs",
                rank,
                index,
                action,
            )
        )
    forward = position.get((stage, F, mb))
    if forward is not None and forward > index:
        problems.append(
            ScheduleError(
                f"{kind} before F",
                f"{action} runs before {stage}F{mb} (its #{forward + 1}); a backward needs its forward's activations",
                rank,
                index,
                action,
            )
        )


def _check_missing(
    schedule: Schedule,
    position: dict[Action, int],
    misplaced: set[Action],
    problems: list[ScheduleError],
    cap: int,
) -> None:
    """Every (stage, microbatch) needs one F and one backward (B, or I then W)."""

    def present(key: tuple) -> bool:
        return key in position or key in misplaced

    counts = Counter(map(itemgetter(1), position))  # C speed: 10^5 actions
    expected = schedule.num_stages * schedule.num_microbatches
    if counts[F] == expected and counts[B] + counts[I] == expected:
        return  # no duplicates and no out-of-range entries survive the scan: all present
    for stage in range(schedule.num_stages):
        rank = schedule.stage_to_rank[stage]
        for mb in range(schedule.num_microbatches):
            if len(problems) >= cap:
                return
            holder = f"rank {rank} holds stage {stage}"
            if not present((stage, F, mb)):
                detail = f"{stage}F{mb} never runs; {holder}"
                problems.append(ScheduleError("missing forward", detail, rank, None, Action(stage, F, mb)))
            if not present((stage, B, mb)) and not present((stage, I, mb)):
                detail = f"neither {stage}B{mb} nor {stage}I{mb} runs; {holder}"
                problems.append(ScheduleError("missing backward", detail, rank, None, Action(stage, B, mb)))


# --- torch's full order ----------------------------------------------------------------------------------------


def _check_order(schedule: Schedule, problems: list[ScheduleError], cap: int) -> None:
    """Transfers and collectives of torch's order: where they stand relative to the compute they serve."""
    if not states_comms(schedule):  # compute actions and pairs alone (the overlapped families): nothing to place
        return
    placement, num_stages, num_mb = schedule.stage_to_rank, schedule.num_stages, schedule.num_microbatches
    seen: set[CommAction] = set()
    for rank, row in enumerate(schedule.order or ()):
        if not any(issubclass(kind, CommAction) for kind in set(map(type, row))):  # nothing to place: read in C
            continue
        at = {a: index for index, e in enumerate(row) for a in entry_actions(e)}
        last_backward = {a.stage: index for index, e in enumerate(row) for a in entry_actions(e) if a.kind in (B, W)}
        for index, entry in enumerate(row):
            if len(problems) >= cap:
                return
            if not isinstance(entry, CommAction):
                continue
            problem = _order_problem(entry, index, rank, at, last_backward, seen, placement, num_stages, num_mb)
            if problem:
                problems.append(ScheduleError(problem[0], problem[1], rank, index, None))
            seen.add(entry)
    if schedule.has_transfers:
        _check_every_transfer(schedule, seen, problems, cap)
    if len(problems) < cap:
        _check_every_reload(schedule, seen, problems)


def _order_problem(
    entry: CommAction,
    index: int,
    rank: int,
    at: dict,
    last_backward: dict,
    seen: set,
    placement: tuple[int, ...],
    num_stages: int,
    num_mb: int,
) -> tuple[str, str] | None:
    stage, kind, mb = entry
    if not 0 <= stage < num_stages or placement[stage] != rank:
        return "misplaced action", f"{entry}: stage {stage} does not live on rank {rank}"
    if entry in seen:
        return f"duplicate {kind}", f"{entry} appears twice"
    if kind is CommKind.REDUCE_GRAD:
        if last_backward.get(stage, -1) > index:
            return "REDUCE_GRAD too early", f"{entry} comes before stage {stage}'s last backward; it reduces them all"
        return None
    if kind in MEMORY_MOVES:
        return _move_problem(entry, index, at, seen, num_mb)
    if kind not in TRANSFER_KINDS:
        return None
    # a send comes after the action that produces what it moves, a receive before the one that needs it
    kinds, after = served_kinds(entry), kind in SENDS
    if mb is None or not 0 <= mb < num_mb:
        return "out of range", f"{entry}: a transfer names a microbatch in 0..{num_mb - 1}"
    peer = peer_stage(entry)
    if not 0 <= peer < num_stages or placement[peer] == rank:
        return f"needless {kind}", f"{entry}: stage {stage} has no neighbour {peer} on another rank to talk to"
    served = [at[(stage, k, mb)] for k in kinds if (stage, k, mb) in at]
    if not served:
        return (
            f"{kind} without its action",
            f"{entry}: no {'/'.join(map(str, kinds))} of stage {stage} microbatch {mb} on this rank",
        )
    if after and served[0] > index:
        return f"{kind} too early", f"{entry} comes before the action that produces what it sends"
    if not after and served[0] < index:
        return f"{kind} too late", f"{entry} comes after the action that needs what it receives"
    return None


def _move_problem(entry: CommAction, index: int, at: dict, seen: set, num_mb: int) -> tuple[str, str] | None:
    """An OFFLOAD stands after the forward whose activations it moves, a RELOAD after that OFFLOAD, and both
    before the first backward that needs them (`pipesim.semantics.lower.memory_moves`)."""
    stage, kind, mb = entry
    if mb is None or not 0 <= mb < num_mb:
        return "out of range", f"{entry}: a memory move names a microbatch in 0..{num_mb - 1}"
    new = tuple.__new__  # one per move: no argument check for the schedule's own numbers
    found = [at[a] for a in (new(Action, (stage, k, mb)) for k in RELOAD_SERVES) if a in at]
    backward = min(found) if found else None
    if kind is CommKind.OFFLOAD:
        forward = at.get(new(Action, (stage, F, mb)))
        if forward is None or forward > index:
            return "OFFLOAD too early", f"{entry} comes before {stage}F{mb}, whose activations it moves"
    elif CommAction(stage, CommKind.OFFLOAD, mb) not in seen:
        return "RELOAD without OFFLOAD", f"{entry} brings back what no earlier {stage}OFFLOAD{mb} moved out"
    if backward is None or backward < index:
        return f"{kind} too late", f"{entry} comes after the backward of stage {stage} microbatch {mb} that needs it"
    return None


def _check_every_reload(schedule: Schedule, seen: set, problems: list[ScheduleError]) -> None:
    """Every OFFLOAD has its RELOAD: the backward needs the activations back on the device."""
    for entry in sorted(seen, key=str):
        stage, kind, mb = entry
        if kind is CommKind.OFFLOAD and CommAction(stage, CommKind.RELOAD, mb) not in seen:
            rank = schedule.stage_to_rank[stage]
            problems.append(
                ScheduleError(
                    "OFFLOAD without RELOAD",
                    f"{entry} moves activations out that no {stage}RELOAD{mb} brings back before the backward",
                    rank,
                    None,
                    None,
                )
            )


def _check_every_transfer(schedule: Schedule, seen: set, problems: list[ScheduleError], cap: int) -> None:
    """When the order states transfers, every message between ranks is sent once and received once."""
    placement, num_stages = schedule.stage_to_rank, schedule.num_stages
    for rank, row in enumerate(schedule.actions):
        for action in row:
            if len(problems) >= cap:
                return
            message = produced_message(action, num_stages)
            if message is None or placement[message.stage] == rank:
                continue
            for comm in transfers_of(message):
                if comm not in seen:
                    owner = placement[comm.stage]
                    problems.append(
                        ScheduleError(
                            f"missing {comm.kind}",
                            f"{action}'s output crosses ranks but rank {owner} has no {comm}",
                            owner,
                            None,
                            None,
                        )
                    )
