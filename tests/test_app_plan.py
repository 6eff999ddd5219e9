"""AppTest of the Plan page: the search, the Pareto figure with the cap, the table, a candidate's charts, exports."""

from __future__ import annotations

import json
import time

import pytest
from streamlit.testing.v1 import AppTest

from pipesim.cost.description import ModelDescription
from pipesim.plan.report import best_candidate
from pipesim.plan.search import PlanInputs, PlanSpace, evaluate_all
from tests.helpers.app_charts import chart_figures

SUBMIT = "FormSubmitter:plan-form-Plan"


@pytest.fixture
def app(open_page) -> AppTest:
    return open_page("plan")


def submit(at: AppTest, **values) -> AppTest:
    for key, value in values.items():
        at.get_by_key(f"plan-{key}").set_value(value)
    at.button(key=SUBMIT).click()
    return at.run()


def test_default_plan_shows_front_cap_table_and_the_best_candidates_charts(app: AppTest) -> None:
    assert not app.error
    description = ModelDescription(
        num_layers=8, hidden_size=1024, ffn_size=4096, num_heads=16, seq_len=1024, vocab_size=32000, device_tflops=200.0
    )
    inputs = PlanInputs.from_description(description, devices=4, global_batch=32, memory_cap_bytes=40 * 2**30)
    space = PlanSpace(schedules=("1f1b", "interleaved-1f1b", "zb-h1", "zbv"), chunks=(2,))
    best = best_candidate(evaluate_all(inputs, space))
    assert app.selectbox(key="plan-selected").value == best.label  # the recommendation comes first
    assert any(best.label in m.value and "best:" in m.value for m in app.markdown)
    pareto, gantt, memory, parts = chart_figures(app)
    stacked = sum(trace["y"][0] for trace in parts["data"])  # rank 0's four parts add up to its peak
    assert {t["name"] for t in parts["data"]} == {"parameters", "gradients", "optimizer state", "activations (peak)"}
    peak = max(sum(t["y"][r] for t in parts["data"]) for r in range(4))
    assert peak == pytest.approx(best.peak_memory_bytes / 2**30)  # in GiB, as the axis says
    assert stacked > 0
    assert {t["name"] for t in pareto["data"]} >= {"Pareto front", "best that fits"}
    assert gantt["layout"]["title"]["text"].startswith(best.schedule)
    assert "memory" in memory["layout"]["title"]["text"]
    frame = candidates_table(app)
    assert frame["candidate"].iloc[0] == best.label and frame["fits"].iloc[0]


def candidates_table(at: AppTest):
    """The table of candidates (its `fits` column tells it from the failed candidates' and the sensitivity's)."""
    return next(d.value for d in at.dataframe if "fits" in d.value.columns)


def test_each_familys_fastest_fitting_candidate_reports_its_sensitivity(app: AppTest) -> None:
    """Issue 30 item 2: one row per family, its fastest candidate that fits (the candidates table's first of the
    family), with the step's growth for each pipeline rank 1.2x slower and the worst rank, as
    `pipesim.analysis.sensitivity` gives them for that candidate's schedule and costs."""
    from pipesim.analysis.sensitivity import rank_sensitivity
    from pipesim.plan.evaluator import Evaluator
    from pipesim.plan.search import candidate_grid

    description = ModelDescription(
        num_layers=8, hidden_size=1024, ffn_size=4096, num_heads=16, seq_len=1024, vocab_size=32000, device_tflops=200.0
    )
    inputs = PlanInputs.from_description(description, devices=4, global_batch=32, memory_cap_bytes=40 * 2**30)
    space = PlanSpace(schedules=tuple(app.multiselect(key="plan-schedules").value), chunks=(2,))
    evaluator = Evaluator(inputs)  # every candidate built, as the page's plan builds them (no pruning)
    evaluated = {c.label: c for c in (evaluator.evaluate(c) for c in candidate_grid(inputs, space))}
    listed = candidates_table(app)
    firsts = list(listed[listed["fits"]]["candidate"])
    family_of = {label: evaluated[label].schedule for label in firsts}
    expected_labels = list(dict.fromkeys(family_of[label] for label in firsts))  # families in the table's order
    frame = next(d.value for d in app.dataframe if "worst rank" in d.value.columns)
    assert [family_of[label] for label in frame["candidate"]] == expected_labels
    for _, row in frame.iterrows():
        first = next(label for label in firsts if family_of[label] == family_of[row["candidate"]])
        assert row["candidate"] == first
        schedule, cost = evaluator.materialise(evaluated[row["candidate"]])
        found = rank_sensitivity(schedule, cost, 1.2)
        assert row["worst rank"] == found.worst_rank
        assert row["worst"] == pytest.approx(100 * found.worst_growth)
        assert [row[f"rank {r}"] for r in range(schedule.num_ranks)] == pytest.approx(
            [100 * g for g in found.rank_growth]
        )
    app.number_input(key="sensitivity").set_value(1.0).run()  # off
    assert not any("worst rank" in d.value.columns for d in app.dataframe)
    app.number_input(key="sensitivity").set_value(0.0).run()
    assert not app.exception and any("below its minimum 1" in e.value for e in app.error)


