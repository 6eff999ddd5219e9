"""AppTest of the Compare page: table and charts for several schedules on one cost model."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from streamlit.testing.v1 import AppTest

from pipesim.analysis.compare import compare_schedules
from pipesim.cost.model import CostModel, LinkCost
from pipesim.schedules import planned_schedule_names
from tests.helpers.app_charts import chart_figures, chart_titles
from tests.helpers.app_keys import widget_key

SUBMIT = "FormSubmitter:cmp-form-Compare"
MIB = 2**20


@pytest.fixture
def app(open_page) -> AppTest:
    return open_page("compare")


def table(at: AppTest):
    return at.dataframe[0].value


def submit(at: AppTest, **values) -> AppTest:
    for key, value in values.items():
        at.get_by_key(widget_key("cmp", key)).set_value(value)
    at.button(key=SUBMIT).click()
    return at.run()


def test_default_compares_the_planned_schedules(app: AppTest) -> None:
    assert not app.error
    frame = table(app)
    chosen = app.multiselect(key="cmp-schedules").value
    assert list(frame.index) == chosen == list(planned_schedule_names())  # the registry's `planned`
    assert "naive" not in chosen  # its step would dwarf every other bar
    expected = compare_schedules(chosen, 4, 8, CostModel.uniform(activation_bytes=MIB), num_virtual_stages=2)
    assert list(frame["step_ms"]) == pytest.approx([row.step_ms for row in expected])
    assert "makespan" not in frame.columns  # one name per quantity: the step time, as Simulate's card
    assert list(frame["stashed_microbatches"]) == [row.peak_activations for row in expected]  # no sequence chunks
    names = chart_titles(app)
    assert names[0].startswith("schedule comparison") and names[1].startswith("trade-off")
    assert len(names) == 3  # bars, trade-off, one Gantt


def test_the_knobs_apply_to_every_compared_schedule(app: AppTest) -> None:
    """Offload, the host link and sequence chunks reach the compared schedules, priced as `compare_schedules`
    prices them; seq1f1b's stashed column counts microbatches' worth, not its sequence chunks."""
    chosen = ["1f1b", "seq1f1b", "v-half", "v-min", "dualpipe", "1f1b-overlap"]
    app.multiselect(key="cmp-schedules").set_value(chosen).run()  # seq1f1b chosen: its chunks apply
    app.get_by_key("knob-offload").set_value("full")
    app.get_by_key("knob-host-lat").set_value(0.5)
    app.get_by_key("knob-seq").set_value(3)
    submit(app)
    assert not app.exception and not app.error and not app.warning
    frame = table(app)
    assert list(frame.index) == chosen
    cost = CostModel.uniform(activation_bytes=MIB)
    cost = replace(cost, host_link=LinkCost(0.5, float("inf")))
    options = {"seq_chunks": 3, "seq_cut": "even"}
    expected = compare_schedules(chosen, 4, 8, cost, num_virtual_stages=2, options=options, offload="full")
    assert list(frame["step_ms"]) == pytest.approx([row.step_ms for row in expected])
    plain = compare_schedules(chosen, 4, 8, cost, num_virtual_stages=2, options=options)
    assert frame.loc["1f1b", "peak_activation_bytes"] < plain[0].peak_activation_bytes / MIB  # offloaded
    assert list(frame["stashed_microbatches"]) == [row.stashed_microbatches for row in expected]
    seq = compare_schedules(["seq1f1b"], 4, 8, cost, options=options)[0]
    assert seq.stashed_microbatches == seq.peak_activations / 3  # chunks, each a third of a microbatch
    assert any("microbatches' worth" in caption.value for caption in app.caption)
    app.selectbox(key="cmp-gantt-pick").set_value("1f1b").run()
    gantt = chart_figures(app)[2]
    assert "copy engine" in [trace.get("name") for trace in gantt["data"]]  # the offloaded schedule's copies


def test_selection_change(app: AppTest) -> None:
    submit(app, schedules=["gpipe", "1f1b"], ranks=3, microbatches=6)
    assert list(table(app).index) == ["gpipe", "1f1b"]
    app.selectbox(key="cmp-gantt-pick").set_value("1f1b").run()
    assert chart_titles(app)[2].startswith("1f1b: 3 ranks")


def test_a_schedule_that_cannot_be_built_gets_a_reason(app: AppTest) -> None:
    submit(app, schedules=["1f1b", "interleaved-1f1b"], microbatches=9)  # 2 rounds of 4.5
    assert not app.exception and not app.error
    assert any("interleaved-1f1b" in w.value and "multiple" in w.value for w in app.warning)
    frame = table(app)  # built rows only: no row of empty cells
    assert list(frame.index) == ["1f1b"] and not frame.isna().any().any()


def test_units_are_binary_bytes_and_named(app: AppTest) -> None:
    """Issue 13 item 6: memory in MiB on the table and the axes, never plotly's decimal "B" (billions)."""
    submit(app, schedules=["gpipe", "1f1b"])
    frame = table(app)
    expected = compare_schedules(["gpipe", "1f1b"], 4, 8, CostModel.uniform(activation_bytes=MIB))
    assert list(frame["peak_activation_bytes"]) == pytest.approx([row.peak_activation_bytes / MIB for row in expected])
    config = json.loads(app.dataframe[0].proto.columns)  # the column is titled with its unit
    assert config["peak_activation_bytes"]["label"] == "peak activations (MiB)"
    bars, tradeoff = chart_figures(app)[:2]
    assert "peak activations (MiB)" in json.dumps(bars["layout"])
    assert tradeoff["layout"]["yaxis"]["title"]["text"] == "peak activations (MiB)"


