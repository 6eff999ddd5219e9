"""Timing a model unit by unit, in one process: what `executor profile` measures on each rank
(pipesim_executor.rank.unit_profile gathers it).

A unit's time is its share of a stage's action, not a run of the unit alone: the whole model runs as one stage
through the executor's own `StageRunner` (the very F, B, F-with-capture, I and W calls the runtime makes, the loss
on the last unit), and stamps at the unit boundaries cut each call into shares (a forward pre-hook on each unit;
for the backwards, a hook on each unit's output tensor, which fires once the gradient reaching that unit is
complete: the chain of units runs its backward unit by unit). A unit timed alone in a loop keeps its weights in
the cache and pays the runner's entry and exit on its own; measured on this machine's 2 cores, the sum of
isolated units missed a stage's time by 5-25% in both directions, the shares by 2-5%.

The shares add up to the whole call, so the first unit's share holds the call's entry and the last unit's its exit
(and the loss). A stage cut out of the model pays an entry where it starts after unit 0 and an exit where it ends
before the last unit: `ActionConstants`, fitted per kind from stages of several cuts
(pipesim_executor.rank.unit_profile).

Each runner built here takes its hooks off the model's layers once measured (`StageRunner.remove_hooks`): hooks left
behind by earlier runners made every later forward slower, the more the longer a profile ran.

On a GPU the stamps are CUDA events, resolved after the call (no synchronisation inside it).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from pipesim.cost.profile import TIME_KINDS
from pipesim_executor.rank.stage import (
    StageRunner,
    explicit_weight_grads,
    own_parameters,
    parameterised_leaves,
    tensor_bytes,
)

KINDS = TIME_KINDS  # F, B, F with capture, I, W; F without a graph, B and I recomputing (pipesim.cost.profile)
WARMUP_REPEATS = 3


class Marks:
    """Time stamps on the host clock, or CUDA events on a GPU (read once the device is synchronised)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.device = device

    def mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def ms(self, start: Any, end: Any) -> float:
        """Milliseconds from `start` to `end` (after `sync`)."""
        return start.elapsed_time(end) if self.cuda else (end - start) * 1e3


@dataclass
class ModelParts:
    """One process's copy of the model and what it needs to run a stage of it."""

    layers: list[nn.Module]
    make_batch: Callable[[int, int, int], tuple[Tensor, Tensor]]
    loss_fn: Callable[[Tensor, Tensor], Tensor]
    device: torch.device
    seed: int
    num_microbatches: int
    autocast_dtype: torch.dtype | None = None
    wire_dtype: torch.dtype = torch.float32

    def runner(self, start: int, stop: int, recompute: bool = False) -> StageRunner:
        """A StageRunner over units start..stop-1, as the runtime builds one."""
        module = nn.Sequential(*self.layers[start:stop])
        return StageRunner(
            start,
            module,
            start == 0,
            stop == len(self.layers),
            self.loss_fn,
            1.0 / self.num_microbatches,
            recompute,
            autocast_dtype=self.autocast_dtype,
            wire_dtype=self.wire_dtype,
        )

    def inputs(self, start: int, size: int) -> tuple[Tensor, Tensor]:
        """The input unit `start` receives for one microbatch of `size` (what the units before it make), and the
        targets."""
        x, target = self.make_batch(size, self.seed, 0)
        x, target = x.to(self.device), target.to(self.device)
        with torch.no_grad(), self._autocast():
            for layer in self.layers[:start]:
                x = layer(x)
        if x.is_floating_point():
            x = x.to(self.wire_dtype).float() if start else x  # as it arrives over the wire
        return x.detach(), target

    def _autocast(self) -> Any:
        return torch.autocast(
            self.device.type, dtype=self.autocast_dtype or torch.bfloat16, enabled=self.autocast_dtype is not None
        )

    def clear_grads(self) -> None:
        for layer in self.layers:
            for p in layer.parameters():
                p.grad = None


