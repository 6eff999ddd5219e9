"""AppTest of the Run page with a stand-in launcher: launch, live progress, cancel, results, errors.

Real runs are covered by tests/test_launch.py (torchrun) and tests/test_browser.py (from
the UI); here a fake RunHandle follows pipesim_executor.host.launch's contract, and finished runs
are real run folders read by the real pipesim_executor.host.run_folder.load_run / list_runs.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from pipesim.io.formats import write_json
from pipesim.schedules import build_schedule
from pipesim.units import format_ms
from pipesim_executor.host import launch, run_folder
from pipesim_executor.progress import PROGRESS_PREFIX
from pipesim_executor.run_files import CANCEL_FILE
from tests.conftest import APP
from tests.helpers.app_charts import chart_figures, chart_titles
from tests.helpers.run_folders import write_run

SUBMIT = "FormSubmitter:run-form-Launch run"


class FakeHandle:
    """pipesim_executor.host.launch.RunHandle's interface; the test decides when the run ends."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.status = "running"
        self.progress = 0.5
        self.cancelled = False

    def events(self) -> list[dict]:
        return [{"event": "step", "rank": 0, "step": 1, "steps": 4, "phase": "run"}]

    def log_tail(self, lines: int = 40) -> str:
        return "[rank0] step 2 of 4"

    def done(self) -> bool:
        return self.status != "running"

    def cancel(self) -> None:
        self.cancelled = True
        self.status = "cancelled"


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "runs"
    monkeypatch.setenv("PIPESIM_RUNS_ROOT", str(root))
    return root


@pytest.fixture
def app(runs, open_page) -> AppTest:
    return open_page("run")


@pytest.fixture
def fake_launcher(runs: Path, monkeypatch: pytest.MonkeyPatch) -> list:
    """Replaces start_run; records (config, schedule) and hands out FakeHandles."""
    started: list = []

    def start_run(config, runs_root=Path("runs"), name=None, schedule=None, on_event=None):
        handle = FakeHandle(Path(runs_root) / f"fake-{len(started)}")
        started.append((config, schedule, handle))
        return handle

    monkeypatch.setattr(launch, "start_run", start_run)
    return started


def test_first_screen(app: AppTest, runs: Path) -> None:
    assert not app.error
    assert any("No runs yet" in c.value for c in app.caption)
    assert app.button(key=SUBMIT).label == "Launch run"
    assert app.selectbox(key="run-device").value == "auto" and app.selectbox(key="run-backend").value == "auto"


def test_config_that_fails_validation_is_a_plain_error(app: AppTest, runs: Path) -> None:
    app.number_input(key="run-batch").set_value(6)
    app.button(key=SUBMIT).click().run()
    assert "batch_size 6 does not split into 8 microbatches" in app.error[0].value
    assert not app.exception and not runs.exists()


def test_launcher_refusal_starts_nothing(app: AppTest, runs: Path) -> None:
    app.number_input(key="ranks").set_value(8)
    app.selectbox(key="run-device").set_value("cpu")
    app.button(key=SUBMIT).click().run()
    assert "8 stages" in app.error[0].value and "4" in app.error[0].value
    assert not app.exception
    assert not runs.exists() or not any(runs.iterdir())  # refused before any folder was made


