"""Data parallel x pipeline under torchrun on CPU (gloo), 4 processes: gradients against one process on the
global batch, and the issue's command end to end (your own model, 2 ranks x 2 replicas, bf16, profile)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pipesim.io.formats import read_json, timeline_from_dict
from pipesim_executor import processes
from tests.test_executor_runtime import torchrun

pytestmark = [pytest.mark.torchrun, pytest.mark.timeout(900)]  # start-up on a loaded 2-core machine

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE = 1e-5  # max abs gradient difference (fp32)


@pytest.fixture(scope="module")
def dp_check(tmp_path_factory):
    out = tmp_path_factory.mktemp("dp")
    result = torchrun(4, [str(ROOT / "tests" / "helpers" / "data_parallel_check.py"), str(out)], timeout=420)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads((out / "data_parallel.json").read_text())["cases"]


def test_gradients_after_one_step_equal_one_process_on_the_global_batch(dp_check):
    assert {c["schedule"] for c in dp_check} == {"1f1b", "zb-h1", "interleaved-1f1b"}
    for case in dp_check:
        assert "error" not in case, case.get("error")
        assert case["tensors_checked"] == case["expected_tensors"]  # every replica, every parameter
        assert case["max_abs_diff"] <= TOLERANCE, case
        assert case["grad_norm"] > 1e-4  # the comparison is not vacuous
        # one all-reduce (one bucket: a tiny model) per stage on every process
        assert case["allreduces"] == case["stages_per_rank"]


@pytest.fixture(scope="module")
def issue_run(tmp_path_factory):
    """The issue's command, with fewer steps: 2 ranks x 2 replicas of examples.gpt_small, bf16, profiled."""
    out = tmp_path_factory.mktemp("runs") / "gpt-dp"
    command = [
        sys.executable,
        "-m",
        "executor",
        "run",
        "--model",
        "examples.gpt_small:build",
        "--schedule",
        "1f1b",
        "--ranks",
        "2",
        "--data-parallel",
        "2",
        "--dtype",
        "bf16",
        "--profile",
        "--steps",
        "3",
        "--device",
        "cpu",
        "--timeout",
        "400",
        "--out",
        str(out),
    ]
    done = subprocess.run(command, cwd=processes.REPO_ROOT, capture_output=True, text=True, timeout=480)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out, done.stdout


def test_issue_command_writes_the_timeline_with_the_all_reduce_the_prediction_and_the_error(issue_run):
    out, stdout = issue_run
    result = read_json(out / "result.json")
    assert result["status"] == "ok"
    config = read_json(out / "config.json")
    assert config["pipeline"]["data_parallel"] == 2 and config["training"]["dtype"] == "bf16"
    assert config["model"]["kind"] == "custom" and config["model"]["spec"] == "examples.gpt_small:build"
    measured = read_json(out / "measured.json")
    assert measured["data_parallel"] == 2 and measured["dtype"] == "bf16"
    timeline = timeline_from_dict(measured)
    assert timeline.num_ranks == 2  # pipeline ranks, each span tagged with its replica
    assert {(s.replica, s.rank) for s in timeline.spans} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    for replica in (0, 1):
        for rank in (0, 1):
            for step in range(3):
                syncs = [
                    c
                    for c in timeline.comm
                    if c.kind == "allreduce" and (c.replica, c.rank, c.step) == (replica, rank, step)
                ]
                assert len(syncs) == 1 and syncs[0].peer == 2 and syncs[0].end >= syncs[0].start
    trace = read_json(out / "trace.json")  # the Perfetto view shows every replica's ranks
    names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert {"replica 0 · rank 0 compute", "replica 1 · rank 1 compute"} <= names
    lags = measured["allreduce_replica_lag_ms"]
    assert len(lags) == 2 and all(len(row) == 3 and min(row) >= 0 for row in lags)
    cost = read_json(out / "cost.json")
    assert cost["data_parallel"] == 2 and cost["dp_link"]["latency_ms"] >= 0
    assert cost["meta"]["allreduce_measured"][0]["large_bytes"] > 0
    simulated = timeline_from_dict(read_json(out / "simulated.json"))
    assert len([c for c in simulated.comm if c.kind == "allreduce"]) == 2
    assert result["predicted_step_ms"] > 0 and isinstance(result["prediction_error"], float)
    analysis = read_json(out / "analysis.json")
    shares = analysis["ranks"]
    assert len(shares) == 2 and all(r["comm_wait_ms"] >= 0 for r in shares)
    assert "predict" in stdout and "error" in stdout
    losses = measured["losses"]
    assert all(isinstance(x, float) for x in losses)
