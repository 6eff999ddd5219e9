"""Files: JSON for schedules, costs and timelines (versioned); CSV. (Chrome traces: pipesim.chrome_trace.)

Every JSON document carries `format` and `version` so a reader can refuse a
file it does not understand with a clear message instead of a KeyError.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pipesim.ir import Action, Schedule, make_schedule
from pipesim.limits import MAX_MICROBATCHES, MAX_STAGES, check_sizes
from pipesim.timeline import CommSpan, Span, Timeline

SCHEDULE_FORMAT = "pipesim.schedule"
TIMELINE_FORMAT = "pipesim.timeline"
FORMAT_VERSION = 1


def _check_header(data: Any, expected: str) -> None:
    if not isinstance(data, dict) or data.get("format") != expected:
        raise ValueError(f"not a {expected} document: expected \"format\": \"{expected}\"")
    if data.get("version") != FORMAT_VERSION:
        raise ValueError(
            f"unsupported {expected} version {data.get('version')!r}; this pipesim reads version {FORMAT_VERSION}"
        )


def schedule_to_dict(schedule: Schedule) -> dict[str, Any]:
    return {
        "format": SCHEDULE_FORMAT,
        "version": FORMAT_VERSION,
        "name": schedule.name,
        "num_ranks": schedule.num_ranks,
        "num_stages": schedule.num_stages,
        "num_microbatches": schedule.num_microbatches,
        "stage_to_rank": list(schedule.stage_to_rank),
        "params": schedule.params,
        "actions": schedule.text_rows(),
    }


def schedule_from_dict(data: Any) -> Schedule:
    """Read pipesim's schedule JSON; a field of the wrong type is a ValueError naming it."""
    _check_header(data, SCHEDULE_FORMAT)
    missing = [key for key in ("name", "num_ranks", "num_microbatches", "stage_to_rank", "actions") if key not in data]
    if missing:
        raise ValueError(f"schedule file is missing field '{missing[0]}'")
    name, actions, placement, params = data["name"], data["actions"], data["stage_to_rank"], data.get("params") or {}
    for key in ("num_ranks", "num_microbatches"):
        if isinstance(data[key], bool) or not isinstance(data[key], int):
            raise ValueError(f"schedule file: {key} must be an integer, got {data[key]!r}")
    if not isinstance(name, str):
        raise ValueError(f"schedule file: name must be a string, got {name!r}")
    if not isinstance(placement, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in placement):
        raise ValueError(f"schedule file: stage_to_rank must be a list of rank numbers, got {placement!r:.60}")
    if not isinstance(actions, list) or not all(isinstance(row, list) for row in actions):
        raise ValueError("schedule file: actions must be a list with one list of action texts per rank")
    if not isinstance(params, dict):
        raise ValueError(f"schedule file: params must be an object, got {params!r:.60}")
    check_sizes(num_ranks=len(actions), num_stages=len(placement), num_microbatches=data["num_microbatches"],
                num_actions=sum(len(row) for row in actions))
    rows = []
    for rank, row in enumerate(actions):
        if not all(isinstance(text, str) for text in row):
            raise ValueError(f"schedule file: actions of rank {rank} must be texts such as '2F0'")
        rows.append([Action.parse(text) for text in row])
    return make_schedule(name, data["num_ranks"], data["num_microbatches"], placement, rows, **params)


def timeline_to_dict(timeline: Timeline, summary: dict[str, Any] | None = None) -> dict[str, Any]:
    """The timeline document; `summary` adds top-level keys such as makespan and bubble_fraction."""
    data: dict[str, Any] = {
        "format": TIMELINE_FORMAT,
        "version": FORMAT_VERSION,
        "source": timeline.source,
        "schedule_name": timeline.schedule_name,
        "num_ranks": timeline.num_ranks,
        "units": {"time": "ms"},
    }
    data.update(summary or {})
    data["meta"] = timeline.meta
    data["spans"] = [
        {"rank": s.rank, "action": str(s.action), "start": s.start, "end": s.end, "step": s.step}
        for s in timeline.spans
    ]
    data["comm"] = [
        {"rank": c.rank, "kind": c.kind, "peer": c.peer, "action": str(c.action),
         "start": c.start, "end": c.end, "step": c.step}
        for c in timeline.comm
    ]
    return data


