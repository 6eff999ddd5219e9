"""Files: JSON for schedules, costs and timelines (versioned); CSV; Chrome trace.

Every JSON document carries `format` and `version` so a reader can refuse a
file it does not understand with a clear message instead of a KeyError.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pipesim.ir import Action, Schedule, make_schedule
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


def schedule_from_dict(data: dict[str, Any]) -> Schedule:
    _check_header(data, SCHEDULE_FORMAT)
    try:
        return make_schedule(
            data["name"],
            int(data["num_ranks"]),
            int(data["num_microbatches"]),
            data["stage_to_rank"],
            [[Action.parse(text) for text in row] for row in data["actions"]],
            **dict(data.get("params") or {}),
        )
    except KeyError as missing:
        raise ValueError(f"schedule file is missing field {missing}") from None


def _span_row(span: Span) -> list[Any]:
    return [span.rank, str(span.action), span.start, span.end, span.step]


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
        {"rank": s.rank, "action": str(s.action), "start": s.start, "end": s.end, "step": s.step} for s in timeline.spans
    ]
    data["comm"] = [
        {"rank": c.rank, "kind": c.kind, "peer": c.peer, "action": str(c.action), "start": c.start, "end": c.end, "step": c.step}
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


def write_json(data: dict[str, Any], path: str | Path) -> None:
    """Write atomically: a reader never sees half a file, and a failed write keeps the old one."""
    target = Path(path)
    temporary = target.with_name(target.name + ".tmp")
    temporary.write_text(json.dumps(data, indent=1))
    temporary.replace(target)


def read_json(path: str | Path) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not valid JSON ({error})") from None
