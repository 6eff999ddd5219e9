"""Files: JSON for schedules, costs and timelines (versioned); CSV. (Chrome traces: pipesim.io.chrome_trace.)

Every JSON document carries `format` and `version` so a reader can refuse a
file it does not understand with a clear message instead of a KeyError.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pipesim.io.atomic import (  # noqa: F401 - the writers' home; re-exported
    STANDARD_OUTPUT,
    UnwritableOutput,
    check_output,
    current_umask,
    is_standard_output,
    write_file,
    write_files,
)
from pipesim.io.bounded import check_size, read_bytes, read_text
from pipesim.io.span_text import columns_text, spans_text
from pipesim.io.torch_csv import (  # noqa: F401 - the CSV's home; re-exported
    CsvError,
    dialect_note,
    schedule_from_csv,
    schedule_to_csv,
)
from pipesim.ir import Action, Overlap, Schedule, make_schedule, parse_entry
from pipesim.limits import MAX_RESULT_BYTES, MAX_SCHEDULE_BYTES, PATH_TAKES, PATH_TYPES, check_sizes, require
from pipesim.numbers import MAX_NUMBER_CHARS, shown
from pipesim.records import CommSpan, Span, Timeline, plain_meta

SCHEDULE_FORMAT = "pipesim.schedule"
TIMELINE_FORMAT = "pipesim.timeline"
FORMAT_VERSION = 1


def _check_header(data: Any, expected: str) -> None:
    if not isinstance(data, dict) or data.get("format") != expected:
        raise ValueError(f'not a {expected} document: expected "format": "{expected}"')
    if data.get("version") != FORMAT_VERSION:
        raise ValueError(
            f"unsupported {expected} version {data.get('version')!r}; this pipesim reads version {FORMAT_VERSION}"
        )


def schedule_to_dict(schedule: Schedule, texts: list[list[str]] | None = None) -> dict[str, Any]:
    """The schedule document; `texts`: its `text_rows()` where the caller made them already (`simulate --json`
    writes them twice: here and as its spans' actions)."""
    return {
        "format": SCHEDULE_FORMAT,
        "version": FORMAT_VERSION,
        "name": schedule.name,
        "num_ranks": schedule.num_ranks,
        "num_stages": schedule.num_stages,
        "num_microbatches": schedule.num_microbatches,
        "stage_to_rank": list(schedule.stage_to_rank),
        "params": schedule.params,
        # the shape of its microbatches, where not the plain one: sequence chunks, pipelines in both directions
        **({"seq_chunks": schedule.seq_chunks, "seq_cut": schedule.seq_cut} if schedule.seq_chunks > 1 else {}),
        **({"pipelines": schedule.pipelines} if schedule.pipelines > 1 else {}),
        "actions": schedule.text_rows() if texts is None else texts,
        **(
            {}
            if schedule.order is None
            else {"order": [["" if e is None else str(e) for e in row] for row in schedule.order]}
        ),
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
    check_sizes(
        num_ranks=len(actions),
        num_stages=len(placement),
        num_microbatches=data["num_microbatches"],
        num_actions=sum(len(row) for row in actions),
    )
    rows = []
    for rank, row in enumerate(actions):
        if not all(isinstance(text, str) for text in row):
            raise ValueError(f"schedule file: actions of rank {rank} must be texts such as '2F0'")
        rows.append([Action.parse(text) for text in row])
    schedule = make_schedule(name, data["num_ranks"], data["num_microbatches"], placement, rows)
    shape = {key: data[key] for key in ("seq_chunks", "seq_cut", "pipelines") if key in data}
    try:  # params as given (a builder's may name num_microbatches: DualPipe's total); Schedule checks the shape
        schedule = dataclasses.replace(schedule, params=dict(params), **shape)
    except (TypeError, ValueError) as error:
        raise ValueError(f"schedule file: {error}") from None
    order = data.get("order")
    if order is None:
        return schedule
    if not isinstance(order, list) or not all(
        isinstance(row, list) and all(isinstance(t, str) for t in row) for row in order
    ):
        raise ValueError("schedule file: order must be a list with one list of action texts per rank")
    check_sizes(num_actions=sum(len(row) for row in order))
    try:  # the full order must hold exactly the action lists' compute actions (Schedule checks it)
        return dataclasses.replace(schedule, order=tuple(tuple(parse_entry(t) for t in row) for row in order))
    except ValueError as error:
        raise ValueError(f"schedule file: order: {error}") from None


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
    data["meta"] = plain_meta(timeline.meta)  # a simulation's groups as text, made here
    data["spans"] = [  # "replica" only where it is not 0: files of one replica read as they always did
        {"rank": s.rank, "action": str(s.action), "start": s.start, "end": s.end, "step": s.step}
        | ({"replica": s.replica} if s.replica else {})
        for s in timeline.spans
    ]
    data["comm"] = [
        {
            "rank": c.rank,
            "kind": c.kind,
            "peer": c.peer,
            "action": str(c.action),
            "start": c.start,
            "end": c.end,
            "step": c.step,
            **({"replica": c.replica} if c.replica else {}),
        }
        for c in timeline.comm
    ]
    return data


def _comm_action(text: Any) -> Any:
    """A transfer names the compute action it moves for; a collective is torch's own action (0REDUCE_GRAD)."""
    entry = parse_entry(str(text))
    if entry is None or isinstance(entry, Overlap):
        raise ValueError(f"timeline file: a comm span's action {text!r} is not an action")
    return entry


def timeline_from_dict(data: dict[str, Any]) -> Timeline:
    _check_header(data, TIMELINE_FORMAT)
    try:
        spans = tuple(
            Span(
                int(s["rank"]),
                Action.parse(s["action"]),
                float(s["start"]),
                float(s["end"]),
                int(s.get("step", 0)),
                int(s.get("replica", 0)),
            )
            for s in data["spans"]
        )
        comm = tuple(
            CommSpan(
                int(c["rank"]),
                str(c["kind"]),
                int(c["peer"]),
                _comm_action(c["action"]),
                float(c["start"]),
                float(c["end"]),
                int(c.get("step", 0)),
                int(c.get("replica", 0)),
            )
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


# A document up to this size is written indented, for people who read it (configs, results, cost files); past it,
# compactly: with an indent json leaves its C encoder for the Python one, which took 3.0 of the 3.4 s that a
# 131k-action `simulate --json` spent writing.
READABLE_JSON_CHARS = 1 << 20


def write_json(data: Any, path: str | Path, indent: int | None = 1) -> None:
    """Write JSON atomically (see `write_file`); infinities and NaN are refused, not written as bare words."""
    write_file(json_text(data, path, indent), path)


def json_text(data: Any, path: str | Path, indent: int | None = 1) -> str:
    """The JSON text `write_json` writes to `path` (named in the refusal of a non-finite number): indented by
    `indent` while it stays under READABLE_JSON_CHARS, compact past it (`python -m json.tool FILE` indents it)."""
    try:
        compact = json.dumps(data, separators=(",", ":"), allow_nan=False)
        if indent is None or len(compact) > READABLE_JSON_CHARS:
            return compact
        return json.dumps(data, indent=indent, allow_nan=False)
    except ValueError:
        raise ValueError(f"{path}: refusing to write a non-finite number (inf or nan); check the inputs") from None


def read_json(
    path: str | Path, limit: int = MAX_RESULT_BYTES, what: str = "JSON file", max_items: int | None = None
) -> Any:
    """Parse a JSON file of at most `limit` bytes, read through `pipesim.io.bounded` (regular files only, size
    checked before reading); every way it can fail (missing, too large, not a file, not JSON, nested too deep)
    is a ValueError that names the path. `max_items` bounds the values it holds, counted (by their separating
    commas, at the speed of a byte search) before it is parsed: a file padded with a 10^8-element array is
    refused in a fraction of a second rather than parsed into gigabytes."""
    return parse_bounded_json(read_bytes(path, limit, what), str(path), limit, what, max_items)


def parse_bounded_json(raw: bytes, name: str, limit: int, what: str = "JSON file", max_items: int | None = None) -> Any:
    """JSON already in memory (an upload, a file's bytes) under `read_json`'s bounds: at most `limit` bytes and
    fewer than `max_items` values, counted before it is parsed; ValueError naming `name` otherwise."""
    check_size(name, len(raw), limit, what)
    if max_items is not None and raw.count(b",") >= max_items:
        raise ValueError(
            f"{name} holds more than {max_items:,} values; pipesim reads a {what} of at most that many "
            "(pipesim/limits.py)"
        )
    return parse_json(raw, name)


def parse_json(raw: bytes | str, name: str, object_hook: Callable[[dict], Any] | None = None) -> Any:
    """Parse JSON already in memory (an upload, a file's bytes); every failure a ValueError naming `name`.

    Strict JSON: NaN and Infinity (Python's extension, which pipesim never writes) are refused, so no reader
    downstream meets a number that is not one. `object_hook` may replace each object as it is parsed (a reader
    that keeps a few of a million objects drops the rest at once)."""
    try:
        return json.loads(
            raw,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
            object_hook=object_hook,
        )
    except UnicodeDecodeError as error:
        raise ValueError(f"{name}: not a UTF-8 text file ({error.reason} at byte {error.start})") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{name}: not valid JSON ({error})") from None
    except RecursionError:
        raise ValueError(f"{name}: JSON nested too deeply") from None
    except ValueError as error:  # Python's 4,300-digit limit on integers, a non-finite constant
        raise ValueError(f"{name}: not valid JSON ({error})") from None


def _finite_float(text: str) -> float:
    """A JSON number with a fraction or an exponent: 1e400 is no number pipesim can use (json would make it inf)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {shown(text)} is out of range (a finite number is at most about 1.8e308)")
    return value


def _bounded_int(text: str) -> int:
    """A JSON whole number: of at most MAX_NUMBER_CHARS digits, so any reader may take it as a float."""
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError(f"the number {shown(text)} is out of range (at most {MAX_NUMBER_CHARS} digits)")
    return int(text)


def _refuse_constant(word: str) -> Any:
    raise ValueError(f"{word} is not a number JSON allows")


# --- path-based helpers ----------------------------------------------------------


def save_schedule(schedule: Schedule, path: str | Path) -> None:
    """Write a schedule: torch's CSV when the name ends in .csv (compute_comms when the schedule states its
    transfers, else compute_only), else the JSON document."""
    require(schedule, "schedule", Schedule, "a Schedule")
    require(path, "path", PATH_TYPES, PATH_TAKES)
    write_file(schedule_file_text(schedule, path), path)


def schedule_file_text(schedule: Schedule, path: str | Path) -> str:
    """What `save_schedule` writes to `path`: CSV for a .csv name, else the JSON document."""
    if Path(path).suffix.lower() == ".csv":
        return schedule_to_csv(schedule, "auto")
    return json_text(schedule_to_dict(schedule), path)


def load_schedule(path: str | Path) -> Schedule:
    """Read a schedule file: pipesim's JSON (`.json`), else torch's CSV, either format (named after the file)."""
    require(path, "path", PATH_TYPES, PATH_TAKES)
    source = Path(path)
    if source.suffix.lower() == ".json":
        return schedule_from_dict(read_json(source, MAX_SCHEDULE_BYTES, "schedule file"))
    return schedule_from_csv_file(source)


def schedule_from_csv_file(path: str | Path, csv_format: str = "auto") -> Schedule:
    """A torch schedule CSV file (named after the file), read bounded; a refusal names the file."""
    source = Path(path)
    text = read_text(source, MAX_SCHEDULE_BYTES, "schedule file")
    try:
        return schedule_from_csv(text, name=source.stem, csv_format=csv_format)
    except ValueError as error:
        raise ValueError(f"{source}: {error}") from None


def load_timeline(path: str | Path) -> Timeline:
    """A timeline document (`save_timeline`'s, a run's measured.json or simulated.json) read back."""
    require(path, "path", PATH_TYPES, PATH_TAKES)
    return timeline_from_dict(read_json(path, what="timeline"))


def save_timeline(timeline: Timeline, path: str | Path, summary: dict[str, Any] | None = None) -> None:
    """`timeline_to_dict` written as JSON (`timeline_text`: the same bytes, a long timeline's spans as text)."""
    require(timeline, "timeline", Timeline, "a Timeline")
    require(path, "path", PATH_TYPES, PATH_TAKES)
    write_file(timeline_text(timeline, path, summary), path)


def timeline_text(
    timeline: Timeline,
    path: str | Path,
    summary: dict[str, Any] | None = None,
    action_texts: Iterable[str] | None = None,
) -> str:
    """What `write_json(timeline_to_dict(timeline, summary), path)` writes, byte for byte, without a dict per span:
    the spans written as text (a 131k-action simulation's dicts cost more than the rest of its writing); a document
    of at most READABLE_JSON_CHARS compact characters is written indented as json writes it. `action_texts`: each
    span's action as text, in span order, where the caller holds them (a simulation's spans follow its schedule's
    rows, whose texts its document holds: a fifth off writing 131k spans)."""
    head = timeline_to_dict(dataclasses.replace(timeline, spans=()), summary)
    comm = json_text(head.pop("comm"), path, indent=None)
    head.pop("spans")
    text = json_text(head, path, indent=None)
    columns = timeline.columns  # a simulation's: its spans written off the engine's columns, no Span built
    spans = None if columns is None else columns_text(columns, path, action_texts)
    if spans is None:
        spans = spans_text(timeline.spans, path, action_texts)
    compact = f'{text[:-1]},"spans":[{spans}],"comm":{comm}}}'
    if len(compact) > READABLE_JSON_CHARS:
        return compact
    return json_text(timeline_to_dict(timeline, summary), path)
