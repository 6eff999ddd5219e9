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
microseconds (each file's `baseTimeNanoseconds` added, so files of ranks on one host share one clock); the
imported timeline holds them in ms from each step's start (its earliest compute label), as the executor's measured
timelines do, so every step is attributed alike. Reading the files down to labels is `pipesim.io.trace_labels`.
No torch import: a trace is JSON, read within `pipesim.limits`; every pass is linear in the labels.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipesim._perf import paused_gc
from pipesim.io.formats import CsvError, schedule_from_csv
from pipesim.io.trace_labels import LABEL_PREFIX, Label, Slice, collect_labels, parse_trace, read_trace
from pipesim.ir import Action, B, CommAction, CommKind, F, I, Schedule
from pipesim.records import CommSpan, Span, Timeline
from pipesim.semantics.lower import peer_stage, producer_stage, transfer_message
from pipesim.semantics.validate import validate

__all__ = ["ImportedRun", "Label", "Slice", "import_trace_data", "import_traces", "parse_trace", "read_trace"]

_COMM = re.compile(r"^(\d{1,9})(SEND_F|RECV_F|SEND_B|RECV_B)(\d{1,9})$", re.ASCII)
_OTHER = re.compile(r"^\d{1,9}(UNSHARD|RESHARD|REDUCE_GRAD)\d{0,9}$", re.ASCII)
_OVERLAP = re.compile(r"^\((.*)\)OVERLAP_F_B$")


@dataclass(frozen=True)
class ImportedRun:
    """What the traces say: the schedule each rank ran, and the timeline of every recorded step (each step's
    spans timed from that step's start, as the executor's measured timelines are)."""

    schedule: Schedule
    timeline: Timeline
    step_times_ms: tuple[float, ...]


# --- labels -> actions, schedule, timeline ----------------------------------------------------------------------
# Every pass below is linear in the labels (a trace holds 10^5 to 10^6): per rank, per step, one walk each.


def _parse_text(text: str, rank: int) -> tuple[Action, ...] | None:
    """The compute actions a label's text names (two for an overlapped pair), None for a communication label."""
    overlap = _OVERLAP.match(text)
    if overlap:
        parts = tuple(Action.parse(part) for part in overlap.group(1).split(";") if part.strip())
        if not parts:
            raise ValueError(f"rank {rank}: {LABEL_PREFIX}{text} names no sub-actions")
        return parts
    try:
        return (Action.parse(text),)
    except ValueError:
        pass
    if _COMM.match(text) or _OTHER.match(text):
        return None
    raise ValueError(
        f"rank {rank}: cannot read label {LABEL_PREFIX}{text[:40]!r}: expected torch's "
        "action names such as PP:2F0, PP:1SEND_F0, PP:(0F7;7B3)OVERLAP_F_B"
    )


def _compute_rows(labels: list[Label], num_ranks: int) -> list[list[Span]]:
    """Per rank, the compute spans of its labels in order (an overlapped pair's slice split in half between its
    sub-actions); each distinct label text is parsed once."""
    rows: list[list[Span]] = [[] for _ in range(num_ranks)]
    parsed: dict[str, tuple[Action, ...] | None] = {}
    for label in labels:
        actions = parsed.get(label.text, ())
        if actions == ():
            actions = parsed[label.text] = _parse_text(label.text, label.rank)
        if actions is None:
            continue
        row = rows[label.rank]
        if len(actions) == 1:
            row.append(Span(label.rank, actions[0], label.start, label.end))
            continue
        width = (label.end - label.start) / len(actions)
        row.extend(
            Span(label.rank, action, label.start + k * width, label.start + (k + 1) * width)
            for k, action in enumerate(actions)
        )
    return rows


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
        by_step: list[list[Action]] = [[] for _ in range(steps)]
        for span in spans:
            by_step[span.step].append(span.action)
        first = by_step[0] if steps else []
        for step in range(1, steps):
            again = by_step[step]
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


def _step_extents(rows: list[list[Span]], steps: int) -> tuple[list[float], list[float]]:
    """Each step's start and end on the traces' clock: its earliest compute span's start, its latest's end."""
    starts, ends = [math.inf] * steps, [-math.inf] * steps
    for spans in rows:
        for span in spans:
            if span.start < starts[span.step]:
                starts[span.step] = span.start
            if span.end > ends[span.step]:
                ends[span.step] = span.end
    return starts, ends


def _transfer(text: str, rank: int, schedule: Schedule, split: set) -> tuple[str, int, Action] | None:
    """A SEND_*/RECV_* label's (kind, peer rank, producer of the tensor moved); None for any other label."""
    match = _COMM.match(text) if "_" in text else None
    if match is None:
        return None
    stage, kind, microbatch = int(match.group(1)), match.group(2), int(match.group(3))
    transfer = CommAction(stage, CommKind(kind), microbatch)  # the direction rules are the lowering's
    source_stage, peer = producer_stage(transfer_message(transfer)), peer_stage(transfer)
    if not (0 <= source_stage < schedule.num_stages and 0 <= peer < schedule.num_stages):
        raise ValueError(f"rank {rank}: {LABEL_PREFIX}{text} names a stage outside 0..{schedule.num_stages - 1}")
    if kind.endswith("_F"):
        producer = Action(source_stage, F, microbatch)
    else:  # the first backward of the source stage: I where the schedule splits it, else B
        producer = Action(source_stage, I if (source_stage, microbatch) in split else B, microbatch)
    return ("send" if kind.startswith("SEND") else "recv"), schedule.stage_to_rank[peer], producer


def _comm_spans(labels: list[Label], schedule: Schedule, origins: list[float]) -> list[CommSpan]:
    """SEND_*/RECV_* labels as comm spans: `action` is the producer of the tensor moved, `peer` the other rank.

    The k-th occurrence of a label on a rank is step k's; it is timed from that step's start (`origins`). Each
    distinct (rank, label) is read once."""
    split = {(a.stage, a.microbatch) for row in schedule.actions for a in row if a.kind is I}
    read: dict[tuple[int, str], tuple[str, int, Action] | None] = {}
    seen: Counter = Counter()
    out = []
    for rank, text, start, end in labels:
        key = (rank, text)
        if key not in read:
            read[key] = _transfer(text, rank, schedule, split)
        transfer = read[key]
        if transfer is None:
            continue
        step = seen[key]
        seen[key] += 1
        if step >= len(origins):
            raise ValueError(
                f"rank {rank}: {LABEL_PREFIX}{text} occurs more often than the {len(origins)} recorded steps: "
                "the trace holds a partial step (record whole steps)"
            )
        kind, peer, producer = transfer
        out.append(CommSpan(rank, kind, peer, producer, start - origins[step], end - origins[step], step))
    return out


@paused_gc()  # a trace's million small objects hold no cycles: the collector's rescans only cost (pipesim._perf)
def import_traces(paths: Sequence[str | Path], name: str = "imported") -> ImportedRun:
    """Read trace files (one per rank, or merged) into the schedule they ran and their imported Timeline."""
    return import_trace_data([(str(path), read_trace(path)) for path in paths], name)


@paused_gc()
def import_trace_data(files: Sequence[tuple[str, dict[str, Any]]], name: str = "imported") -> ImportedRun:
    """`import_traces` for traces already parsed (`parse_trace`): (name, trace) per file.

    The timeline's spans of step k are timed from step k's start (its earliest compute label), as the
    executor's measured timelines are: attribution, overlays and replays read every step alike."""
    labels = collect_labels(files)
    num_ranks = max(label.rank for label in labels) + 1
    rows = _compute_rows(labels, num_ranks)
    if not any(rows):
        raise ValueError("the traces have PP: labels but no compute action (F, B, I, W) in them")
    rows, steps = _number_steps(rows)
    schedule = _schedule(rows, steps, name)
    origins, ends = _step_extents(rows, steps)
    step_times = tuple(end - start for start, end in zip(origins, ends, strict=True))
    spans = tuple(
        span._replace(start=span.start - origins[span.step], end=span.end - origins[span.step])
        for row in rows
        for span in row
    )
    timeline = Timeline(
        num_ranks,
        spans,
        "imported",
        name,
        tuple(_comm_spans(labels, schedule, origins)),
        {
            "imported_from": [file_name for file_name, _ in files],
            "steps": steps,
            "label_extent": "torch's PP: slice: input wait, compute, posting the send",
            "times": "ms from each step's start (its earliest compute label)",
        },
    )
    return ImportedRun(schedule, timeline, step_times)
