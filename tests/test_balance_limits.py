"""`balance` past the command line's limit says where more go (--cost FILE), and reads a cost file of many stages
by its layout (numpy over the bytes) exactly as the JSON reader does, handing it anything else."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

import pipesim.io.stage_times as stage_times
from pipesim.cli.main import main as pipesim_main
from pipesim.cost.model import CostModel, StageCost
from pipesim.io.cost_file import cost_to_dict, load_cost_file, save_cost


def test_layer_ms_past_the_limit_points_to_a_cost_file(capsys):
    assert pipesim_main(["balance", "--layer-ms", ",".join(["1"] * 10_000), "--stages", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--layer-ms" in err and "got 10,000" in err and "--cost FILE takes up to" in err


def _stages(count: int, seed: int = 3) -> tuple[StageCost, ...]:
    rng = random.Random(seed)
    return tuple(
        StageCost(forward_ms=rng.uniform(0.1, 2), backward_ms=rng.uniform(2, 4), weight_ms=rng.choice([None, 1.0]))
        for _ in range(count)
    )


@pytest.mark.parametrize("write", ["save_cost", "json.dumps", "json.dumps compact"])
def test_the_layout_reader_reads_what_the_json_reader_reads(tmp_path, monkeypatch, write):
    cost = CostModel(stages=_stages(5_000))
    path = tmp_path / "cost.json"
    if write == "save_cost":
        save_cost(cost, path)
    else:
        path.write_text(json.dumps(cost_to_dict(cost), separators=(",", ":") if "compact" in write else None))
    expected = np.array([s.forward_ms + s.backward_ms for s in load_cost_file(path).stages])
    monkeypatch.setattr(stage_times, "SLICE_BYTES", 1 << 14)  # many slices: a record cut at a slice's end shows
    monkeypatch.setattr(stage_times, "_checked", lambda records: pytest.fail("the JSON path read a plain file"))
    assert np.array_equal(stage_times.stage_times_ms(path), expected)


@pytest.mark.parametrize(
    "piece",
    [
        b'{"forward_ms":1-2,"backward_ms":2}',  # two numbers where one belongs
        b'{"forward_ms":1e,"backward_ms":2}',
        b'{"forward_ms":"1","backward_ms":2}',  # a string
        b'{"forward_ms":1,"backward_ms":null}',  # null where a time belongs
        b'{"forward_ms":1,"backward_ms":2},{"backward_ms":2,"forward_ms":1}',  # two layouts
        b'{"forward_ms":1,"backward_ms":2,"colour":3}',
        b'{"forward_ms":-1,"backward_ms":2}',
        b'{"forward_ms":1,"backward_ms":2,"weight_ms":3}',  # W beyond the backward
        b'{"forward_ms":1,"backward_ms":{"a":1}}',
        b'{"forward_ms":Infinity,"backward_ms":2}',
    ],
)
def test_the_layout_reader_hands_anything_odd_to_the_json_path(piece):
    assert stage_times._by_layout(piece) is None


def test_the_layout_reader_takes_null_w_and_exponents():
    forward, backward = stage_times._by_layout(
        b'{"forward_ms":1.5e2,"backward_ms":2,"weight_ms":null},{"forward_ms":0.25,"backward_ms":3E-1,"weight_ms":0.1}'
    )
    assert forward.tolist() == [150.0, 0.25] and backward.tolist() == [2.0, 0.3]
