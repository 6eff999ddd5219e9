"""C-speed screens of a schedule's compute actions, run before `validate`'s per-action checks.

A screen answers True only when it has proved a rule holds for a whole rank list; False means "look closer",
never "wrong": `pipesim.semantics.validate` then runs its detailed checks, which name the problem. A sound
registry-built schedule of 10^5 actions is thereby checked in a few list passes per rank, without hashing each
action into a position table (the table and its per-kind count were half of validating 1f1b 64 x 1024).

A schedule `validate` found sound is marked so (`mark_validated`): a Schedule never changes, so the checks hold for
its lifetime, and `pipesim.semantics.dag.dependencies` then skips the range and producer checks they imply (the
simulator's second look at what `simulate` had just validated).
"""

from __future__ import annotations

from itertools import compress, repeat
from operator import is_, itemgetter, lt

from pipesim.ir import Action, B, F, Schedule

_key = itemgetter(0, 2)  # (stage, microbatch)
_VALIDATED = "_validated"  # the mark's name in the schedule's instance dict (fields and equality untouched)


def is_validated(schedule: Schedule) -> bool:
    """Whether `validate` has found this very schedule sound."""
    return schedule.__dict__.get(_VALIDATED, False)


def mark_validated(schedule: Schedule) -> None:
    """Record that `validate` found `schedule` sound (set as functools.cached_property sets a frozen value)."""
    schedule.__dict__[_VALIDATED] = True


def row_is_clean(row: tuple[Action, ...], own_stages: set[int], num_mb: int) -> bool:
    """A rank's list names only its own stages and microbatches in range (repeats are not looked at)."""
    if not row:
        return True
    microbatches = list(map(itemgetter(2), row))
    return set(map(itemgetter(0), row)) <= own_stages and 0 <= min(microbatches) and max(microbatches) < num_mb


def compute_rules_hold(schedule: Schedule) -> bool:
    """Whether every rank runs exactly one F and one B of each (stage, microbatch) of its own stages and nothing
    else, each B after its F: then every rule `validate` checks on compute actions holds (a stage lives on one
    rank, so every rank covering its own stages covers them all). Split backwards (I, W) are left to the
    detailed checks."""
    num_mb = schedule.num_microbatches
    for rank, row in enumerate(schedule.actions):
        own = schedule.stages_of_rank(rank)
        expected = len(own) * num_mb
        if len(row) != 2 * expected or not row_is_clean(row, set(own), num_mb):
            return False
        kinds = list(map(itemgetter(1), row))
        is_forward = list(map(is_, kinds, repeat(F)))
        is_backward = list(map(is_, kinds, repeat(B)))
        if is_forward.count(True) != expected or is_backward.count(True) != expected:
            return False
        places = range(len(row))
        forward_at = dict(zip(map(_key, compress(row, is_forward)), compress(places, is_forward), strict=True))
        backward_keys = list(map(_key, compress(row, is_backward)))
        # as many distinct keys as slots, all in range: each (stage, microbatch) once per kind, none missing
        if len(forward_at) != expected or len(set(backward_keys)) != expected:
            return False
        if not all(map(lt, map(forward_at.__getitem__, backward_keys), compress(places, is_backward))):
            return False
    return True
