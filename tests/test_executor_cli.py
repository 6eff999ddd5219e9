"""`python -m executor`: bad input is one line and exit 2 with nothing started; run, list and show."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pipesim_executor import processes
from pipesim_executor.host import cli, launch, phase
from pipesim_executor.progress import PROGRESS_PREFIX

TINY_FLAGS = ["--layers", "2", "--d-model", "16", "--heads", "2", "--ffn", "32", "--seq-len", "8", "--vocab", "32"]


def fake_torchrun(monkeypatch, script: str) -> None:
    monkeypatch.setattr(launch, "torchrun_command", lambda config, run_dir, **_: [sys.executable, "-c", script])


BAD_INPUTS = {
    "unknown flag": ["run", "--bogus"],
    "unknown schedule": ["run", "--schedule", "nope"],
    "not a number": ["run", "--ranks", "two"],
    "batch does not split": ["run", "--batch-size", "10", "--microbatches", "4"],
    "too many stages": ["run", "--ranks", "4", "--layers", "1", "--device", "cpu"],
    "cuda without gpu": ["run", "--device", "cpu", "--backend", "nccl"],
    "bad split points": ["run", "--split-points", "1,x"],
    "missing schedule file": ["run", "--schedule-file", "/nonexistent/s.csv", "--device", "cpu"],
    "no command": [],
    # issue 9 item 7: refused before anything starts
    "batch size 0": ["run", "--batch-size", "0", "--device", "cpu"],
    "negative batch size": ["run", "--batch-size", "-4", "--device", "cpu"],
    "lr nan": ["run", "--lr", "nan", "--device", "cpu"],
    "lr zero": ["run", "--lr", "0", "--device", "cpu"],
    "experts over replicas": ["run", "--model", "moe", "--experts", "3", "--data-parallel", "2", "--device", "cpu"],
    "experts on a dense model": ["run", "--experts", "8", "--device", "cpu"],
    "moe unit profile": ["profile", "--model", "moe", "--out", "prof"],
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_exit_2_and_starts_nothing(case, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    started = []
    monkeypatch.setattr(phase.subprocess, "Popen", lambda *a, **k: started.append(a))
    exit_info = cli.main(BAD_INPUTS[case])
    assert exit_info == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m executor: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert started == [] and list(tmp_path.iterdir()) == []


def test_bad_input_from_a_real_process_has_no_traceback(tmp_path):
    done = subprocess.run([sys.executable, "-m", "executor", "run", "--schedule", "nope", "--device", "cpu"],
                          cwd=processes.REPO_ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "valid schedules" in done.stderr


def test_run_prints_json_progress_then_a_summary(tmp_path, monkeypatch, capsys):
    line = "[rank0]:" + PROGRESS_PREFIX + '{"event": "step", "rank": 0, "step": 0, "steps": 1}'
    fake_torchrun(monkeypatch, f"print({line!r})")
    out_dir = tmp_path / "runs" / "mine"
    code = cli.main(["run", "--schedule", "gpipe", "--device", "cpu", *TINY_FLAGS, "--out", str(out_dir)])
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    events = [json.loads(x) for x in lines if x.startswith("{")]
    assert [e["event"] for e in events] == ["launch", "step", "finished"]
    assert any(x.startswith("status   ok") for x in lines)
    assert (out_dir / "result.json").exists()
    config = json.loads((out_dir / "config.json").read_text())
    model = config["model"]
    shape = model["transformer"]
    assert (config["pipeline"]["schedule"], shape["num_layers"], shape["hidden_size"]) == ("gpipe", 2, 16)


def test_failed_run_exits_1(tmp_path, monkeypatch, capsys):
    fake_torchrun(monkeypatch, "import sys; print('[rank1]:RuntimeError: boom'); sys.exit(1)")
    assert cli.main(["run", "--device", "cpu", *TINY_FLAGS, "--out", str(tmp_path / "r")]) == 1
    assert "rank 1 failed" in capsys.readouterr().out


def test_an_out_folder_that_cannot_be_made_is_one_line(tmp_path, monkeypatch, capsys):
    """issue 9 item 5: --out under a file (as on a read-only or full disk): one line, no half-made folder; exit 1,
    an output that cannot be written, not a usage error."""
    started = []
    monkeypatch.setattr(phase.subprocess, "Popen", lambda *a, **k: started.append(a))
    (tmp_path / "file").write_text("x")
    exit_info = cli.main(["run", "--device", "cpu", *TINY_FLAGS, "--out", str(tmp_path / "file" / "runs" / "r")])
    err = capsys.readouterr().err
    assert exit_info == 1 and err.count("\n") == 1 and "Traceback" not in err
    assert str(tmp_path / "file" / "runs") in err and started == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_custom_schedule_file_runs(tmp_path, monkeypatch, capsys):
    from pipesim.io.formats import schedule_to_csv
    from pipesim.schedules import build_schedule

    (tmp_path / "mine.csv").write_text(schedule_to_csv(build_schedule("1f1b", 2, 4)))
    fake_torchrun(monkeypatch, "pass")
    args = ["run", "--schedule-file", str(tmp_path / "mine.csv"), "--device", "cpu", *TINY_FLAGS]
    assert cli.main([*args, "--out", str(tmp_path / "runs" / "c")]) == 0
    saved = json.loads((tmp_path / "runs" / "c" / "schedule.json").read_text())
    assert saved["name"] == "mine" and saved["num_stages"] == 2
    config = json.loads((tmp_path / "runs" / "c" / "config.json").read_text())
    assert config["pipeline"] == {
        "schedule": "mine",
        "num_ranks": 2,
        "num_microbatches": 4,
        "num_virtual_stages": None,
        "data_parallel": 1,
        "offload": "none",
        "seq_chunks": None,
        "seq_cut": None,
    }  # the file says what runs
    # issue 9 item 7: a schedule name such as "../x" never makes a folder outside the runs root
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    assert cli.main([*args, "--schedule", "../x"]) == 0
    made = [p for p in (tmp_path / "work" / "runs").iterdir()]
    assert len(made) == 1 and made[0].parent == tmp_path / "work" / "runs" and ".." not in made[0].name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.csv", "runs", "work"]


def test_list_and_show(tmp_path, monkeypatch, capsys):
    fake_torchrun(monkeypatch, "pass")
    root = tmp_path / "runs"
    for name in ("first", "second"):
        assert cli.main(["run", "--device", "cpu", *TINY_FLAGS, "--out", str(root / name)]) == 0
    capsys.readouterr()
    assert cli.main(["list", "--runs-root", str(root)]) == 0
    listing = capsys.readouterr().out
    assert "first" in listing and "second" in listing and "ok" in listing
    assert cli.main(["show", str(root / "first"), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "ok" and shown["config"]["pipeline"]["schedule"] == "1f1b"
    assert shown["trace"] is None and shown["profiler_traces"] == []  # no measured.json, no --torch-profile
    (root / "first" / "traces").mkdir()
    (root / "first" / "traces" / "rank0.json").write_text("{}")
    assert cli.main(["show", str(root / "first"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["profiler_traces"] == [str(root.resolve() / "first/traces/rank0.json")]
    assert cli.main(["show", str(root / "first")]) == 0
    assert "status   ok" in capsys.readouterr().out
    exit_info = cli.main(["show", str(tmp_path / "nothing")])
    assert exit_info == 2
