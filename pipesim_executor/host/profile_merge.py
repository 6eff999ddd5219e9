"""One unit profile from several launches of it (`executor profile --launches K`), and how far their levels differ.

A profile is one launch of the ranks, and on a shared machine a launch lands at a speed of its own: the same run
launched 16 times 5 s apart on the 2-core development machine had medians 33.9-39.0 ms, and two
profiles of one model made minutes apart predicted the same candidates 5-6% apart as a whole. Within one launch
nothing shows it: the drift between a launch's in-situ rounds (`pipesim.analysis.drift`) spans seconds, not the
minutes between a profile and the run it predicts. Several launches give both what one cannot:

* a level nearer the machine's typical speed: every timing is the median over the launches of its logarithm
  (for two launches their geometric mean), so a stage's price and its in-situ factor keep their product;
* how far a launch's level moves: each launch's level is the median, over every in-situ action time it implies
  (a stage's isolated time x its in-situ factor, present in every launch), of its log away from the launches'
  mean; their standard deviation (`launch_spread`)
  is how far a run lands from the typical speed, and the merged level's own error is that over sqrt(K).
  The merged profile's drift (`spread.drift`, one machine-speed draw per sampled step) becomes
  sqrt(within^2 + between^2 x (1 + 1/K)): the drift inside a launch, the run's own launch, the profile's;
* prices known K times better: each launch's own uncertainty of a price (its repetitions' and rounds' standard
  error, an in-situ factor's CI) is divided by sqrt(K) in the merged one, its repetitions counted K times.

The merge walks the cost files' JSON: numbers (not counts, which are whole numbers, nor switches) are merged where
every launch has them at the same place; lists of records are matched by their identity fields (name, microbatch
size, start, stop), others by position when their lengths agree; anything else is the first launch's. The
provenance is the first launch's, with each launch's time and level added and every launch's in-situ steps. Pure
Python, no torch.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from typing import Any

STAGE_KEYS = ("microbatch_size", "start", "stop")  # what names a stage record: its size and its units
IDENTITY_KEYS = ("name", *STAGE_KEYS)
MAX_LAUNCHES = 10
KEPT_AS_FIRST = ("provenance", "format", "version", "kind", "measures", "model", "microbatch_sizes")


def merge_profiles(documents: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The cost-file document of one profile from `documents` (each a launch's cost.json, parsed), with the drift
    widened by the spread of their levels and the launches recorded in the provenance. One document: itself."""
    if not documents:
        raise ValueError("no profile launches to merge")
    if len(documents) == 1:
        return documents[0]
    merged = {
        key: value if key in KEPT_AS_FIRST else _merged([d.get(key) for d in documents], value)
        for key, value in documents[0].items()
    }
    levels = launch_levels(documents)
    between = launch_spread(levels)
    count = len(documents)
    spread = merged.get("spread")
    if isinstance(spread, dict):
        within = statistics.median(_drift(d) for d in documents)
        spread["drift"] = min(1.0, math.sqrt(within**2 + between**2 * (1 + 1 / count)))
        # a price now rests on every launch's repetitions and rounds: its standard error is one launch's / sqrt(K)
        if isinstance(spread.get("repeats"), int):
            spread["repeats"] *= count
        spread["round_se"] = _scaled(spread.get("round_se"), 1 / math.sqrt(count))
    for terms in (merged.get("in_situ") or {}).values():
        if isinstance(terms, dict) and "ci" in terms:
            terms["ci"] = _scaled(terms["ci"], 1 / math.sqrt(count))  # each factor the mean of K launches' logs
    provenance = dict(documents[0].get("provenance") or {})
    provenance["launches"] = {
        "count": len(documents),
        "measured_at": [(d.get("provenance") or {}).get("measured_at") for d in documents],
        "levels": [round(level, 6) for level in levels],
        "spread": between,
        "rule": "every timing the median of its log over the launches; the drift sqrt(within^2 + between^2 x "
        "(1 + 1/launches)) (pipesim_executor.host.profile_merge)",
    }
    steps = merged_in_situ_steps(documents)
    if steps:
        provenance["in_situ"] = {**provenance.get("in_situ", {}), "measured_steps": steps}
    merged["provenance"] = provenance
    return merged


STEP_IDENTITY = ("microbatch_size", "schedule", "chunks", "recompute", "split_backward", "split_points", "microbatches")


