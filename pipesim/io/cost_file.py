"""The cost file (`cost.json`): what a profile run measured, in a versioned format that pipesim reads back.

Version 1 (below) holds a run's stages as its profile cut them (`executor run --profile`); version 2 a model
profiled unit by unit (`executor profile`, `pipesim.io.profile_file`), which the planner cuts into any split.
`load_cost_file` reads both; `load_cost` the first alone (what simulate, compare and synthesize price with).

    {"format": "pipesim.cost", "version": 1, "units": {...}, "source": "profile", "recompute": false,
     "stages": [{"forward_ms": ..., "backward_ms": ..., ...}], "links": [{"latency_ms": ..., "bandwidth_gbps": ...}],
     "step_overhead_ms": [...], "dispatch_ms": [...], "shared_cores": n | null,
     "description": {...} | null, "data_parallel": D, "dp_link": {...}, "sharded": false,
     "dp_bucket_bytes": 26214400, "overlap_factor": 1.0, "meta": {...}}

The layout is flat: the cost model's concerns (`CostModel.runtime`, `dp_group`, `provenance`) are grouped in
memory, not in the file, so files of every version of this format read both ways (an older pipesim ignores
the keys it does not know, such as `dp_bucket_bytes`; a missing key is its default).

Reading is strict: every field has one type, and a wrong one is a ValueError naming the field (a string
"false" is not a boolean, a list is not a link). Files written before `step_overhead_ms` and
`description` were fields (they sat in "meta") are still read. Writing is atomic (`formats.write_json`).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipesim.cost.collectives import DEFAULT_BUCKET_BYTES
from pipesim.cost.model import CostModel, DataParallelGroup, LinkCost, Provenance, RankRuntime, StageCost
from pipesim.io.formats import parse_bounded_json, read_json, write_json
from pipesim.limits import MAX_COST_BYTES, MAX_COST_VALUES, PATH_TAKES, PATH_TYPES, require
from pipesim.numbers import check_number, shown
from pipesim.programs import programs

if TYPE_CHECKING:  # a unit profile's modules load where one is read or written (not for `simulate --json`)
    from pipesim.cost.description import ModelDescription
    from pipesim.cost.profile import UnitProfile

COST_FORMAT = "pipesim.cost"
COST_FORMAT_VERSION = 1
COST_UNITS = {"time": "ms", "size": "bytes", "bandwidth": "GB/s"}  # what a stage cost file's numbers are in
_STAGE_FIELDS = {f.name for f in fields(StageCost)}
_LINK_FIELDS = {"latency_ms", "bandwidth_gbps"}


def cost_to_dict(cost: CostModel) -> dict[str, Any]:
    return {
        "format": COST_FORMAT,
        "version": COST_FORMAT_VERSION,
        "units": dict(COST_UNITS),
        "source": cost.source,
        "recompute": cost.recompute,
        "stages": [_stage_dict(s) for s in cost.stages],
        "links": [_link_dict(link) for link in cost.links],
        "step_overhead_ms": list(cost.step_overhead_ms),
        "dispatch_ms": list(cost.dispatch_ms),
        "shared_cores": cost.shared_cores,
        "description": None if cost.description is None else asdict(cost.description),
        "data_parallel": cost.data_parallel,
        "dp_link": _link_dict(cost.dp_link),
        "sharded": cost.sharded,
        "dp_bucket_bytes": cost.dp_group.bucket_bytes,
        "overlap_factor": cost.overlap_factor,
        "host_link": _link_dict(cost.host_link),
        "attention_fraction": cost.attention_fraction,
        "meta": cost.meta,
    }


# A dense stage's all-to-all fields at their defaults are left out: a million-stage file stays its size, and a
# file of a model without experts reads as it did before they existed.
_DENSE = {"a2a_ms": 0.0, "moe_layers": 1}


def _stage_dict(stage: StageCost) -> dict[str, Any]:
    record = asdict(stage)
    for name, default in _DENSE.items():
        if record[name] == default:
            del record[name]
    return record


def _link_dict(link: LinkCost) -> dict[str, Any]:
    return {
        "latency_ms": link.latency_ms,
        "bandwidth_gbps": None if math.isinf(link.bandwidth_gbps) else link.bandwidth_gbps,
    }


def _number(value: Any, where: str, *, allow_none: bool = False) -> float | None:
    """A finite number (pipesim.numbers.check_number); the cost model's own checks bound it further."""
    if value is None and allow_none:
        return None
    return float(check_number(value, f"cost file: {where}"))