def test_picking_a_candidate_draws_it(app: AppTest) -> None:
    labels = app.selectbox(key="plan-selected").options
    other = next(label for label in labels if label.startswith("1f1b"))
    app.selectbox(key="plan-selected").set_value(other).run()
    assert not app.exception and not app.error
    assert chart_figures(app)[1]["layout"]["title"]["text"].startswith("1f1b")
    assert any(t["name"] == "selected" for t in chart_figures(app)[0]["data"])


def test_a_tight_cap_and_bad_input(app: AppTest) -> None:
    submit(app, cap=0.01)
    assert not app.exception
    assert any("no candidate fits" in m.value for m in app.markdown)
    submit(app, cap=40.0, mbs="two")
    assert app.error and "Microbatch sizes" in app.error[0].value


def test_exports_the_schedule_csv_and_torchtitan_settings(app: AppTest) -> None:
    buttons = {b.proto.label for b in app.get("download_button")}
    assert {"Schedule CSV (torch compute_only)", "torchtitan settings (JSON)", "Plan JSON"} <= buttons
    assert app.button(key="plan-verify") is not None


def test_balancing_on_its_own(app: AppTest) -> None:
    assert any(c.value == "--split-points 4" for c in app.code)  # the default 1,4,4,4,4,6: 13 against 10 ms
    app.text_input(key="plan-balance-layers").set_value("1,1,1,1,1,5").run()
    app.number_input(key="plan-balance-stages").set_value(3).run()
    assert any(c.value == "--split-points 4,5" for c in app.code)
    app.number_input(key="plan-balance-stages").set_value(9).run()
    assert any("Cannot balance" in e.value and "at least 9 layers" in e.value for e in app.error)


def _fake_verify(seen: dict, gate=None, tie: bool = False, rounds_of=None):
    """A stand-in for verify.verify_plan (the real one launches torchrun: tests/test_verify.py runs it): it makes
    each candidate's run folder as start_run does (never over an existing one) and reports rows through on_row."""
    from pipesim_executor.host import verify

    def fake(path, top, *, runs_root, steps, on_row=None, **kwargs):
        plan = json.loads(path.read_text())
        seen.setdefault("paths", []).append(path)
        seen.update(top=top, best=plan["best"]["schedule"], steps=steps)
        rows = []
        for index, c in enumerate(verify.plan_candidates(plan, top)):
            folder = runs_root / f"verify-{path.stem}-{index}"
            folder.mkdir(parents=True)  # FileExistsError, as start_run refuses: "already exists"
            predicted = 340.39 if tie else c["step_ms"]
            if gate is not None:  # the run of this candidate, until the test lets it end
                gate.wait(30)
            rows.append(verify.VerifyRow(c["schedule"], c, predicted, predicted * 1.1, run_dir=str(folder)))
            for steps_ms in [] if rounds_of is None else rounds_of(index):  # measured rounds: a CI, groups
                rows[-1].add_round(steps_ms, str(folder))
            if on_row is not None:
                on_row(rows[-1])
        return verify.compare(rows)

    return fake


def _finish(app: AppTest) -> AppTest:
    """Wait for the verification thread, then draw the page as the fragment's poll would."""
    from app_pages.parts.plan import verify as plan_verify

    deadline = time.monotonic() + 60
    for job in list(plan_verify._jobs().values()):
        while not job.done():
            assert time.monotonic() < deadline, "the verification never ended"
            time.sleep(0.05)
    return app.run()


