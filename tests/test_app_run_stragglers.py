"""AppTest of the Run page's stragglers: what the run injected, and what was found, in words."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from pipesim.io.formats import read_json, write_json
from tests.helpers.run_folders import write_run

STRAGGLER = {"rank": 1, "factor": 1.52, "factor_low": 1.49, "factor_high": 1.55, "cost_ms": 3.5}


def open_run_with_a_straggler(runs: Path, open_page, inject: list[str] | None = None) -> AppTest:
    """A run folder whose analysis.json names rank 1 as 1.52x slow (and whose config records `inject`), opened on
    the Run page."""
    folder = write_run(runs, "slow")
    if inject is not None:
        config = read_json(folder / "config.json")
        config["inject"] = {"inject": inject}
        write_json(config, folder / "config.json")
    analysis = read_json(folder / "analysis.json")
    analysis["stragglers"] = {"stragglers": [STRAGGLER], "links": []}
    write_json(analysis, folder / "analysis.json")
    at: AppTest = open_page("run")
    at.selectbox(key="run-open-pick").set_value("slow")
    at.button(key="FormSubmitter:run-open-Open").click().run()
    return at


def test_the_run_page_says_what_was_injected_and_found(tmp_path: Path, open_page) -> None:
    at = open_run_with_a_straggler(tmp_path / "runs", open_page, ["slow-rank=1:1.5", "link-delay=0-1:2"])
    assert not at.exception
    assert any("Injected: rank 1 1.5x slower; link 0-1 +2 ms per transfer" in i.value for i in at.info)
    assert any("rank 1 computes 1.52x slower (1.49 to 1.55)" in m.value for m in at.markdown)


def test_the_stragglers_are_named_on_the_overlay_lanes(tmp_path: Path, open_page) -> None:
    """The slow rank analysis.json names is marked on its measured lane of the run's overlay."""
    from tests.helpers.app_charts import chart_figures

    at = open_run_with_a_straggler(tmp_path / "runs", open_page)
    [drawn] = [f for f in chart_figures(at) if "simulated vs measured" in f["layout"]["title"]["text"]]
    lanes = drawn["layout"]["yaxis"]["ticktext"]
    assert lanes[3] == "rank 1 · measured · 1.52x slower"
    assert [lane for lane in lanes if "slower" in lane] == [lanes[3]]


def test_imported_traces_name_their_straggler(tmp_path: Path, open_page) -> None:
    """Issue 30 item 4 on imported traces: a rank that computes 1.5x slower in torch.profiler traces is found and
    named, in words and on its lane; traces of even ranks say no straggler."""
    from pipesim.cost.model import CostModel
    from pipesim.cost.perturb import Perturbation
    from pipesim.schedules import build_schedule
    from tests.helpers.app_charts import chart_figures
    from tests.helpers.kineto_traces import kineto_files

    schedule = build_schedule("1f1b", 2, 8)
    even = CostModel.uniform(forward_ms=1.0, backward_ms=2.0, comm_ms=0.2).for_pipeline(2, 2)
    slowed = Perturbation(((1, 1.5),)).apply(even, schedule.stage_to_rank)
    at: AppTest = open_page("run")
    for name, cost in (("slow", slowed), ("even", even)):
        (tmp_path / name).mkdir()
        paths, _ = kineto_files(tmp_path / name, schedule, steps=3, cost=cost)
        files = [(p.name, p.read_bytes(), "application/json") for p in paths]
        at.file_uploader(key="import-traces").set_value(files).run()
        assert not at.exception and not at.error
        said = "\n".join(m.value for m in at.markdown)
        assert "Stragglers found in the imported traces" in said
        lanes = next(f for f in chart_figures(at) if "simulated vs measured" in f["layout"]["title"]["text"])
        lanes = lanes["layout"]["yaxis"]["ticktext"]
        if name == "slow":
            assert "rank 1 computes 1.50x slower" in said and lanes[3] == "rank 1 · measured · 1.50x slower"
        else:
            assert "no straggler" in said and not any("slower" in lane for lane in lanes)
