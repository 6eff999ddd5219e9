"""AppTest of the Simulate page: the first screen, each input path, and the error paths.

Expected numbers come from pipesim itself, called the way the page should call it,
so the tests check the page's plumbing (widgets -> config -> pipesim -> figures).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from pipesim.cost.description import ModelDescription
from pipesim.cost.model import CostModel, Provenance, StageCost
from pipesim.io.cost_file import cost_from_dict, cost_to_dict
from pipesim.schedules import build_schedule
from pipesim.sim.steps import simulate_step
from pipesim.units import format_ms
from tests.helpers.app_charts import chart_figures
from tests.helpers.app_keys import widget_key

MIB = 2**20
SUBMIT = "FormSubmitter:sim-form-Simulate"


@pytest.fixture
def app(open_page) -> AppTest:
    return open_page()


def length(array) -> int:
    """Entries of a plotly array, plain or base64-packed (plotly 6 packs numeric arrays)."""
    if isinstance(array, list):
        return len(array)
    return len(base64.b64decode(array["bdata"])) // np.dtype(array["dtype"]).itemsize


def title(figure: dict) -> str:
    return figure["layout"]["title"]["text"]


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def expected_step(name: str, ranks: int, microbatches: int, cost: CostModel, **options) -> str:
    """The step time card's text: `simulate_step`'s step (what `pipesim simulate` reports), as units formats it."""
    return format_ms(simulate_step(build_schedule(name, ranks, microbatches, **options), cost).step_ms)


def submit(at: AppTest, **values) -> AppTest:
    if "schedule" in values:  # outside the form: it decides which options the form shows
        at.get_by_key("schedule").set_value(values.pop("schedule"))
        at.run()
    for key, value in values.items():
        at.get_by_key(widget_key("sim", key)).set_value(value)
    at.button(key=SUBMIT).click()
    return at.run()


def test_first_screen_shows_1f1b_on_4_ranks_with_8_microbatches(app: AppTest) -> None:
    assert not app.error
    gantt, memory = chart_figures(app)
    assert title(gantt).startswith("1f1b: 4 ranks, 4 stages, 8 microbatches")
    bars = [t for t in gantt["data"] if t["name"] in ("forward (F)", "backward (B)")]
    assert sum(length(t["x"]) for t in bars) == 4 * 8 * 2
    assert any(t["name"] == "idle" for t in gantt["data"])  # the bubbles are drawn
    assert len(memory["data"]) == 4  # one memory line per rank
    assert metric(app, "Step time") == expected_step("1f1b", 4, 8, CostModel.uniform(activation_bytes=MIB))
    [ranks] = [e for e in app.expander if e.label.startswith("Each rank: idle share and peak activations (4 ranks")]
    assert ranks.markdown[0].value.splitlines()[2] == "| 0 | 27.3% | 4.00 MiB | 4 microbatches |"
    assert "hovertemplate" in gantt["data"][1]  # hover details per action


def test_changing_the_schedule_redraws(app: AppTest) -> None:
    submit(app, schedule="gpipe")
    gantt, _ = chart_figures(app)
    assert title(gantt).startswith("gpipe")
    cost = CostModel.uniform(activation_bytes=MIB)
    assert metric(app, "Step time") == expected_step("gpipe", 4, 8, cost)
    assert metric(app, "Peak activations") == "8.00 MiB"  # GPipe stashes every microbatch on rank 0


def test_interleaved_uses_the_chunks(app: AppTest) -> None:
    submit(app, schedule="interleaved-1f1b", chunks=3)
    assert not app.error
    assert "12 stages" in title(chart_figures(app)[0])
    cost = CostModel.uniform(activation_bytes=MIB).for_stages(12, 4)  # uniform times are per rank, cut in 3
    assert metric(app, "Step time") == expected_step("interleaved-1f1b", 4, 8, cost, num_virtual_stages=3)


def test_impossible_interleaving_is_a_plain_error(app: AppTest) -> None:
    submit(app, schedule="interleaved-1f1b", microbatches=9)  # torch refuses it too: 2 rounds of 4.5
    assert not app.exception
    assert len(app.error) == 1
    assert "multiple of its number of rounds" in app.error[0].value
    assert not chart_figures(app)


def test_sizes_beyond_the_app_limits_are_refused(app: AppTest) -> None:
    submit(app, ranks=100)
    assert "Ranks = 100 is above its maximum 32" in app.error[0].value
    submit(app, ranks=4, microbatches=2000)
    assert "Microbatches = 2,000 is above its maximum 1,024" in app.error[0].value
    submit(app, ranks=0, microbatches=99999999)  # every bad field is named, not only the first
    said = [e.value for e in app.error]
    assert any("Ranks = 0 is below" in e for e in said) and any("Microbatches = 99,999,999" in e for e in said)
    submit(app, schedule="zbv", ranks=32, microbatches=1024)  # 196,608 actions
    assert "at most 131,072" in app.error[0].value
    assert not app.exception


def test_recomputation_lengthens_the_step(app: AppTest) -> None:
    before = metric(app, "Step time")
    submit(app, recompute=True)
    after = metric(app, "Step time")
    assert after == expected_step("1f1b", 4, 8, CostModel.uniform(activation_bytes=MIB, recompute=True))
    assert after != before


def test_critical_path_toggle_adds_the_outline(app: AppTest) -> None:
    assert not any(t["name"] == "critical path" for t in chart_figures(app)[0]["data"])
    app.toggle(key="sim-critical").set_value(True).run()
    path = [t for t in chart_figures(app)[0]["data"] if t["name"] == "critical path"]
    assert len(path) == 1 and length(path[0]["x"]) >= 2


def test_per_stage_table_feeds_heterogeneous_costs(app: AppTest) -> None:
    app.radio(key="cost-source").set_value("Per stage").run()
    assert app.data_editor, "the per-stage table is shown"
    app.session_state["cost-stages-4"] = {"edited_rows": {1: {"forward_ms": 3.0}}, "added_rows": [], "deleted_rows": []}
    submit(app)
    assert not app.error
    forward = [1.0, 3.0, 1.0, 1.5]
    cost = CostModel.per_stage(
        forward, [2.0, 2.0, 2.0, 3.0], weight_ms=[1.0, 1.0, 1.0, 1.5], activation_bytes=[MIB] * 4
    )
    assert metric(app, "Step time") == expected_step("1f1b", 4, 8, cost)


def test_per_stage_table_with_an_empty_cell_names_it(app: AppTest) -> None:
    app.radio(key="cost-source").set_value("Per stage").run()
    app.session_state["cost-stages-4"] = {
        "edited_rows": {2: {"backward_ms": None}},
        "added_rows": [],
        "deleted_rows": [],
    }
    submit(app)
    assert "stage 2: backward_ms is empty" in app.error[0].value
    assert not app.exception


def test_model_description_costs(app: AppTest) -> None:
    app.radio(key="cost-source").set_value("Model").run()
    submit(app)
    assert not app.error
    assert metric(app, "Step time") == expected_step("1f1b", 4, 8, ModelDescription().to_cost_model(4))


def _cost_file(num_stages: int) -> bytes:
    stages = tuple(StageCost(forward_ms=1.0 + s, backward_ms=2.0 + s, activation_bytes=MIB) for s in range(num_stages))
    return json.dumps(cost_to_dict(CostModel(stages=stages, provenance=Provenance("profile")))).encode()


def test_uploaded_cost_file(app: AppTest) -> None:
    app.radio(key="cost-source").set_value("Cost file").run()
    assert "no cost file chosen" in app.error[0].value  # says how to get one
    app.file_uploader(key="cost-upload").set_value(("cost.json", _cost_file(4), "application/json"))
    submit(app)
    assert not app.error
    cost = cost_from_dict(json.loads(_cost_file(4)))
    assert metric(app, "Step time") == expected_step("1f1b", 4, 8, cost)


def test_cost_file_for_another_pipeline_is_refused(app: AppTest) -> None:
    app.radio(key="cost-source").set_value("Cost file").run()
    app.file_uploader(key="cost-upload").set_value(("cost.json", _cost_file(3), "application/json"))
    submit(app)
    assert "3 stages" in app.error[0].value and "4" in app.error[0].value
    app.file_uploader(key="cost-upload").set_value(("cost.json", b"{not json", "application/json"))
    submit(app)
    assert "not valid JSON" in app.error[0].value
    assert not app.exception


def test_cost_file_picked_from_a_profile_run(tmp_path: Path, open_page) -> None:
    run = tmp_path / "runs" / "profiled"  # open_page points PIPESIM_RUNS_ROOT at tmp_path / "runs"
    run.mkdir(parents=True)
    (run / "cost.json").write_bytes(_cost_file(4))
    at = open_page()
    at.radio(key="cost-source").set_value("Cost file").run()
    picker = at.selectbox(key="cost-pick")
    assert str(run / "cost.json") in picker.options
    picker.set_value(str(run / "cost.json"))
    submit(at)
    assert not at.error
    assert metric(at, "Step time") == expected_step("1f1b", 4, 8, cost_from_dict(json.loads(_cost_file(4))))


def test_image_export_without_a_browser_says_so(app: AppTest, monkeypatch: pytest.MonkeyPatch) -> None:
    from pipesim.charts import export

    monkeypatch.setattr(export, "images_available", lambda: False)
    app.run()
    assert any("HTML export still works" in w.value for w in app.warning)
    assert app.get_by_key("sim-gantt-export-html") is not None  # HTML stays available
    assert "PNG" not in [b.label for b in app.get("download_button")]
    assert not app.exception


def test_images_are_made_only_when_asked_one_format_each(app: AppTest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 23 item 16: drawing the page renders no image; a click renders its one format (the button's deferred
    data), through one browser kept for the server, of the figure styled as on screen.

    Catches images rendered before anyone asks (seconds per chart), all three formats rendered for one, and a
    browser started per image."""
    from app_pages.parts import plot, widgets
    from pipesim.charts import export

    calls = []
    monkeypatch.setattr(export, "figure_bytes", lambda fig, fmt: calls.append((fig, fmt)) or b"image")
    monkeypatch.setattr(export, "start_export_server", lambda: calls.append("browser started"))
    monkeypatch.setattr(export, "images_available", lambda: True)
    app.run()
    assert not calls  # nothing rendered before it is asked for
    assert {"PNG", "SVG", "PDF"} <= {b.label for b in app.get("download_button")}
    widgets._export_browser.clear()
    figure = plot.styled(chart_figures_as_plotly(app)[0])
    assert widgets.image_bytes(figure, "svg") == b"image" and widgets.image_bytes(figure, "png") == b"image"
    assert calls[0] == "browser started" and [fmt for _, fmt in calls[1:]] == ["svg", "png"]  # one browser
    assert calls[1][0].layout.template.layout.title.xanchor == "left"  # the page's template: its title, fonts


