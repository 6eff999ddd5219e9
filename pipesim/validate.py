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

Cross-rank ordering problems are not structural: they show up as a cycle in
the dependency graph (`pipesim.dag.find_deadlock`).
"""

from __future__ import annotations

from pipesim._perf import paused_gc
from pipesim.ir import Action, B, F, I, W, Schedule


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
            where.append(f"action {action}" + (f" (position {index})" if index is not None else ""))
        prefix = ", ".join(where)
        super().__init__(f"{prefix}: {rule}: {detail}" if prefix else f"{rule}: {detail}")


def validate(schedule: Schedule) -> None:
    """Raise `ScheduleError` for the first problem found; return None when the schedule is sound."""
    problems = find_problems(schedule, limit=1)
    if problems:
        raise problems[0]


@paused_gc()
def find_problems(schedule: Schedule, limit: int | None = None) -> list[ScheduleError]:
    """Every structural problem, in rank order (at most `limit` when given)."""
    problems: list[ScheduleError] = []
    misplaced: set[Action] = set()
    position = _scan_actions(schedule, problems, misplaced)
    if limit is None or len(problems) < limit:
        _check_pairs(schedule, position, problems)
        if not problems or limit is None:
            _check_missing(schedule, position, misplaced, problems)
    return problems if limit is None else problems[:limit]


def _scan_actions(
    schedule: Schedule, problems: list[ScheduleError], misplaced: set[Action]
) -> dict[Action, tuple[int, int]]:
    """One pass over every action: range, placement, duplicates. Returns action -> (rank, index).

    Actions on the wrong rank go to `misplaced` instead: reported once, not again as missing.
    """
    placement = schedule.stage_to_rank
    num_stages, num_mb = schedule.num_stages, schedule.num_microbatches
    position: dict[Action, tuple[int, int]] = {}
    for rank, row in enumerate(schedule.actions):
        for index, action in enumerate(row):
            stage, _, mb = action
            if not (0 <= stage < num_stages and 0 <= mb < num_mb):
                problems.append(ScheduleError(
                    "out of range",
                    f"stages are 0..{num_stages - 1} and microbatches 0..{num_mb - 1}",
                    rank, index, action,
                ))
                continue
            if placement[stage] != rank:
                problems.append(ScheduleError(
                    "stage on two ranks",
                    f"stage {stage} lives on rank {placement[stage]} (stage_to_rank) but rank {rank} runs {action}; "
                    "each stage lives on exactly one rank",
                    rank, index, action,
                ))
                misplaced.add(action)
                continue
            if action in position:
                problems.append(ScheduleError(
                    f"duplicate {action.kind}",
                    f"{action} already runs at position {position[action][1]}; each (stage, microbatch) "
                    f"has exactly one {action.kind}",
                    rank, index, action,
                ))
                continue
            position[action] = (rank, index)
    return position


def _check_pairs(schedule: Schedule, position: dict[Action, tuple[int, int]], problems: list[ScheduleError]) -> None:
    """Order on the rank: F before its backward, I before W; B and I never both."""
    for action, (rank, index) in position.items():
        stage, kind, mb = action
        if kind is F:
            continue
        if kind is W:
            before = position.get((stage, I, mb))
            if before is None:
                problems.append(ScheduleError(
                    "W without I", f"{action} needs {stage}I{mb} (the input-gradient half) on the same rank",
                    rank, index, action,
                ))
            elif before[1] > index:
                problems.append(ScheduleError(
                    "W before I", f"{action} runs before {stage}I{mb} (position {before[1]}); W needs I's result",
                    rank, index, action,
                ))
            continue
        if kind is I and (stage, B, mb) in position:
            problems.append(ScheduleError(
                "both B and I", f"{stage}B{mb} and {action} both run; a backward is either B, or I then W",
                rank, index, action,
            ))
        if kind is I and (stage, W, mb) not in position:
            problems.append(ScheduleError(
                "I without W", f"{action} splits the backward but {stage}W{mb} never runs",
                rank, index, action,
            ))
        forward = position.get((stage, F, mb))
        if forward is not None and forward[1] > index:
            problems.append(ScheduleError(
                f"{kind} before F", f"{action} runs before {stage}F{mb} (position {forward[1]}); "
                "a backward needs its forward's activations",
                rank, index, action,
            ))


def _check_missing(
    schedule: Schedule,
    position: dict[Action, tuple[int, int]],
    misplaced: set[Action],
    problems: list[ScheduleError],
) -> None:
    """Every (stage, microbatch) needs one F and one backward (B, or I then W)."""
    def present(key: tuple) -> bool:
        return key in position or key in misplaced

    counts = {kind: 0 for kind in (F, B, I, W)}
    for action in position:
        counts[action.kind] += 1
    expected = schedule.num_stages * schedule.num_microbatches
    if counts[F] == expected and counts[B] + counts[I] == expected:
        return  # no duplicates and no out-of-range entries survive the scan: all present
    for stage in range(schedule.num_stages):
        rank = schedule.stage_to_rank[stage]
        for mb in range(schedule.num_microbatches):
            if not present((stage, F, mb)):
                problems.append(ScheduleError(
                    "missing forward", f"{stage}F{mb} never runs; rank {rank} holds stage {stage}",
                    rank, None, Action(stage, F, mb),
                ))
            if not present((stage, B, mb)) and not present((stage, I, mb)):
                problems.append(ScheduleError(
                    "missing backward", f"neither {stage}B{mb} nor {stage}I{mb} runs; rank {rank} holds stage {stage}",
                    rank, None, Action(stage, B, mb),
                ))