def test_live_progress_then_the_overlay(app: AppTest, runs: Path, fake_launcher: list) -> None:
    app.button(key=SUBMIT).click().run()
    ((config, schedule, handle),) = fake_launcher
    # the schedule and size every page shares (Simulate's 1f1b on 4 ranks with 8 microbatches): what is drawn runs
    assert (config.pipeline.schedule, config.pipeline.num_ranks, config.pipeline.num_microbatches, config.profile) == (
        "1f1b",
        4,
        8,
        True,
    )
    assert schedule is None
    assert app.get("progress")[0].value == 50  # the handle's progress, in percent
    assert any("step 2 of 4" in c.value for c in app.code)
    assert app.button(key=SUBMIT).disabled  # one run at a time

    write_run(runs, handle.run_dir.name)
    handle.status = "ok"
    app.run()  # the polling fragment notices the end and reruns the page
    assert app.session_state["run_handle"] is None
    assert not app.error
    assert any("simulated vs measured" in t for t in chart_titles(app))
    result = run_folder.load_run(handle.run_dir)
    cards = {m.label: m.value for m in app.metric}
    # the fixture's two steps differ by half (CV 20%): too noisy to judge, and the page says so
    assert cards["Prediction error"] == f"{result.prediction_error:+.1%} (noisy)"
    assert any("too noisy to judge" in w.value for w in app.warning)
    assert cards["Measured step time"] == format_ms(result.measured_step_ms)
    diffs = next(d.value for d in app.dataframe if "difference" in d.value.columns)
    # one sign for both: predicted - measured, negative where the run was slower than predicted (25% here)
    assert len(diffs) == 2 * 8 and diffs["difference"].lt(0).all()
    assert diffs["error"].sub(-20.0).abs().max() < 1e-6  # simulated / measured - 1 = 1 / 1.25 - 1
    overlay = next(
        figure for figure in chart_figures(app) if "simulated vs measured" in figure["layout"]["title"]["text"]
    )
    marks = {trace["name"] for trace in overlay["data"] if trace.get("name", "").startswith("lost: ")}
    # the measured step is the simulated one stretched: all its idle is the schedule's, none is lost elsewhere
    assert marks == {"lost: schedule idle"}


def test_cancel_ends_the_run(app: AppTest, runs: Path, fake_launcher: list) -> None:
    app.button(key=SUBMIT).click().run()
    ((_, _, handle),) = fake_launcher
    write_run(runs, handle.run_dir.name, status="cancelled", message="cancelled by the caller", measured=False)
    app.button(key="run-cancel").click().run()
    assert handle.cancelled
    assert not app.error  # a cancel is not a crash: said calmly, no red box
    assert "Run cancelled: cancelled by the caller" in app.info[0].value
    assert not app.exception


def test_failed_run_is_shown_plainly_with_its_logs(app: AppTest, runs: Path, fake_launcher: list) -> None:
    app.button(key=SUBMIT).click().run()
    ((_, _, handle),) = fake_launcher
    write_run(runs, handle.run_dir.name, status="failed", message="rank 1 failed: RuntimeError: boom", measured=False)
    handle.status = "failed"
    app.run()
    assert "Run failed: rank 1 failed: RuntimeError: boom" in app.error[0].value
    assert any("rank 0 says hello" in c.value for c in app.code)
    assert not chart_figures(app) and not app.exception


def test_earlier_runs_are_listed_and_reopen(runs: Path, open_page) -> None:
    write_run(
        runs, "older", reference={"torch_schedule": "Schedule1F1B", "step_times_ms": [9.0, 8.0], "losses": [2.5, 2.26]}
    )
    write_run(runs, "broken", status="failed", message="rank 0 failed", measured=False)
    at = open_page("run")
    listing = at.dataframe[0].value
    assert set(listing["folder"]) == {"older", "broken"}
    at.selectbox(key="run-open-pick").set_value("older")
    at.button(key="FormSubmitter:run-open-Open").click().run()
    assert any("simulated vs measured" in t for t in chart_titles(at))
    assert any(t.startswith("where the step went") for t in chart_titles(at))  # the attribution, per rank
    reference = next(d.value for d in at.dataframe if "torch reference" in d.value.columns)
    assert reference["torch reference"].iloc[0] == pytest.approx(8.5)  # median of the reference step times


def test_custom_schedule_is_launched_as_sent(app: AppTest, runs: Path, fake_launcher: list) -> None:
    custom = build_schedule("gpipe", 3, 6)
    app.session_state["run_schedule"] = custom  # what the Custom page's button leaves behind
    app.run()
    assert app.toggle(key="run-use-custom").value is True  # sent from the Custom page: it is what runs
    app.number_input(key="run-batch").set_value(12)  # a multiple of the custom schedule's 6 microbatches
    app.button(key=SUBMIT).click().run()
    ((config, schedule, _),) = fake_launcher
    assert schedule == custom and (config.pipeline.num_ranks, config.pipeline.num_microbatches) == (3, 6)


