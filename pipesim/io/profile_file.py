"""The cost file of a model profiled unit by unit (`python -m executor profile --out D` writes `D/cost.json`):
version 2 of `pipesim.cost`, read strictly (every field typed, every record's fields known, every number finite).

    {"format": "pipesim.cost", "version": 2, "kind": "unit-profile",
     "measures": {"time": "ms", "size": "bytes", "bandwidth": "GB/s"},
     "microbatch_sizes": [1, 2],
     "units": [{"name": "TokenEmbedding", "param_bytes": ..., "forward_ms": [per size], "backward_ms": [...],
                "forward_split_ms": [...], "input_ms": [...], "weight_ms": [...], "activation_bytes": [...],
                "weight_grad_bytes": [...], "input_bytes": [...], "output_bytes": [...]}, ...],
     "action_ms": {"start": {"forward_ms": c, "backward_ms": c, ...}, "end": {...}},  (per kind, at a cut start / end)
     "dispatch_ms": x, "tail_ms": x,
     "optimizers": {"sgd": {"fixed_ms": a, "ms_per_byte": b}, "sgd-momentum": {...}, "adam": {...}},
     "link": {"latency_ms": x, "bandwidth_gbps": x | null}, "core_slots": n | null,
     "model": {...the executor's model section...}, "provenance": {...},
     "in_situ": {"plain": {"dispatch_ms": x, "tail_ms": x, "scale": {"backward_ms": [per size], ...},
                           "ci": {"backward_ms": [per size], ...},  (optional: each factor's CI)
                           "stages": [{"microbatch_size": s, "start": a, "stop": b,  (optional: each in-situ
                                       "factors": {"backward_ms": x, ...}}]}, "split": ...,  stage's own factors)
                 "plain-chunked": ..., "split-chunked": ...},  (per class of schedule: its in-situ steps)
     "stages": [{"microbatch_size": s, "start": a, "stop": b, "forward_ms": ..., ...every time kind}],
     "spread": {"repeats": n, "cv": {"forward_ms": [per size], ...},  (optional: the stages' step-to-step spread,
                "round_se": {"forward_ms": [per size], ...},  (optional: a price's relative SE from its rounds)
                "drift": x},  (optional: the machine's speed drift between in-situ rounds, a relative SD)
     "fits": [{"name": ..., "forward_ms": {"a": .., "b": .., "residual": ..}, ...}]}

`spread` and each in-situ class's `ci` are optional both ways: a file written before them loads with
neither (a prediction from it has no interval), and a reader that ignores them reads the rest unchanged.

`fits` is derived from the units (`UnitProfile.fits`: the affine fit of every size curve and its residual),
written for the reader and ignored when read back. `cost_file.load_cost_file` reads either version; a stage
cost file (version 1, a run's `--profile`) is what `simulate` takes, a unit profile what `plan --cost` cuts.
"""

from __future__ import annotations

import math
from typing import Any

from pipesim.cost.links import LinkCost
from pipesim.cost.profile import (
    BYTE_KINDS,
    IN_SITU_CLASSES,
    OPTIONAL_BYTE_KINDS,
    TIME_KINDS,
    ActionConstants,
    InSituTerms,
    ProfiledUnit,
    SizeCurve,
    UnitProfile,
)
from pipesim.cost.runtime import OptimizerTime
from pipesim.limits import MAX_BYTES, MAX_LAYERS, MAX_PROFILE_UNITS, MAX_TIME_MS
from pipesim.numbers import check_number, shown
from pipesim.sim.memory import OPTIMIZER_STATES

PROFILE_VERSION = 2
PROFILE_KIND = "unit-profile"
MAX_SIZES = 64  # profiled microbatch sizes: a handful in practice
_UNIT_FIELDS = {"name", "param_bytes", *TIME_KINDS, *BYTE_KINDS, *OPTIONAL_BYTE_KINDS}
_OPTIMIZER_FIELDS = {"fixed_ms", "ms_per_byte"}