def chart_figures_as_plotly(at: AppTest) -> list:
    import plotly.graph_objects as go

    return [go.Figure(figure) for figure in chart_figures(at)]


def test_data_downloads_are_offered(app: AppTest) -> None:
    labels = [b.label for b in app.get("download_button")]
    assert {"Timeline JSON", "Schedule CSV (torch)", "Chrome trace (Perfetto)", "Interactive HTML"} <= set(labels)


# --- issue 13: the app as its users judge it --------------------------------------------------------------------


def test_settings_survive_a_page_switch_and_live_in_the_url(app: AppTest, open_page) -> None:
    """Item 2: zbv, 6 ranks, F = 1.5 stay after a visit to Compare; the URL carries them to a new session."""
    submit(app, schedule="zbv", ranks=6, f=1.5)
    makespan = metric(app, "Step time")
    app.switch_page("app_pages/compare.py").run()
    app.query_params.clear()  # a browser drops the URL's parameters on a page switch: the session keeps them
    app.switch_page("app_pages/simulate.py").run()
    assert app.selectbox(key="schedule").value == "zbv"
    assert app.number_input(key="ranks").value == 6 and app.number_input(key="cost-f").value == 1.5
    assert metric(app, "Step time") == makespan
    assert {k: app.query_params[k] for k in ("schedule", "ranks", "cost-f")} == {
        "schedule": "zbv",
        "ranks": "6",
        "cost-f": "1.5",
    }
    shared = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app.py"), default_timeout=60)
    shared.query_params.update({"schedule": "zbv", "ranks": "6", "cost-f": "1.5"})
    shared.run()  # a reload, or a link someone sent
    assert metric(shared, "Step time") == makespan


