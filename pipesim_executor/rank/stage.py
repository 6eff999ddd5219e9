"""One pipeline stage's computation: forward, full backward (B), and the split backward (I then W).

The split backward is what zero-bubble schedules need: I computes the gradient of
the stage input as early as possible (the previous stage waits for it) and W
computes the weight gradients later, in a bubble. W must not redo I's work. So,
during a forward whose backward will be split, a forward hook records each
parameterised leaf module's call (its input and output). I then asks autograd
for the gradients of the stage input *and* of every recorded leaf output: that
pass runs every input-gradient kernel and no weight-gradient kernel (autograd
only evaluates the edges leading to the requested tensors). W then computes
each leaf's weight gradient from (leaf input, leaf output gradient) with the
dW kernels alone: one matmul for a Linear, `conv2d_weight` for a Conv2d, and so
on. A leaf type without such a formula, or with several outputs (a GRU), falls back to a per-leaf autograd call
on a retained graph (correct, a little slower, and it keeps the graph alive
until W).

Assumption, true of the reference models: a parameter feeds only its own
leaf module's output (no weight tying across modules).

Mixed precision (`autocast_dtype` bfloat16): the forward (and its recomputation) runs under torch.autocast;
weights, their gradients and the optimizer stay fp32. What crosses to another stage (the output, and the input
gradient going back) is cast to `wire_dtype` (bfloat16: half the bytes) and cast back to fp32 on arrival, as
the residual stream of a single autocast process is fp32. W's explicit formulas compute in the dtype autocast
ran the leaf in (its output gradient's dtype) and accumulate into the fp32 gradients.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._pytree import tree_leaves

from pipesim_executor.rank.seq_chunks import run_layers

LossFn = Callable[[Tensor, Tensor], Tensor]


@dataclass
class LeafCall:
    """One call of a parameterised leaf module during a captured forward.

    `outputs` are the call's tensors that carry a gradient: one for the modules with a dW-only formula, any number
    for the rest (a GRU returns its sequence and its last hidden state); `input` is kept only where a formula
    needs it."""

    module: nn.Module
    input: Tensor | None
    outputs: tuple[Tensor, ...]


@dataclass
class Stash:
    """What F keeps for the backward of one microbatch."""

    input: Tensor  # the stage input (a leaf; requires grad unless this is the first stage)
    target: Tensor | None  # the last stage needs it again when it recomputes
    root: Tensor | None = None  # stage output, or the loss on the last stage; None under recompute
    calls: list[LeafCall] | None = None  # recorded when the backward will be split
    chunk: Any = None  # a sequence chunk's (pipesim_executor.rank.seq_chunks.SeqChunk), else None


@dataclass
class WeightWork:
    """What I leaves for W: per leaf, (module, its input, its output gradient)."""

    explicit: list[tuple[nn.Module, Tensor, Tensor]] = field(default_factory=list)
    # (module, its outputs, their gradients)
    fallback: list[tuple[nn.Module, tuple[Tensor, ...], tuple[Tensor, ...]]] = field(default_factory=list)


def own_parameters(module: nn.Module) -> list[nn.Parameter]:
    return [p for p in module.parameters(recurse=False) if p.requires_grad]


def parameterised_leaves(module: nn.Module) -> list[nn.Module]:
    return [m for m in module.modules() if own_parameters(m)]


def _accumulate(param: Tensor | None, grad: Tensor) -> None:
    if param is None:
        return
    grad = grad.to(param.dtype)
    if param.grad is None:
        param.grad = grad
    else:
        param.grad.add_(grad)


def _flat_leading(t: Tensor, trailing: int) -> Tensor:
    return t.reshape(-1, *t.shape[t.dim() - trailing :])


def explicit_weight_grads(module: nn.Module, x: Tensor, g: Tensor) -> bool:
    """Accumulate the weight gradients of `module` from its input and output gradient.

    Returns False (touching nothing) for a module without a dW-only formula here.
    """
    if not supports_explicit(module):
        return False
    if x.is_floating_point() and x.dtype != g.dtype:  # autocast ran the leaf in g's dtype: do the same
        x = x.to(g.dtype)
    if type(module) is nn.Linear:
        g2, x2 = _flat_leading(g, 1), _flat_leading(x, 1)
        _accumulate(module.weight, g2.t().mm(x2))
        _accumulate(module.bias, g2.sum(0))
    elif type(module) is nn.Conv2d:
        weight = torch.nn.grad.conv2d_weight(
            x, module.weight.shape, g, module.stride, module.padding, module.dilation, module.groups
        )
        _accumulate(module.weight, weight)
        _accumulate(module.bias, g.sum((0, 2, 3)))
    elif type(module) is nn.LayerNorm:
        # The same kernel autograd runs, told to skip the input gradient: identical numbers.
        # The kernel wants weights in x's dtype (bf16 when autocast ran the norm on a bf16 input); the casts feed
        # the kernel only: the gradients accumulate into the module's own fp32 parameters.
        shape, weight, bias = list(module.normalized_shape), module.weight, module.bias
        kernel_weight = weight if weight.dtype == x.dtype else weight.to(x.dtype)
        kernel_bias = bias if bias is None or bias.dtype == x.dtype else bias.to(x.dtype)
        _, mean, rstd = torch.ops.aten.native_layer_norm(x, shape, kernel_weight, kernel_bias, module.eps)
        _, dweight, dbias = torch.ops.aten.native_layer_norm_backward(
            g, x, shape, mean, rstd, kernel_weight, kernel_bias, [False, True, bias is not None]
        )
        _accumulate(weight, dweight)
        _accumulate(bias, dbias)
    else:  # nn.Embedding
        weight = torch.zeros_like(module.weight).index_add_(0, x.reshape(-1), g.reshape(-1, g.shape[-1]))
        if module.padding_idx is not None:
            weight[module.padding_idx] = 0
        _accumulate(module.weight, weight)
    return True


def supports_explicit(module: nn.Module) -> bool:
    """Whether `explicit_weight_grads` has a dW-only formula for this module (same conditions)."""
    kind = type(module)
    if kind is nn.Linear:
        return True
    if kind is nn.Conv2d:
        return module.padding_mode == "zeros" and not isinstance(module.padding, str)
    if kind is nn.LayerNorm:
        return module.elementwise_affine
    if kind is nn.Embedding:
        return not (module.sparse or module.scale_grad_by_freq or module.max_norm)
    return False


class StageRunner:
    """Runs F, B, I and W of one stage for one microbatch at a time.

    `scale` multiplies the loss (1 / num_microbatches) so that gradients summed
    over microbatches equal those of the mean loss over the whole batch.
    """

    def __init__(
        self,
        stage: int,
        module: nn.Module,
        is_first: bool,
        is_last: bool,
        loss_fn: LossFn | None,
        scale: float,
        recompute: bool = False,
        autocast_dtype: torch.dtype | None = None,
        wire_dtype: torch.dtype = torch.float32,
    ) -> None:
        if is_last and loss_fn is None:
            raise ValueError("the last stage needs a loss function")
        self.autocast_dtype, self.wire_dtype = autocast_dtype, wire_dtype
        self.stage, self.module = stage, module
        self.is_first, self.is_last = is_first, is_last
        self.loss_fn, self.scale, self.recompute = loss_fn, scale, recompute
        self.leaves = parameterised_leaves(module)
        self._needs_graph = not all(supports_explicit(m) for m in self.leaves)
        self._calls: list[LeafCall] | None = None
        self._hooks = [leaf.register_forward_hook(self._record_call) for leaf in self.leaves]

    def remove_hooks(self) -> None:
        """Take this runner's hooks off its leaves: a profile builds many runners over one model's layers, and
        every hook left behind would slow each later forward of those layers."""
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()

    def parameters(self) -> list[nn.Parameter]:
        return [p for p in self.module.parameters() if p.requires_grad]

    # --- forward ----------------------------------------------------------------------------------------------
    def _record_call(self, module: nn.Module, args: tuple, output: object) -> None:
        if self._calls is None:
            return
        if supports_explicit(module) and isinstance(output, Tensor) and args and isinstance(args[0], Tensor):
            self._calls.append(LeafCall(module, args[0], (output,)))
            return
        # Any other leaf (several outputs, a tuple, a dict): W asks autograd for its own parameters' gradients
        # from every output tensor that carries one (the fallback on the retained graph).
        outputs = tuple(t for t in tree_leaves(output) if isinstance(t, Tensor) and t.requires_grad)
        if outputs:
            self._calls.append(LeafCall(module, None, outputs))

    def _run(
        self, x: Tensor, target: Tensor | None, capture: bool, chunk: Any = None
    ) -> tuple[Tensor, list[LeafCall] | None]:
        """The stage's forward (plus the scaled loss on the last stage); records leaf calls if asked. A sequence
        chunk's loss is weighted by its share of the tokens: the chunks' losses sum to the microbatch's."""
        self._calls = [] if capture else None
        try:
            with torch.autocast(
                x.device.type, dtype=self.autocast_dtype or torch.bfloat16, enabled=self.autocast_dtype is not None
            ):
                out = self.module(x) if chunk is None else run_layers(self.module, x, chunk)
                if self.is_last:
                    out = self.loss_fn(out, target).float() * self.scale
                    out = out if chunk is None else out * chunk.weight
            return out, self._calls
        finally:
            self._calls = None

    def _as_input(self, x: Tensor) -> Tensor:
        x = x.detach()
        if not self.is_first and x.is_floating_point():
            x = x.float() if x.dtype != torch.float32 else x  # off the wire (bf16): back to the fp32 stream
            x.requires_grad_(True)
        return x

    def _to_wire(self, t: Tensor | None) -> Tensor | None:
        """What goes to another stage, in the wire dtype (a no-op in fp32)."""
        if t is None or not t.is_floating_point() or t.dtype == self.wire_dtype:
            return t
        return t.to(self.wire_dtype)

    @staticmethod
    def _grad_for(root: Tensor, grad_output: Tensor | None) -> Tensor | None:
        if grad_output is None or grad_output.dtype == root.dtype:
            return grad_output
        return grad_output.to(root.dtype)

    def forward(
        self, x: Tensor, target: Tensor | None = None, split: bool = False, chunk: Any = None
    ) -> tuple[Tensor, Stash]:
        """F: returns (tensor to hand on: the output, or the scaled loss on the last stage; stash). `chunk`: one
        sequence chunk of the microbatch (pipesim_executor.rank.seq_chunks)."""
        x = self._as_input(x)
        if self.recompute:
            with torch.no_grad():
                out, _ = self._run(x, target, capture=False, chunk=chunk)
            return (out if self.is_last else self._to_wire(out)), Stash(x, target, chunk=chunk)
        out, calls = self._run(x, target, capture=split, chunk=chunk)
        handed = out.detach()
        return (handed if self.is_last else self._to_wire(handed)), Stash(x, target, out, calls, chunk)

    def _root(self, stash: Stash, split: bool) -> tuple[Tensor, list[LeafCall] | None]:
        if stash.root is not None:
            return stash.root, stash.calls
        with torch.enable_grad():  # recompute: run the forward again, this time keeping the graph
            return self._run(stash.input, stash.target, capture=split, chunk=stash.chunk)

    def _roots(self, stash: Stash, root: Tensor, grad_output: Tensor | None) -> tuple[list[Tensor], list]:
        """What a backward starts from: the output (or loss) with its gradient, and a sequence chunk's keys and
        values with the gradients the later chunks left for them."""
        roots, grads = [root], [None if self.is_last else self._grad_for(root, grad_output)]
        if stash.chunk is not None:
            tensors, kv_grads = stash.chunk.key_value_grads()
            roots += tensors
            grads += kv_grads
        return roots, grads

    # --- backward ---------------------------------------------------------------------------------------------
    def backward(self, stash: Stash, grad_output: Tensor | None) -> Tensor | None:
        """B: weight gradients accumulate into .grad; returns the input gradient (None on the first stage)."""
        root, _ = self._root(stash, split=False)
        torch.autograd.backward(*self._roots(stash, root, grad_output))
        if stash.chunk is not None:
            stash.chunk.release()
        return self._to_wire(stash.input.grad) if stash.input.requires_grad else None

    def backward_input(self, stash: Stash, grad_output: Tensor | None) -> tuple[Tensor | None, WeightWork]:
        """I: the input gradient only; what W needs is returned, everything else is freed."""
        root, calls = self._root(stash, split=True)
        if calls is None:
            raise RuntimeError(f"stage {self.stage}: I needs a forward run with split=True")
        wants_input = stash.input.requires_grad
        past = [] if stash.chunk is None else stash.chunk.past_leaves()  # autograd.grad fills no .grad: handed back
        targets = ([stash.input] if wants_input else []) + [t for call in calls for t in call.outputs] + past
        roots, root_grads = self._roots(stash, root, grad_output)
        grads = torch.autograd.grad(roots, targets, root_grads, retain_graph=self._needs_graph, allow_unused=True)
        if stash.chunk is not None:
            stash.chunk.add_past_grads(past, grads[len(grads) - len(past) :])
            grads = grads[: len(grads) - len(past)]
            stash.chunk.release()
        input_grad = self._to_wire(grads[0]) if wants_input else None
        work = WeightWork()
        at = 1 if wants_input else 0
        for call in calls:
            call_grads = grads[at : at + len(call.outputs)]
            at += len(call.outputs)
            if call.input is not None:  # a module with a dW-only formula: one output
                if call_grads[0] is not None:
                    work.explicit.append((call.module, call.input.detach(), call_grads[0]))
                continue
            given = [(t, g) for t, g in zip(call.outputs, call_grads, strict=True) if g is not None]
            if given:
                work.fallback.append((call.module, tuple(t for t, _ in given), tuple(g for _, g in given)))
        stash.root, stash.calls = None, None
        return input_grad, work

    def backward_weight(self, work: WeightWork) -> None:
        """W: the weight gradients from each leaf's input and output gradient; no input-gradient work."""
        with torch.no_grad():
            for module, x, grad in work.explicit:
                if not explicit_weight_grads(module, x, grad):
                    raise AssertionError(f"no explicit weight gradient for {module}")
        for module, outputs, grads in work.fallback:
            torch.autograd.backward(outputs, grads, inputs=own_parameters(module))
        work.explicit.clear()
        work.fallback.clear()


