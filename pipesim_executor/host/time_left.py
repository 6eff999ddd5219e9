"""The time left of a launch, for its progress bar: smooth enough to read while progress comes in steps.

A profile's progress moves in steps minutes apart (a phase of many units, then the in-situ steps), so the rate of
the latest step (tqdm's estimate) swings between an hour and a minute. This one prices what is left at the average
rate so far (elapsed / fraction done), counts the shown figure down between redraws, and lets each redraw move it
at most `MAX_MOVE` times (either way) off that countdown: a step in progress shows as a turn, never as a jump.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_MOVE = 1.25  # the most one redraw moves the shown time left off its countdown, either way
FLOOR_S = 1.0  # the countdown stops here while work is left (a bar at 0 s for minutes looks hung)


@dataclass
class TimeLeft:
    """`estimate(now, fraction)`: the seconds left, or None before anything is done. A pure function of the
    sequence of calls (times from one clock, fractions from 0 to 1)."""

    started: float
    shown: float | None = None
    shown_at: float = 0.0

    def estimate(self, now: float, fraction: float) -> float | None:
        elapsed = now - self.started
        if fraction <= 0 or elapsed <= 0:
            return None
        fraction = min(fraction, 1.0)
        left = elapsed * (1.0 - fraction) / fraction  # the average rate so far: steadier than the last step's
        if self.shown is not None:
            counted = max(self.shown - (now - self.shown_at), FLOOR_S if fraction < 1 else 0.0)
            left = min(max(left, counted / MAX_MOVE), counted * MAX_MOVE)
        self.shown, self.shown_at = left, now
        return left