def test_only_the_options_a_schedule_takes_are_enabled(app: AppTest) -> None:
    """Issue 13 item 10, issue 23 item 13: 'Chunks per rank' and the W share are disabled, with the reason, where
    the schedule does not use them (1f1b: neither; zbv holds two chunks itself; interleaved: chunks, no W)."""
    chunks, w = app.number_input(key="chunks"), app.number_input(key="cost-w")
    assert chunks.disabled and "one stage per rank" in chunks.help
    assert w.disabled and "Not used by 1f1b" in w.help and "runs whole" in w.help
    submit(app, schedule="interleaved-1f1b")
    assert not app.number_input(key="chunks").disabled and app.number_input(key="cost-w").disabled
    submit(app, schedule="zbv")
    chunks = app.number_input(key="chunks")
    assert chunks.disabled and "always holds 2 chunks per rank" in chunks.help
    assert not app.number_input(key="cost-w").disabled


def test_uniform_costs_mean_the_same_on_simulate_and_compare(app: AppTest) -> None:
    """Item 7: zbv gets the same makespan on both pages for the same inputs, and the page says what they mean."""
    submit(app, schedule="zbv")
    simulated = metric(app, "Step time")
    assert any("one stage per rank" in c.value for c in app.caption)
    app.switch_page("app_pages/compare.py").run()
    app.get_by_key("cmp-schedules").set_value(["zbv"])
    app.button(key="FormSubmitter:cmp-form-Compare").click()
    app.run()
    assert format_ms(app.dataframe[0].value.loc["zbv", "step_ms"]) == simulated
    assert any("one stage per rank" in c.value for c in app.caption)


