"""The one record type for simulated and measured runs, and the metrics read off it.

Charts, metrics and exporters read only a `Timeline`; whether it came from
the simulator or from the executor is its `source`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from pipesim.ir import Action

Source = Literal["simulated", "measured"]


class Span(NamedTuple):
    """One action on one rank, from `start` to `end` (milliseconds).

    `step` numbers the training step for measured timelines that hold several.
    """

    rank: int
    action: Action
    start: float
    end: float
    step: int = 0

    @property
    def duration(self) -> float:
        return self.end - self.start


class CommSpan(NamedTuple):
    """Time a rank spent blocked on a transfer (measured runs): `kind` is "send" or "recv".

    `action` is the action whose tensor was being moved; `peer` the other rank.
    """

    rank: int
    kind: str
    peer: int
    action: Action
    start: float
    end: float
    step: int = 0


@dataclass(frozen=True)
class Timeline:
    """Spans of one or more steps of a schedule on `num_ranks` ranks."""

    num_ranks: int
    spans: tuple[Span, ...]
    source: Source = "simulated"
    schedule_name: str = ""
    comm: tuple[CommSpan, ...] = ()
    meta: dict = field(default_factory=dict, compare=False)
