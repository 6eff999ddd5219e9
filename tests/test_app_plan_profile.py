"""AppTest of the Plan page planning from a unit profile (`executor profile --out runs/NAME`): the box lists the
profiles of the runs folder and nothing else, picking one plans exactly as `pipesim plan --cost` does, at its
sizes and with its intervals, a size it did not measure is refused or marked, and Verify is handed the profiled
model. Uploads are read under the same bounds as files."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app_pages.parts.plan import profile as plan_profile
from pipesim.io.cost_file import save_cost, save_profile
from pipesim.plan.inputs import PlanInputs
from pipesim.plan.intervals import attach_intervals
from pipesim.plan.report import best_candidate
from pipesim.plan.search import PlanSpace, evaluate_all
from tests.test_app_plan import _fake_verify, _finish, candidates_table
from tests.test_plan_intervals import with_spread
from tests.test_unit_profile import SIZES


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """A runs folder with one unit profile ("prof", which timed SGD's step only) beside what the box must not list:
    a run's stage costs (version 1), a FIFO named cost.json, a folder without one and a file that is not JSON."""
    from pipesim.cost.convert import cost_from_times

    root = tmp_path / "runs"
    for name in ("prof", "stages", "fifo", "empty", "garbage"):
        (root / name).mkdir(parents=True)
    save_profile(sgd_profile(), root / "prof" / "cost.json")
    save_cost(cost_from_times([1.0], [2.0], [0.0], [0.1]), root / "stages" / "cost.json")
    os.mkfifo(root / "fifo" / "cost.json")
    (root / "garbage" / "cost.json").write_bytes(b"\x00" * 4096)
    return root


def sgd_profile():
    profile = with_spread()
    return replace(profile, optimizers={"sgd": profile.optimizers["sgd"]})


def picked(at: AppTest) -> AppTest:
    at.selectbox(key="plan-profile").set_value("prof").run()
    assert not at.exception, at.exception
    return at


def test_the_box_lists_only_profiles_and_picking_one_plans_as_plan_cost_does(runs, open_page) -> None:
    at = open_page("plan")
    assert at.selectbox(key="plan-profile").options == [plan_profile.NO_PROFILE, "prof"]
    at = picked(at)
    assert not at.error, [e.value for e in at.error]
    assert at.text_input(key="plan-mbs").value == ",".join(map(str, SIZES))  # the sizes it measured
    assert at.selectbox(key="plan-optimizer").value == "sgd"  # the page's adam was not timed
    assert at.number_input(key="plan-layers").disabled and at.number_input(key="plan-jitter").disabled
    said = " ".join(i.value for i in at.info)
    assert "Planned from the profile" in said and str(runs / "prof" / "cost.json") in said
    assert "not used" in said
    # the page's defaults (4 devices, a batch of 32, a 40 GiB cap) planned as the library plans them
    inputs = PlanInputs.from_profile(
        sgd_profile(), devices=4, global_batch=32, memory_cap_bytes=40 * 2**30, optimizer="sgd"
    )
    schedules = tuple(at.multiselect(key="plan-schedules").value)
    space = PlanSpace(schedules=schedules, microbatch_sizes=SIZES, chunks=(2,), recompute=(False, True))
    candidates = attach_intervals(inputs, evaluate_all(inputs, space, prune=False))
    best = best_candidate(candidates)
    frame = candidates_table(at)
    assert frame["candidate"].iloc[0] == best.label  # the recommendation first
    row = frame[frame["candidate"] == best.label].iloc[0]
    assert row["step"] == pytest.approx(best.step_ms) and row["90% interval"]  # the profile's own spread
    assert set(frame["candidate"].str.extract(r"x(\d+)")[0].astype(int)) <= set(SIZES)


def test_a_size_the_profile_did_not_measure_is_refused_then_marked_when_extrapolating(runs, open_page) -> None:
    at = picked(open_page("plan"))
    at.text_input(key="plan-mbs").set_value("2,8")
    at.button(key="FormSubmitter:plan-form-Plan").click().run()
    said = " ".join(e.value for e in at.error)
    assert "microbatch size 8 lies outside the profiled sizes 1,2,4" in said and "--extrapolate" in said
    assert not at.exception
    at.checkbox(key="plan-extrapolate").check()
    at.button(key="FormSubmitter:plan-form-Plan").click().run()
    assert not at.error and not at.exception
    labels = list(candidates_table(at)["candidate"])
    assert any(label.endswith("x8 extrapolated") for label in labels)
    assert not at.selectbox(key="plan-selected").value.endswith("extrapolated")  # a measured size fits


def test_verify_is_handed_the_profiled_model_not_the_description(runs, open_page, monkeypatch) -> None:
    from pipesim.analysis.since_profile import SinceProfile
    from pipesim_executor.host import verify
    from pipesim_executor.host.verify_config import model_config

    seen: dict = {}
    fake = _fake_verify(seen)

    def moved(*args, **kwargs):  # the real one reads the move from the plan's profile (tests/test_since_profile.py)
        result = fake(*args, **kwargs)
        result.since_profile = SinceProfile(3, 1.052, 1.021, 1.084, -0.013)
        return result

    monkeypatch.setattr(verify, "verify_plan", moved)
    at = picked(open_page("plan"))
    at.button(key="plan-verify").click().run()
    _finish(at)
    said = [c.value for c in at.caption]
    assert any(c.startswith("Since the profile: these runs took 1.052x [1.021, 1.084]") for c in said), said
    document = json.loads(seen["paths"][0].read_text())
    assert document["inputs"]["executor_model"] == {"kind": "transformer"} and "model" not in document["inputs"]
    assert document["inputs"]["cost_file"] == str(runs / "prof" / "cost.json")
    assert model_config(document).kind == "transformer"
    assert document["calibration"]["source"] == "profile"


class Upload:
    """What st.file_uploader returns, as far as the picker reads it."""

    def __init__(self, name: str, raw: bytes) -> None:
        self.name, self._raw = name, raw

    def getvalue(self) -> bytes:
        return self._raw


def test_an_upload_is_read_under_the_files_bounds_and_must_be_a_unit_profile(runs) -> None:
    good = Upload("mine.json", (runs / "prof" / "cost.json").read_bytes())
    got = plan_profile.picked_profile(runs, good)
    assert got.origin == "mine.json" and got.profile == sgd_profile()
    with pytest.raises(ValueError, match="stage costs \\(version 1\\), not a model profiled unit by unit"):
        plan_profile.picked_profile(runs, Upload("s.json", (runs / "stages" / "cost.json").read_bytes()))
    with pytest.raises(ValueError, match="big.json is 33.0 MiB; pipesim reads a cost file of at most 32.0 MiB"):
        plan_profile.picked_profile(runs, Upload("big.json", b" " * (33 * 1024**2)))
    with pytest.raises(ValueError, match="bad.json: not a UTF-8 text file"):
        plan_profile.picked_profile(runs, Upload("bad.json", b"\xff\xfe{"))
    with pytest.raises(ValueError, match="cut.json: not valid JSON"):
        plan_profile.picked_profile(runs, Upload("cut.json", good.getvalue()[:-100]))


def test_an_uploaded_profile_plans_and_a_bad_upload_is_named_without_losing_the_plan(runs, open_page) -> None:
    at = open_page("plan")
    raw = (runs / "prof" / "cost.json").read_bytes()
    at.file_uploader(key="plan-profile-upload").set_value(("mine.json", raw, "application/json")).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert "`mine.json`" in " ".join(i.value for i in at.info)
    assert at.text_input(key="plan-mbs").value == ",".join(map(str, SIZES))
    stages = (runs / "stages" / "cost.json").read_bytes()
    at.file_uploader(key="plan-profile-upload").set_value(("stages.json", stages, "application/json")).run()
    said = " ".join(e.value for e in at.error)
    assert "Cannot plan from this profile: stages.json holds a run's stage costs (version 1)" in said
    assert not at.exception and candidates_table(at) is not None  # the description's plan is still drawn


def test_a_link_naming_the_profile_opens_with_its_settings_unless_the_link_sets_them(runs, monkeypatch) -> None:
    monkeypatch.setenv("PIPESIM_RUNS_ROOT", str(runs))
    at = AppTest.from_file("../app.py", default_timeout=60)
    at.query_params.update({"plan-profile": "prof", "plan-optimizer": "adam"})  # the link's optimizer is kept
    at.run()
    at.switch_page("app_pages/plan.py").run()
    assert at.selectbox(key="plan-optimizer").value == "adam"
    assert "the profile timed no 'adam' optimizer step (it timed: sgd)" in " ".join(e.value for e in at.error)
    assert not at.exception
    for query, sizes in (({"plan-profile": "prof"}, "1,2,4"), ({"plan-profile": "prof", "plan-mbs": "2,4"}, "2,4")):
        at = AppTest.from_file("../app.py", default_timeout=60)
        at.query_params.update(query)
        at.run()
        at.switch_page("app_pages/plan.py").run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        assert at.selectbox(key="plan-profile").value == "prof"
        assert at.text_input(key="plan-mbs").value == sizes
        assert at.selectbox(key="plan-optimizer").value == "sgd"  # the page's default (adam) was not timed
        assert "Planned from the profile" in " ".join(i.value for i in at.info)


def test_a_disturbed_profile_is_said_above_the_plan_and_marked_in_its_json(runs, open_page, monkeypatch) -> None:
    """The page plans from a disturbed profile (the command line refuses one without a flag), says so first, and
    the plan Verify reads carries the mark, as `plan --cost --accept-disturbed-profile` writes it."""
    from pipesim_executor.host import verify
    from tests.test_profile_disturbance import BUSY, disturbed_profile

    profile = disturbed_profile()
    save_profile(replace(profile, provenance={**profile.provenance, "machine_load": BUSY}), runs / "prof" / "cost.json")
    seen: dict = {}
    monkeypatch.setattr(verify, "verify_plan", _fake_verify(seen))
    at = picked(open_page("plan"))
    said = " ".join(w.value for w in at.warning)
    assert "This profile is disturbed: its own check is off by" in said and "1.70 of its 2 cores" in said
    at.button(key="plan-verify").click().run()
    _finish(at)
    mark = json.loads(seen["paths"][0].read_text())["calibration"]["disturbance"]
    assert mark["disturbed"] is True and mark["accepted"] is True and mark["bias"] < -0.3


def test_the_machines_launch_history_widens_the_plans_intervals_and_is_said(runs, open_page, monkeypatch) -> None:
    """Where earlier verifications on this machine recorded how far launches land apart, the page plans as `plan
    --cost` does by default: the intervals of verify-plan's median, carrying that spread, and says what they rest
    on."""
    from pipesim.io.launch_history import ENV, append_record, model_key

    at = picked(open_page("plan"))
    before = candidates_table(at)
    assert not any("launches land" in m.value for m in at.markdown)
    history = runs.parent / "history.jsonl"
    append_record(history, log_sd=0.2, dof=24, model=model_key(sgd_profile().model))
    monkeypatch.setenv(ENV, str(history))
    at = picked(open_page("plan"))
    assert not at.error, [e.value for e in at.error]
    said = " ".join(m.value for m in at.markdown)
    assert "intervals: launches land 20.2% apart (one standard deviation), pooled over this model's 1 earlier" in said
    after = candidates_table(at)
    label = after["candidate"].iloc[0]
    assert (
        after[after["candidate"] == label]["90% interval"].iloc[0]
        != before[before["candidate"] == label]["90% interval"].iloc[0]
    )
