"""AppTest of the Run page's view of a run (issue 23 items 2-5, 12): one definition per figure and one step per
screen, tooltips that say what they mean, a cancelled profiled run told as it was, only runs listed as runs, and
a reload during a run naming the run's own settings without taking over the form."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pipesim_executor.host import run_folder
from tests.helpers.app_charts import chart_figures, chart_titles
from tests.helpers.run_folders import write_run

OPEN = "FormSubmitter:run-open-Open"


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs"  # open_page points PIPESIM_RUNS_ROOT here


def opened(open_page, name: str) -> AppTest:
    at = open_page("run")
    at.selectbox(key="run-open-pick").set_value(name)
    at.button(key=OPEN).click().run()
    assert not at.exception
    return at


def test_one_step_per_screen_the_median_by_default(runs: Path, open_page) -> None:
    """Item 2: the overlay, its lost-time marks, the attribution bars and the per-action table show one step: the
    median one by default (the attribution's summary), another when picked.

    Catches the overlay drawing the last step (2) while the attribution shows the median one (0)."""
    write_run(runs, "three", step_factors=(1.2, 1.0, 1.5))  # step times: the median is step 0, the last step 2
    at = opened(open_page, "three")
    assert at.selectbox(key="run-step").value == 0
    titles = chart_titles(at)
    assert any(t.startswith("where the step went") and "(step 0, the median)" in t for t in titles), titles
    assert any(m.value.startswith("**Per action, step 0**") for m in at.markdown)
    at.selectbox(key="run-step").set_value(2).run()
    titles = chart_titles(at)
    assert any(t.startswith("where the step went") and t.endswith("(step 2)") for t in titles), titles
    assert any(m.value.startswith("**Per action, step 2**") for m in at.markdown)


def test_every_error_figure_has_one_sign_and_says_what_it_is(runs: Path, open_page) -> None:
    """Item 2: predicted - measured in ms and the prediction error in % have the same sign; the overlay's makespan
    figure is named as such, not as a second "error".

    Catches "delta ms" (measured - simulated) beside "error %" (simulated - measured) with opposite signs."""
    write_run(runs, "slow")  # every action measured 25% slower than simulated
    at = opened(open_page, "slow")
    table = next(d.value for d in at.dataframe if "difference" in d.value.columns)
    assert (table["difference"] < 0).all() and (table["error"] < 0).all()
    config = json.loads(next(d for d in at.dataframe if "difference" in d.value.columns).proto.columns)
    assert config["difference"]["label"] == "predicted - measured (ms)"
    assert "(predicted - measured) / measured" in config["error"]["help"]
    overlay = next(t for t in chart_titles(at) if "simulated vs measured" in t)
    assert "(makespan error -20.0%)" in overlay  # its own name, beside the step's prediction error
    cards = {m.label: m for m in at.metric}
    assert "(predicted - measured) / measured" in cards["Prediction error"].help


def test_tooltips_give_lengths_and_formatted_numbers(runs: Path, open_page) -> None:
    """Item 3: a lost-time mark's hover gives its length, start and end (a based bar's %{x} is its end, which the
    old hover called the length); a measured bar's hover formats predicted - measured (no 1.548307000193745).

    Catches "from 51.427 ms for 58.218 ms" (the end as the length) and an unformatted difference."""
    write_run(runs, "marks", step_factors=(1.0, 1.0))
    folder = runs / "marks"
    measured = json.loads((folder / "measured.json").read_text())
    # a slower step 1 on rank 1: an idle gap that is more than the schedule's, i.e. lost time to mark
    for span in measured["spans"]:
        if span["rank"] == 1 and span["step"] == 1:
            span["start"] += 3.0
            span["end"] += 3.0
    (folder / "measured.json").write_text(json.dumps(measured))
    at = opened(open_page, "marks")
    at.selectbox(key="run-step").set_value(1).run()
    overlay = next(f for f in chart_figures(at) if "simulated vs measured" in f["layout"]["title"]["text"])
    marks = [t for t in overlay["data"] if t.get("name", "").startswith("lost: ")]
    assert marks
    for trace in marks:
        template = trace["hovertemplate"]
        assert "%{x" not in template and "%{base" not in template
        assert "from %{customdata[0]:,.2f} ms to %{customdata[2]:,.2f} ms" in template
    measured_bars = [t for t in overlay["data"] if t.get("name", "").endswith(" measured")]
    for trace in measured_bars:
        assert "predicted - measured %{customdata[7]:+,.2f} ms" in trace["hovertemplate"]
        assert ":.3f}" not in trace["hovertemplate"]


def test_a_cancelled_profiled_run_is_told_as_it_was(runs: Path, open_page) -> None:
    """Item 4: a profiled run cancelled before its prediction says so (not "launch with 'Profile first'"), and
    its chart's title names the run once, "(measured)" once."""
    write_run(runs, "stopped", status="cancelled", message="cancelled by the caller", predicted=False)
    at = opened(open_page, "stopped")
    infos = " ".join(i.value for i in at.info)
    assert "this run was profiled" in infos and "Profile first, then predict" not in infos
    title = chart_titles(at)[0]
    assert title.startswith("stopped (measured)") and title.count("(measured)") == 1