def _output_gradient(runner: StageRunner, x: Tensor, target: Tensor) -> Tensor | None:
    if runner.is_last:
        return None
    with torch.no_grad():
        out, _ = runner.forward(x, None)
    return torch.randn(out.shape, device=out.device) * 1e-3


def stage_times(
    parts: ModelParts, start: int, stop: int, size: int, repeats: int, marks: Marks
) -> dict[str, list[float]]:
    """`repeats` samples of every kind (KINDS) of the stage holding units start..stop-1, each action timed as a
    whole."""
    plain, recomputing = parts.runner(start, stop), parts.runner(start, stop, recompute=True)
    x, target = parts.inputs(start, size)
    target = target if plain.is_last else None
    grad = _output_gradient(plain, x, target)
    samples: dict[str, list[float]] = {kind: [] for kind in KINDS}
    order = ("forward_ms", "backward_ms", "forward_split_ms", "input_ms", "weight_ms")
    redo = ("forward_recompute_ms", "backward_recompute_ms", None, "input_recompute_ms", None)
    for rep in range(repeats + WARMUP_REPEATS):
        for runner, names in ((plain, order), (recomputing, redo)):
            m = [marks.mark()]
            _, stash = runner.forward(x, target, split=False)
            m.append(marks.mark())
            runner.backward(stash, grad)
            m.append(marks.mark())
            _, stash = runner.forward(x, target, split=True)
            m.append(marks.mark())
            _, work = runner.backward_input(stash, grad)
            m.append(marks.mark())
            runner.backward_weight(work)
            m.append(marks.mark())
            marks.sync()
            parts.clear_grads()
            if rep >= WARMUP_REPEATS:
                for kind, begin, end in zip(names, m, m[1:], strict=False):
                    if kind is not None:
                        samples[kind].append(marks.ms(begin, end))
    plain.remove_hooks()
    recomputing.remove_hooks()
    return samples


class _Boundaries:
    """Stamps at the unit boundaries of one call: a forward pre-hook on each unit, and on each unit's output a
    tensor hook that fires when the gradient reaching that unit is complete."""

    def __init__(self, layers: Sequence[nn.Module], marks: Marks) -> None:
        self.marks = marks
        self.forward: dict[int, Any] = {}
        self.backward: dict[int, Any] = {}
        self.handles = []
        for index, layer in enumerate(layers):
            self.handles.append(layer.register_forward_pre_hook(self._pre(index)))
            if index < len(layers) - 1:
                self.handles.append(layer.register_forward_hook(self._post(index)))

    def _pre(self, index: int) -> Callable:
        def hook(module: nn.Module, args: tuple) -> None:
            self.forward[index] = self.marks.mark()

        return hook

    def _post(self, index: int) -> Callable:
        def stamp(grad: Tensor) -> None:
            self.backward[index] = self.marks.mark()

        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            if isinstance(output, Tensor) and output.requires_grad:
                output.register_hook(stamp)

        return hook

    def clear(self) -> None:
        self.forward.clear()
        self.backward.clear()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def forward_shares(self, begin: Any, end: Any, n: int) -> list[float]:
        """Unit k's share of a forward call: from its pre-hook (the call's start for unit 0) to the next unit's
        (the call's end for the last, which holds the loss)."""
        starts = [begin, *(self.forward[k] for k in range(1, n)), end]
        return [max(0.0, self.marks.ms(a, b)) for a, b in zip(starts, starts[1:], strict=False)]

    def backward_shares(self, begin: Any, end: Any, n: int) -> list[float]:
        """Unit k's share of a backward call: from the moment the gradient of its output is complete (the call's
        start for the last unit) to the moment its input's is (the call's end for unit 0). A unit whose output
        needs no gradient (no parameter before it) has no backward: its share is 0."""
        stamps = [self.backward.get(k) for k in range(n - 1)]
        shares = []
        for k in range(n):
            start = begin if k == n - 1 else stamps[k]
            stop = end if k == 0 else stamps[k - 1]
            if start is None:
                shares.append(0.0)
                continue
            stop = end if stop is None else stop
            shares.append(max(0.0, self.marks.ms(start, stop)))
        return shares