def profile_to_dict(profile: UnitProfile, format_name: str) -> dict[str, Any]:
    """The file's content (`formats.write_json` writes it atomically)."""
    units = []
    for unit in profile.units:
        record: dict[str, Any] = {"name": unit.name, "param_bytes": unit.param_bytes}
        kinds = (*TIME_KINDS, *BYTE_KINDS, *(k for k in OPTIONAL_BYTE_KINDS if k in unit.curves))
        record.update({kind: list(unit.curves[kind].values) for kind in kinds})
        units.append(record)
    return {
        "format": format_name,
        "version": PROFILE_VERSION,
        "kind": PROFILE_KIND,
        "measures": {"time": "ms", "size": "bytes", "bandwidth": "GB/s"},
        "microbatch_sizes": list(profile.microbatch_sizes),
        "units": units,
        "action_ms": {"start": dict(profile.action.start), "end": dict(profile.action.end)},
        "dispatch_ms": profile.dispatch_ms,
        "tail_ms": profile.tail_ms,
        "optimizers": {
            name: {"fixed_ms": t.fixed_ms, "ms_per_byte": t.ms_per_byte} for name, t in profile.optimizers.items()
        },
        "link": {
            "latency_ms": profile.link.latency_ms,
            "bandwidth_gbps": None if math.isinf(profile.link.bandwidth_gbps) else profile.link.bandwidth_gbps,
        },
        "core_slots": profile.core_slots,
        "model": dict(profile.model),
        "provenance": dict(profile.provenance),
        "in_situ": {
            name: {
                "dispatch_ms": t.dispatch_ms,
                "tail_ms": t.tail_ms,
                "scale": {kind: list(curve.values) for kind, curve in t.scale.items()},
                **({"ci": {kind: list(curve.values) for kind, curve in t.ci.items()}} if t.ci else {}),
                **(
                    {
                        "stages": [
                            {"microbatch_size": size, "start": start, "stop": stop, "factors": dict(factors)}
                            for (size, start, stop), factors in sorted(t.stages.items())
                        ]
                    }
                    if t.stages
                    else {}
                ),
            }
            for name, t in profile.in_situ.items()
        },
        "stages": [
            {"microbatch_size": size, "start": start, "stop": stop, **dict(times)}
            for (size, start, stop), times in sorted(profile.stages.items())
        ],
        **(
            {
                "spread": {
                    "repeats": profile.spread_repeats,
                    "cv": {kind: list(curve.values) for kind, curve in profile.spread.items()},
                    **(
                        {"round_se": {kind: list(c.values) for kind, c in profile.spread_round_se.items()}}
                        if profile.spread_round_se
                        else {}
                    ),
                    **({"drift": profile.spread_drift} if profile.spread_drift else {}),
                }
            }
            if profile.spread
            else {}
        ),
        "fits": profile.fits(),
    }


def _number(value: Any, where: str, limit: float, *, signed: bool = False) -> float:
    """A finite number from -limit (signed) or 0 to limit (pipesim.numbers.check_number)."""
    return float(check_number(value, f"cost file: {where}", minimum=-limit if signed else 0.0, maximum=limit))


def _object(raw: Any, where: str, known: set[str], required: set[str] | None = None) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ValueError(f"cost file: {where} must be an object with fields {sorted(known)}, got {raw!r:.60}")
    unknown = set(raw) - known
    if unknown:
        raise ValueError(f"cost file: {where}: unknown fields {sorted(unknown)[:5]}; valid: {sorted(known)}")
    missing = (known if required is None else required) - set(raw)
    if missing:
        raise ValueError(f"cost file: {where} is missing {sorted(missing)}")
    return raw


def _sizes(raw: Any) -> tuple[int, ...]:
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_SIZES:
        raise ValueError(
            f"cost file: microbatch_sizes must be a list of 1 to {MAX_SIZES} whole numbers, got {raw!r:.60}"
        )
    if any(isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= 2**31 for s in raw) or raw != sorted(
        set(raw)
    ):
        raise ValueError(f"cost file: microbatch_sizes must be increasing whole numbers >= 1, got {raw!r:.60}")
    return tuple(raw)


def _unit(raw: Any, index: int, sizes: tuple[int, ...]) -> ProfiledUnit:
    where = f"units[{index}]"
    record = _object(raw, where, _UNIT_FIELDS, _UNIT_FIELDS - set(OPTIONAL_BYTE_KINDS))
    name = record["name"]
    if not isinstance(name, str) or len(name) > 200:
        raise ValueError(f"cost file: {where}.name must be a string of at most 200 characters, got {name!r:.60}")
    curves = {}
    for kind in (*TIME_KINDS, *BYTE_KINDS, *(k for k in OPTIONAL_BYTE_KINDS if k in record)):
        values = record[kind]
        if not isinstance(values, list) or len(values) != len(sizes):
            raise ValueError(
                f"cost file: {where}.{kind} must list one value per microbatch size ({len(sizes)}), got {values!r:.60}"
            )
        limit = MAX_TIME_MS if kind in TIME_KINDS else MAX_BYTES
        curves[kind] = SizeCurve(sizes, tuple(_number(v, f"{where}.{kind}[{i}]", limit) for i, v in enumerate(values)))
    return ProfiledUnit(name, _number(record["param_bytes"], f"{where}.param_bytes", MAX_BYTES), curves)