def _record(raw: Any, where: str, known: set[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ValueError(f"cost file: {where} must be an object with fields {sorted(known)}, got {raw!r}")
    unknown = set(raw) - known
    if unknown:
        raise ValueError(f"cost file: {where}: unknown fields {sorted(unknown)}; valid: {sorted(known)}")
    return raw


def _stage(raw: Any, index: int) -> StageCost:
    record = _record(raw, f"stages[{index}]", _STAGE_FIELDS)
    optional = {"weight_ms", "weight_grad_bytes"}
    values = {}
    for name, value in record.items():
        values[name] = _number(value, f"stages[{index}].{name}", allow_none=name in optional)
    if "moe_layers" in values:  # a count: 3.0 reads as 3, 2.5 is refused by StageCost
        layers = values["moe_layers"]
        values["moe_layers"] = int(layers) if float(layers).is_integer() else layers
    try:
        return StageCost(**values)
    except TypeError as error:  # a required field is missing
        raise ValueError(f"cost file: stages[{index}]: {error}") from None
    except ValueError as error:
        raise ValueError(f"cost file: stages[{index}]: {error}") from None


def _link(raw: Any, index: int) -> LinkCost:
    record = _record(raw, f"links[{index}]", _LINK_FIELDS)
    latency = _number(record.get("latency_ms", 0.0), f"links[{index}].latency_ms")
    bandwidth = _number(record.get("bandwidth_gbps"), f"links[{index}].bandwidth_gbps", allow_none=True)
    try:
        return LinkCost(latency_ms=latency, bandwidth_gbps=math.inf if bandwidth is None else bandwidth)
    except ValueError as error:
        raise ValueError(f"cost file: links[{index}]: {error}") from None


def _list(data: dict[str, Any], key: str, default: list) -> list:
    value = data.get(key, default)
    if value is None:
        return default
    if not isinstance(value, list):
        raise ValueError(f"cost file: {key} must be a list, got {value!r}")
    return value


def cost_from_dict(data: Any) -> CostModel:
    """Read the versioned cost file format; every error names the field at fault."""
    from pipesim.io.profile_file import PROFILE_VERSION  # a file is read: its profile's version is worth loading

    if not isinstance(data, dict) or data.get("format") != COST_FORMAT:
        raise ValueError(f'not a pipesim cost file: expected "format": "{COST_FORMAT}"')
    version = data.get("version")
    if version == PROFILE_VERSION and not isinstance(version, bool):
        raise ValueError(
            f"this cost file is a model profiled unit by unit ({programs().executor} profile): "
            f"{programs().pipesim} plan --cost cuts it into any split; simulate, compare and synthesize take a "
            f"run's stage costs ({programs().executor} run --profile writes them)"
        )
    if isinstance(version, bool) or version != COST_FORMAT_VERSION:
        raise ValueError(
            f"unsupported cost file version {version!r:.20}; this pipesim reads versions {COST_FORMAT_VERSION} "
            f"(a run's stage costs) and {PROFILE_VERSION} (a model profiled per unit)"
        )
    if data.get("units") != COST_UNITS:
        raise ValueError(
            f"cost file: units must be {json.dumps(COST_UNITS)} (the numbers mean nothing without them), got "
            f"{shown(data.get('units'))}"
        )
    recompute = data.get("recompute", False)
    if not isinstance(recompute, bool):
        raise ValueError(f"cost file: recompute must be true or false, got {recompute!r}")
    source = data.get("source", "file")
    if not isinstance(source, str):
        raise ValueError(f"cost file: source must be a string, got {source!r}")
    meta = data.get("meta") or {}
    if not isinstance(meta, dict):
        raise ValueError(f"cost file: meta must be an object, got {meta!r}")
    if "stages" not in data:
        raise ValueError("cost file is missing field 'stages'")
    stages = tuple(_stage(raw, i) for i, raw in enumerate(_list(data, "stages", [])))
    if not stages:
        raise ValueError("cost file: stages is empty; give one stage cost, or one per stage")
    links = tuple(_link(raw, i) for i, raw in enumerate(_list(data, "links", [{}]) or [{}]))
    legacy_overhead = meta.get("step_overhead_ms")  # files from before it was a field
    overhead = data.get("step_overhead_ms", legacy_overhead if legacy_overhead is not None else [])
    if isinstance(overhead, (int, float)) and not isinstance(overhead, bool):
        overhead = [overhead]
    if not isinstance(overhead, list):
        raise ValueError(f"cost file: step_overhead_ms must be a list of numbers, got {overhead!r}")
    overhead_ms = tuple(_number(v, f"step_overhead_ms[{i}]") for i, v in enumerate(overhead))
    dispatch = data.get("dispatch_ms", [])  # files from before it was measured have none: no gap
    if not isinstance(dispatch, list):
        raise ValueError(f"cost file: dispatch_ms must be a list of numbers, got {dispatch!r}")
    dispatch_ms = tuple(_number(v, f"dispatch_ms[{i}]") for i, v in enumerate(dispatch))
    shared_cores = data.get("shared_cores")
    if shared_cores is not None and (isinstance(shared_cores, bool) or not isinstance(shared_cores, int)):
        raise ValueError(f"cost file: shared_cores must be a positive integer or null, got {shared_cores!r}")
    description = _description(data.get("description", meta.get("model") if source == "model" else None))
    data_parallel = data.get("data_parallel", 1)  # files from before data parallelism: one replica
    if isinstance(data_parallel, bool) or not isinstance(data_parallel, int):
        raise ValueError(f"cost file: data_parallel must be a positive integer, got {data_parallel!r}")
    dp_link = _link(data["dp_link"], "dp") if data.get("dp_link") is not None else LinkCost()
    sharded = data.get("sharded", False)
    if not isinstance(sharded, bool):
        raise ValueError(f"cost file: sharded must be true or false, got {sharded!r}")
    bucket_bytes = _number(data.get("dp_bucket_bytes", DEFAULT_BUCKET_BYTES), "dp_bucket_bytes")
    if not 1 <= bucket_bytes < math.inf:
        raise ValueError(f"cost file: dp_bucket_bytes must be a number of bytes, at least 1, got {bucket_bytes!r}")
    overlap_factor = data.get("overlap_factor", 1.0)
    if isinstance(overlap_factor, bool) or not isinstance(overlap_factor, (int, float)):
        raise ValueError(f"cost file: overlap_factor must be a number in (0, 1], got {overlap_factor!r}")
    host_link = _link(data["host_link"], "host") if data.get("host_link") is not None else LinkCost()
    try:
        return CostModel(
            stages=stages,
            links=links,
            recompute=recompute,
            overlap_factor=float(overlap_factor),
            host_link=host_link,
            attention_fraction=_number(data.get("attention_fraction", 0.0), "attention_fraction"),
            runtime=RankRuntime(overhead_ms, dispatch_ms, shared_cores),
            dp_group=DataParallelGroup(data_parallel, dp_link, sharded, bucket_bytes),
            provenance=Provenance(source, description, dict(meta)),
        )
    except ValueError as error:
        raise ValueError(f"cost file: {error}") from None


def _description(raw: Any) -> ModelDescription | None:
    if raw is None:
        return None
    from pipesim.cost.description import ModelDescription  # a cost file's model, read only where it has one

    known = {f.name for f in fields(ModelDescription)}
    record = _record(raw, "description", known)
    try:
        return ModelDescription(**record)
    except (TypeError, ValueError) as error:
        raise ValueError(f"cost file: description: {error}") from None


def save_cost(cost: CostModel, path: str | Path) -> None:
    """Write atomically: a reader never sees half a file, a failed write leaves the old one."""
    write_json(cost_to_dict(cost), path)


def load_cost(path: str | Path) -> CostModel:
    return cost_from_dict(_read(path))


def _read(path: str | Path) -> Any:
    """A cost file's JSON, bounded by its size and its count of values before it is parsed (pipesim/limits.py)."""
    return read_json(path, MAX_COST_BYTES, "cost file", max_items=MAX_COST_VALUES)


def load_cost_file(path: str | Path) -> CostModel | UnitProfile:
    """Either version: a run's stage costs (version 1, a `CostModel`) or a model profiled per unit (version 2, a
    `UnitProfile`); what `plan --cost` reads."""
    require(path, "path", PATH_TYPES, PATH_TAKES)
    return _either_version(_read(path))


def cost_file_from_bytes(raw: bytes, name: str) -> CostModel | UnitProfile:
    """`load_cost_file` of a file already in memory (an upload named `name`), under the same bounds."""
    return _either_version(parse_bounded_json(raw, name, MAX_COST_BYTES, "cost file", MAX_COST_VALUES))


def _either_version(data: Any) -> CostModel | UnitProfile:
    from pipesim.io.profile_file import PROFILE_VERSION, profile_from_dict

    if isinstance(data, dict) and data.get("format") == COST_FORMAT and data.get("version") == PROFILE_VERSION:
        return profile_from_dict(data)
    return cost_from_dict(data)


def save_profile(profile: UnitProfile, path: str | Path) -> None:
    """Write a unit profile (version 2) atomically."""
    from pipesim.io.profile_file import profile_to_dict

    write_json(profile_to_dict(profile, COST_FORMAT), path)
