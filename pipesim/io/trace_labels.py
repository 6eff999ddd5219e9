"""Kineto traces read down to their action labels: files -> `Label`s (rank, action text, start, end) on one clock.

The first half of `pipesim.io.kineto` (which says what the labels are and what becomes of them): reading a trace
file within `pipesim.limits` (bytes, events, ranks), keeping only the events that can be labels while the JSON is
parsed, working out each file's (or each process's) rank, and putting every label on one clock. No torch import.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from pipesim.io.bounded import read_bytes
from pipesim.io.formats import parse_json
from pipesim.limits import MAX_ACTIONS, MAX_RANKS, MAX_TRACE_BYTES, MAX_TRACE_EVENTS
from pipesim.programs import programs

LABEL_PREFIX = "PP:"
_RANK_NAME = re.compile(r"rank\s*(\d{1,6})", re.IGNORECASE | re.ASCII)
# ScheduleGPipe's own labels (torch 2.13 gives its single-stage schedules no PP: labels); the stage is the rank's.
_GPIPE = re.compile(r"^(Forward|Backward) (\d{1,9})$", re.ASCII)
_GPIPE_PREFIXES = ("Forward ", "Backward ")
_RANK_STAGE = "#"


class Label(NamedTuple):
    """One `PP:` slice of one rank: times in ms on the shared clock (a tuple: a trace holds 10^5 to 10^6)."""

    rank: int
    text: str
    start: float
    end: float


class Slice(NamedTuple):
    """A complete event ("ph": "X") that may be an action label: what `read_trace` keeps of one (as a plain
    tuple of these four fields while parsing, the cheapest thing to make a million of)."""

    name: str
    ts: Any
    dur: Any
    pid: Any


# --- reading files --------------------------------------------------------------------------------------------


def _keep_event(obj: dict[str, Any]) -> Any:
    """json's object hook: an event that can be an action label becomes a small `Slice`, a process name stays,
    every other event becomes None at once (torch ops, memory, flows: most of a trace). Parsing then holds
    about a third of the memory the whole document would; the event count is kept (the list's length)."""
    phase = obj.get("ph")
    if phase is None:  # not an event: the document, "args", "distributedInfo"
        return obj
    name = obj.get("name")
    if phase == "X" and isinstance(name, str) and (name.startswith(LABEL_PREFIX) or name.startswith(_GPIPE_PREFIXES)):
        return (name, obj.get("ts"), obj.get("dur"), obj.get("pid"))
    if phase == "M" and name == "process_name":
        return obj
    return None


def _as_trace(name: str, data: Any) -> dict[str, Any]:
    if isinstance(data, list):  # the format also allows a bare array of events
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError(f'{name}: not a Chrome trace: expected an object with a "traceEvents" list')
    if len(data["traceEvents"]) > MAX_TRACE_EVENTS:
        raise ValueError(
            f"{name} holds {len(data['traceEvents']):,} events; pipesim imports at most {MAX_TRACE_EVENTS:,} "
            "(pipesim/limits.py): record fewer steps"
        )
    return data


def read_trace(path: str | Path) -> dict[str, Any]:
    """One Chrome/Kineto trace file as {"traceEvents": [...], ...}, keeping only the events this module reads;
    every failure a one-line ValueError naming the file (bounded: `pipesim.io.bounded`)."""
    return parse_trace(str(path), read_bytes(path, MAX_TRACE_BYTES, "trace file"))


def parse_trace(name: str, raw: bytes) -> dict[str, Any]:
    """`read_trace` for bytes already in memory (an upload); `name` names it in errors."""
    if len(raw) > MAX_TRACE_BYTES:
        raise ValueError(
            f"{name} is {len(raw) / 1024**2:,.0f} MiB; pipesim reads traces of at most "
            f"{MAX_TRACE_BYTES / 1024**2:,.0f} MiB (pipesim/limits.py): record fewer steps"
        )
    return _as_trace(name, parse_json(raw, name, object_hook=_keep_event))


def _time(value: Any) -> float | None:
    """A finite number of microseconds, or None (NaN, infinities, text and booleans are not times)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _slices(data: dict[str, Any]) -> list[tuple[str, Any, Any, Any]]:
    """The complete events of a parsed trace that may be labels, as `Slice` fields: the tuples `read_trace`
    kept, or the dicts of a trace parsed some other way."""
    found = []
    for event in data["traceEvents"]:
        if isinstance(event, tuple):
            found.append(event)
        elif isinstance(event, dict) and event.get("ph") == "X" and isinstance(event.get("name"), str):
            found.append((event["name"], event.get("ts"), event.get("dur"), event.get("pid")))
    return found


def _action_text(label: str, gpipe: bool) -> str | None:
    """The action text of a label (`PP:2F0` -> "2F0"); with `gpipe`, ScheduleGPipe's "Forward 3" -> "#F3"."""
    if not gpipe:
        return label[len(LABEL_PREFIX) :] if label.startswith(LABEL_PREFIX) else None
    match = _GPIPE.match(label)
    return None if match is None else f"{_RANK_STAGE}{match.group(1)[0]}{match.group(2)}"


def _labels_of(slices: list[tuple], name: str, gpipe: bool = False) -> dict[Any, list[tuple[str, float, float]]]:
    """The `PP:` complete events of one file (with `gpipe`: ScheduleGPipe's "Forward i" / "Backward i"), per
    process id: (action text, start us, end us). A label without finite times is an error naming it."""
    by_pid: dict[Any, list[tuple[str, float, float]]] = {}
    for label, ts, dur, pid in slices:
        text = _action_text(label, gpipe)
        if text is None:
            continue
        start, duration = _time(ts), _time(dur)
        end = None if start is None or duration is None or duration < 0 else start + duration
        if end is None or not math.isfinite(end):
            raise ValueError(f"{name}: event {label[:40]!r} has no valid ts/dur (finite microseconds)")
        by_pid.setdefault(pid if isinstance(pid, (int, str)) else str(pid), []).append((text, start, end))
    return by_pid


def _process_ranks(data: dict[str, Any], pids: list[Any]) -> list[Any]:
    """A merged file's processes in rank order: by a "rank N" process name where every one has it, else by id."""
    names = {
        e.get("pid"): e.get("args", {}).get("name")
        for e in data["traceEvents"]
        if isinstance(e, dict)
        and e.get("ph") == "M"
        and e.get("name") == "process_name"
        and isinstance(e.get("args"), dict)
    }
    numbers = {pid: _RANK_NAME.search(str(names.get(pid, ""))) for pid in pids}
    if all(numbers.values()):
        return sorted(pids, key=lambda pid: int(numbers[pid].group(1)))
    return sorted(pids, key=lambda pid: (isinstance(pid, str), pid))


def _check_rank(path: str, rank: int) -> None:
    """Ranks are numbered densely from 0, so a rank past the limit cannot be real: refused before any list
    of ranks is made (a trace naming rank 10^12 once asked for terabytes)."""
    if rank >= MAX_RANKS:
        raise ValueError(f"{path}: rank {rank} is past pipesim's limit of {MAX_RANKS:,} ranks (pipesim/limits.py)")


def collect_labels(files: Sequence[tuple[str, dict[str, Any]]]) -> list[Label]:
    """Every `PP:` slice of the given traces (name, parsed trace), with its rank, on one clock (ms from the
    earliest slice)."""
    if not files:
        raise ValueError("give at least one trace file (one per rank, or one merged)")
    if sum(len(data["traceEvents"]) for _, data in files) > MAX_TRACE_EVENTS:
        raise ValueError(f"the traces hold more than {MAX_TRACE_EVENTS:,} events (pipesim/limits.py)")
    # Integers as Kineto writes them: ns since the epoch lose precision as floats (2^-52 of 1.8e18 is 256 ns).
    bases = [
        base if isinstance(base := data.get("baseTimeNanoseconds"), int) and not isinstance(base, bool) else 0
        for _, data in files
    ]
    lowest = min(bases)
    raw: list[tuple[int, str, float, float]] = []
    seen_ranks: dict[int, int] = {}  # rank -> index of the file it came from
    next_rank = 0
    for index, ((path, data), base) in enumerate(zip(files, bases, strict=True)):
        slices = _slices(data)
        by_pid = _labels_of(slices, str(path)) or _labels_of(slices, str(path), gpipe=True)
        if not by_pid:
            raise ValueError(
                f"{path}: no {LABEL_PREFIX} labels: record with `{programs().executor} run "
                "--torch-profile`, or torch's multi-stage schedules (torch 2.13 labels actions only "
                "in _PipelineScheduleRuntime: interleaved 1F1B, looped BFS, zero bubble, ZBV, DualPipeV; "
                "ScheduleGPipe's 'Forward i' labels are read too, Schedule1F1B has none)"
            )
        info = data.get("distributedInfo")
        given = info.get("rank") if isinstance(info, dict) else None
        if len(by_pid) == 1 and isinstance(given, int) and not isinstance(given, bool) and given >= 0:
            ranks = {next(iter(by_pid)): given}
        else:
            ranks = {pid: next_rank + index for index, pid in enumerate(_process_ranks(data, list(by_pid)))}
        _check_rank(str(path), max(ranks.values()))
        next_rank = max(next_rank, max(ranks.values()) + 1)
        shift = (base - lowest) / 1000.0  # ns -> us, kept small so float precision stays sub-microsecond
        if not math.isfinite(shift):
            raise ValueError(f"{path}: baseTimeNanoseconds {base} is not a time pipesim can use")
        for pid, rows in by_pid.items():
            rank = ranks[pid]
            if rank in seen_ranks and seen_ranks[rank] != index:
                raise ValueError(
                    f"{path}: rank {rank} is also in {files[seen_ranks[rank]][0]}: give each rank's trace once"
                )
            seen_ranks[rank] = index
            stage = str(rank)
            raw.extend(
                (rank, text.replace(_RANK_STAGE, stage), start + shift, end + shift) for text, start, end in rows
            )
        if len(raw) > MAX_ACTIONS:
            raise ValueError(f"the traces hold more than {MAX_ACTIONS:,} labels (pipesim/limits.py)")
    if len(seen_ranks) <= max(seen_ranks):
        missing = next(rank for rank in range(max(seen_ranks) + 1) if rank not in seen_ranks)
        shown = sorted(seen_ranks)[:10]
        raise ValueError(f"no trace for rank {missing} (ranks found: {shown}{' ...' if len(seen_ranks) > 10 else ''}): "
                         "give every rank's trace")  # fmt: skip
    origin = min(start for _, _, start, _ in raw)
    raw.sort(key=lambda row: (row[0], row[2], -row[3]))  # per rank by start; an enclosing slice first
    if not all(math.isfinite((end - origin) / 1000.0) for _, _, _, end in raw):
        raise ValueError("the traces' times span more than a float can hold: are they of one run?")
    return [Label(rank, text, (start - origin) / 1000.0, (end - origin) / 1000.0) for rank, text, start, end in raw]