def _recompute_shares(boundaries: _Boundaries, begin: Any, end: Any, n: int) -> list[float]:
    """Unit k's share of a recomputing backward call: its share of the forward run again (pre-hook stamps, unit 0
    from the call's start) plus its share of the backward that follows (as `backward_shares`); the last unit's
    two parts run back to back and are read together, from its forward's start to the gradient of its input."""
    ms, forward = boundaries.marks.ms, boundaries.forward
    starts = [begin, *(forward[k] for k in range(1, n))]
    backward = boundaries.backward_shares(begin, end, n)
    if n == 1:
        return [max(0.0, ms(begin, end))]
    shares = [max(0.0, ms(starts[k], starts[k + 1])) + backward[k] for k in range(n - 1)]
    last_end = boundaries.backward.get(n - 2)
    shares.append(max(0.0, ms(starts[n - 1], end if last_end is None else last_end)))
    return shares


def unit_shares(parts: ModelParts, size: int, repeats: int, marks: Marks) -> dict[str, list[list[float]]]:
    """Per kind (KINDS), `repeats` samples of every unit's share of the whole model's action (a list of shares
    per sample; see the module docstring)."""
    n = len(parts.layers)
    runner, recomputing = parts.runner(0, n), parts.runner(0, n, recompute=True)
    x, target = parts.inputs(0, size)
    owner = {id(leaf): k for k, layer in enumerate(parts.layers) for leaf in parameterised_leaves(layer)}
    boundaries = _Boundaries(parts.layers, marks)
    samples: dict[str, list[list[float]]] = {kind: [] for kind in KINDS}

    def timed(call: Callable[[], Any]) -> tuple[Any, Any, Any]:
        begin = marks.mark()
        result = call()
        return begin, marks.mark(), result

    try:
        for rep in range(repeats + WARMUP_REPEATS):
            shares: dict[str, list[float]] = {}
            boundaries.clear()
            t0, t1, (_, stash) = timed(lambda: runner.forward(x, target, split=False))
            _, t2, _ = timed(lambda stash=stash: runner.backward(stash, None))
            marks.sync()
            shares["forward_ms"] = boundaries.forward_shares(t0, t1, n)
            shares["backward_ms"] = boundaries.backward_shares(t1, t2, n)
            boundaries.clear()
            t0, t1, (_, stash) = timed(lambda: runner.forward(x, target, split=True))
            _, t2, (_, work) = timed(lambda stash=stash: runner.backward_input(stash, None))
            weight_marks = _weight_by_unit(work, owner, n, marks)
            marks.sync()
            shares["forward_split_ms"] = boundaries.forward_shares(t0, t1, n)
            shares["input_ms"] = boundaries.backward_shares(t1, t2, n)
            shares["weight_ms"] = [marks.ms(a, b) for a, b in zip(weight_marks, weight_marks[1:], strict=False)]
            parts.clear_grads()
            boundaries.clear()
            t0, t1, (_, stash) = timed(lambda: recomputing.forward(x, target, split=False))
            marks.sync()
            shares["forward_recompute_ms"] = boundaries.forward_shares(t0, t1, n)
            boundaries.clear()
            t1, t2, _ = timed(lambda stash=stash: recomputing.backward(stash, None))
            marks.sync()
            shares["backward_recompute_ms"] = _recompute_shares(boundaries, t1, t2, n)
            _, stash = recomputing.forward(x, target, split=True)
            boundaries.clear()
            t1, t2, (_, work) = timed(lambda stash=stash: recomputing.backward_input(stash, None))
            marks.sync()
            shares["input_recompute_ms"] = _recompute_shares(boundaries, t1, t2, n)
            recomputing.backward_weight(work)
            parts.clear_grads()
            if rep >= WARMUP_REPEATS:
                for kind in KINDS:
                    samples[kind].append(shares[kind])
    finally:
        boundaries.remove()
        runner.remove_hooks()
        recomputing.remove_hooks()
    return samples


