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
from operator import add, is_, itemgetter, lt, mul, or_

from pipesim.ir import Action, B, F, I, Schedule, W

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
    """Whether every rank runs, of each (stage, microbatch) of its own stages, exactly one F and one backward (a B,
    or an I and its W) and nothing else, each B and I after its F and each W after its I: then every rule
    `validate` checks on compute actions holds (a stage lives on one rank, so every rank covering its own stages
    covers them all)."""
    num_mb = schedule.num_microbatches
    for rank, row in enumerate(schedule.actions):
        own = schedule.stages_of_rank(rank)
        expected = len(own) * num_mb
        if len(row) < 2 * expected:
            return False
        kinds = list(map(itemgetter(1), row))
        is_forward = list(map(is_, kinds, repeat(F)))
        if is_forward.count(True) != expected:
            return False
        if len(row) != 2 * expected or kinds.count(B) != expected:  # a split backward, or a fault
            if not _split_rules_hold(row, set(own), kinds, is_forward, num_mb):
                return False
            continue
        is_backward = list(map(is_, kinds, repeat(B)))
        if is_backward.count(True) != expected or not row_is_clean(row, set(own), num_mb):
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


def _split_rules_hold(
    row: tuple[Action, ...],
    own: set[int],
    kinds: list,
    is_forward: list[bool],
    num_mb: int,
) -> bool:
    """`compute_rules_hold` for one rank whose backward is split (I then W), whole or mixed, its F counted: it
    names only its `own` stages and microbatches in range (`row_is_clean`, from the same columns as the keys), and
    each of its (stage, microbatch) keys has one F, one B or I after it, and each I one W after it. A key is the
    number stage * num_mb + microbatch (an int hashes for nothing: a pair costs a tuple and its hash)."""
    expected = len(own) * num_mb
    is_input = list(map(is_, kinds, repeat(I)))
    is_weight = list(map(is_, kinds, repeat(W)))
    is_backward = list(map(is_, kinds, repeat(B))) if B in kinds else None  # a V rank's has none
    whole = is_backward.count(True) if is_backward else 0
    inputs, weights = is_input.count(True), is_weight.count(True)
    if whole + inputs != expected or weights != inputs or 2 * expected + weights != len(row):
        return False  # a backward missing or twice, a W short of its I, or a kind other than F, B, I and W
    stages, microbatches = list(map(itemgetter(0), row)), list(map(itemgetter(2), row))
    if not set(stages) <= own or min(microbatches) < 0 or max(microbatches) >= num_mb:
        return False
    codes = list(map(add, map(mul, stages, repeat(num_mb)), microbatches))
    places = range(len(row))
    forward_at = dict(zip(compress(codes, is_forward), compress(places, is_forward), strict=True))
    is_back = list(map(or_, is_backward, is_input)) if is_backward and whole else is_input
    back = list(compress(codes, is_back))
    if len(forward_at) != expected or len(set(back)) != expected:  # each key once as F, once as B or I
        return False
    if not all(map(lt, map(forward_at.__getitem__, back), compress(places, is_back))):
        return False
    input_at = dict(zip(compress(codes, is_input), compress(places, is_input), strict=True))
    weight = list(compress(codes, is_weight))
    if len(set(weight)) != weights:  # a W twice
        return False
    # each W after its own I: a W whose key has no I gets the row's length, never before its place
    return all(map(lt, map(input_at.get, weight, repeat(len(row))), compress(places, is_weight)))