def test_verify_runs_again_for_the_same_plan_and_shows_the_comparison(app: AppTest, monkeypatch) -> None:
    """Issue 23 item 6: the same plan verified twice, each time in run folders of its own, then the comparison.

    Catches one plan file (plan-<signature>.json) per plan: its run folders (verify-plan-<signature>-0) exist on
    the second click, and the launcher refuses them ("already exists; choose another name")."""
    from pipesim_executor.host import verify

    seen: dict = {}
    monkeypatch.setattr(verify, "verify_plan", _fake_verify(seen))
    for _ in range(2):
        app.button(key="plan-verify").click().run()
        _finish(app)
        assert not app.exception and not app.error, [e.value for e in app.error]
    first, second = seen["paths"]
    assert first.stem != second.stem and first.parent == second.parent
    assert seen["top"] == 2 and seen["steps"] == 3
    assert "runs" not in first.parts[-2:]  # beside the runs folder, not in it
    cards = {m.label: m.value for m in app.metric}
    assert cards["Rank correlation (Spearman)"] == "+1.00" and cards["Recommended vs measured best"] == "+0.0%"
    frame = app.dataframe[-1].value
    assert list(frame["error"]) == pytest.approx([100 * (1 / 1.1 - 1)] * 2)  # (predicted - measured) / measured


def test_verify_of_a_tie_says_indistinguishable(app: AppTest, monkeypatch) -> None:
    """Issue 23 item 6: two candidates predicted at 340.39 ms: no Spearman of their noise, the tie said."""
    from pipesim_executor.host import verify

    monkeypatch.setattr(verify, "verify_plan", _fake_verify({}, tie=True))
    app.button(key="plan-verify").click().run()
    _finish(app)
    cards = {m.label: m.value for m in app.metric}
    assert cards.get("Planner's order") == "indistinguishable" and "Rank correlation (Spearman)" not in cards


def test_verify_shows_progress_and_cancels(app: AppTest, monkeypatch) -> None:
    """Issue 23 item 6: while the candidates run, a progress bar and Cancel; a cancel ends after the candidate
    going (the launcher's cancel for a real run) and shows what was measured."""
    import threading

    from pipesim_executor.host import verify

    gate = threading.Event()
    monkeypatch.setattr(verify, "verify_plan", _fake_verify({}, gate=gate))
    app.button(key="plan-verify").click().run()
    bars = app.get("progress")
    assert bars and "Verifying: candidate" in bars[-1].proto.text
    assert app.button(key="plan-verify").disabled  # one verification of a plan at a time
    app.button(key="plan-verify-cancel").click().run()
    gate.set()
    _finish(app)
    assert any("cancelled after 1 of 2" in i.value for i in app.info)
    assert len(app.dataframe[-1].value) == 1


def test_the_model_form_asks_for_every_field_the_command_line_does(app: AppTest) -> None:
    """The form is generated from ModelDescription, as `pipesim plan`'s flags are: a field added to the dataclass
    (or the link's bandwidth and latency, once left out of the form) is asked for here too."""
    from pipesim.form_fields import form_fields

    for spec in form_fields(ModelDescription):
        assert app.get_by_key(f"plan-{spec.flag}") is not None, spec.name
    slower = submit(app, bandwidth=0.5, latency=2.0)
    assert not slower.error


def test_verify_shows_the_measured_ci_beside_the_predicted_interval_and_greys_out_ties(app, monkeypatch) -> None:
    """Issue 29 item 6: the measured 95% CI beside the prediction, and candidates the measurement cannot tell
    apart greyed out (two candidates measured alike: one group)."""
    from app_pages.parts.plan import verify as plan_verify
    from pipesim_executor.host import verify

    same = [[10.0, 10.2, 9.9, 10.1], [10.1, 10.0, 10.3, 9.8]]
    seen: dict = {}
    monkeypatch.setattr(verify, "verify_plan", _fake_verify(seen, rounds_of=lambda index: same))
    app.button(key="plan-verify").click().run()
    _finish(app)
    assert not app.exception
    frame = app.dataframe[-1].value
    assert {"predicted 90%", "measured 95% CI", "indistinguishable"} <= set(frame.columns)
    assert list(frame["indistinguishable"]) == ["group 1", "group 1"]
    assert all(" - " in text for text in frame["measured 95% CI"])
    assert any(c.value.startswith("Grey: the measurement cannot tell") for c in app.caption)
    # this test's job (the registry is the server's: other tests' jobs are in it too)
    result = next(job for job in plan_verify._jobs().values() if job.plan_path == seen["paths"][-1]).result
    rows, grey = plan_verify.verify_table(result)
    assert grey == [True, True] and rows[0]["predicted 90%"] == "no interval"


