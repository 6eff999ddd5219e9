"""AppTest of the Plan page: the search, the Pareto figure with the cap, the table, a candidate's charts, exports."""

from __future__ import annotations

import json

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
    assert max(sum(t["y"][r] for t in parts["data"]) for r in range(4)) == pytest.approx(best.peak_memory_bytes)
    assert stacked > 0
    assert pareto["layout"]["shapes"][0]["y0"] == pytest.approx(40 * 2**30)  # the cap, drawn as a line
    assert {t["name"] for t in pareto["data"]} >= {"Pareto front", "best that fits"}
    assert gantt["layout"]["title"]["text"].startswith(best.schedule)
    assert "memory" in memory["layout"]["title"]["text"]
    frame = app.dataframe[0].value if len(app.dataframe) == 1 else app.dataframe[-1].value
    assert frame["candidate"].iloc[0] == best.label and frame["fits"].iloc[0]


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


def test_verify_button_writes_the_plan_and_shows_the_comparison(app: AppTest, monkeypatch, tmp_path) -> None:
    from executor.host import verify

    seen = {}

    def fake_verify(path, top, **kwargs):  # the real one launches torchrun: tests/test_verify.py runs it
        plan = json.loads(path.read_text())
        seen.update(top=top, best=plan["best"]["schedule"], steps=kwargs["steps"])
        rows = [
            verify.VerifyRow(c["schedule"], c, c["step_ms"], c["step_ms"] * 1.1)
            for c in verify.plan_candidates(plan, top)
        ]
        return verify.compare(rows)

    monkeypatch.setattr(verify, "verify_plan", fake_verify)
    app.button(key="plan-verify").click().run()
    assert not app.exception and not app.error
    assert seen["top"] == 2 and seen["steps"] == 3
    cards = {m.label: m.value for m in app.metric}
    assert cards["Rank correlation (Spearman)"] == "+1.00" and cards["Recommended vs measured best"] == "+0.0%"
