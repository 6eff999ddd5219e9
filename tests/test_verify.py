"""Verification arithmetic on synthetic results, and the mapping from a plan's candidate to an executor run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from executor.host import verify
from executor.host.cli import main as executor_main
from executor.host.verify import VerifyRow, candidate_config, compare, plan_candidates, spearman
from pipesim.cli.main import main as pipesim_main


def test_spearman_on_known_orders():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # one swap among four: 1 - 6*2/(4*15) = 0.8
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486832980505138)  # ties share mean ranks
    assert spearman([1], [2]) is None and spearman([1, 1], [1, 2]) is None


def test_compare_reports_the_gap_of_the_recommended_candidate():
    rows = [
        VerifyRow("a", {}, 10.0, 12.0),
        VerifyRow("b", {}, 11.0, 10.0),
        VerifyRow("c", {}, 15.0, 20.0),
        VerifyRow("d", {}, 16.0, None, error="run failed"),
    ]
    result = compare(rows)
    assert result.measured_best == "b"
    assert result.recommended_gap == pytest.approx(0.2)
    assert result.spearman == pytest.approx(0.5)  # ranks (1,2,3) against (2,1,3)
    assert any("run failed" in n for n in result.notes)
    assert compare([VerifyRow("a", {}, 1.0, None, error="x")]).recommended_gap is None


@pytest.fixture
def plan_file(tmp_path):
    path = tmp_path / "plan.json"
    argv = [
        "plan",
        "--layers",
        "2",
        "--hidden",
        "32",
        "--ffn",
        "64",
        "--heads",
        "2",
        "--seq-len",
        "16",
        "--vocab",
        "64",
        "--dtype",
        "fp32",
        "--devices",
        "2",
        "--global-batch",
        "8",
        "--schedules",
        "1f1b,gpipe,interleaved-1f1b",
        "--microbatch-sizes",
        "1,2",
        "--recompute",
        "off",
        "--json",
        str(path),
    ]
    assert pipesim_main(argv) == 0
    return path


def test_top_candidates_become_executor_runs_with_their_split_points(plan_file):
    plan = json.loads(plan_file.read_text())
    top = plan_candidates(plan, 3)
    assert len(top) == 3 and top[0]["step_ms"] == plan["best"]["step_ms"]
    assert [c["step_ms"] for c in top] == sorted(c["step_ms"] for c in top)
    for c in top:
        config = candidate_config(plan, c, steps=2, warmup_steps=1, device="cpu", timeout_s=60)
        assert config.pipeline.schedule == c["schedule"] and config.pipeline.num_microbatches == c["microbatches"]
        assert config.model.split_points == tuple(c["split"]) and config.model.transformer.hidden_size == 32
        assert config.microbatch_size == c["microbatch_size"]
    with pytest.raises(ValueError, match="data-parallel"):
        candidate_config(plan, {**top[0], "data_parallel": 2}, steps=2, warmup_steps=1, device="cpu", timeout_s=60)


def test_a_plan_without_a_model_is_refused_before_anything_runs(tmp_path, capsys):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"candidates": [], "inputs": {"cost_file": "cost.json"}}))
    with pytest.raises(ValueError, match="has no model"):
        verify.verify_plan(path, 2, runs_root=tmp_path / "runs")
    exit_ = executor_main(["verify-plan", str(path), "--top", "2", "--runs-root", str(tmp_path / "runs")])
    assert exit_ == 2 and "has no model" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


@pytest.mark.torchrun
@pytest.mark.timeout(300)
def test_verify_runs_the_top_two_for_real(plan_file, tmp_path, capsys):
    code = executor_main(
        [
            "verify-plan",
            str(plan_file),
            "--top",
            "2",
            "--steps",
            "2",
            "--warmup-steps",
            "1",
            "--runs-root",
            str(tmp_path / "runs"),
            "--timeout",
            "240",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    written = json.loads(plan_file.with_name("plan-verify.json").read_text())
    rows = written["rows"]
    assert len(rows) == 2 and all(r["measured_ms"] > 0 and r["error"] is None for r in rows), rows
    plan = json.loads(plan_file.read_text())
    assert rows[0]["candidate"]["step_ms"] == plan["best"]["step_ms"]  # the recommendation runs first
    assert written["spearman"] in (-1.0, 1.0)  # two measured rows: the same order or the reverse
    assert written["recommended_gap"] >= 0 and written["measured_best"] in {r["label"] for r in rows}
    assert "Spearman" in out
    for row in rows:  # each candidate ran with its own schedule and split
        config = json.loads((Path(row["run_dir"]) / "config.json").read_text())
        assert config["pipeline"]["schedule"] == row["candidate"]["schedule"]
        assert list(config["model"]["split_points"]) == row["candidate"]["split"]
