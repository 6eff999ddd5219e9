"""A timeline's spans written as the JSON text json writes for their dicts, byte for byte, without the dicts.

`pipesim.io.formats.timeline_text` (what `simulate --json` and `save_timeline` write) glues this text into the
document: a dict per span cost more than the rest of writing 131k spans. A simulation's spans are written off the
engine's columns (`SpanColumns`), so its Span tuples are never built for the file.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left
from collections.abc import Iterable
from itertools import islice, pairwise
from operator import itemgetter, le
from pathlib import Path
from typing import Any

from pipesim.records import Span, SpanColumns


def columns_text(columns: SpanColumns, path: str | Path, action_texts: Iterable[str] | None) -> str | None:
    """`spans_text` of a simulation's spans, read off its columns (step and replica 0); None where a time is not
    a float (the caller then writes the spans)."""
    ranks, actions, starts, ends = columns
    if not _float_times(starts, ends, path) or not starts:
        return None
    if action_texts is None:
        texts = [f"{stage}{kind._value_}{microbatch}" for stage, kind, microbatch in actions]
    else:
        texts = list(action_texts)
        if len(texts) != len(starts):
            raise ValueError(f"{len(texts)} action texts for {len(starts)} spans")
    if not all(map(le, ranks, islice(ranks, 1, None))):  # not one run per rank: the rank written per span
        return _one_step_text(zip(ranks, texts, starts, ends, strict=True))
    # each rank's spans one run, in rank order (as the engine lays them): the rank is written once per run, in the
    # text between two of its spans (131k spans: 55 -> 36 ms)
    runs = []
    for rank, (lo, hi) in zip(range(ranks[0], ranks[-1] + 1), pairwise(_run_bounds(ranks)), strict=True):
        if hi > lo:
            head = f'{{"rank":{rank},"action":"'
            inner = [
                f'{text}","start":{start!r},"end":{end!r},"step":0'
                for text, start, end in zip(texts[lo:hi], starts[lo:hi], ends[lo:hi], strict=True)
            ]
            runs.append(head + f"}},{head}".join(inner) + "}")
    return ",".join(runs)


def _run_bounds(ranks: list[int]) -> list[int]:
    """Where each rank's run starts in ascending `ranks`, from the first rank to one past the last."""
    return [bisect_left(ranks, rank) for rank in range(ranks[0], ranks[-1] + 2)]


def _float_times(starts: list, ends: list, path: str | Path) -> bool:
    """Whether every time is a float (json then writes its repr); a non-finite one is refused."""
    # a sum is finite only if every number is (an inf or a nan carries through); one that overflows is checked in
    # full (the checks of 131k spans: 17 -> 13.5 ms against a test per number)
    if not math.isfinite(sum(starts) + sum(ends)) and not (
        all(map(math.isfinite, starts)) and all(map(math.isfinite, ends))
    ):
        raise ValueError(f"{path}: refusing to write a non-finite number (inf or nan); check the inputs")
    types = set(map(type, starts))
    types.update(map(type, ends))
    return types == {float}


def _one_step_text(rows: Iterable[tuple[int, str, float, float]]) -> str:
    """Spans of step 0, replica 0, given as (rank, action text, start, end) with float times, as json writes
    their dicts: float repr is json's; a text per span, unpacked, 1.8x quicker than a dict per span (joining the
    pieces column by column in C was slower still); the text between two spans is the
    separator."""
    inner = [f'{rank},"action":"{text}","start":{start!r},"end":{end!r},"step":0' for rank, text, start, end in rows]
    return '{"rank":' + '},{"rank":'.join(inner) + "}"


def spans_text(spans: tuple[Span, ...], path: str | Path, action_texts: Iterable[str] | None = None) -> str:
    """The spans as `json.dumps(..., separators=(",", ":"))` writes their dicts (floats by repr, as json does)."""
    # the time columns taken out once, then summed and typed as lists
    starts, ends = list(map(itemgetter(2), spans)), list(map(itemgetter(3), spans))
    floats = _float_times(starts, ends, path)
    if spans and floats and not any(map(_replica, spans)):
        # a simulation's, or one like it: the action's text (Action.__str__) inline
        if not any(map(_step, spans)):  # one step (every simulation's)
            if action_texts is None:
                action_texts = [f"{stage}{kind._value_}{microbatch}" for _, (stage, kind, microbatch), *_ in spans]
            return _one_step_text(zip(map(itemgetter(0), spans), action_texts, starts, ends, strict=True))
        return ",".join(
            [
                f'{{"rank":{rank},"action":"{stage}{kind._value_}{microbatch}","start":{start!r},"end":{end!r},'
                f'"step":{step}}}'
                for rank, (stage, kind, microbatch), start, end, step, _ in spans
            ]
        )
    number = {float: float.__repr__, int: int.__repr__}
    return ",".join(
        f'{{"rank":{s.rank},"action":"{s.action}","start":{number.get(type(s.start), _json_number)(s.start)},'
        f'"end":{number.get(type(s.end), _json_number)(s.end)},"step":{s.step}'
        + (f',"replica":{s.replica}}}' if s.replica else "}")
        for s in spans
    )


_replica = itemgetter(5)  # Span.replica: 0 for every span of a simulation
_step = itemgetter(4)  # Span.step: 0 for every span of one simulated step


def _json_number(value: Any) -> str:
    return json.dumps(value)  # a float or int subclass (numpy's float64): as json writes it