def _optimizers(raw: Any) -> dict[str, OptimizerTime]:
    if not isinstance(raw, dict) or not raw:
        raise ValueError(f"cost file: optimizers must be an object naming at least one optimizer, got {raw!r:.60}")
    out = {}
    for name, fit in raw.items():
        if name not in OPTIMIZER_STATES:
            raise ValueError(
                f"cost file: optimizers: unknown optimizer {name!r:.60}; valid: {', '.join(OPTIMIZER_STATES)}"
            )
        record = _object(fit, f"optimizers.{name}", _OPTIMIZER_FIELDS)
        out[name] = OptimizerTime(
            _number(record["fixed_ms"], f"optimizers.{name}.fixed_ms", MAX_TIME_MS),
            _number(record["ms_per_byte"], f"optimizers.{name}.ms_per_byte", MAX_TIME_MS),
        )
    return out


def _in_situ(raw: Any, sizes: tuple[int, ...]) -> dict[str, InSituTerms]:
    """Each class's in-situ terms: dispatch gap, tail, and the factor of every kind measured at each size."""
    classes = _object(raw, "in_situ", set(IN_SITU_CLASSES), set())
    out = {}
    for name, record in classes.items():
        where = f"in_situ.{name}"
        known = {"dispatch_ms", "tail_ms", "scale", "ci", "stages"}
        record = _object(record, where, known, {"dispatch_ms", "tail_ms", "scale"})
        scale = _object(record["scale"], f"{where}.scale", set(TIME_KINDS), set())
        ci = _object(record.get("ci", {}), f"{where}.ci", set(TIME_KINDS), set())
        out[name] = InSituTerms(
            _number(record["dispatch_ms"], f"{where}.dispatch_ms", MAX_TIME_MS),
            _number(record["tail_ms"], f"{where}.tail_ms", MAX_TIME_MS),
            {kind: _factors(values, f"{where}.scale.{kind}", sizes) for kind, values in scale.items()},
            {kind: _factors(values, f"{where}.ci.{kind}", sizes) for kind, values in ci.items()},
            _stage_factors(record.get("stages", []), f"{where}.stages"),
        )
    return out


def _stage_factors(raw: Any, where: str) -> dict[tuple[int, int, int], dict[str, float]]:
    """One class's own factors per in-situ stage: each record's size, units and factor per kind."""
    if not isinstance(raw, list) or len(raw) > MAX_LAYERS:
        raise ValueError(f"cost file: {where} must be a list of at most {MAX_LAYERS:,} stage records")
    out = {}
    for index, record in enumerate(raw):
        at = f"{where}[{index}]"
        record = _object(record, at, {"microbatch_size", "start", "stop", "factors"})
        factors = _object(record["factors"], f"{at}.factors", set(TIME_KINDS), set())
        out[_stage_key(record, at)] = {k: _number(v, f"{at}.factors.{k}", 1e6) for k, v in factors.items()}
    return out


def _stage_key(record: dict[str, Any], where: str) -> tuple[int, int, int]:
    """A stage record's (microbatch size, first unit, the unit past the last), each a bounded whole number."""
    key = []
    for name in ("microbatch_size", "start", "stop"):
        value = record[name]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_LAYERS:
            raise ValueError(f"cost file: {where}.{name} must be a whole number >= 0, got {value!r:.40}")
        key.append(value)
    return key[0], key[1], key[2]


def _factors(raw: Any, where: str, sizes: tuple[int, ...]) -> SizeCurve:
    if not isinstance(raw, list) or len(raw) != len(sizes):
        raise ValueError(f"cost file: {where} must list one factor per microbatch size ({len(sizes)}), got {raw!r:.60}")
    return SizeCurve(sizes, tuple(_number(v, f"{where}[{i}]", 1e6) for i, v in enumerate(raw)), monotone=False)


def _spread(raw: Any, sizes: tuple[int, ...]) -> tuple[dict[str, SizeCurve], int, dict[str, SizeCurve], float]:
    """The stages' coefficient of variation per kind and size, the repetitions behind each median, each price's
    relative standard error from its rounds, and the machine's drift between in-situ rounds (the last two optional:
    empty and 0 for a file written before them)."""
    if raw is None:
        return {}, 0, {}, 0.0
    record = _object(raw, "spread", {"repeats", "cv", "round_se", "drift"}, {"repeats", "cv"})
    repeats = record["repeats"]
    if isinstance(repeats, bool) or not isinstance(repeats, int) or not 0 <= repeats <= 1_000_000:
        raise ValueError(f"cost file: spread.repeats must be a whole number >= 0, got {repeats!r:.40}")
    cv = _object(record["cv"], "spread.cv", set(TIME_KINDS), set())
    round_se = _object(record.get("round_se", {}), "spread.round_se", set(TIME_KINDS), set())
    return (
        {kind: _factors(values, f"spread.cv.{kind}", sizes) for kind, values in cv.items()},
        repeats,
        {kind: _factors(values, f"spread.round_se.{kind}", sizes) for kind, values in round_se.items()},
        _number(record.get("drift", 0.0), "spread.drift", 1.0),
    )