def test_only_runs_are_offered_and_a_run_is_preselected(runs: Path, open_page) -> None:
    """Item 5: a folder that is no run (an old plans folder) is listed as damaged, last, and never pre-selected.

    Catches the newest folder (plans/) picked by default, "is not a run folder: it has no config.json"."""
    write_run(runs, "good")
    plans = runs / "plans"
    plans.mkdir()
    (plans / "plan-1234.json").write_text("{}")
    later = time.time() + 60
    os.utime(plans, (later, later))  # the newest entry
    at = open_page("run")
    picker = at.selectbox(key="run-open-pick")
    assert picker.value == "good" and picker.options[-1] == "plans"


def test_a_reload_during_a_run_names_its_settings_and_keeps_the_form(runs: Path, open_page) -> None:
    """Issue 33 item 2: a new session (a reload) that finds a run going (here 1f1b, 2 ranks, 4 microbatches, 2
    steps) names it and its settings in a banner, but never takes them over the user's form (defaults here: 4
    ranks, 8 microbatches, 5 steps), so Launch never starts a configuration the user did not set up."""
    folder = write_run(runs, "going", measured=False).resolve()
    (folder / "result.json").unlink()
    run_folder.write_progress(folder, {"status": "running", "progress": 0.1, "events": [], "log": []})
    at = open_page("run")
    assert at.button(key="run-elsewhere-cancel") is not None  # named, with its Cancel
    assert at.number_input(key="ranks").value == 4 and at.number_input(key="microbatches").value == 8
    assert at.number_input(key="run-steps").value == 5
    said = " ".join(c.value for c in at.caption)
    assert "Its settings: 1f1b, 2 ranks, 4 microbatches" in said and "2 steps" in said
    assert "ranks" not in at.query_params and "microbatches" not in at.query_params
    (folder / "result.json").write_text(json.dumps({"status": "cancelled", "message": "", "started_at": 0}))


def test_a_huge_log_and_a_fifo_do_not_hang_the_page(runs: Path, open_page) -> None:
    """The log viewer reads each log's tail (pipesim.io.bounded.read_tail): a 50 MB log shows its last lines, a
    FIFO named like a log is refused at once (a plain read would block the page forever)."""
    folder = write_run(runs, "noisy", status="failed", message="rank 0 failed", measured=False)
    with (folder / "logs" / "rank1.log").open("w") as log:
        for i in range(1_000_000):
            log.write(f"line {i:07d} of a very long log, padded to fifty bytes\n")
    os.mkfifo(folder / "logs" / "rank2.log")
    at = opened(open_page, "noisy")
    shown = "\n".join(c.value for c in at.code)
    assert "line 0999999" in shown and "line 0000000" not in shown
    assert any("rank2.log" in c.value and "FIFO" in c.value for c in at.caption)


def test_a_verify_run_shows_the_plans_prediction_and_what_it_rests_on(runs: Path, open_page) -> None:
    """Issue 33 item 5: the same candidate shows the same prediction and error on Plan and Run (the Run page said
    "Predicted step time n/a" for a Plan verification's run), labelled as the plan's, from an assumed rate."""
    from pipesim.analysis.overlay import prediction_error
    from pipesim_executor.run_files import PLAN_PREDICTION_FILE

    folder = write_run(runs, "verify-plan-x-0", predicted=False)
    (folder / PLAN_PREDICTION_FILE).write_text(
        json.dumps({"predicted_step_ms": 4.0, "candidate": "1f1b P2 m4x4", "calibrated": False, "device_tflops": 0.01})
    )
    result = run_folder.load_run(folder)
    assert result.predicted_step_ms == 4.0
    assert result.prediction_error == pytest.approx(prediction_error(4.0, result.measured_step_ms))
    at = opened(open_page, "verify-plan-x-0")
    cards = {m.label: m.value for m in at.metric}
    assert cards["Predicted step time"] == "4.00 ms", cards
    said = " ".join(c.value for c in at.caption)
    assert "the plan's prediction for 1f1b P2 m4x4, from an assumed device rate (0.01 TFLOP/s), not a profile" in said


def test_an_offload_runs_copies_are_drawn_on_the_copy_engines_lane(runs: Path, open_page) -> None:
    """An --offload run's OFFLOADs and RELOADs, measured on the copy engine (comm spans of kind offload / reload),
    are drawn as a thin sub-lane under each rank's measured lane, the simulated copies under its simulated one."""
    write_run(runs, "offloaded", offload="full")
    at = opened(open_page, "offloaded")
    overlay = next(f for f in chart_figures(at) if "simulated vs measured" in f["layout"]["title"]["text"])
    lanes = {trace["name"]: trace for trace in overlay["data"] if trace.get("name", "").startswith("copy engine")}
    assert set(lanes) == {"copy engine simulated", "copy engine measured"}
    measured = json.loads((runs / "offloaded" / "measured.json").read_text())
    copies = [c for c in measured["comm"] if c["kind"] in ("offload", "reload") and c["step"] == 0]
    assert copies and len(lanes["copy engine measured"]["y"]) == len(copies)  # the drawn step's copies, each once
    rows = {round(y - 0.36) for y in lanes["copy engine measured"]["y"]}
    assert rows == {2 * c["rank"] + 1 for c in copies}  # on each rank's measured row (2r + 1), not its simulated
    assert {round(y - 0.36) for y in lanes["copy engine simulated"]["y"]} == {2 * c["rank"] for c in copies}
