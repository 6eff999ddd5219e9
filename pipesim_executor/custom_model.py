"""Your own model: `--model package.module:factory` or `--model path/to/file.py:factory`.

The spec names a module (or a .py file) and a function in it. Only that module is imported
(`importlib.import_module`, or a regular file loaded by its path, then `getattr`); nothing is evaluated as code,
and the text is checked (`parse_spec`) before anything is imported. The factory is
called with no arguments and returns either an object with the attributes below or
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
keeps its own stages. For the split backward (zero-bubble schedules) see pipesim_executor.rank.stage: parameterised
leaves without a dW formula fall back to autograd.

The launcher checks a spec (`pipesim_executor.host.model_check`) before any process of the run starts, and never in its
own process: a module named by a user may do anything when imported or called (serve forever, exit, abort the
interpreter, fill the memory), and the launcher is also the web page's server. The check runs this module as a
child process (`python -m pipesim_executor.custom_model SPEC VERDICT`): under a memory limit it imports the module,
calls
the factory, checks what it returned and one batch, and writes a small JSON verdict (the units, their parameter
counts, or the error in one line); then it ends at once (`os._exit`, as the ranks do), whatever threads or exit
handlers the user's module left. The ranks import the same module the same way (`load_custom_model`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pipesim_executor.config import SPEC_HELP, check_model_file, is_file_spec, parse_spec
from pipesim_executor.shipped_examples import hint_for, module_to_import


@dataclass(frozen=True)
class CustomModel:
    """What a factory returned, checked: the layers, the batch maker and the loss."""

    layers: list[Any]  # nn.Module each
    make_batch: Callable[..., tuple[Any, Any]]
    loss_fn: Callable[[Any, Any], Any]


def _import_file(path: str) -> Any:
    """The module of a .py file, loaded by its path under a name of its own (two files both called model.py
    stay apart); the file's folder goes on sys.path, as `python file.py` puts it, for its own imports."""
    absolute = check_model_file(path)
    name = "pipesim_user_model_" + hashlib.sha1(absolute.encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, absolute)
    if spec is None or spec.loader is None:
        raise ValueError(f"model file {path}: Python cannot load it as a module; valid: {SPEC_HELP}")
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(absolute)
    if folder not in sys.path:
        sys.path.append(folder)
    sys.modules[name] = module  # before running it: dataclasses and pickling look their module up there
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def load_factory(spec: str) -> Callable[[], Any]:
    module_name, function = parse_spec(spec)
    try:
        if is_file_spec(module_name):
            module = _import_file(module_name)
        else:
            module = importlib.import_module(module_to_import(module_name))
    except ValueError:
        raise
    except ModuleNotFoundError as error:
        if is_file_spec(module_name):
            raise ValueError(f"model {spec}: importing {module_name!r} failed: {error}") from None
        raise ValueError(
            f"model {spec}: cannot import module {module_name!r} ({error}); modules are imported from the folder "
            f"you run from (or PYTHONPATH); a file can be named by its path: path/to/file.py:{function}"
            f"{hint_for(module_name)}"
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
    factory = load_factory(spec)  # the user's module first: a spec that names no module fails before torch loads
    import torch
    from torch import nn

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


# --- the check's child process ------------------------------------------------------------------------------------

MAX_UNITS_REPORTED = 100_000  # per-unit parameter counts in a verdict; past this only the total


def model_verdict(spec: str) -> dict[str, Any]:
    """What the check reports of a factory that works: its units (layers) and their parameter counts."""
    model = load_custom_model(spec, seed=0)
    custom_batch(model, spec, 1, seed=0, step=0)
    counts = [sum(p.numel() for p in layer.parameters()) for layer in model.layers]
    return {
        "ok": True,
        "units": len(counts),
        "parameters": sum(counts),
        "unit_parameters": counts if len(counts) <= MAX_UNITS_REPORTED else None,
    }


def _why(spec: str, error: BaseException) -> str:
    """One line for whatever the factory did instead of returning a model."""
    if isinstance(error, SystemExit):
        return (
            f"model {spec}: the factory tried to end the process (SystemExit {error.code!r}); a factory returns "
            "(layers, make_batch, loss_fn) or an object with those attributes"
        )
    if isinstance(error, KeyboardInterrupt):
        return f"model {spec}: the factory raised KeyboardInterrupt; a factory returns the model, it is not interrupted"
    if isinstance(error, ValueError):
        return str(error).splitlines()[0] if str(error) else f"model {spec}: ValueError"
    return f"model {spec}: {type(error).__name__}: {error}".splitlines()[0]


def _limit_memory(limit_bytes: int) -> None:
    """Cap this process's address space where the OS lets us (Linux, macOS): a factory that allocates past it
    fails with MemoryError here rather than taking the machine."""
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = limit_bytes if hard == resource.RLIM_INFINITY else min(limit_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    except (ImportError, ValueError, OSError):
        pass


def main(argv: Sequence[str]) -> None:
    """The check's child: `SPEC VERDICT_PATH MEMORY_BYTES`. Writes the verdict and ends without running anything
    else (no exit handlers, no waiting on threads the user's module started)."""
    spec, verdict_path, memory = argv
    _limit_memory(int(memory))
    try:
        verdict = model_verdict(spec)
    except BaseException as error:  # noqa: BLE001 - SystemExit and KeyboardInterrupt too: the factory's doing
        verdict = {"ok": False, "error": _why(spec, error)}
    try:
        data = json.dumps(verdict, allow_nan=False).encode()
        handle = os.open(verdict_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        while data:
            data = data[os.write(handle, data) :]
        os.close(handle)
    finally:
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