def test_w_above_b_is_refused_with_the_reason(app: AppTest) -> None:
    """Item 8: no silent cap that makes the I bars vanish."""
    submit(app, schedule="zb-h1", w=3.0)
    assert len(app.error) == 1 and "weight_ms 3 exceeds backward_ms 2" in app.error[0].value
    assert not chart_figures(app) and not app.exception


def test_zb_h2_shows_both_bubbles_each_defined(app: AppTest) -> None:
    """Item 9: the step-level bubble equals ZB-H1's; the per-stage one (the paper's) is 0 for F = I = W."""
    submit(app, schedule="zb-h1")
    h1 = metric(app, "Bubble")
    submit(app, schedule="zb-h2")
    assert metric(app, "Bubble") == h1
    assert metric(app, "Per-stage bubble") == "0.0%"
    cards = {m.label: m for m in app.metric}
    assert "ramp" in cards["Bubble"].help and "per-stage" in cards["Per-stage bubble"].help
    assert any("per-stage bubble is 0" in c.value for c in app.caption)


def test_large_schedules_are_binned_and_a_window_brings_exact_bars(app: AppTest) -> None:
    """The raised cap: 32 ranks x 400 microbatches (25,600 actions) is one picture; a window shows bars."""
    submit(app, ranks=32, microbatches=400)
    assert not app.error and not app.exception
    [ranks] = [e for e in app.expander if e.label.startswith("Each rank: idle share and peak activations (32 ranks")]
    table = ranks.markdown[0].value.splitlines()
    assert len(table) == 2 + 32 and table[2].startswith("| 0 | ") and table[-1].startswith("| 31 | ")
    assert any("drag across the chart" in c.value.lower() for c in app.caption)
    gantt = chart_figures(app)[0]
    assert gantt["layout"]["images"] and not any(t.get("type") == "bar" for t in gantt["data"])
    app.slider(key="sim-window").set_value((100.0, 110.0)).run()
    gantt = chart_figures(app)[0]
    assert not gantt["layout"].get("images") and any(t.get("type") == "bar" for t in gantt["data"])
    assert gantt["layout"]["xaxis"]["range"] == [100.0, 110.0]
    assert any("drag across the chart" in c.value.lower() for c in app.caption)  # a narrower window: drag again
    app.selectbox(key="sim-color").set_value("microbatch").run()
    assert any(t["name"].startswith("microbatch") for t in chart_figures(app)[0]["data"])


