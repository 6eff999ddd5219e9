"""The machine's record of launch spreads: verify-plan adds what its rounds measured, plan's intervals read it back.

A profile reads how far launches land apart off its own two launches (one degree of freedom); a verification of
six candidates in three rounds reads it off twelve. The record keeps the latter per machine and model, pooled by
degrees of freedom; where it is larger than the profile's own reading, both kinds of interval carry it."""

from __future__ import annotations

import json
import math
import os
from dataclasses import replace

import pytest

from pipesim.cli.main import main
from pipesim.io.cost_file import save_profile
from pipesim.io.launch_history import (
    MAX_BYTES,
    MAX_RECORDS,
    MIN_DOF,
    LaunchSpread,
    append_record,
    machine,
    model_key,
    pooled_launch_spread,
    read_records,
    relative_sd,
    resolve,
)
from pipesim.plan.intervals import machine_launch_spread
from pipesim.sim.spread import machine_cv
from pipesim_executor.host.verify import _record_launch_spread
from pipesim_executor.host.verify_compare import VerifyRow, compare, summary_lines
from tests.test_plan_intervals import with_spread


def _merged(within: float = 0.05, own: float = 0.02, launches: int = 2):
    drift = math.sqrt(within**2 + own**2 * (1 + 1 / launches))
    return replace(with_spread(), spread_drift=drift, spread_launch=own, spread_launches=launches)


def test_a_launch_spread_measured_elsewhere_replaces_the_profiles_own_only_where_it_is_larger():
    profile = _merged()
    for launches in (1, 3):
        assert machine_cv(profile, launches, None) == machine_cv(profile, launches)
        assert machine_cv(profile, launches, 0.01) == machine_cv(profile, launches)  # the profile saw more
    # by hand: within 0.05 stays the profile's, the launches' spread is 0.12, the profile's level rests on K = 2
    assert machine_cv(profile, 1, 0.12) == pytest.approx(math.sqrt(0.05**2 + 0.12**2 * 1.5))
    assert machine_cv(profile, 3, 0.12) == pytest.approx(math.sqrt((0.05**2 + 0.12**2) / 3 + 0.12**2 / 2))
    # a profile of one launch: its drift is all within it, and its level one launch's (K = 1)
    single = replace(with_spread(), spread_drift=0.06)
    assert machine_cv(single, 3) == 0.06  # nothing measured elsewhere: as before
    assert machine_cv(single, 3, 0.12) == pytest.approx(math.sqrt((0.06**2 + 0.12**2) / 3 + 0.12**2))


def test_records_round_trip_and_pool_by_degrees_of_freedom_this_models_first(tmp_path):
    path = tmp_path / "deep" / "history.jsonl"
    append_record(path, log_sd=0.05, dof=6, model="a")
    assert pooled_launch_spread(read_records(path)[0], "a") is None  # 6 < MIN_DOF degrees of freedom
    append_record(path, log_sd=0.20, dof=12, model="b")
    pooled = pooled_launch_spread(read_records(path)[0], "a")  # a's own are too few: every model's
    assert pooled.scope == "machine" and pooled.dof == 18 and pooled.verifications == 2
    assert pooled.log_sd == pytest.approx(math.sqrt((6 * 0.05**2 + 12 * 0.20**2) / 18))
    append_record(path, log_sd=0.07, dof=6, model="a")
    own = pooled_launch_spread(read_records(path)[0], "a")
    assert own == LaunchSpread(pytest.approx(math.sqrt((0.05**2 + 0.07**2) / 2)), 12, 2, "model")
    assert own.between == pytest.approx(math.sqrt(math.expm1(own.log_sd**2)))
    assert "this model's 2 earlier verifications on this machine (12 degrees of freedom)" in own.line()
    elsewhere = {**json.loads(path.read_text().splitlines()[0]), "machine": {**machine(), "host": "another-host"}}
    path.write_text(json.dumps(elsewhere) + "\n")
    assert read_records(path)[0] and pooled_launch_spread(read_records(path)[0], "a") is None  # not this machine
    assert pooled_launch_spread([], "a") is None and MIN_DOF == 10


def test_a_damaged_or_hostile_record_costs_its_lines_only_and_a_non_file_is_named(tmp_path):
    path = tmp_path / "history.jsonl"
    good = {"machine": machine(), "model": "m", "log_sd": 0.1, "dof": 12}
    bad = [
        {**good, "log_sd": -1},
        {**good, "dof": True},
        {**good, "log_sd": float("nan")},
        [1, 2],
        {**good, "model": 3},
    ]
    path.write_text("\n".join([json.dumps(good), "{not json", *map(json.dumps, bad), ""]))
    records, skipped = read_records(path)
    assert len(records) == 1 and skipped == 6
    other_model = replace(with_spread(), model={"kind": "x"})
    pooled, line = machine_launch_spread(other_model, str(path))  # the machine's one good record: 12 dof
    assert pooled.dof == 12 and line.endswith(f"(6 damaged lines of the launch history {path} skipped)")
    path.write_text("\n".join(["{not json", *map(json.dumps, bad)]))
    assert machine_launch_spread(other_model, str(path)) == (
        None,
        f"note: 6 damaged lines of the launch history {path} skipped",
    )
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="FIFO"):
        read_records(fifo)
    assert "cannot be read" in machine_launch_spread(with_spread(), str(fifo))[1]
    huge = tmp_path / "huge.jsonl"
    huge.write_bytes(b" " * (MAX_BYTES + 1))
    with pytest.raises(ValueError, match="at most"):
        read_records(huge)
    assert read_records(tmp_path / "missing.jsonl") == ([], 0)
    assert resolve("none") is None and resolve(str(huge)) == huge
    with pytest.raises(ValueError, match="not a launch spread"):
        append_record(path, log_sd=math.nan, dof=3, model="m")


