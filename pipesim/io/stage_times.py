"""The stage times of a cost file, read in time and memory linear in its size, for `pipesim balance`.

`load_cost_file` makes a validated `StageCost` per stage: right for a pipeline's few stages, but a file of 10^6
stages (a model profiled layer by layer, to be cut by `balance`) then cost 49 s and 800 MB. Balancing needs each
stage's forward plus backward time alone. This reader finds the top-level `stages` array in the bytes, parses it
in slices of about `SLICE_BYTES` (flat records: one `json.loads` per slice, no object kept), checks every record
as `StageCost` would (known fields; numbers, finite and >= 0; W within the backward, W bytes within the
activations) with numpy over the slice, and keeps two float arrays. The rest of the file is parsed and checked by
`cost_from_dict` with one stage. Anything it does not recognise (a unit profile, an odd layout, any bad value)
goes to `load_cost_file`, whose message names the field at fault: the fast path never words an error itself.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import numpy as np

from pipesim.cost.description import unit_weight
from pipesim.io.bounded import read_buffer
from pipesim.io.cost_file import _STAGE_FIELDS, COST_FORMAT_VERSION, cost_from_dict, load_cost_file
from pipesim.io.profile_file import PROFILE_VERSION
from pipesim.limits import MAX_LAYERS, MAX_RESULT_BYTES

SLICE_BYTES = 8 << 20
_REQUIRED = ("forward_ms", "backward_ms")
_OPTIONAL = ("weight_ms", "weight_grad_bytes")
_COLON, _COMMA, _BRACE, _SPACE = b":,} "
_MAX_VALUE_CHARS = 32  # a float's repr is at most 24 characters
_VALUE_BYTES = np.zeros(256, dtype=bool)  # the characters of a JSON number, and null's
_VALUE_BYTES[list(b"0123456789.eE+-nul")] = True
_KEY = re.compile(rb'"([a-z][a-z0-9_]*)":')  # a field's name: a2a_ms holds a digit


def stage_times_ms(path: str | Path) -> np.ndarray:
    """Per stage, its weight in a cut (`pipesim.cost.description.unit_weight`: forward + backward ms) of the cost
    file at `path` (a unit profile: its units at its first microbatch size, as `balance` cuts them). ValueError
    naming the field at fault for a bad file."""
    raw = read_buffer(path, MAX_RESULT_BYTES, "cost file")
    times = _fast(raw)
    if times is not None:
        return times
    loaded = load_cost_file(path)  # the full reader: a unit profile, or the message for a bad file
    stages = loaded.unit_costs(loaded.microbatch_sizes[0]) if hasattr(loaded, "unit_costs") else loaded.stages
    return np.array([unit_weight(s.forward_ms, s.backward_ms) for s in stages], dtype=float)


def _fast(raw: bytearray) -> np.ndarray | None:
    """The times of a version-1 cost file laid out as pipesim writes it, or None to leave it to the full reader."""
    key = raw.find(b'"stages"')
    start = raw.find(b"[", key) if key >= 0 else -1
    end = raw.find(b"]", start) if start >= 0 else -1
    if end < 0 or raw[key + 8 : start].strip() != b":":
        return None
    try:
        rest = json.loads(raw[:start] + b"[]" + raw[end + 1 :])
    except (ValueError, RecursionError):
        return None
    if not isinstance(rest, dict) or rest.get("stages") != [] or rest.get("version") in (PROFILE_VERSION, None):
        return None
    if rest.get("version") != COST_FORMAT_VERSION:
        return None
    forward, backward = [], []
    position = start + 1
    while position < end:
        stop = raw.rfind(b"}", position, min(position + SLICE_BYTES, end)) if position + SLICE_BYTES < end else end
        if stop <= position:
            return None
        cut = stop + 1 if stop < end else end
        piece = raw[position:cut].strip().strip(b",")
        if b"true" in piece or b"false" in piece:
            return None  # a boolean where a number belongs
        times = _by_layout(piece)
        if times is None:
            try:
                records = json.loads(b"[" + piece + b"]")
            except (ValueError, RecursionError):
                return None
            if not all(type(record) is dict for record in records):
                return None
            if piece.count(b'"') != 2 * sum(map(len, records)):
                return None  # a string among the values (numpy would read "1" as 1.0)
            times = _checked(records)
        if times is None:
            return None
        forward.append(times[0])
        backward.append(times[1])
        position = cut
    if not forward or not 1 <= sum(len(f) for f in forward) <= MAX_LAYERS:
        return None
    first = json.loads(b"[" + raw[start + 1 : raw.find(b"}", start) + 1] + b"]")
    cost_from_dict({**rest, "stages": first})  # the rest of the file, checked as the full reader checks it
    return unit_weight(np.concatenate(forward), np.concatenate(backward))


def _by_layout(piece: bytes) -> tuple[np.ndarray, np.ndarray] | None:
    """The times of a slice whose records all share one layout (the keys in one order, as pipesim writes them),
    read without a Python object per value: each value is the text between a colon and the next comma or brace,
    the text left once they are taken out must be one record's skeleton repeated, and numpy parses every value at
    once. None where the slice is laid out otherwise (the JSON path reads it, or refuses it)."""
    buf = np.frombuffer(piece, dtype=np.uint8)
    colons = np.flatnonzero(buf == _COLON)
    stops = np.flatnonzero((buf == _COMMA) | (buf == _BRACE))
    after = np.searchsorted(stops, colons)
    if not colons.size or after[-1] >= stops.size:
        return None
    starts, ends = colons + 1, stops[after]
    for _ in range(2):  # `"key": value`, as json.dumps writes it by default: the space is the skeleton's
        starts += (buf[np.minimum(starts, buf.size - 1)] == _SPACE) & (starts < ends)
    lengths = ends - starts
    if lengths.min() < 1 or lengths.max() > _MAX_VALUE_CHARS or np.any(ends[1:] <= ends[:-1]):
        return None  # an empty value, a long one, or two colons before one stop (a value holding a colon)
    edges = np.zeros(buf.size + 1, dtype=np.int8)
    edges[starts] = 1
    edges[ends] = -1
    inside = np.cumsum(edges[:-1], dtype=np.int8).astype(bool)
    if not _VALUE_BYTES[buf[inside]].all():
        return None  # anything but a number's characters and null's
    skeleton = buf[~inside].tobytes().translate(None, b" \n\r\t")  # the layout, whatever its white space
    template = skeleton[: skeleton.find(b"}") + 1]
    count = skeleton.count(b"}")
    if not template or skeleton != b",".join([template] * count):
        return None
    keys = [key.decode() for key in _KEY.findall(template)]
    if template != b"{" + b",".join(b'"%s":' % key.encode() for key in keys) + b"}":
        return None  # anything but keys and values: the JSON path's
    if len(set(keys)) != len(keys) or not set(keys) <= _STAGE_FIELDS or not set(_REQUIRED) <= set(keys):
        return None
    text = np.where(inside, buf, np.uint8(_SPACE))
    text[ends] = _COMMA  # each value then a comma: numpy's reader stops at anything else (`1-2`, `1e`)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a text it cannot read to its end: a DeprecationWarning, now an error
        try:
            values = np.fromstring(text.tobytes().replace(b"null", b" nan"), dtype=float, sep=",")
        except (ValueError, DeprecationWarning):
            return None
    if values.size != count * len(keys):
        return None
    values = values.reshape(count, len(keys))
    given = dict(zip(keys, values.T, strict=True))
    columns = {
        name: given[name] if name in given else np.full(count, np.nan if name in _OPTIONAL else 0.0)
        for name in _STAGE_FIELDS
    }
    return _checked_columns(columns)


def _checked(records: list) -> tuple[np.ndarray, np.ndarray] | None:
    """Forward and backward arrays of a slice's records, or None unless every record is one `StageCost` takes
    (the slice was refused beforehand if it holds a true or false)."""
    if not set().union(*records) <= _STAGE_FIELDS:
        return None
    try:
        columns = {
            name: np.array([r.get(name, np.nan if name in _OPTIONAL else 0.0) for r in records], dtype=float)
            for name in _STAGE_FIELDS
        }
        for name in _REQUIRED:
            for record in records:
                record[name]  # noqa: B018  KeyError: a stage without its time
    except (TypeError, ValueError, KeyError):  # a string, a list, an object, a missing time
        return None
    return _checked_columns(columns)


def _checked_columns(columns: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """Forward and backward, or None unless every stage's values are ones `StageCost` takes."""
    for name, values in columns.items():
        present = values[~np.isnan(values)] if name in _OPTIONAL else values
        if not np.all(np.isfinite(present)) or np.any(present < 0):
            return None  # nan (a null where a number belongs) is not finite
    weight, grad = columns["weight_ms"], columns["weight_grad_bytes"]
    if np.any(weight > columns["backward_ms"]) or np.any(grad > columns["activation_bytes"]):
        return None  # nan compares false: an absent W passes
    return columns["forward_ms"], columns["backward_ms"]
