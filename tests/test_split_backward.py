"""The split backward (I then W) gives every parameter the gradient the full backward (B) gives, in fp32 and bf16.

In process, no torchrun: each model is cut into two stages, and one microbatch goes forward through both and back
through both, once with B on each stage and once with I then W. Every parameter's gradient must match, and so
must the input gradient that crosses the stage boundary.

Breakage caught: `explicit_weight_grads` rebinding LayerNorm's weight and bias to cast copies when autocast ran
the norm in bf16, which accumulated dweight/dbias onto the copies and left the module's `weight.grad` None
(issue 24: with --dtype bf16 and any zero-bubble schedule, such LayerNorm weights never learned).

Which LayerNorms that bug reached: on the CPU, autocast runs layer_norm in its input's dtype. The built-in
Transformer and examples.gpt_small normalise the fp32 residual stream (x + a bf16 branch is fp32), so their norms
run in fp32 and never took the faulty branch; a LayerNorm right after a Linear gets a bf16 input and did. The
`norm_after_linear` model is that shape, so this comparison fails without the fix; `gru` holds a leaf with two
outputs (a user's recurrent layer once failed the profile: "one tensor in and out"); the others guard the
models users run.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from pipesim_executor.config import CUSTOM, ModelConfig
from pipesim_executor.rank.model import model_parts, split_stages
from pipesim_executor.rank.stage import StageRunner

SEED = 5
MODELS = {
    "transformer": ModelConfig.of_transformer(
        vocab_size=32, hidden_size=16, num_heads=2, ffn_size=32, num_layers=2, seq_len=8
    ),
    "cnn": ModelConfig.of_cnn(channels=4, blocks=2, fc_size=16),
    "gpt_small": ModelConfig(kind=CUSTOM, spec="examples.gpt_small:build"),
    "norm_after_linear": None,  # built below: a LayerNorm whose input is a Linear's (bf16 under autocast)
    "gru": None,  # built below: a leaf with two outputs (a GRU's sequence and last hidden state), both used
}


class _GruBlock(nn.Module):
    """A recurrent layer whose two outputs both reach the loss: its leaf, the nn.GRU, returns a tuple."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.gru = nn.GRU(width, width, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sequence, last = self.gru(x)
        return x + sequence + last.transpose(0, 1)


def _gru() -> tuple[list[nn.Module], object, object]:
    torch.manual_seed(SEED)
    layers = [nn.Sequential(nn.Linear(6, 8), _GruBlock(8)), nn.Sequential(_GruBlock(8), nn.Linear(8, 3))]

    def make_batch(batch_size: int, seed: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(seed + step)
        return torch.randn(batch_size, 5, 6, generator=generator), torch.randn(batch_size, 5, 3, generator=generator)

    return layers, make_batch, nn.functional.mse_loss


def _norm_after_linear() -> tuple[list[nn.Module], object, object]:
    torch.manual_seed(SEED)
    layers = [
        nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8)),
        nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8), nn.Linear(8, 3)),
    ]

    def make_batch(batch_size: int, seed: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(seed + step)
        return torch.randn(batch_size, 6, generator=generator), torch.randn(batch_size, 3, generator=generator)

    return layers, make_batch, nn.functional.mse_loss


def _runners(model: str, dtype: str) -> tuple[list[StageRunner], torch.Tensor, torch.Tensor]:
    built = {"norm_after_linear": _norm_after_linear, "gru": _gru}
    layers, make_batch, loss = built[model]() if model in built else model_parts(MODELS[model], SEED)
    stages = split_stages(layers, 2)
    half = torch.bfloat16 if dtype == "bf16" else None
    runners = [
        StageRunner(s, stages[s], s == 0, s == 1, loss, 1.0, autocast_dtype=half, wire_dtype=half or torch.float32)
        for s in range(2)
    ]
    inputs, targets = make_batch(4, SEED, 0)
    return runners, inputs, targets


def _gradients(model: str, dtype: str, split: bool) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Every parameter's gradient after one microbatch's forward and backward through both stages, and the
    input gradient stage 1 hands to stage 0."""
    runners, inputs, targets = _runners(model, dtype)
    first, last = runners
    hidden, first_stash = first.forward(inputs, split=split)
    _, last_stash = last.forward(hidden, targets, split=split)
    if split:
        boundary, work = last.backward_input(last_stash, None)
        _, first_work = first.backward_input(first_stash, boundary)
        last.backward_weight(work)
        first.backward_weight(first_work)
    else:
        boundary = last.backward(last_stash, None)
        first.backward(first_stash, boundary)
    grads = {}
    for index, runner in enumerate(runners):
        for name, param in runner.module.named_parameters():
            grads[f"stage{index}.{name}"] = param.grad
    return grads, boundary


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_split_backward_matches_full_backward_for_every_parameter(model: str, dtype: str) -> None:
    full, full_boundary = _gradients(model, dtype, split=False)
    split, split_boundary = _gradients(model, dtype, split=True)
    assert full.keys() == split.keys()
    missing = sorted(name for name, grad in split.items() if grad is None and full[name] is not None)
    assert not missing, f"{model} {dtype}: the split backward left these gradients None: {missing}"
    # fp32: the same kernels, up to summation order; bf16: W's explicit formulas run in bf16 as autocast did
    tolerance = {"fp32": 1e-5, "bf16": 2e-2}[dtype]
    for name, grad in full.items():
        assert grad is not None, f"{model} {dtype}: the full backward gave {name} no gradient"
        assert split[name].dtype == grad.dtype == torch.float32, name  # fp32 master gradients either way
        scale = grad.abs().max().item() or 1.0
        assert torch.allclose(split[name], grad, rtol=tolerance, atol=tolerance * scale), (
            f"{model} {dtype}: {name} differs: max |split - full| {(split[name] - grad).abs().max().item():.3g} "
            f"(largest |full| {scale:.3g})"
        )
    assert split_boundary.dtype == full_boundary.dtype
    assert torch.allclose(split_boundary.float(), full_boundary.float(), rtol=tolerance, atol=1e-6)


def test_layer_norm_weights_get_gradients_in_bf16() -> None:
    """The bug's own shape, named: a bf16 split backward over a LayerNorm fills its weight and bias gradients."""
    norm = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
    runner = StageRunner(1, norm, False, False, None, 1.0, autocast_dtype=torch.bfloat16, wire_dtype=torch.bfloat16)
    _, stash = runner.forward(torch.randn(2, 8), split=True)
    _, work = runner.backward_input(stash, torch.randn(2, 8, dtype=torch.bfloat16))
    runner.backward_weight(work)
    layer_norm = norm[1]
    assert layer_norm.weight.grad is not None and layer_norm.bias.grad is not None
    assert layer_norm.weight.grad.dtype == torch.float32
