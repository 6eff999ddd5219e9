"""Your own model: `--model package.module:factory`.

The spec names a module and a function in it. Only that module is imported (`importlib.import_module`, then
`getattr`); nothing is evaluated as code, and the text is checked against `SPEC_PATTERN` before anything is
imported. The factory is called with no arguments and returns either an object with the attributes below or
the tuple `(layers, make_batch, loss_fn)`:

* `layers`: the model as an ordered list of layers, an `nn.Sequential` or a list/tuple of `nn.Module`;
  pipesim cuts it into contiguous stages (by parameter count, or at `--split-points`), so the model needs at
  least as many layers as the schedule has stages. Each layer takes one tensor and returns one tensor.
* `make_batch(batch_size=..., step=..., seed=...)`: one step's `(inputs, targets)` tensors on the CPU, the
  batch dimension first; a pure function of its arguments (every rank makes the same batch and keeps its
  rows). With data parallelism it is asked for the global batch (batch_size x replicas).
* `loss_fn(output, targets)`: a scalar, the mean over the batch (microbatches are summed with weight
  1/num_microbatches, replicas averaged: the gradients equal those of one process on the global batch).

The weights must depend only on the global RNG's seed: every rank calls the factory under the same seed and
keeps its own stages. For the split backward (zero-bubble schedules) see executor.stage: parameterised leaves
without a dW formula fall back to autograd.

The launcher checks a spec (`check_custom_model`) before any process starts: it imports the module and calls
the factory in the launcher's own process, lazily inside the check (the launcher imports no torch at module
level; a custom model's module usually does). That is a deliberate choice over a probe subprocess: the same
import the ranks will do, the same errors, one line each, and no second interpreter start (seconds) per check.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from executor.config import check_split_points, parse_spec


@dataclass(frozen=True)
class CustomModel:
    """What a factory returned, checked: the layers, the batch maker and the loss."""

    layers: list[Any]  # nn.Module each
    make_batch: Callable[..., tuple[Any, Any]]
    loss_fn: Callable[[Any, Any], Any]


def load_factory(spec: str) -> Callable[[], Any]:
    module_name, function = parse_spec(spec)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        raise ValueError(
            f"model {spec}: cannot import module {module_name!r} ({error}); "
            "is it on PYTHONPATH (the folder you run from)?"
        ) from None
    except Exception as error:  # noqa: BLE001 - the user's module failed while importing: say so in one line
        raise ValueError(f"model {spec}: importing {module_name!r} failed: {type(error).__name__}: {error}") from None
    factory = getattr(module, function, None)
    if factory is None:
        raise ValueError(f"model {spec}: module {module_name!r} has no attribute {function!r}")
    if not callable(factory):
        raise ValueError(f"model {spec}: {module_name}.{function} is not callable")
    return factory


def _parts(made: Any, spec: str) -> tuple[Any, Any, Any]:
    if isinstance(made, tuple) and len(made) == 3:
        return made
    try:
        return made.layers, made.make_batch, made.loss_fn
    except AttributeError:
        raise ValueError(
            f"model {spec}: the factory must return (layers, make_batch, loss_fn) or an object with "
            f"those attributes, got {type(made).__name__}"
        ) from None


def load_custom_model(spec: str, seed: int) -> CustomModel:
    """Call the factory under `seed` (the caller's RNG state is left alone) and check what it returned."""
    import torch
    from torch import nn

    factory = load_factory(spec)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            made = factory()
        except Exception as error:  # noqa: BLE001 - one line naming the factory, not the user's traceback
            raise ValueError(f"model {spec}: the factory raised {type(error).__name__}: {error}") from None
    layers, make_batch, loss_fn = _parts(made, spec)
    if isinstance(layers, nn.Sequential):
        layers = list(layers)
    if not isinstance(layers, (list, tuple)) or not all(isinstance(layer, nn.Module) for layer in layers):
        raise ValueError(
            f"model {spec}: layers must be an nn.Sequential or a list of nn.Module, got {type(layers).__name__}"
        )
    if not layers:
        raise ValueError(f"model {spec}: the factory returned no layers")
    for name, value in (("make_batch", make_batch), ("loss_fn", loss_fn)):
        if not callable(value):
            raise ValueError(f"model {spec}: {name} must be callable, got {type(value).__name__}")
    return CustomModel(list(layers), make_batch, loss_fn)


def custom_batch(model: CustomModel, spec: str, batch_size: int, seed: int, step: int) -> tuple[Any, Any]:
    """make_batch's (inputs, targets), checked to be two tensors of `batch_size` rows."""
    import torch

    try:
        batch = model.make_batch(batch_size=batch_size, step=step, seed=seed)
    except Exception as error:  # noqa: BLE001
        raise ValueError(
            f"model {spec}: make_batch(batch_size={batch_size}, step={step}, seed={seed}) raised "
            f"{type(error).__name__}: {error}"
        ) from None
    ok = isinstance(batch, (tuple, list)) and len(batch) == 2 and all(isinstance(t, torch.Tensor) for t in batch)
    if not ok:
        raise ValueError(f"model {spec}: make_batch must return (inputs, targets) tensors, got {type(batch).__name__}")
    if any(t.dim() == 0 or t.shape[0] != batch_size for t in batch):
        raise ValueError(
            f"model {spec}: make_batch(batch_size={batch_size}) returned tensors of shapes "
            f"{[tuple(t.shape) for t in batch]}: the first dimension must be the batch"
        )
    return batch[0], batch[1]


def check_custom_model(spec: str, num_stages: int, split_points: Sequence[int] | None) -> int:
    """The launcher's check: the factory imports, runs and returns the right things, and the model has a layer
    for every stage. Returns the number of layers."""
    model = load_custom_model(spec, seed=0)
    custom_batch(model, spec, 1, seed=0, step=0)
    if num_stages > len(model.layers):
        raise ValueError(
            f"model {spec} has {len(model.layers)} layers but the schedule has {num_stages} stages and "
            "every stage needs one; use fewer ranks or virtual stages, or a model with more layers"
        )
    if split_points is not None:
        check_split_points(split_points, len(model.layers), num_stages)
    return len(model.layers)