def timeline_from_dict(data: dict[str, Any]) -> Timeline:
    _check_header(data, TIMELINE_FORMAT)
    try:
        spans = tuple(
            Span(int(s["rank"]), Action.parse(s["action"]), float(s["start"]), float(s["end"]), int(s.get("step", 0)))
            for s in data["spans"]
        )
        comm = tuple(
            CommSpan(int(c["rank"]), str(c["kind"]), int(c["peer"]), Action.parse(c["action"]),
                     float(c["start"]), float(c["end"]), int(c.get("step", 0)))
            for c in data.get("comm") or []
        )
    except KeyError as missing:
        raise ValueError(f"timeline file: a span is missing field {missing}") from None
    return Timeline(
        num_ranks=int(data["num_ranks"]),
        spans=spans,
        source=data.get("source", "simulated"),
        schedule_name=str(data.get("schedule_name", "")),
        comm=comm,
        meta=dict(data.get("meta") or {}),
    )


def write_json(data: Any, path: str | Path) -> None:
    """Write JSON atomically (see `write_file`); infinities and NaN are refused, not written as bare words."""
    try:
        text = json.dumps(data, indent=1, allow_nan=False)
    except ValueError:
        raise ValueError(f"{path}: refusing to write a non-finite number (inf or nan); check the inputs") from None
    write_file(text, path)


def write_file(content: str | bytes, path: str | Path) -> None:
    """Write a file atomically: a reader never sees half of it, a failed write keeps the old one and leaves no
    temporary file behind.

    A symbolic link is written through to its target (the link stays). A path that exists but is not a regular
    file (a folder, a FIFO, a device such as /dev/null) is refused rather than replaced. Every failure is a
    ValueError that names the path the user gave.
    """
    given = Path(path)
    target = Path(os.path.realpath(given))
    if target.exists() and not target.is_file():
        kind = "a folder" if target.is_dir() else "not a regular file (a FIFO, socket or device)"
        raise ValueError(f"cannot write {given}: it is {kind}; give the path of a file")
    if not target.parent.is_dir():
        raise ValueError(f"cannot write {given}: folder {target.parent} does not exist")
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        if isinstance(content, bytes):
            with os.fdopen(handle, "wb") as out:
                out.write(content)
        else:
            with os.fdopen(handle, "w", newline="") as out:  # newline="": keep the text's own line endings (CSV)
                out.write(content)
        os.replace(temporary, target)
    except OSError as error:
        raise ValueError(f"cannot write {given}: {error.strerror or error}") from None
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def read_json(path: str | Path) -> Any:
    """Parse a JSON file; every way it can fail (missing, unreadable, not JSON, nested too deep) is a
    ValueError that names the path."""
    try:
        return json.loads(Path(path).read_text())
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text file") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply") from None


# --- path-based helpers ----------------------------------------------------------


def save_schedule(schedule: Schedule, path: str | Path) -> None:
    """Write a schedule: CSV (torch compute_only) when the name ends in .csv, else the JSON document."""
    target = Path(path)
    if target.suffix.lower() == ".csv":
        write_file(schedule_to_csv(schedule), target)
    else:
        write_json(schedule_to_dict(schedule), target)


def load_schedule(path: str | Path) -> Schedule:
    """Read a schedule file: pipesim's JSON (`.json`), else torch's compute_only CSV (named after the file)."""
    source = Path(path)
    if source.suffix.lower() == ".json":
        return schedule_from_dict(read_json(source))
    try:
        text = source.read_text()
    except OSError as error:
        raise ValueError(f"cannot read schedule file {source}: {error.strerror}") from None
    return schedule_from_csv(text, name=source.stem)


def save_timeline(timeline: Timeline, path: str | Path, summary: dict[str, Any] | None = None) -> None:
    write_json(timeline_to_dict(timeline, summary), path)


# --- CSV: torch.distributed.pipelining's compute_only format -----------------------
#
# One row per rank, one cell per action in that rank's order, the cell text being the
# action's text form (`2F0`, `1B3`, `0I2`, `0W2`); an empty cell is an idle slot. This is
# what `_PipelineScheduleRuntime._dump_csv(..., format="compute_only")` writes (csv.writer
# over `pipeline_order`, None -> empty cell) and what `_load_csv` reads back.

_CSV_VALID_FORMS = "<stage><kind><microbatch> such as 2F0, 1B3, 0I2 or 0W2 (kind F, B, I or W); an empty cell is idle"
_COMM_WORDS = ("UNSHARD", "RESHARD", "REDUCE_GRAD", "SEND_F", "RECV_F", "SEND_B", "RECV_B")


