"""Rank processes end cleanly: process groups released while Python is alive, exit status kept (issue: SIGABRT at exit).

A rank that aborted at exit with "terminate called without an active exception" had finished its work; the
gloo groups it still referenced were destroyed during interpreter finalisation. These tests check the contract
of pipesim_executor.rank.teardown under torchrun: nothing of the groups outlives `release_distributed`, a clean run
exits 0, and a failing rank exits 1 at once (no wait at the teardown barrier) with its traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.torchrun
ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "helpers" / "teardown_check.py"


def torchrun(args: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(SCRIPT)]
    command += args
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_no_process_group_outlives_the_teardown(tmp_path):
    result = torchrun([str(tmp_path)])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "terminate called" not in result.stderr
    for rank in (0, 1):
        report = json.loads((tmp_path / f"teardown_{rank}.json").read_text())
        assert report["groups"] >= 2  # WORLD and at least one link group were watched
        assert report["alive"] == 0, f"rank {rank}: {report['alive']} process group(s) still alive after teardown"


def test_a_failing_rank_exits_1_with_its_traceback(tmp_path):
    result = torchrun([str(tmp_path), "raise"], timeout=90)
    assert result.returncode != 0
    assert "injected failure on rank 1" in result.stderr + result.stdout
    assert "exitcode  : 1" in result.stderr + result.stdout or "exitcode: 1" in result.stderr + result.stdout