def _storage_key(t: Tensor) -> tuple:
    storage = t.untyped_storage()
    return (t.device.type, storage.data_ptr(), storage.nbytes())


def tensor_bytes(t: Tensor) -> int:
    return t.numel() * t.element_size()


def measure_stash_bytes(runner: StageRunner, x: Tensor, target: Tensor | None) -> tuple[int, int]:
    """(activation bytes, weight-gradient bytes) that one microbatch's F keeps (`measure_stash_parts`)."""
    activation, weight, _ = measure_stash_parts(runner, x, target)
    return activation, weight


def measure_stash_parts(runner: StageRunner, x: Tensor, target: Tensor | None) -> tuple[int, int, int]:
    """(activation bytes, weight-gradient bytes, output bytes among the activation) that one microbatch's F keeps.

    Activation bytes: every distinct storage autograd saves for the backward, parameters
    excluded, plus the stage input. Weight-gradient bytes: what the split backward holds
    from the end of I to W (each leaf's input and output gradient). Output bytes: the part of the activation
    that is the stage's own output (a ReLU or a sigmoid saves its result): a following piece of the same stage
    keeps that tensor as its input, so summing pieces measured apart counts it twice (the planner subtracts it,
    pipesim.cost.description.stage_costs_from_units).
    """
    params = {_storage_key(p) for p in runner.parameters()}
    seen: dict[tuple, int] = {}

    def pack(t: Tensor) -> Tensor:
        key = _storage_key(t)
        if key not in params:
            seen[key] = key[2]
        return t

    x = runner._as_input(x)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        root, calls = runner._run(x, target, capture=True)
    seen.setdefault(_storage_key(x), tensor_bytes(x))
    held: dict[tuple, int] = {}
    for call in calls or []:
        if call.input is not None:
            held.setdefault(_storage_key(call.input), tensor_bytes(call.input))
        held[("grad", id(call))] = sum(map(tensor_bytes, call.outputs))
    output = seen.get(_storage_key(root), 0) if target is None and _storage_key(root) != _storage_key(x) else 0
    del root
    return sum(seen.values()), min(sum(held.values()), sum(seen.values())), output
