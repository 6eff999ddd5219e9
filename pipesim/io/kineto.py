"""A real run in: torch.profiler (Kineto) traces -> each rank's actions and times -> an imported Timeline.

torch.distributed.pipelining's runtime (torch 2.13, `_PipelineScheduleRuntime`) wraps every action it runs in
`record_function("PP:<action>")`: compute (`PP:2F0`, `PP:1I3`, `PP:1W3`, `PP:(0F7;7B3)OVERLAP_F_B`) and
communication (`PP:1SEND_F0`, `PP:0RECV_B2`, `PP:0REDUCE_GRAD`). The executor labels its own actions the same way
under `--torch-profile`. Those labels are all this module reads (and, in a trace with none, ScheduleGPipe's own
"Forward i" / "Backward i", stage i's rank being the file's: torch 2.13 gives its single-stage schedules no PP:
labels, and Schedule1F1B none at all):

* a rank's actions in the order its labels start; the k-th occurrence of an action is step k, and every step
  must run the same order (the schedule is the first step's);
* an action's span is its label's slice (torch's covers the wait for its input, the compute and posting the
  send); an overlapped pair's slice is split in half between its two sub-actions (the trace does not say more);
* SEND_*/RECV_* labels become the timeline's comm spans (torch's post non-blocking transfers: short);
  UNSHARD, RESHARD and REDUCE_GRAD are left out (no Timeline span kind for them).

Which rank a file is: its `distributedInfo.rank` (Kineto writes it under torch.distributed), else its position
among the files given. One file holding several processes' labels (a merged trace) is one rank per process,
numbered by a process name "rank N" where there is one, else in order of process id. Times are the trace's
microseconds (each file's `baseTimeNanoseconds` added, so files of ranks on one host share one clock), in ms
from the earliest label. No torch import: a trace is JSON, read within `pipesim.limits`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipesim.io.formats import CsvError, parse_json, read_json, schedule_from_csv
from pipesim.ir import Action, B, F, I, Schedule
from pipesim.limits import MAX_ACTIONS, MAX_RANKS, MAX_TRACE_BYTES
from pipesim.records import CommSpan, Span, Timeline
from pipesim.semantics.validate import validate

LABEL_PREFIX = "PP:"
_COMM = re.compile(r"^(\d{1,9})(SEND_F|RECV_F|SEND_B|RECV_B)(\d{1,9})$")
_OTHER = re.compile(r"^\d{1,9}(UNSHARD|RESHARD|REDUCE_GRAD)\d{0,9}$")
_OVERLAP = re.compile(r"^\((.*)\)OVERLAP_F_B$")
_RANK_NAME = re.compile(r"rank\s*(\d{1,6})", re.IGNORECASE)
# ScheduleGPipe's own labels (torch 2.13 gives its single-stage schedules no PP: labels); the stage is the rank's.
_GPIPE = re.compile(r"^(Forward|Backward) (\d{1,9})$")
_RANK_STAGE = "#"


@dataclass(frozen=True)
class Label:
    """One `PP:` slice of one rank: times in ms on the shared clock."""

    rank: int
    text: str
    start: float
    end: float


@dataclass(frozen=True)
class ImportedRun:
    """What the traces say: the schedule each rank ran, and the timeline of every recorded step."""

    schedule: Schedule
    timeline: Timeline
    step_times_ms: tuple[float, ...]


# --- reading files --------------------------------------------------------------------------------------------


def _check_size(name: str, size: int) -> None:
    if size > MAX_TRACE_BYTES:
        raise ValueError(
            f"{name} is {size / 1024**2:,.0f} MiB; pipesim reads traces of at most "
            f"{MAX_TRACE_BYTES / 1024**2:,.0f} MiB (pipesim/limits.py): record fewer steps"
        )


def _as_trace(name: str, data: Any) -> dict[str, Any]:
    if isinstance(data, list):  # the format also allows a bare array of events
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError(f'{name}: not a Chrome trace: expected an object with a "traceEvents" list')
    return data


def read_trace(path: str | Path) -> dict[str, Any]:
    """One Chrome/Kineto trace file as {"traceEvents": [...], ...}; every failure a one-line ValueError."""
    source = Path(path)
    try:
        size = source.stat().st_size
    except OSError as error:
        raise ValueError(f"cannot read {source}: {error.strerror or error}") from None
    if not source.is_file():
        raise ValueError(f"{source} is not a regular file; give a trace file (JSON)")
    _check_size(str(source), size)
    return _as_trace(str(source), read_json(source))


def parse_trace(name: str, raw: bytes) -> dict[str, Any]:
    """`read_trace` for bytes already in memory (an upload); `name` names it in errors."""
    _check_size(name, len(raw))
    return _as_trace(name, parse_json(raw, name))


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _action_text(label: Any, gpipe: bool) -> str | None:
    """The action text of a label (`PP:2F0` -> "2F0"); with `gpipe`, ScheduleGPipe's "Forward 3" -> "#F3"."""
    if not isinstance(label, str):
        return None
    if not gpipe:
        return label[len(LABEL_PREFIX) :] if label.startswith(LABEL_PREFIX) else None
    match = _GPIPE.match(label)
    return None if match is None else f"{_RANK_STAGE}{match.group(1)[0]}{match.group(2)}"