def test_tradeoff_has_a_legend_and_the_pareto_front_and_bars_a_log_scale(app: AppTest) -> None:
    """Issue 13 item 13: no overlapping point labels, a Pareto front, a log scale for naive's bar."""
    submit(app, schedules=["naive", "gpipe", "1f1b", "zb-h1"])
    bars, tradeoff = chart_figures(app)[:2]
    names = [t["name"] for t in tradeoff["data"]]
    assert names[:4] == ["naive", "gpipe", "1f1b", "zb-h1"] and "Pareto front" in names
    assert all("text" not in t for t in tradeoff["data"])
    assert bars["layout"]["xaxis"].get("type") != "log"
    app.toggle(key="cmp-log").set_value(True).run()
    bars = chart_figures(app)[0]  # horizontal bars: the values run along the x axes
    assert bars["layout"]["xaxis"]["type"] == "log" and bars["layout"]["xaxis3"]["type"] == "log"


def test_nothing_buildable_is_an_error(app: AppTest) -> None:
    submit(app, schedules=["interleaved-1f1b"], microbatches=9)
    assert "None of the chosen schedules" in app.error[0].value
    assert not chart_figures(app)


def test_empty_selection_asks_for_one(app: AppTest) -> None:
    submit(app, schedules=[])
    assert any("at least one schedule" in i.value for i in app.info)
    assert not app.exception


def test_recompute_changes_the_numbers(app: AppTest) -> None:
    before = list(table(app)["step_ms"])
    submit(app, recompute=True)
    after = list(table(app)["step_ms"])
    assert all(b > a for a, b in zip(before, after, strict=True))


def test_too_many_ranks_is_refused(app: AppTest) -> None:
    submit(app, ranks=64)
    assert "at most 32" in app.error[0].value


def test_a_slow_rank_shows_each_step_beside_its_uniform_one(app: AppTest) -> None:
    """Issue 30: with rank 2 1.5x slower, each schedule's step is `pipesim compare --slow-rank 2:1.5`'s, its uniform
    step and growth beside it, a light bar beside each step bar, and the Gantt the slowed step over the uniform."""
    from pipesim.cost.perturb import Perturbation

    names = ["1f1b", "zb-h1"]
    submit(app, schedules=names, **{"slow-ranks": "1, 1, 1.5"})
    assert not app.exception and not app.error
    cost = CostModel.uniform(activation_bytes=MIB)
    slowed = compare_schedules(names, 4, 8, cost, perturbation=Perturbation(((2, 1.5),)))
    uniform = compare_schedules(names, 4, 8, cost)
    frame = table(app)
    assert list(frame["step_ms"]) == pytest.approx([row.step_ms for row in slowed])
    assert list(frame["uniform_step_ms"]) == pytest.approx([row.step_ms for row in uniform])
    growth = [100 * (s.step_ms / u.step_ms - 1) for s, u in zip(slowed, uniform, strict=True)]
    assert list(frame["step_growth"]) == pytest.approx(growth) and all(g > 0 for g in growth)
    bars = chart_figures(app)[0]
    [light] = [t for t in bars["data"] if t.get("name") == "uniform"]
    assert list(light["y"]) == names
    assert any("rank 2 1.5x slower" in i.value for i in app.info)
    assert any("on top of the what-if (rank 2 1.5x slower)" in m.value for m in app.markdown)  # the sensitivity
    assert "over the uniform case" in chart_titles(app)[2]


def test_each_schedules_sensitivity_and_its_worst_rank(app: AppTest) -> None:
    """Issue 30 item 2: per schedule, the step's growth with each rank 2x slower in turn, and the worst rank, as
    `pipesim compare --sensitivity 2` gives them."""
    names = ["gpipe", "1f1b", "zb-h1"]
    submit(app, schedules=names, sensitivity=2.0)
    expected = compare_schedules(names, 4, 8, CostModel.uniform(activation_bytes=MIB), slowdown=2.0)
    frame = app.dataframe[1].value
    assert list(frame.index) == names
    assert list(frame["worst rank"]) == [row.sensitivity["worst_rank"] for row in expected]
    assert list(frame["worst"]) == pytest.approx([100 * row.sensitivity["worst_growth"] for row in expected])
    assert list(frame["rank 3"]) == pytest.approx([100 * row.sensitivity["rank_growth"][3] for row in expected])
    assert any("one rank 2x slower" in m.value for m in app.markdown)
    submit(app, sensitivity=1.0)  # off
    assert len(app.dataframe) == 1


@pytest.mark.parametrize(
    ("values", "said"),
    [
        ({"slow-ranks": "0"}, "Slowdown per rank"),
        ({"slow-ranks": "1, abc"}, "Slowdown per rank"),
        ({"link-delays": "0-1:-1"}, "Link delays"),
        ({"sensitivity": 0.5}, "below its minimum 1"),
    ],
)
def test_a_bad_what_if_is_an_error_line(app: AppTest, values: dict, said: str) -> None:
    submit(app, **values)
    assert not app.exception
    assert any(said in e.value for e in app.sidebar.error)
    assert any("Not compared" in e.value and said in e.value for e in app.main.error)
    assert not chart_figures(app)


def test_a_sensitivity_too_large_for_the_page_is_said_not_computed(app: AppTest) -> None:
    submit(app, schedules=["1f1b", "zb-h1"], ranks=32, microbatches=512)
    assert not app.exception and not app.error
    said = " ".join(c.value for c in app.caption)
    assert "Sensitivity not computed" in said and "pipesim compare --sensitivity" in said
    assert len(app.dataframe) == 1  # the comparison alone
