"""The model zoo: every model builds, keeps the factory contract and trains a step; each has the shape it
is in the zoo for; each imports only torch (examples ship as a package of plain modules)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from pipesim_executor.custom_model import custom_batch, load_custom_model  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ZOO = ("zoo_mlp_uneven", "zoo_cnn", "zoo_transformer", "zoo_embed_heavy", "zoo_tiny_layers")
HELD_OUT = (
    *("heldout_gru", "heldout_tcn", "heldout_mixer", "heldout_autoencoder", "heldout_sepconv", "heldout_vit"),
    *("heldout_resnet", "heldout_gmlp", "heldout_pointnet"),
)


def _params(layer) -> int:
    return sum(p.numel() for p in layer.parameters())


@pytest.mark.parametrize("name", ZOO + HELD_OUT)
def test_each_zoo_model_keeps_the_contract_and_trains_a_step(name):
    spec = f"examples.{name}:build"
    model = load_custom_model(spec, seed=0)
    inputs, targets = custom_batch(model, spec, 3, seed=1, step=2)
    again = custom_batch(model, spec, 3, seed=1, step=2)
    assert torch.equal(inputs, again[0]) and torch.equal(targets, again[1])  # a pure function of its arguments
    x = inputs
    for layer in model.layers:
        x = layer(x)
        assert isinstance(x, torch.Tensor) and x.shape[0] == 3
    loss = model.loss_fn(x, targets)
    assert loss.dim() == 0 and math.isfinite(loss.item())
    loss.backward()
    assert all(p.grad is not None for layer in model.layers for p in layer.parameters())
    same = load_custom_model(spec, seed=0)  # weights depend only on the seed: every rank builds the same model
    assert all(torch.equal(a, b) for la, lb in zip(model.layers, same.layers, strict=True)
               for a, b in zip(la.parameters(), lb.parameters(), strict=True))  # fmt: skip


@pytest.mark.parametrize("name", ZOO + HELD_OUT)
def test_zoo_models_import_only_torch(name):
    tree = ast.parse((EXAMPLES / f"{name}.py").read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}  # fmt: skip
    imported |= {
        node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert imported <= {"torch", "__future__"}, imported


def test_each_zoo_model_has_the_shape_it_is_there_for():
    def layers(name):
        return load_custom_model(f"examples.{name}:build", seed=0).layers

    mlp = [_params(layer) for layer in layers("zoo_mlp_uneven")[:-1]]
    assert 3.5 <= max(mlp) / min(mlp) <= 4.5  # uneven widths: about 4x
    cnn = layers("zoo_cnn")
    assert sum(isinstance(m, torch.nn.Conv2d) for layer in cnn for m in layer.modules()) >= 5
    encoder = [_params(layer) for layer in layers("zoo_transformer")[1:-1]]
    assert len(encoder) >= 6 and len(set(encoder)) == 1  # equal blocks
    heavy = [_params(layer) for layer in layers("zoo_embed_heavy")]
    assert min(heavy[0], heavy[-1]) > 10 * max(heavy[1:-1])  # embedding and LM head dominate
    tiny = layers("zoo_tiny_layers")
    assert len(tiny) >= 40 and max(map(_params, tiny)) <= 300


@pytest.mark.parametrize("name", ["zoo_cnn", "zoo_mlp_uneven", "gpt_small"])
def test_a_stage_priced_from_its_units_stashes_what_the_stage_measures(name):
    """The planner prices a stage's stash as the sum of its units' (stage_costs_from_units); the runtime counts the
    whole stage's (measure_stash_bytes). A conv or linear layer ending in a ReLU keeps its own output, which the
    next unit keeps as its input: summed apart, the CNN's first stage came out 34% high before the units carried
    `output_stash_bytes`."""
    from pipesim.cost.description import stage_costs_from_units
    from pipesim.cost.stage import StageCost
    from pipesim_executor.rank.stage import measure_stash_bytes
    from pipesim_executor.rank.unit_timing import ModelParts, unit_bytes

    model = load_custom_model(f"examples.{name}:build", seed=0)
    parts = ModelParts(model.layers, model.make_batch, model.loss_fn, torch.device("cpu"), 0, 4)
    units = [
        StageCost(0.0, 0.0, activation_bytes=b["activation_bytes"], output_stash_bytes=b["output_stash_bytes"])
        for b in unit_bytes(parts, 4)
    ]
    n = len(units)
    for split in ((n // 2,), (1, n - 2)):
        priced = stage_costs_from_units(units, split)
        for stage, (start, stop) in enumerate(zip((0, *split), (*split, n), strict=True)):
            x, target = parts.inputs(start, 4)
            runner = parts.runner(start, stop)
            measured, _ = measure_stash_bytes(runner, x, target if stop == n else None)
            runner.remove_hooks()
            assert priced.stages[stage].activation_bytes == pytest.approx(measured, rel=1e-9), (split, stage)


@pytest.mark.torchrun
@pytest.mark.timeout(480)
def test_the_cnn_trains_two_steps_under_a_zero_bubble_schedule(tmp_path):
    """The zoo's CNN through the executor for real: zb-h1's split backward over conv layers and GroupNorm."""
    import subprocess
    import sys

    from pipesim_executor import processes

    out = tmp_path / "cnn"
    command = [sys.executable, "-m", "executor", "run", "--model", "examples.zoo_cnn:build", "--schedule", "zb-h1",
               "--ranks", "2", "--microbatches", "2", "--batch-size", "4", "--steps", "2", "--warmup-steps", "0",
               "--device", "cpu", "--timeout", "400", "--out", str(out)]  # fmt: skip
    done = subprocess.run(command, cwd=processes.REPO_ROOT, capture_output=True, text=True, timeout=470)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    from pipesim_executor.host.run_folder import load_run

    result = load_run(out)
    assert result.status == "ok" and len(result.losses) == 2 and len(result.step_times_ms) == 2
    assert all(math.isfinite(loss) for loss in result.losses)