def test_run_page_offers_the_perfetto_view_and_the_profiler_traces(runs: Path, open_page) -> None:
    from tests.helpers.kineto_traces import kineto_files

    folder = write_run(runs, "profiled")
    (folder / "traces").mkdir()
    kineto_files(folder / "traces", build_schedule("1f1b", 2, 4), steps=2)  # rank0.json, rank1.json
    at = open_page("run")
    at.selectbox(key="run-open-pick").set_value("profiled")
    at.button(key="FormSubmitter:run-open-Open").click().run()
    labels = [b.proto.label for b in at.get("download_button")]
    assert "Perfetto trace: simulated + measured" in labels
    assert {"rank0.json", "rank1.json"} <= set(labels)  # the torch.profiler traces, one button each
    # the run's own traces import in one click: the schedule recovered, laid over its simulation
    assert at.radio(key="import-source").options == ["uploaded files", "this run's executor traces"]
    at.radio(key="import-source").set_value("this run's executor traces").run()
    assert not at.error and any("4 microbatches, 16 actions; 2 steps recorded" in c.value for c in at.caption)
    assert sum("simulated vs measured" in t for t in chart_titles(at)) == 2  # the run's overlay and the import


def test_imported_traces_are_laid_over_their_simulation(app: AppTest) -> None:
    import tempfile

    from tests.helpers.kineto_traces import kineto_files

    schedule = build_schedule("interleaved-1f1b", 2, 4, num_virtual_stages=2)
    with tempfile.TemporaryDirectory() as folder:
        paths, _ = kineto_files(Path(folder), schedule, steps=2)
        files = [(p.name, p.read_bytes(), "application/json") for p in paths]
    app.file_uploader(key="import-traces").set_value(files).run()
    assert not app.error and not app.exception
    assert any("simulated vs measured" in t for t in chart_titles(app))
    assert any(t.startswith("where the step went") for t in chart_titles(app))
    assert any("2 steps recorded" in c.value for c in app.caption)
    app.file_uploader(key="import-traces").set_value(("bad.json", b'{"traceEvents": []}', "application/json")).run()
    assert len(app.error) == 1 and "no PP: labels" in app.error[0].value


def test_own_model_data_parallel_and_dtype_reach_the_launcher(app: AppTest, runs: Path, fake_launcher: list) -> None:
    app.text_input(key="run-model-spec").set_value("examples.gpt_small:build")
    app.number_input(key="run-data-parallel").set_value(2)
    app.selectbox(key="run-dtype").set_value("bf16")
    app.button(key=SUBMIT).click().run()
    assert not app.exception and not app.error
    config = fake_launcher[0][0]
    assert config.model.kind == "custom" and config.model.spec == "examples.gpt_small:build"
    assert config.pipeline.data_parallel == 2 and config.training.dtype == "bf16"


def test_own_model_spec_is_checked_never_evaluated(app: AppTest, runs: Path) -> None:
    app.text_input(key="run-model-spec").set_value("__import__('os').system('x')")
    app.button(key=SUBMIT).click().run()
    assert "must look like" in app.error[0].value and not app.exception
    assert not runs.exists() or not any(runs.iterdir())


# --- issue 13 --------------------------------------------------------------------------------------------------


def test_log_is_readable_and_the_raw_one_downloadable(app: AppTest, runs: Path, fake_launcher: list) -> None:
    """Item 12: no raw `PIPESIM {json}` in the live log; the raw text is a download."""
    app.button(key=SUBMIT).click().run()
    ((_, _, handle),) = fake_launcher
    handle.log_tail = lambda lines=40: (
        '[rank0] PIPESIM {"event": "step", "rank": 0, "step": 1, "steps": 4, "phase": "measure"}\n[rank1] hello'
    )
    app.run()
    shown = "\n".join(c.value for c in app.code)
    assert "[rank0] step 2/4 (measure)" in shown and "[rank1] hello" in shown and "PIPESIM" not in shown
    assert any(b.label == "Raw log" for b in app.get("download_button"))


