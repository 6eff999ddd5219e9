"""A progress bar on the terminal for the long commands (profile, run, verify-plan, plan, synthesize), drawn by tqdm
on stderr, and only when stderr is a terminal: output a program reads (a pipe, a file, the app, the tests) stays
as it was, and stdout keeps the results alone.

    with ProgressBar("plan") as bar:          # no bar where stderr is not a terminal: every call does nothing
        bar.set(done / total, f"{done}/{total} candidates")
    with ProgressBar.ticking("synthesize", seconds=10):   # elapsed time against a known limit
        work()

The machine-readable event lines of `pipesim-run run` and `profile` are the other half of the rule
(pipesim_executor.host.cli_run.EventOutput): printed with --events, or whenever stdout is not a terminal.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

# {percentage} of a bar whose total is 1.0; the postfix says what is happening ("step 3/5 (measure)")
_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{remaining}{postfix}"
_OWN_LEFT_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {elapsed}<{left}{postfix}"
TICK_S = 0.25  # how often a ticking bar moves
NOTE_CHARS = 40  # the note beside the bar, cut to this


def on_terminal(stream: IO[str] | None = None) -> bool:
    """Whether `stream` (default stderr) is a terminal a person watches."""
    stream = sys.stderr if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or replaced by an object without isatty
        return False


class ProgressBar:
    """A bar from 0 to 1 on stderr (tqdm), or nothing at all where stderr is not a terminal."""

    def __init__(self, what: str, enabled: bool | None = None) -> None:
        self._bar: Any = None
        self._lock = threading.Lock()  # events arrive from the launcher's threads
        if on_terminal() if enabled is None else enabled:
            from tqdm import tqdm  # lazily: `pipesim list` and every non-terminal use never load it

            self._bar = tqdm(total=1.0, desc=what, file=sys.stderr, leave=False, bar_format=_FORMAT, dynamic_ncols=True)

    @property
    def shown(self) -> bool:
        return self._bar is not None

    def set(self, fraction: float, note: str = "", left_s: float | None = None) -> None:
        """Move the bar to `fraction` (0 to 1; it never moves back) with a short note beside it; `left_s`, the
        caller's own estimate of the time left, replaces tqdm's (a rate that jumps when progress comes in steps)."""
        if self._bar is None:
            return
        with self._lock:
            self._bar.n = max(self._bar.n, min(1.0, max(0.0, float(fraction))))
            if left_s is not None:
                self._bar.bar_format = _OWN_LEFT_FORMAT.replace("{left}", self._bar.format_interval(left_s))
            if note:  # a short note: the bar keeps its width on a narrow terminal
                self._bar.set_postfix_str(
                    note if len(note) <= NOTE_CHARS else note[: NOTE_CHARS - 3] + "...", refresh=False
                )
            self._bar.refresh()

    def write(self, line: str) -> None:
        """A line on stdout above the bar (which is redrawn below it)."""
        if self._bar is None:
            print(line, flush=True)
            return
        from tqdm import tqdm

        with self._lock:
            tqdm.write(line, file=sys.stdout)

    def close(self) -> None:
        """Take the bar off the terminal (before the summary is printed)."""
        if self._bar is not None:
            with self._lock:
                self._bar.close()
                self._bar = None

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    @contextmanager
    def ticking(what: str, seconds: float, enabled: bool | None = None) -> Iterator[ProgressBar]:
        """A bar of the elapsed time against `seconds` (a time limit the work stays within), moved by a thread."""
        bar, stop = ProgressBar(what, enabled), threading.Event()
        started = time.monotonic()

        def tick() -> None:
            while not stop.wait(TICK_S):
                elapsed = time.monotonic() - started
                bar.set(elapsed / seconds, f"{elapsed:.0f} of at most {seconds:g} s")

        ticker = threading.Thread(target=tick, daemon=True) if bar.shown else None
        if ticker is not None:
            ticker.start()
        try:
            yield bar
        finally:
            stop.set()
            if ticker is not None:
                ticker.join()
            bar.close()