def test_a_refused_field_says_why_beside_it_and_marks_the_chart_not_updated(app: AppTest) -> None:
    """Issue 33 item 3: microbatches 16 with F = -5 (or ranks = 0) never leaves the old chart without a word: the
    reason is under the field, and the chart is marked as the last settings that worked (8 microbatches)."""
    before = chart_figures(app)[0]
    submit(app, microbatches=16, f=-5.0)
    assert not app.exception
    warned = app.warning[0].value
    assert "Chart not updated" in warned and "F (ms) = -5 is below its minimum 0" in warned
    assert "1f1b: 4 ranks, 4 stages, 8 microbatches" in warned
    assert any("F (ms) = -5 is below its minimum 0" in e.value for e in app.sidebar.error)
    assert chart_figures(app)[0] == before  # the last good chart, said as such
    submit(app, f=1.0, ranks=0)
    assert any("Ranks = 0 is below its minimum 1" in e.value for e in app.sidebar.error)
    assert "Chart not updated" in app.warning[0].value and "Ranks = 0" in app.warning[0].value
    submit(app, ranks=4)
    assert not app.warning and "16 microbatches" in title(chart_figures(app)[0])


def test_a_slow_rank_is_drawn_over_the_uniform_step(app: AppTest) -> None:
    """Issue 30: a factor per rank (rank 1 twice as slow) gives `pipesim simulate --slow-rank 1:2`'s step on the
    card, the uniform step beside it in words, and the slowed step drawn over the uniform one (two lanes a rank)."""
    from pipesim.cost.perturb import Perturbation

    submit(app, **{"slow-ranks": "1, 2"})
    assert not app.exception and not app.error
    cost = CostModel.uniform(activation_bytes=MIB)
    schedule = build_schedule("1f1b", 4, 8)
    slowed = simulate_step(schedule, Perturbation(((1, 2.0),)).apply(cost.for_pipeline(4, 4), schedule.stage_to_rank))
    uniform = simulate_step(schedule, cost)
    assert slowed.step_ms > uniform.step_ms
    assert metric(app, "Step time") == format_ms(slowed.step_ms)
    [said] = [i.value for i in app.info if "What-if" in i.value]
    assert "rank 1 2x slower" in said and format_ms(slowed.step_ms) in said and format_ms(uniform.step_ms) in said
    figures = chart_figures(app)
    assert any("; what-if: rank 1 2x slower" in title(f) for f in figures)  # the Gantt says what it prices in
    [drawn] = [f for f in figures if "over the uniform case" in title(f)]
    lanes = drawn["layout"]["yaxis"]["ticktext"]
    assert lanes[:2] == ["rank 0 · uniform", "rank 0 · slowed"] and len(lanes) == 8
    uniform_bars = sum(length(t["x"]) for t in drawn["data"] if t["name"].endswith(" uniform"))
    slowed_bars = sum(length(t["x"]) for t in drawn["data"] if t["name"].endswith(" slowed"))
    assert uniform_bars == slowed_bars == 4 * 8 * 2
    submit(app, **{"slow-ranks": "", "slow-kinds": "W", "link-delays": "0-1:3"})  # a link alone
    assert not app.error and "link 0-1 +3 ms" in next(i.value for i in app.info if "What-if" in i.value)
    submit(app, **{"link-delays": ""})
    assert not any("What-if" in i.value for i in app.info)
    assert not any("over the uniform case" in title(f) for f in chart_figures(app))


@pytest.mark.parametrize(
    ("field", "typed", "said"),
    [
        ("slow-ranks", "1, 0", "Slowdown per rank"),
        ("slow-ranks", "-2", "Slowdown per rank"),
        ("slow-ranks", "fast", "Slowdown per rank"),
        ("slow-ranks", "1,1,1,1,2", "5 factors for 4 ranks"),
        ("link-delays", "0-9:5", "rank 9 is not in a pipeline of 4 ranks"),
        ("link-delays", "0-1:-5", "Link delays"),
        ("link-delays", "slow", "A-B:MS"),
    ],
)
def test_a_bad_slowdown_is_said_under_its_field(app: AppTest, field: str, typed: str, said: str) -> None:
    before = chart_figures(app)[0]
    submit(app, **{field: typed})
    assert not app.exception
    [reason] = [e.value for e in app.sidebar.error]
    assert said in reason
    if field == "slow-ranks" and "factors for" not in said:
        assert "from 0.1 to 1000" in reason  # the valid range, named
    assert "Chart not updated" in app.warning[0].value
    assert chart_figures(app)[0] == before