def _labels_of(data: dict[str, Any], name: str, gpipe: bool = False) -> dict[Any, list[tuple[str, float, float]]]:
    """The `PP:` complete events of one file (with `gpipe`: ScheduleGPipe's "Forward i" / "Backward i"), per
    process id: (action text, start us, end us)."""
    by_pid: dict[Any, list[tuple[str, float, float]]] = {}
    for event in data["traceEvents"]:
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        label = event.get("name")
        text = _action_text(label, gpipe)
        if text is None:
            continue
        start, duration = _number(event.get("ts")), _number(event.get("dur"))
        if start is None or duration is None or duration < 0:
            raise ValueError(f"{name}: event {label[:40]!r} has no valid ts/dur (microseconds)")
        pid = event.get("pid")
        by_pid.setdefault(pid if isinstance(pid, (int, str)) else str(pid), []).append((text, start, start + duration))
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


def collect_labels(files: Sequence[tuple[str, dict[str, Any]]]) -> list[Label]:
    """Every `PP:` slice of the given traces (name, parsed trace), with its rank, on one clock (ms from the
    earliest slice)."""
    if not files:
        raise ValueError("give at least one trace file (one per rank, or one merged trace)")
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
        by_pid = _labels_of(data, str(path)) or _labels_of(data, str(path), gpipe=True)
        if not by_pid:
            raise ValueError(
                f"{path}: no {LABEL_PREFIX} labels: record with `python -m executor run "
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
        next_rank = max(next_rank, max(ranks.values()) + 1)
        shift = (base - lowest) / 1000.0  # ns -> us, kept small so float precision stays sub-microsecond
        for pid, rows in by_pid.items():
            rank = ranks[pid]
            if rank in seen_ranks and seen_ranks[rank] != index:
                raise ValueError(
                    f"{path}: rank {rank} is also in {files[seen_ranks[rank]][0]}: give each rank's trace once"
                )
            seen_ranks[rank] = index
            raw.extend(
                (rank, text.replace(_RANK_STAGE, str(rank)), start + shift, end + shift) for text, start, end in rows
            )
        if len(raw) > MAX_ACTIONS or len(seen_ranks) > MAX_RANKS:
            raise ValueError(
                f"the traces hold more than {MAX_ACTIONS:,} labels or {MAX_RANKS:,} ranks (pipesim/limits.py)"
            )
    missing = [rank for rank in range(max(seen_ranks) + 1) if rank not in seen_ranks]
    if missing:
        raise ValueError(f"no trace for rank {missing[0]} (ranks found: {sorted(seen_ranks)}): give every rank's trace")
    origin = min(start for _, _, start, _ in raw)
    raw.sort(key=lambda row: (row[0], row[2], -row[3]))  # per rank by start; an enclosing slice first
    return [Label(rank, text, (start - origin) / 1000.0, (end - origin) / 1000.0) for rank, text, start, end in raw]


# --- labels -> actions, schedule, timeline ----------------------------------------------------------------------


def _compute(label: Label) -> list[Span] | None:
    """The compute span(s) of a label, None for a label that is not compute (steps filled in later)."""
    overlap = _OVERLAP.match(label.text)
    if overlap:
        parts = [Action.parse(part) for part in overlap.group(1).split(";") if part.strip()]
        if not parts:
            raise ValueError(f"rank {label.rank}: {LABEL_PREFIX}{label.text} names no sub-actions")
        width = (label.end - label.start) / len(parts)
        return [
            Span(label.rank, action, label.start + k * width, label.start + (k + 1) * width)
            for k, action in enumerate(parts)
        ]
    try:
        return [Span(label.rank, Action.parse(label.text), label.start, label.end)]
    except ValueError:
        pass
    if _COMM.match(label.text) or _OTHER.match(label.text):
        return None
    raise ValueError(
        f"rank {label.rank}: cannot read label {LABEL_PREFIX}{label.text[:40]!r}: expected torch's "
        "action names such as PP:2F0, PP:1SEND_F0, PP:(0F7;7B3)OVERLAP_F_B"
    )


def _number_steps(rows: list[list[Span]]) -> tuple[list[list[Span]], int]:
    """Step k is each action's k-th occurrence; every action of a rank must occur equally often."""
    numbered, steps = [], None
    for rank, spans in enumerate(rows):
        seen: Counter = Counter()
        out = []
        for span in spans:
            out.append(span._replace(step=seen[span.action]))
            seen[span.action] += 1
        counts = set(seen.values())
        if len(counts) > 1:
            few = min(seen, key=seen.__getitem__)
            raise ValueError(
                f"rank {rank}: {few} ran {seen[few]} times but other actions {max(counts)}: the trace "
                "holds a partial step (record whole steps)"
            )
        count = counts.pop() if counts else 0
        if steps is not None and count != steps and count:
            raise ValueError(f"rank {rank} ran {count} steps but rank 0 {steps}: the traces are of different runs")
        steps = count if steps is None or not steps else steps
        numbered.append(out)
    return numbered, steps or 0


def _schedule(rows: list[list[Span]], steps: int, name: str) -> Schedule:
    """The first step's order per rank, every later step checked against it; validated."""
    orders = []
    for rank, spans in enumerate(rows):
        first = [s.action for s in spans if s.step == 0]
        for step in range(1, steps):
            again = [s.action for s in spans if s.step == step]
            if again != first:
                index = next(i for i, (a, b) in enumerate(zip(first, again, strict=False)) if a != b)
                raise ValueError(
                    f"rank {rank}: step {step} runs {again[index]} at position {index + 1} where step 0 "
                    f"ran {first[index]}: a trace of one schedule runs the same order every step"
                )
        orders.append(first)
    text = "\r\n".join(",".join(str(action) for action in order) for order in orders)
    try:  # the placement rule (a stage lives where its actions run) is the CSV reader's: read the orders as rows
        schedule = schedule_from_csv(text, name=name)
    except CsvError as error:
        raise ValueError(f"the traced actions are not a schedule: {error}") from None
    validate(schedule)
    return schedule


def _first_backward(schedule: Schedule, stage: int, microbatch: int) -> Action:
    rank_actions = schedule.actions[schedule.stage_to_rank[stage]]
    split = Action(stage, I, microbatch) in rank_actions
    return Action(stage, I if split else B, microbatch)


def _comm_spans(labels: list[Label], schedule: Schedule) -> list[CommSpan]:
    """SEND_*/RECV_* labels as comm spans: `action` is the producer of the tensor moved, `peer` the other rank."""
    place, seen, out = schedule.stage_to_rank, Counter(), []
    for label in labels:
        match = _COMM.match(label.text)
        if match is None:
            continue
        stage, kind, microbatch = int(match.group(1)), match.group(2), int(match.group(3))
        source_stage = {"SEND_F": stage, "RECV_F": stage - 1, "SEND_B": stage, "RECV_B": stage + 1}[kind]
        peer_stage = {"SEND_F": stage + 1, "RECV_F": stage - 1, "SEND_B": stage - 1, "RECV_B": stage + 1}[kind]
        if not (0 <= source_stage < schedule.num_stages and 0 <= peer_stage < schedule.num_stages):
            raise ValueError(
                f"rank {label.rank}: {LABEL_PREFIX}{label.text} names a stage outside 0..{schedule.num_stages - 1}"
            )
        producer = (
            Action(source_stage, F, microbatch)
            if kind.endswith("_F")
            else _first_backward(schedule, source_stage, microbatch)
        )
        key = (label.rank, label.text)
        out.append(
            CommSpan(
                label.rank,
                "send" if kind.startswith("SEND") else "recv",
                place[peer_stage],
                producer,
                label.start,
                label.end,
                seen[key],
            )
        )
        seen[key] += 1
    return out


def import_traces(paths: Sequence[str | Path], name: str = "imported") -> ImportedRun:
    """Read trace files (one per rank, or merged) into the schedule they ran and their imported Timeline."""
    return import_trace_data([(str(path), read_trace(path)) for path in paths], name)


def import_trace_data(files: Sequence[tuple[str, dict[str, Any]]], name: str = "imported") -> ImportedRun:
    """`import_traces` for traces already parsed (`parse_trace`): (name, trace) per file."""
    labels = collect_labels(files)
    num_ranks = max(label.rank for label in labels) + 1
    rows: list[list[Span]] = [[] for _ in range(num_ranks)]
    for label in labels:
        spans = _compute(label)
        if spans:
            rows[label.rank].extend(spans)
    if not any(rows):
        raise ValueError("the traces have PP: labels but no compute action (F, B, I, W) in them")
    rows, steps = _number_steps(rows)
    schedule = _schedule(rows, steps, name)
    spans = [span for row in rows for span in row]
    step_times = []
    for step in range(steps):
        of_step = [span for span in spans if span.step == step]
        step_times.append(max(s.end for s in of_step) - min(s.start for s in of_step))
    timeline = Timeline(
        num_ranks,
        tuple(spans),
        "imported",
        name,
        tuple(_comm_spans(labels, schedule)),
        {
            "imported_from": [file_name for file_name, _ in files],
            "steps": steps,
            "label_extent": "torch's PP: slice: input wait, compute, posting the send",
        },
    )
    return ImportedRun(schedule, timeline, tuple(step_times))