def test_a_reload_finds_the_running_run_again(app: AppTest, runs: Path, fake_launcher: list, open_page) -> None:
    """Item 3: a new session (a browser reload) shows the run still going, with progress and Cancel."""
    app.button(key=SUBMIT).click().run()
    ((_, _, handle),) = fake_launcher
    reloaded = open_page("run")
    assert reloaded.get("progress") and reloaded.get("progress")[0].value == 50
    assert reloaded.button(key=SUBMIT).disabled
    write_run(runs, handle.run_dir.name, status="cancelled", message="cancelled by the caller", measured=False)
    reloaded.button(key="run-cancel").click().run()
    assert handle.cancelled and not reloaded.error


def test_run_page_labels(runs: Path, open_page, monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 12: the step picker is not a second "Measured step"; the error is a percentage; layers' help is
    true (stages share embedding + blocks + output); measured files are named so, the schedule CSV is not."""
    from streamlit.delta_generator import DeltaGenerator

    names: list[str] = []
    original = DeltaGenerator.download_button

    def recording(self, label, data, file_name=None, *args, **kwargs):  # AppTest does not expose file names
        names.append(file_name)
        return original(self, label, data, file_name, *args, **kwargs)

    monkeypatch.setattr(DeltaGenerator, "download_button", recording)
    write_run(runs, "older")
    at = open_page("run")
    config = json.loads(at.dataframe[0].proto.columns)
    assert config["error"]["label"] == "prediction error"
    table = at.dataframe[0].value  # issue 33 item 7: figures formatted as the app does, a dash where there is none
    assert "None" not in table.astype(str).to_numpy().ravel().tolist()
    assert all(re.fullmatch(r"[+-]\d+\.\d%|—", e) for e in table["error"]), table["error"]
    assert "embedding" in at.number_input(key="run-layers").help
    at.selectbox(key="run-open-pick").set_value("older")
    at.button(key="FormSubmitter:run-open-Open").click().run()
    assert [s.label for s in at.selectbox if s.key == "run-step"] == ["Step drawn (overlay, bars and table)"]
    assert {"older-measured-timeline.json", "older-measured-trace.json", "older.csv"} <= set(names)
    assert not any(n.endswith("-measured.csv") for n in names)


def test_a_cancel_says_what_was_measured() -> None:
    """Item 4: a cancelled run keeps what it measured, from its step events (the slowest rank per step)."""
    from pipesim_executor.progress import measured_so_far

    events = [
        {"event": "step", "rank": r, "step": s, "steps": 5, "phase": "measure", "ms": ms}
        for s, pair in enumerate([(10.0, 12.0), (11.0, 9.0), (30.0, 14.0)])
        for r, ms in enumerate(pair)
    ]
    events.append({"event": "step", "rank": 0, "step": 0, "steps": 1, "phase": "warmup", "ms": 99.0})
    assert measured_so_far(events) == "3 of 5 measured steps done, median step 12.00 ms"
    assert measured_so_far(events[-1:]) == ""


def test_run_form_settings_survive_a_page_switch(app: AppTest, runs: Path, fake_launcher: list) -> None:
    """Item 2: the Run form's values are the session's, not the page visit's."""
    app.number_input(key="run-steps").set_value(7)
    app.selectbox(key="run-size").set_value("tiny")
    app.button(key=SUBMIT).click().run()
    app.switch_page("app_pages/simulate.py").run()
    app.switch_page("app_pages/run.py").run()
    assert app.number_input(key="run-steps").value == 7 and app.selectbox(key="run-size").value == "tiny"


def test_a_run_started_elsewhere_is_named_in_a_banner_and_can_be_cancelled(runs: Path, open_page) -> None:
    """A run this server did not start (the command line, another server) is named in a banner, from its
    folder, with the launcher's progress, a readable log and a Cancel that the launcher obeys; Launch waits; the
    page opens its result only once the user cancelled it."""
    folder = write_run(runs, "elsewhere", measured=False).resolve()
    (folder / "result.json").unlink()
    step = {"event": "step", "rank": 0, "step": 1, "steps": 4, "phase": "measure", "part": "run"}
    # this test process stands for the launcher: progress.json names a live process
    run_folder.write_progress(
        folder,
        {
            "status": "running",
            "progress": 0.25,
            "events": [step],
            "log": ["[rank0] " + PROGRESS_PREFIX + json.dumps(step), "[rank1] hello"],
        },
    )

    def launcher() -> None:  # obeys the cancel file as pipesim_executor.host.launch does, a moment later
        deadline = time.monotonic() + 60
        while not (folder / CANCEL_FILE).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)
        write_json({"status": "cancelled", "message": "cancelled by the caller (2 of 4 measured steps done, "
                    "median step 12.00 ms)", "started_at": time.time()}, folder / "result.json")  # fmt: skip

    at = open_page("run")
    assert at.get("progress")[0].value == 25 and "elsewhere: step 2/4 (measure)" in at.get("progress")[0].proto.text
    shown = "\n".join(c.value for c in at.code)
    assert "[rank0] step 2/4 (measure)" in shown and "[rank1] hello" in shown and "PIPESIM" not in shown
    assert at.button(key=SUBMIT).disabled and any("Launch waits" in c.value for c in at.caption)
    assert any("A run is going (elsewhere)" in w.value for w in at.warning) and "run" not in at.query_params
    thread = threading.Thread(target=launcher)
    thread.start()
    at.button(key="run-elsewhere-cancel").click().run()
    thread.join()
    assert (folder / CANCEL_FILE).exists() and not at.error
    assert any("2 of 4 measured steps done" in i.value for i in at.info)
    assert not at.get("progress") and not at.button(key=SUBMIT).disabled