class CsvError(ValueError):
    """A CSV schedule that cannot be read: `row` is the rank (0-based), `column` the cell index.

    Either may be None when the problem is not tied to one cell (no actions at all, a
    stage number that never appears).
    """

    def __init__(self, message: str, row: int | None = None, column: int | None = None) -> None:
        where = ""
        if row is not None:
            where = f"row {row + 1} (rank {row})" + ("" if column is None else f", cell {column + 1}") + ": "
        super().__init__(where + message)
        self.row = row
        self.column = column


def schedule_to_csv(schedule: Schedule) -> str:
    """The schedule in torch's compute_only CSV format (rows end in CRLF like csv.writer's)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    for row in schedule.text_rows():
        writer.writerow(row)
    return buffer.getvalue()


def _parse_cell(text: str, row: int, column: int) -> Action:
    try:
        return Action.parse(text)
    except ValueError:
        pass
    cell = text.strip()
    if "OVERLAP_F_B" in cell:
        raise CsvError(
            f"{cell!r} is torch's fused OVERLAP_F_B action, which pipesim does not model: write its "
            f"sub-actions as separate cells ({_CSV_VALID_FORMS})",
            row,
            column,
        )
    if cell.lstrip("0123456789").rstrip("0123456789") in _COMM_WORDS:
        raise CsvError(
            f"{cell!r} is a communication action; the compute_only format holds only "
            f"compute actions: {_CSV_VALID_FORMS}",
            row,
            column,
        )
    shown = cell if len(cell) <= 24 else cell[:24] + "..."
    raise CsvError(f"cannot parse {shown!r}: expected {_CSV_VALID_FORMS}", row, column)


def schedule_from_csv(text: str, name: str = "custom") -> Schedule:
    """Read a compute_only CSV; placement is inferred from where each stage's actions appear.

    The number of ranks is the number of rows, the number of stages the highest stage
    number plus one and the number of microbatches the highest microbatch plus one.
    Structural checks (every F has its backward, ...) are left to `pipesim.validate`.
    """
    rows = list(csv.reader(io.StringIO(text)))
    while rows and not any(cell.strip() for cell in rows[-1]):
        rows.pop()  # trailing blank lines are not ranks (an interior blank row is an idle rank, as in torch's files)
    if not rows:
        raise CsvError("the CSV is empty: expected one row of actions per rank")
    check_sizes(num_ranks=len(rows), num_actions=sum(len(cells) for cells in rows))
    actions: list[list[Action]] = []
    placement: dict[int, tuple[int, int]] = {}  # stage -> (rank, cell) where first seen
    for rank, cells in enumerate(rows):
        rank_actions = []
        for column, cell in enumerate(cells):
            if not cell.strip():
                continue  # idle slot
            action = _parse_cell(cell, rank, column)
            if action.stage >= MAX_STAGES or action.microbatch >= MAX_MICROBATCHES:
                raise CsvError(f"{cell.strip()}: stages are limited to {MAX_STAGES:,} and microbatches to "
                               f"{MAX_MICROBATCHES:,} (pipesim/limits.py)", rank, column)
            first = placement.setdefault(action.stage, (rank, column))
            if first[0] != rank:
                raise CsvError(
                    f"stage {action.stage} ({cell.strip()}) appears on rank {rank}, but also on rank {first[0]} "
                    f"(cell {first[1] + 1}): a stage lives on exactly one rank",
                    rank,
                    column,
                )
            rank_actions.append(action)
        actions.append(rank_actions)
    if not placement:
        raise CsvError("the CSV holds no actions: expected cells such as 0F0")
    num_stages = max(placement) + 1
    missing = [stage for stage in range(num_stages) if stage not in placement]
    if missing:
        shown = ", ".join(map(str, missing[:5])) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise CsvError(
            f"stage(s) {shown} never appear, yet stage {num_stages - 1} does: "
            f"stages must be numbered 0..{num_stages - 1} without gaps"
        )
    num_microbatches = 1 + max(a.microbatch for rank_actions in actions for a in rank_actions)
    stage_to_rank = [placement[stage][0] for stage in range(num_stages)]
    return make_schedule(name, len(rows), num_microbatches, stage_to_rank, actions, source="csv")
