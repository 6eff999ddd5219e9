"""A synthesized schedule run for real: `python -m pipesim synthesize` writes torch's CSV, and
`python -m executor run --schedule-file` trains with it under torchrun on CPU, with the losses of one process
training the whole model on the whole batch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pipesim.cli.main import main as pipesim_main
from pipesim.io.formats import load_schedule, read_json

ROOT = Path(__file__).resolve().parents[1]
MODEL_FLAGS = ["--layers", "2", "--d-model", "32", "--heads", "2", "--ffn", "64", "--seq-len", "16", "--vocab", "64"]
BATCH, STEPS, WARMUP, LR, SEED = 8, 3, 1, 0.1, 0
TOLERANCE = 1e-5  # fp32: the same sums in another order


def single_process_losses(num_stages: int) -> list[float]:
    """The whole model on one process: the same weights, batches, loss and SGD steps as the executor's."""
    torch = pytest.importorskip("torch")
    from pipesim_executor.config import ModelConfig
    from pipesim_executor.rank.model import build_model, loss_fn, make_batch, split_stages

    config = ModelConfig.of_transformer(
        num_layers=2, hidden_size=32, num_heads=2, ffn_size=64, seq_len=16, vocab_size=64
    )
    stages = split_stages(build_model(config, SEED), num_stages, config.split_points)
    params = [p for stage in stages for p in stage.parameters()]
    optimizer = torch.optim.SGD(params, lr=LR)
    losses = []
    for step in range(WARMUP + STEPS):
        inputs, targets = make_batch(config, BATCH, SEED, step)
        out = inputs
        for stage in stages:
            out = stage(out)
        loss = loss_fn(config)(out, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def test_synthesized_csv_is_the_synthesized_order_in_torchs_format(tmp_path):
    """`synthesize --csv` writes the order it found; torch's CSV reads back to it. (That such a CSV trains with
    one process's losses is the executor run of the plan's CSV below: the same writer, one torchrun start-up.)"""
    csv_out, json_out = tmp_path / "synth.csv", tmp_path / "synth.json"
    code = pipesim_main(
        ["synthesize", "--ranks", "2", "--microbatches", "4", "--f", "1", "--b", "2", "--w", "1.5",
         "--comm", "0.2", "--memory-limit", "2", "--time-limit", "2", "--csv", str(csv_out), "--json", str(json_out)]
    )  # fmt: skip
    assert code == 0
    schedule = load_schedule(csv_out)
    assert schedule.uses_split_backward  # I and W run as separate actions
    assert schedule.num_ranks == 2 and schedule.num_microbatches == 4
    assert load_schedule(json_out).actions == schedule.actions  # the CSV holds the order the JSON reports


@pytest.fixture(scope="module")
def synthesized_plan(tmp_path_factory) -> tuple[Path, Path]:
    """(the CSV, the plan JSON) of `plan --schedules ...,synthesized` recommending a synthesized order (faster
    here: a slow link, W a small share of the backward, 2p microbatches' worth of memory)."""
    folder = tmp_path_factory.mktemp("synthesized-plan")
    csv_out, json_out = folder / "best.csv", folder / "plan.json"
    code = pipesim_main(
        ["plan", "--layers", "8", "--hidden", "256", "--ffn", "1024", "--heads", "4", "--seq-len", "128",
         "--vocab", "1000", "--tflops", "0.05", "--latency", "5", "--devices", "2", "--global-batch", "8",
         "--microbatch-sizes", "2", "--recompute", "off", "--w-shares", "0.3", "--ranks", "2",
         "--schedules", "1f1b,zb-h1,zb-h2,synthesized", "--synth-budget", "2", "--csv", str(csv_out),
         "--json", str(json_out)]
    )  # fmt: skip
    assert code == 0
    return csv_out, json_out


@pytest.mark.torchrun
@pytest.mark.timeout(600)
def test_a_plan_recommending_a_synthesized_order_writes_a_csv_the_executor_trains_with(synthesized_plan, tmp_path):
    """Issue 31, item 4: `plan --schedules ...,synthesized --csv` recommends a synthesized order and its CSV
    trains with the losses of one process."""
    csv_out, json_out = synthesized_plan
    assert read_json(json_out)["best"]["schedule"] == "synthesized"
    schedule = load_schedule(csv_out)
    assert schedule.num_ranks == 2 and schedule.num_microbatches == 4 and schedule.uses_split_backward
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "executor", "run", "--schedule-file", str(csv_out), "--model", "transformer",
               *MODEL_FLAGS, "--batch-size", str(BATCH), "--steps", str(STEPS), "--warmup-steps", str(WARMUP),
               "--optimizer", "sgd", "--lr", str(LR), "--seed", str(SEED), "--device", "cpu", "--timeout", "400",
               "--out", str(run_dir)]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert load_schedule(run_dir / "schedule.json").actions == schedule.actions
    losses, expected = read_json(run_dir / "measured.json")["losses"], single_process_losses(schedule.num_stages)
    assert len(losses) == len(expected)
    for got, want in zip(losses, expected, strict=True):
        assert abs(got - want) <= TOLERANCE, (losses, expected)
    assert expected[-1] < expected[0]  # training moved: the comparison is not of a frozen model


@pytest.mark.torchrun
@pytest.mark.timeout(600)
def test_verify_plan_runs_the_synthesized_order_the_plan_carries(synthesized_plan, tmp_path):
    """A synthesized candidate cannot be rebuilt from its family's name: the plan carries its order
    (`schedule_document`) and `verify-plan` runs exactly that order."""
    from pipesim.io.formats import schedule_from_dict
    from pipesim_executor.host.verify import verify_plan

    _, json_out = synthesized_plan
    best = read_json(json_out)["best"]
    carried = schedule_from_dict(best["schedule_document"])
    verification = verify_plan(json_out, top=1, steps=2, warmup_steps=1, rounds=1, runs_root=tmp_path / "runs",
                               timeout_s=400.0)  # fmt: skip
    (row,) = verification.rows
    assert row.error is None and row.measured_ms is not None, row.error
    assert load_schedule(Path(row.run_dir) / "schedule.json").actions == carried.actions