def test_the_record_keeps_its_latest_entries(tmp_path):
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps({"machine": machine(), "model": "m", "log_sd": 0.1, "dof": 1}) + "\n"
                            for _ in range(MAX_RECORDS)))  # fmt: skip
    append_record(path, log_sd=0.3, dof=2, model="m")
    records, _ = read_records(path)
    assert len(records) == MAX_RECORDS and records[-1]["log_sd"] == 0.3 and records[-1]["dof"] == 2


def _plan(tmp_path, profile_path, *extra):
    out = tmp_path / f"plan{len(list(tmp_path.glob('plan*.json')))}.json"
    assert main(["plan", "--cost", str(profile_path), "--devices", "2", "--global-batch", "16", "--optimizer", "sgd",
                 "--microbatch-sizes", "2", "--json", str(out), *extra]) == 0  # fmt: skip
    document = json.loads(out.read_text())
    best = document["best"]
    return document, (best["step_ms_p95"] - best["step_ms_p05"]) / best["step_ms"]


def test_plan_reads_the_machines_record_and_says_so(tmp_path, capsys):
    profile = _merged(within=0.03, own=0.01)
    path = tmp_path / "cost.json"
    save_profile(profile, path)
    history = tmp_path / "history.jsonl"
    one_step = ("--interval-of", "step")
    plain, width = _plan(tmp_path, path, "--launch-history", str(history))  # no record yet: as before
    assert "launch_spread" not in plain["inputs"] and plain["inputs"]["interval_of"] == {"launches": 1, "steps": 1}
    assert _plan(tmp_path, path, "--launch-history", str(history), *one_step)[1] == width
    append_record(history, log_sd=0.15, dof=24, model=model_key(profile.model))
    capsys.readouterr()
    read, median = _plan(tmp_path, path, "--launch-history", str(history))
    assert "intervals: launches land 15.1% apart (one standard deviation), pooled over this model's 1 earlier " in (
        capsys.readouterr().out
    )
    assert read["inputs"]["launch_spread"]["dof"] == 24 and read["inputs"]["launch_spread"]["scope"] == "model"
    assert read["inputs"]["interval_of"] == {"launches": 3, "steps": 90}  # auto: the median's, now it is known
    _, wider = _plan(tmp_path, path, "--launch-history", str(history), *one_step)
    assert wider > 1.5 * width and median < wider
    _, ignored = _plan(tmp_path, path, "--launch-history", "none")
    assert ignored == width
    # the default record is the test's own (tests/conftest.py), empty here
    _, default = _plan(tmp_path, path)
    assert default == width


def _row(label: str, rounds: list[list[float]]) -> VerifyRow:
    row = VerifyRow(label, {"schedule": "1f1b"}, 10.0, predicted_p05_ms=9.0, predicted_p95_ms=11.0)
    for steps in rounds:
        row.add_round(steps, "run")
    return row


def test_a_comparable_verification_adds_its_pooled_round_spread_and_a_moved_one_adds_nothing(tmp_path):
    history = tmp_path / "history.jsonl"
    plan = {"inputs": {"executor_model": {"kind": "mlp", "layers": 4}}}
    rows = [_row("a", [[10.0, 10.2, 9.9], [11.0, 11.1, 10.9], [10.4, 10.5, 10.3]]),
            _row("b", [[20.0, 20.1], [21.5, 21.2], [20.6, 20.9]])]  # fmt: skip
    verification = compare(rows, rounds=3)
    assert verification.status == "ok" and verification.launch_spread.dof == 4
    _record_launch_spread(verification, plan, "cpu", str(history))
    records, _ = read_records(history)
    assert len(records) == 1 and records[0]["model"] == model_key(plan["inputs"]["executor_model"])
    assert records[0]["log_sd"] == pytest.approx(verification.launch_spread.log_sd) and records[0]["dof"] == 4
    assert verification.to_dict()["launch_spread"] == {"log_sd": records[0]["log_sd"], "dof": 4}
    said = f"launch spread: a candidate's rounds sat {relative_sd(records[0]['log_sd']):.1%} apart (one standard"
    assert any(line.startswith(said) for line in summary_lines(verification))
    verification.machine_load = {"available": True, "other_cores": 1.5, "own_cores": 0.5, "cores": 2}  # shared
    assert verification.status == "not_comparable"
    _record_launch_spread(verification, plan, "cpu", str(history))
    _record_launch_spread(compare(rows, rounds=3), {"inputs": {}}, "cpu", str(history))  # no profiled model
    _record_launch_spread(compare(rows, rounds=3), plan, "cpu", "none")
    assert len(read_records(history)[0]) == 1
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    fine = compare(rows, rounds=3)
    _record_launch_spread(fine, plan, "cpu", str(blocked / "history.jsonl"))  # its folder is a file
    assert any("was not updated" in note for note in fine.notes)