def merged_in_situ_steps(documents: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every launch's in-situ steps (`provenance.in_situ.measured_steps`, pipesim_executor.rank.unit_fit) of the same
    configuration as one row, their step times one after another in launch order (the profile's check reads them,
    pipesim.analysis.profile_check)."""
    rows: dict[str, dict[str, Any]] = {}
    for document in documents:
        for row in ((document.get("provenance") or {}).get("in_situ") or {}).get("measured_steps") or []:
            if not isinstance(row, dict) or not isinstance(row.get("step_ms"), list):
                continue
            identity = json.dumps([row.get(key) for key in STEP_IDENTITY])
            kept = rows.setdefault(identity, {**row, "step_ms": []})
            kept["step_ms"] = kept["step_ms"] + row["step_ms"]
    return list(rows.values())


def launch_levels(documents: Sequence[dict[str, Any]]) -> list[float]:
    """Each launch's level: the median over its in-situ action times (`_in_situ_times`, those every launch has) of
    the log time away from the launches' mean log time. 0 for every launch where none is shared."""
    tables = [_in_situ_times(d) for d in documents]
    shared = set.intersection(*(set(t) for t in tables))
    if not shared:
        return [0.0] * len(documents)
    deviations: list[list[float]] = [[] for _ in documents]
    for key in sorted(shared):
        logs = [math.log(t[key]) for t in tables]
        centre = statistics.fmean(logs)
        for i, value in enumerate(logs):
            deviations[i].append(value - centre)
    return [statistics.median(d) for d in deviations]


def launch_spread(levels: Sequence[float]) -> float:
    """The standard deviation of the launches' levels (a relative one: they are logs); 0 for fewer than two."""
    return statistics.stdev(levels) if len(levels) > 1 else 0.0


def _in_situ_times(document: dict[str, Any]) -> dict[tuple, float]:
    """Every in-situ action time the profile implies: a stage's isolated time x its class's in-situ factor for
    that stage and kind, keyed by (class, size, start, stop, kind). These, not the isolated times, set a
    prediction's level: a launch whose isolated timings ran slow also reads smaller factors."""
    isolated = {}
    for record in document.get("stages") or []:
        if isinstance(record, dict):
            ident = tuple(record.get(k) for k in STAGE_KEYS)
            isolated.update({(*ident, k): v for k, v in record.items() if k.endswith("_ms") and _number(v)})
    table = {}
    for name, terms in (document.get("in_situ") or {}).items():
        for record in (terms.get("stages") or []) if isinstance(terms, dict) else []:
            ident = tuple(record.get(k) for k in STAGE_KEYS)
            for kind, factor in (record.get("factors") or {}).items():
                price = isolated.get((*ident, kind))
                if _number(factor) and price is not None and price * factor > 0:
                    table[(name, *ident, kind)] = float(price * factor)
    return table


def _drift(document: dict[str, Any]) -> float:
    value = (document.get("spread") or {}).get("drift", 0.0)
    return float(value) if _number(value) else 0.0


def _scaled(value: Any, factor: float) -> Any:
    """Every number in `value` (nested dicts and lists) times `factor`; anything else as it is."""
    if isinstance(value, dict):
        return {k: _scaled(v, factor) for k, v in value.items()}
    if isinstance(value, list):
        return [_scaled(v, factor) for v in value]
    return value * factor if _number(value) else value


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _merged(values: list[Any], first: Any) -> Any:
    """The launches' `values` at one place merged (see the module docstring); `first` is the first launch's."""
    if isinstance(first, (bool, int)):
        return first  # a count or a switch: the same in every launch
    if isinstance(first, float):
        return _merged_number(values) if all(_number(v) for v in values) else first
    if isinstance(first, dict):
        if not all(isinstance(v, dict) for v in values):
            return first
        return {k: _merged([v.get(k) for v in values], item) for k, item in first.items()}
    if isinstance(first, list):
        if not all(isinstance(v, list) for v in values):
            return first
        if first and all(isinstance(item, dict) for v in values for item in v):
            matched = _by_identity(values)
            if matched is not None:
                return [_merged(group, group[0]) if group else item for item, group in zip(first, matched, strict=True)]
        if all(len(v) == len(first) for v in values):
            return [_merged([v[i] for v in values], item) for i, item in enumerate(first)]
    return first


def _by_identity(values: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]] | None:
    """For each record of the first list, the records of every list with its identity (an empty group where some
    launch lacks it); None when the records carry no identity or it repeats within a list."""
    keys = [k for k in IDENTITY_KEYS if k in values[0][0]]
    if not keys:
        return None
    indexed = []
    for records in values:
        table = {tuple(r.get(k) for k in keys): r for r in records}
        if len(table) != len(records):
            return None
        indexed.append(table)
    groups = []
    for record in values[0]:
        ident = tuple(record.get(k) for k in keys)
        found = [t.get(ident) for t in indexed]
        groups.append(found if all(f is not None for f in found) else [])  # type: ignore[misc]
    return groups


def _merged_number(values: list[float]) -> float:
    """The median of the logs for positive values (a geometric mean for two), the median itself otherwise."""
    if all(v > 0 for v in values):
        return math.exp(statistics.median(math.log(v) for v in values))
    return float(statistics.median(values))
