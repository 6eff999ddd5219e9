"""torchrun's output as text: which line belongs to which rank, which rank failed first, and why.

Pure functions of the lines a launch printed (no processes, no files), so they are tested on captured text.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Mapping, Sequence

from pipesim_executor.progress import PROGRESS_PREFIX

RANK_LINE = re.compile(r"^\[(?:rank|default)(\d+)\]:(.*)$")
_FAILURE_ENTRY = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank[^\n]*\n\s*exitcode\s*:\s*(-?\d+)")
_ERROR_LINE = re.compile(r"^(\[rank\d+\]:\s*)?([\w.]*(Error|Exception|Interrupt)\b|Traceback)")
# A rank whose error is one of these died because another rank did.
PEER_FAILURE = ("Connection closed by peer", "remote worker crashing", "Connection reset by peer", "Broken pipe")


def torchrun_failures(text: str) -> list[tuple[int, int]]:
    """(rank, exit code) from torchrun's failure summary, its root cause first."""
    cut = text.find("Root Cause")
    parts = [text[cut:], text[:cut]] if cut >= 0 else [text]
    found: list[tuple[int, int]] = []
    for part in parts:
        for rank, code in _FAILURE_ENTRY.findall(part):
            if int(rank) not in dict(found):
                found.append((int(rank), int(code)))
    return found


def failed_rank(
    rank_lines: Mapping[int, Sequence[str]], launcher_lines: Sequence[str], error_events: Iterable[tuple[int, str]]
) -> int | None:
    """The rank that failed first, not one that merely lost its peer when the first one died.

    Evidence, strongest first: a rank's own error event, then an error in its log, that is not
    a lost connection; then torchrun's failure summary (root cause first) without the ranks it
    killed itself or that lost a peer; then whatever rank reported anything.
    """
    error_events = list(error_events)
    victims = {r for r, lines in rank_lines.items() if any(m in x for x in lines for m in PEER_FAILURE)}
    events = [r for r, message in error_events if r >= 0 and not any(m in message for m in PEER_FAILURE)]
    logs = [
        r for r, lines in sorted(rank_lines.items())
        if r not in victims and any(_ERROR_LINE.search(x) for x in lines)
    ]  # fmt: skip
    summary = torchrun_failures("\n".join(launcher_lines))
    listed = [r for r, code in summary if r not in victims and code not in (-signal.SIGTERM, -signal.SIGKILL)]
    fallback = [r for r, _ in summary] + [r for r, _ in error_events if r >= 0] + sorted(victims)
    for candidates in (events, logs, listed, fallback):
        if candidates:
            return candidates[0]
    return None


def failure_message(
    head: str,
    returncode: int | None,
    rank_lines: Mapping[int, Sequence[str]],
    launcher_lines: Sequence[str],
    error_events: Iterable[tuple[int, str]],
) -> tuple[str, int | None]:
    """Which rank failed, how (its last error line), and the tail of its log. `head` replaces the first
    line when the launcher already knows what happened (a timeout, a cancel)."""
    rank = failed_rank(rank_lines, launcher_lines, error_events)
    lines = list(rank_lines.get(rank, [])) if rank is not None else list(launcher_lines)
    if not head:
        if rank is None:
            head = f"torchrun exited with code {returncode}"
        else:
            codes = dict(torchrun_failures("\n".join(launcher_lines)))
            head = f"rank {rank} failed" + (f" (exit code {codes[rank]})" if rank in codes else "")
            said = [x for x in lines if _ERROR_LINE.search(x) and "Traceback (most recent" not in x]
            said = said or [x for x in lines if x.strip() and not x.startswith(PROGRESS_PREFIX)]
            head += f": {said[-1].strip()}" if said else ""
    tail = "\n".join(lines[-20:])
    where = f"rank {rank}" if rank is not None else "torchrun"
    return (f"{head}\n--- last lines of {where} ---\n{tail}" if tail else head), rank