def medians(samples: dict[str, list[list[float]]]) -> dict[str, list[float]]:
    """Per kind, each unit's median over the samples of `unit_shares`."""
    return {
        kind: [statistics.median(rep[k] for rep in reps) for k in range(len(reps[0]))] for kind, reps in samples.items()
    }


def _weight_by_unit(work: Any, owner: dict[int, int], n: int, marks: Marks) -> list[Any]:
    """W of the whole model, unit by unit (the runner's own W calls, grouped): n + 1 marks."""
    explicit: list[list] = [[] for _ in range(n)]
    fallback: list[list] = [[] for _ in range(n)]
    for entry in work.explicit:
        explicit[owner[id(entry[0])]].append(entry)
    for entry in work.fallback:
        fallback[owner[id(entry[0])]].append(entry)
    stamps = [marks.mark()]
    for k in range(n):
        with torch.no_grad():
            for module, x, grad in explicit[k]:
                explicit_weight_grads(module, x, grad)
        for module, output, grad in fallback[k]:
            torch.autograd.backward(output, grad, inputs=own_parameters(module))
        stamps.append(marks.mark())
    work.explicit.clear()
    work.fallback.clear()
    return stamps


def unit_bytes(parts: ModelParts, size: int) -> list[dict[str, float]]:
    """Per unit, for one microbatch of `size`: what its F stashes (pipesim_executor.rank.stage.measure_stash_parts,
    as the runtime counts a stage's), the part only W needs, the part that is its own output (counted once when
    the next unit shares its stage), its input and output bytes (the output in the wire dtype), and its parameter
    bytes."""
    from pipesim_executor.rank.stage import measure_stash_parts

    out = []
    n = len(parts.layers)
    for k in range(n):
        runner = parts.runner(k, k + 1)
        x, target = parts.inputs(k, size)
        activation, weight, output = measure_stash_parts(runner, x, target if k == n - 1 else None)
        runner.remove_hooks()
        with torch.no_grad(), parts._autocast():
            y = parts.layers[k](x)
        wire = torch.empty(0, dtype=parts.wire_dtype).element_size() if y.is_floating_point() else y.element_size()
        out.append(
            {
                "activation_bytes": float(activation),
                "weight_grad_bytes": float(min(weight, activation)),
                "output_stash_bytes": float(min(output, activation)),
                "input_bytes": float(tensor_bytes(x)),
                "output_bytes": 0.0 if k == n - 1 else float(y.numel() * wire),
                "param_bytes": float(sum(tensor_bytes(p) for p in parts.layers[k].parameters() if p.requires_grad)),
            }
        )
        parts.clear_grads()
    return out


def optimizer_times(
    make: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
    groups: Sequence[list[nn.Parameter]],
    repeats: int,
    marks: Marks,
) -> list[tuple[float, float]]:
    """(parameter bytes, median ms of step + zero_grad(set_to_none=True), as a training step ends) for each group
    of parameters; gradients are fresh each time, the parameters are left as they were."""
    points = []
    for params in groups:
        if not params:
            continue
        saved = [p.detach().clone() for p in params]
        optimizer = make(params)
        grads = [torch.randn_like(p) * 1e-3 for p in params]
        times = []
        for rep in range(repeats + WARMUP_REPEATS):
            for p, g in zip(params, grads, strict=True):
                p.grad = g.clone()
            begin = marks.mark()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            end = marks.mark()
            marks.sync()
            if rep >= WARMUP_REPEATS:
                times.append(marks.ms(begin, end))
        with torch.no_grad():
            for p, value in zip(params, saved, strict=True):
                p.copy_(value)
        points.append((float(sum(tensor_bytes(p) for p in params)), statistics.median(times)))
    return points
