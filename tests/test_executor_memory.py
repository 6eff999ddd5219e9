"""The rank side's byte counts (pipesim_executor.rank.train_loop) against pipesim.sim.memory's optimizer-state rule,
on real torch
optimizers: what a run records in measured.json is what the planner's memory model predicts."""

from __future__ import annotations

import pytest
import torch

from pipesim.sim.memory import OPTIMIZER_STATES
from pipesim_executor.config import ModelConfig
from pipesim_executor.rank.model import build_model
from pipesim_executor.rank.train_loop import gradient_bytes, optimizer_state_bytes

TINY = ModelConfig.of_transformer(num_layers=2, hidden_size=32, num_heads=2, ffn_size=64, seq_len=16, vocab_size=64)


@pytest.mark.parametrize(
    "name,make",
    [
        ("sgd", lambda ps: torch.optim.SGD(ps, lr=0.1)),
        ("sgd-momentum", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)),
        ("adam", lambda ps: torch.optim.Adam(ps, lr=0.1)),
    ],
)
def test_optimizer_state_bytes_match_the_memory_model(name, make):
    layers = build_model(TINY, seed=0)
    params = [p for layer in layers for p in layer.parameters()]
    param_bytes = sum(p.numel() * p.element_size() for p in params)
    optimizer = make(params)
    assert gradient_bytes(params) == 0  # nothing allocated before a backward
    for p in params:
        p.grad = torch.ones_like(p)
    optimizer.step()
    assert gradient_bytes(params) == param_bytes
    predicted = OPTIMIZER_STATES[name] * param_bytes
    # Adam also keeps one 4-byte step count per parameter tensor: well within 1%
    assert optimizer_state_bytes(optimizer) == pytest.approx(predicted, rel=0.01, abs=0)
