"""AppTest of the Run page's stragglers (issue 30): what the run injected, and what was found, in words."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

from pipesim.io.formats import read_json, write_json
from tests.helpers.run_folders import write_run


def test_the_run_page_says_what_was_injected_and_found(tmp_path: Path, open_page) -> None:
    runs = tmp_path / "runs"
    folder = write_run(runs, "slow")
    config = read_json(folder / "config.json")
    config["inject"] = {"inject": ["slow-rank=1:1.5", "link-delay=0-1:2"]}
    write_json(config, folder / "config.json")
    analysis = read_json(folder / "analysis.json")
    straggler = {"rank": 1, "factor": 1.52, "factor_low": 1.49, "factor_high": 1.55, "cost_ms": 3.5}
    analysis["stragglers"] = {"stragglers": [straggler], "links": []}
    write_json(analysis, folder / "analysis.json")
    at: AppTest = open_page("run")
    at.selectbox(key="run-open-pick").set_value("slow")
    at.button(key="FormSubmitter:run-open-Open").click().run()
    assert not at.exception
    assert any("Injected: rank 1 1.5x slower; link 0-1 +2 ms per transfer" in i.value for i in at.info)
    assert any("rank 1 computes 1.52x slower (1.49 to 1.55)" in m.value for m in at.markdown)