def test_a_cancelled_run_shows_what_it_measured(runs: Path, open_page) -> None:
    """Item 4: calmly, with the steps measured before the cancel drawn."""
    write_run(
        runs,
        "stopped",
        status="cancelled",
        message="cancelled by the caller (2 of 5 measured steps done, median step 12.00 ms)",
    )
    at = open_page("run")
    at.selectbox(key="run-open-pick").set_value("stopped")
    at.button(key="FormSubmitter:run-open-Open").click().run()
    assert not at.error and any("2 of 5 measured steps done" in i.value for i in at.info)
    assert chart_figures(at) and any(m.label == "Measured step time" for m in at.metric)


def test_the_earlier_runs_status_column_fits_its_longest_word(runs: Path, open_page) -> None:
    """A table cell is drawn on a canvas, cut at its column's width: "cancelled" read "cancelle"."""
    write_run(runs, "stopped", status="cancelled", message="cancelled by the caller")
    columns = json.loads(open_page("run").dataframe[0].proto.columns)
    assert columns["status"]["width"] == "medium"


def test_a_verification_holding_the_machine_keeps_the_form_and_launch_waits(runs: Path, open_page) -> None:
    """A Plan verification (here its lock, between two of its runs) is a banner: the user's form and URL stay, Launch
    is off with the reason, also on a page drawn before it took the machine; once it ends Launch is back."""
    from pipesim_executor.host import machine

    at = open_page("run")  # opened on a free machine
    with machine.hold("verify-plan", job="verify-plan plan.json: top 3, 3 rounds") as lock:
        lock.update(step="run 2 of 9, 1f1b P2 m4x4", runs_done=1, runs_total=9)
        at.button(key=SUBMIT).click().run()  # a press from a page drawn before: the rerun sees the machine held
        assert not runs.exists() or not list(runs.iterdir())  # nothing started
        assert at.button(key=SUBMIT).disabled and any("has held this machine" in w.value for w in at.warning)
        again = AppTest.from_file(APP, default_timeout=60)
        again.query_params["run-steps"] = "7"  # the user's own link
        again.switch_page("app_pages/run.py").run()
        warned = " ".join(w.value for w in again.warning)
        assert "executor verify-plan (verify-plan plan.json: top 3, 3 rounds) has held this machine" in warned
        assert again.button(key=SUBMIT).disabled and any("Launch waits" in c.value for c in again.caption)
        assert again.get("progress")[0].value == 11 and "run 2 of 9" in again.get("progress")[0].proto.text
        assert "run" not in again.query_params and again.query_params["run-steps"] in ("7", ["7"])
    again.run()
    assert not again.warning and not again.button(key=SUBMIT).disabled
    assert again.number_input(key="run-steps").value == 7 and "run" not in again.query_params


def run_page_from(query: dict[str, str]) -> AppTest:
    """The Run page opened from a link carrying `query`."""
    at = AppTest.from_file(APP, default_timeout=60)
    for key, value in query.items():
        at.query_params[key] = value
    at.switch_page("app_pages/run.py").run()
    assert not at.exception, at.exception
    return at