def test_a_preset_link_restores_the_presets_model(tmp_path, monkeypatch) -> None:
    """Issue 33 item 6: `plan?plan-preset=small...` showed the preset's name over the default 8-layer, 4-device
    model, so Verify would have trained the big one; a field the link sets itself keeps the link's value."""
    from app_pages.parts.plan.presets import SMALL

    monkeypatch.setenv("PIPESIM_RUNS_ROOT", str(tmp_path / "runs"))
    at = AppTest.from_file("../app.py", default_timeout=60)
    at.query_params["plan-preset"] = SMALL
    at.query_params["plan-seq-len"] = "32"
    at.run()
    at.switch_page("app_pages/plan.py").run()
    assert not at.exception
    assert at.selectbox(key="plan-preset").value == SMALL
    assert at.number_input(key="plan-layers").value == 4 and at.number_input(key="plan-devices").value == 2
    assert at.number_input(key="plan-tflops").value == pytest.approx(0.01)
    assert at.number_input(key="plan-seq-len").value == 32


def test_uncalibrated_predictions_are_labelled_with_the_way_to_calibrate(app: AppTest, monkeypatch) -> None:
    """Issue 33 item 5: Verify's -59% on the small preset said nothing of the assumed 0.01 TFLOP/s; and the Plan
    table flags a noisy run as the Run page does (12.7%: too noisy)."""
    from pipesim_executor.host import verify

    fake = _fake_verify({})

    def noisy(*args, **kwargs):
        result = fake(*args, **kwargs)
        result.rows[0].measured_cv = 0.127
        return result

    monkeypatch.setattr(verify, "verify_plan", noisy)
    said = " ".join(w.value for w in app.warning)
    assert "assumed device rate (200 TFLOP/s), not from a profile" in said and "--calibrate-from" in said
    assert "Calibrate from a run" in said
    app.button(key="plan-verify").click().run()
    _finish(app)
    said = " ".join(w.value for w in app.warning)
    assert "The errors below measure that assumption" in said
    assert app.dataframe[-1].value["noise"].iloc[0] == "too noisy (12.7%)"


@pytest.mark.torchrun
@pytest.mark.timeout(600)
def test_calibrating_from_a_run_labels_the_predictions_calibrated(tmp_path, monkeypatch) -> None:
    """Issue 33 item 5: the notice's way out works: picking a finished run in "Calibrate from a run" fits the
    device rate to it (pipesim.analysis.calibration) and the assumed-rate notice goes."""
    from app_pages.parts.plan.presets import SMALL
    from pipesim_executor.config import run_config
    from pipesim_executor.host import launch

    runs = tmp_path / "runs"
    model = {"kind": "transformer", "transformer": {"num_layers": 4, "hidden_size": 128, "num_heads": 4,
             "ffn_size": 512, "seq_len": 64, "vocab_size": 1000}}  # fmt: skip
    config = run_config(schedule="1f1b", num_ranks=2, num_microbatches=4, batch_size=16, model=model, device="cpu",
                        steps=2, warmup_steps=1, timeout_s=400)  # fmt: skip
    result = launch.run(config, runs_root=runs, name="cal")
    assert result.status == "ok", result.headline
    monkeypatch.setenv("PIPESIM_RUNS_ROOT", str(runs))
    at = AppTest.from_file("../app.py", default_timeout=120)
    at.query_params["plan-preset"] = SMALL
    at.run()
    at.switch_page("app_pages/plan.py").run()
    assert any("assumed device rate" in w.value for w in at.warning)
    at.selectbox(key="plan-calibrate").set_value("cal").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert not any("assumed device rate" in w.value for w in at.warning)


