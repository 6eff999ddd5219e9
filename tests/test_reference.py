"""Reference mode: which torch.distributed.pipelining schedule stands for ours, and that it trains the same model."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipesim.io.formats import schedule_to_dict, write_json
from pipesim.ir import make_schedule
from pipesim.schedules import build_schedule, options_for, schedule_names
from pipesim_executor import processes
from pipesim_executor.config import ModelConfig, RunConfig, run_config
from pipesim_executor.host import launch
from pipesim_executor.rank.reference import torch_counterparts, torch_schedule_name, unavailable_reason

TINY = ModelConfig.of_transformer(num_layers=2, hidden_size=16, num_heads=2, ffn_size=32, seq_len=8, vocab_size=32)


def options(name: str) -> dict:
    return options_for(name, num_virtual_stages=2)


@pytest.mark.parametrize("name", schedule_names())
def test_every_schedule_has_a_reference_or_says_why_not(name):
    schedule = build_schedule(name, 2, 4, **options(name))
    reason = unavailable_reason(run_config(schedule=name, device="cpu"), schedule)
    if name in torch_counterparts():
        assert reason is None
        assert torch_schedule_name(name.upper()).startswith("Schedule")
    else:
        assert "no schedule equivalent" in reason and name in reason


def test_classic_schedules_map_to_their_torch_classes():
    assert [torch_schedule_name(n) for n in ("gpipe", "1f1b", "interleaved-1f1b")] == [
        "ScheduleGPipe", "Schedule1F1B", "ScheduleInterleaved1F1B"
    ]  # fmt: skip


def test_torch_classes_exist_in_this_torch():
    from torch.distributed.pipelining import schedules

    missing = [c for c in torch_counterparts().values() if not hasattr(schedules, c)]
    assert missing in ([], ["ScheduleDualPipeV"])  # DualPipeV is newer than torch 2.11's oldest schedules


def test_other_placement_or_staged_backend_has_no_reference():
    good = build_schedule("1f1b", 2, 4)
    moved = make_schedule("1f1b", 2, 4, (1, 0), [good.actions[1], good.actions[0]])
    assert "places stages" in unavailable_reason(run_config(device="cpu"), moved)
    assert "staged" in unavailable_reason(run_config(device="cuda", backend="staged"), good)


def test_launcher_records_when_there_is_no_reference(tmp_path, monkeypatch):
    monkeypatch.setattr(launch, "torchrun_command", lambda config, run_dir, **_: [sys.executable, "-c", "pass"])
    config = run_config(schedule="naive", num_ranks=2, num_microbatches=2, batch_size=4, device="cpu", reference=True)
    result = launch.run(config, runs_root=tmp_path)
    assert result.status == "partial"  # the run itself went well, the part asked for did not happen
    assert result.reference["torch_schedule"] is None and "no schedule equivalent" in result.reference["error"]
    assert "no reference run" in result.message


def test_a_failed_reference_makes_the_run_partial(tmp_path, monkeypatch):
    def command(config, run_dir, module=None, **_):
        return [
            sys.executable,
            "-c",
            "import sys; sys.exit(3 if %r else 0)" % (module == "pipesim_executor.rank.reference"),
        ]

    monkeypatch.setattr(launch, "torchrun_command", command)
    config = run_config(schedule="1f1b", num_ranks=2, num_microbatches=2, batch_size=4, device="cpu", reference=True)
    result = launch.run(config, runs_root=tmp_path)
    assert result.status == "partial" and "reference run failed" in result.message
    from pipesim_executor.host import cli_runs
    from pipesim_executor.host.run_folder import list_runs

    assert [r.status for r in list_runs(tmp_path)] == ["partial"]
    assert any("status   partial" in line for line in cli_runs.summary_lines(result))


def plain_training_losses(config: RunConfig) -> list[float]:
    """The oracle: the whole model on one process, loss averaged over microbatches, same optimizer.

    One loss per step, warm-up steps included (as measured.json and reference.json list them).
    """
    import torch
    from torch import nn

    from pipesim_executor.rank.model import build_model, loss_fn, make_batch, microbatch

    model = nn.Sequential(*build_model(config.model, config.training.seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=config.training.lr)
    criterion, m = loss_fn(config.model), config.pipeline.num_microbatches
    losses = []
    for step in range(config.training.warmup_steps + config.training.steps):
        x, y = make_batch(config.model, config.training.batch_size, config.training.seed, step)
        loss = sum(criterion(model(microbatch(x, i, m)), microbatch(y, i, m)) for i in range(m)) / m
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.torchrun
def test_reference_trains_like_the_plain_model(tmp_path):
    config = run_config(schedule="gpipe", num_ranks=1, num_microbatches=2, batch_size=4, device="cpu",
                       backend="gloo", model=TINY, steps=2, warmup_steps=1, lr=0.1)  # fmt: skip
    write_json(config.to_dict(), tmp_path / "config.json")
    write_json(schedule_to_dict(build_schedule("gpipe", 1, 2)), tmp_path / "schedule.json")
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(processes.free_port()), "PYTHONPATH": str(processes.REPO_ROOT)}  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "pipesim_executor.rank.reference", "--run-dir", str(tmp_path)],
                          env=env,
                          capture_output=True, text=True, timeout=240)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    reference = json.loads((tmp_path / "reference.json").read_text())
    assert reference["torch_schedule"] == "ScheduleGPipe" and len(reference["step_times_ms"]) == 2
    assert reference["losses"] == pytest.approx(plain_training_losses(config), rel=1e-5)
    assert '"event": "done"' in done.stdout