def _launches(provenance: dict[str, Any]) -> tuple[float, int]:
    """How far the merged launches' levels sat apart and how many they were (`provenance.launches`, written by
    `executor profile --launches K`): (0, 1) for a profile of one launch."""
    record = provenance.get("launches")
    if record is None:
        return 0.0, 1
    if not isinstance(record, dict):
        raise ValueError(f"cost file: provenance.launches must be an object, got {record!r:.60}")
    count = record.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1000:
        raise ValueError(
            f"cost file: provenance.launches.count must be a whole number from 1 to 1000, got {count!r:.40}"
        )
    # levels more than e apart (a spread over 1) are a machine that no interval describes: held at 1, as the drift is
    return min(1.0, _number(record.get("spread", 0.0), "provenance.launches.spread", 100.0)), count


def _stages(raw: Any) -> dict[tuple[int, int, int], dict[str, float]]:
    """The stages the profile timed whole: each record's size, units and every kind's time."""
    if not isinstance(raw, list) or len(raw) > MAX_LAYERS:
        raise ValueError(f"cost file: stages must be a list of at most {MAX_LAYERS:,} stage records")
    known = {"microbatch_size", "start", "stop", *TIME_KINDS}
    out = {}
    for index, record in enumerate(raw):
        where = f"stages[{index}]"
        record = _object(record, where, known)
        out[_stage_key(record, where)] = {k: _number(record[k], f"{where}.{k}", MAX_TIME_MS) for k in TIME_KINDS}
    return out


def profile_from_dict(data: dict[str, Any]) -> UnitProfile:
    """Read version 2 (the caller checked format and version); every error names the field at fault."""
    if data.get("kind") != PROFILE_KIND:
        raise ValueError(
            f'cost file: version {PROFILE_VERSION} files hold "kind": "{PROFILE_KIND}", got {data.get("kind")!r:.60}'
        )
    sizes = _sizes(data.get("microbatch_sizes"))
    raw_units = data.get("units")
    if not isinstance(raw_units, list) or not 1 <= len(raw_units) <= MAX_PROFILE_UNITS:
        count = f"{len(raw_units):,} unit records" if isinstance(raw_units, list) else shown(raw_units)
        raise ValueError(
            f"cost file: units must be a list of 1 to {MAX_PROFILE_UNITS:,} unit records (pipesim/limits.py), "
            f"got {count}"
        )
    units = tuple(_unit(raw, i, sizes) for i, raw in enumerate(raw_units))
    action = _object(data.get("action_ms", {}), "action_ms", {"start", "end"}, set())
    sides = {}
    for side in ("start", "end"):
        values = _object(action.get(side, {}), f"action_ms.{side}", set(TIME_KINDS), set())
        sides[side] = {k: _number(v, f"action_ms.{side}.{k}", MAX_TIME_MS, signed=True) for k, v in values.items()}
    constants = ActionConstants(sides["start"], sides["end"])
    link = _object(data.get("link", {}), "link", {"latency_ms", "bandwidth_gbps"}, set())
    bandwidth = link.get("bandwidth_gbps")
    try:
        link_cost = LinkCost(
            _number(link.get("latency_ms", 0.0), "link.latency_ms", MAX_TIME_MS),
            math.inf if bandwidth is None else _number(bandwidth, "link.bandwidth_gbps", math.inf),
        )
    except ValueError as error:
        raise ValueError(f"cost file: link: {error}") from None
    slots = data.get("core_slots")
    if slots is not None and (isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= 1_000_000):
        raise ValueError(f"cost file: core_slots must be a positive whole number or null, got {slots!r:.60}")
    for key in ("model", "provenance"):
        if not isinstance(data.get(key, {}), dict):
            raise ValueError(f"cost file: {key} must be an object, got {data.get(key)!r:.60}")
    stages = _stages(data.get("stages", []))
    spread, repeats, round_se, drift = _spread(data.get("spread"), sizes)
    launch_spread, launches = _launches(data.get("provenance", {}))
    try:
        return UnitProfile(
            units=units,
            microbatch_sizes=sizes,
            action=constants,
            dispatch_ms=_number(data.get("dispatch_ms", 0.0), "dispatch_ms", MAX_TIME_MS),
            tail_ms=_number(data.get("tail_ms", 0.0), "tail_ms", MAX_TIME_MS),
            optimizers=_optimizers(data.get("optimizers")),
            link=link_cost,
            core_slots=slots,
            model=dict(data.get("model", {})),
            provenance=dict(data.get("provenance", {})),
            stages=stages,
            in_situ=_in_situ(data.get("in_situ", {}), sizes),
            spread=spread,
            spread_repeats=repeats,
            spread_round_se=round_se,
            spread_drift=drift,
            spread_launch=launch_spread,
            spread_launches=launches,
        )
    except ValueError as error:
        raise ValueError(f"cost file: {error}") from None