def refusals(at: AppTest) -> list[str]:
    return [w.value for w in at.warning if w.value.startswith("**The executor refuses this run**")]


def test_offload_from_a_link_reaches_the_run_and_stays_in_the_url(runs: Path, fake_launcher: list) -> None:
    at = run_page_from({"schedule": "1f1b", "ranks": "2", "microbatches": "4", "knob-offload": "full"})
    assert at.selectbox(key="knob-offload").value == "full" and not refusals(at)
    at.button(key=SUBMIT).click().run()
    assert not at.exception and not at.error
    assert fake_launcher[0][0].pipeline.offload == "full"  # the executor's `run --offload full`
    assert at.query_params["knob-offload"] in ("full", ["full"])


def test_a_family_the_executor_refuses_is_named_with_its_reason(runs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The executor's own check decides (no list of families in the page): DualPipe's two copies of the weights run
    without a profile, so with 'Profile first' on it is refused in the executor's words, before Launch and on it;
    with it off the run starts. Selective offload, which a model run cannot price, is refused the same way."""
    from pipesim_executor.config import run_config
    from pipesim_executor.host.checks import check_schedule

    at = run_page_from({"schedule": "dualpipe", "ranks": "2", "microbatches": "4", "run-profile": "true"})
    config = run_config(schedule="dualpipe", num_ranks=2, num_microbatches=4, profile=True)
    with pytest.raises(ValueError) as raised:
        check_schedule(config)
    assert refusals(at) == [f"**The executor refuses this run**: {raised.value}"]
    at.button(key=SUBMIT).click().run()  # the real launcher: refused before anything starts
    assert str(raised.value) in at.error[0].value and not at.exception
    assert not runs.exists() or not any(runs.iterdir())
    started: list = []
    monkeypatch.setattr(launch, "start_run", lambda config, *args, **kwargs: started.append(config) or FakeHandle(runs))
    at.toggle(key="run-profile").set_value(False)
    at.button(key=SUBMIT).click().run()
    assert not refusals(at) and started[0].pipeline.schedule == "dualpipe"

    at = run_page_from({"schedule": "1f1b", "knob-offload": "selective"})
    assert len(refusals(at)) == 1 and "selective" in refusals(at)[0]


def test_seq1f1b_is_offered_with_the_executors_answer(runs: Path, fake_launcher: list) -> None:
    """seq1f1b is in the picker; whether it runs is the executor's answer for these settings (its refusal in one
    line, never a traceback), and its sequence chunks reach the run where the executor's config takes them."""
    from app_pages.parts.run.form import PIPELINE

    at = run_page_from({"schedule": "seq1f1b", "ranks": "2", "microbatches": "4", "run-profile": "false"})
    assert "seq1f1b" in at.selectbox(key="schedule").options and at.selectbox(key="schedule").value == "seq1f1b"
    if "seq_chunks" not in PIPELINE:  # an executor that does not run sequence chunks: it says so, and why
        assert len(refusals(at)) == 1 and "sequence chunks" in refusals(at)[0]
        assert at.number_input(key="knob-seq").disabled
        return
    at.number_input(key="knob-seq").set_value(2)
    at.button(key=SUBMIT).click().run()
    assert not at.exception and not refusals(at), refusals(at)
    assert fake_launcher[0][0].pipeline.seq_chunks == 2


def test_a_sent_seq1f1b_schedule_runs_its_microbatches_of_data(app: AppTest, runs: Path, fake_launcher: list) -> None:
    """A schedule of 4 microbatches cut into 2 sequence chunks holds 8 action microbatches; the run's config counts
    the data: 4 microbatches (`pipesim_executor.seq_cut.data_microbatches`), or the executor refuses the pair."""
    custom = build_schedule("seq1f1b", 2, 4, seq_chunks=2)
    assert custom.num_microbatches == 8
    app.session_state["run_schedule"] = custom
    app.run()
    app.number_input(key="run-batch").set_value(8)
    app.button(key=SUBMIT).click().run()
    ((config, schedule, _),) = fake_launcher
    assert schedule == custom and config.pipeline.num_microbatches == 4