def test_synthesized_is_offered_and_a_faster_synthesized_order_is_recommended_and_drawn(app: AppTest) -> None:
    """Issue 31: the page offers synthesized orders beside the families; on a case where one is faster (a slow
    link, W a small share of B, no cap: 2p microbatches' worth) it is recommended, drawn and exportable."""
    assert "synthesized" in app.multiselect(key="plan-schedules").options
    model = {"layers": 16, "hidden": 256, "ffn": 1024, "heads": 4, "seq-len": 128, "vocab": 1000}
    model.update(tflops=0.05, latency=5.0)
    search = {"devices": 4, "batch": 16, "cap": 0.0, "mbs": "2", "recompute": "off", "shares": "0.3", "jitter": 0.0}
    search.update({"schedules": ["1f1b", "zb-h1", "zb-h2", "synthesized"], "synth-budget": 2.0})
    at = submit(app, **model, **search)
    assert not at.exception and not at.error
    selected = at.selectbox(key="plan-selected").value
    assert selected.startswith("synthesized P4")
    assert chart_figures(at)[1]["layout"]["title"]["text"].startswith("synthesized")
    assert any(b.label.startswith("Schedule CSV") for b in at.get("download_button"))


def _verified_with(app, monkeypatch, fake, adjust) -> tuple[str, object]:
    """Verify on the page through `fake` (`_fake_verify`'s), each result changed by `adjust` first: the warnings'
    text and the finished job's result."""
    from app_pages.parts.plan import verify as plan_verify
    from pipesim_executor.host import verify

    paths: list = []

    def changed(path, *args, **kwargs):
        paths.append(path)
        result = fake(path, *args, **kwargs)
        adjust(result)
        return result

    monkeypatch.setattr(verify, "verify_plan", changed)
    app.button(key="plan-verify").click().run()
    _finish(app)
    assert not app.exception
    result = next(job for job in plan_verify._jobs().values() if job.plan_path == paths[-1]).result
    return " ".join(w.value for w in app.warning), result


def test_verify_says_not_comparable_when_its_rounds_moved_and_marks_wide_intervals(app, monkeypatch) -> None:
    """Issue 46: a verification whose rounds moved 3x together says so first, never 'did not move'; an interval
    wider than +-25% is 'not informative' in the table, and the coverage counts none."""

    def wide(result):
        for row in result.rows:
            row.predicted_p05_ms, row.predicted_p95_ms = row.predicted_ms * 0.4, row.predicted_ms * 1.6
            row.has_predicted_interval = True

    rounds = lambda index: [[30.0 + index] * 4, [18.0 + index] * 4, [10.0 + index] * 4]  # noqa: E731
    said, result = _verified_with(app, monkeypatch, _fake_verify({}, rounds_of=rounds), wide)
    assert "not comparable: the machine's speed changed during this verification" in said
    frame = app.dataframe[-1].value
    assert all(text.endswith("(not informative)") for text in frame["predicted 90%"])
    assert any(c.value.startswith("no informative interval") for c in app.caption)
    assert result.status == "not_comparable"


def test_verify_says_not_comparable_when_other_work_held_the_cores(app, monkeypatch) -> None:
    """Issue 46's busy machine on the page: runs that waited for cores other work held are said first, with the
    load."""
    from tests.test_verify_rounds import BUSY

    said, result = _verified_with(app, monkeypatch, _fake_verify({}), lambda r: setattr(r, "machine_load", BUSY))
    assert "not comparable: other work shared the machine with this verification" in said
    assert "other processes used 1.13 of its 2 cores" in said
    assert result.status == "not_comparable" and result.not_comparable_because == ["machine_shared"]


def test_offload_is_planned_where_the_page_prices_the_host_link(app: AppTest) -> None:
    """The Plan page's offload choice and host bandwidth reach the planner (`PlanSpace.offload`,
    `PlanInputs.host_link`): with full offload at 25 GB/s offloaded candidates are listed beside their bases; under
    auto, with a cap some candidate is over and no bandwidth, the page says offload was not tried."""
    app.get_by_key("knob-host-gbps").set_value(25.0)
    at = submit(app, offload="full", schedules=["1f1b"], mbs="1", recompute="off")
    assert not at.error
    labels = list(candidates_table(at)["candidate"])
    assert any(label.endswith("offload full") for label in labels), labels
    assert any("offload" not in label for label in labels)
    app.get_by_key("knob-host-gbps").set_value(0.0)
    at = submit(app, offload="auto")  # every candidate fits the default cap: nothing to say
    assert not any("offload not tried" in m.value for m in at.markdown)
    at = submit(app, cap=0.5)  # some do not: offload could have changed the answer
    assert any("offload not tried" in m.value for m in at.markdown)
    assert not any("offload" in label for label in candidates_table(at)["candidate"])
