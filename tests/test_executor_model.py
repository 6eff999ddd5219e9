"""Fast, single-process tests of the executor's models, stage computation and runtime bookkeeping."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pipesim.cost.balance import balance
from pipesim.ir import Action, make_schedule
from pipesim_executor.config import ModelConfig, RunConfig, run_config
from pipesim_executor.rank.model import (
    build_model,
    loss_fn,
    make_batch,
    param_count,
    split_stages,
    stage_io_shapes,
)
from pipesim_executor.rank.profile import link_cost, stage_cost
from pipesim_executor.rank.runtime import PipelineRuntime, build_rank_model, microbatches
from pipesim_executor.rank.stage import StageRunner, measure_stash_bytes
from pipesim_executor.rank.timing import HostClock, assemble_measured, offset_from_samples
from pipesim_executor.rank.transport import resolve_backend

TINY = {
    "transformer": ModelConfig.of_transformer(
        vocab_size=30, hidden_size=16, num_heads=2, ffn_size=24, num_layers=3, seq_len=6
    ),
    "cnn": ModelConfig.of_cnn(channels=3, blocks=3, fc_size=12),
}
MODELS = sorted(TINY)


def full_model_grads(config: ModelConfig, stages: list[torch.nn.Module], batch_size: int, seed: int) -> list:
    inputs, targets = make_batch(config, batch_size, seed, step=0)
    out = inputs
    for stage in stages:
        out = stage(out)
    loss_fn(config)(out, targets).backward()
    grads = [[p.grad.clone() for p in stage.parameters()] for stage in stages]
    for stage in stages:
        stage.zero_grad(set_to_none=True)
    return grads


# --- models ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", MODELS)
def test_same_seed_same_weights_and_rng_untouched(kind):
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_model(TINY[kind], seed=5)
    assert torch.equal(torch.rand(1), before)  # building did not consume the caller's random numbers
    b = build_model(TINY[kind], seed=5)
    c = build_model(TINY[kind], seed=6)
    pa, pb, pc = (torch.cat([p.flatten() for layer in m for p in layer.parameters()]) for m in (a, b, c))
    assert torch.equal(pa, pb)
    assert not torch.equal(pa, pc)


@pytest.mark.parametrize("kind", MODELS)
def test_stage_weights_do_not_depend_on_the_split(kind):
    """A rank keeps its stages of the full layer list: the split changes no weight."""
    config = TINY[kind]
    flat = [p for layer in build_model(config, 1) for p in layer.parameters()]
    for num_stages in (1, 2, 3):
        split = [p for stage in split_stages(build_model(config, 1), num_stages) for p in stage.parameters()]
        assert all(torch.equal(x, y) for x, y in zip(flat, split, strict=True))


@pytest.mark.parametrize("kind", MODELS)
def test_the_default_split_is_pipesims_one_splitter_over_parameter_counts(kind):
    """The executor cuts a model with pipesim.cost.balance (optimal, its tie rule), not a splitter of its own.

    Catches a second splitter: the executor once had a dynamic programme whose ties went to the earliest cut,
    so equal layers (a Transformer's blocks) were cut unlike the planner and the description cut them."""
    layers = build_model(TINY[kind], 1)
    sizes = [param_count(layer) for layer in layers]
    for stages in range(1, len(layers) + 1):
        expected = balance(sizes, stages).split_points
        got = list(itertools.accumulate(len(stage) for stage in split_stages(layers, stages)))[:-1]
        assert tuple(got) == expected, (stages, got, expected)
        best = min(
            max(sum(sizes[b[i] : b[i + 1]]) for i in range(stages))
            for cut in itertools.combinations(range(1, len(sizes)), stages - 1)
            for b in [(0, *cut, len(sizes))]
        )
        assert balance(sizes, stages).bottleneck == best


@pytest.mark.parametrize("kind", MODELS)
def test_split_stages_partitions_the_layers(kind):
    layers = build_model(TINY[kind], 0)
    stages = split_stages(layers, 3)
    assert [m for stage in stages for m in stage] == layers
    assert all(len(stage) >= 1 for stage in stages)
    assert sum(param_count(s) for s in stages) == sum(param_count(m) for m in layers)


def test_split_points_are_respected_and_checked():
    layers = build_model(TINY["transformer"], 0)  # 5 layers
    assert [len(s) for s in split_stages(layers, 3, split_points=(1, 4))] == [1, 3, 1]
    for bad in [(1,), (2, 2), (0, 3), (3, 5), (3, 1)]:
        with pytest.raises(ValueError, match="split_points"):
            split_stages(layers, 3, split_points=bad)


def test_too_many_stages_is_a_clear_error():
    layers = build_model(TINY["cnn"], 0)
    with pytest.raises(ValueError, match=f"{len(layers)} layers into {len(layers) + 1} stages"):
        split_stages(layers, len(layers) + 1)


@pytest.mark.parametrize("kind", MODELS)
def test_make_batch_is_deterministic_per_step(kind):
    config = TINY[kind]
    x0, y0 = make_batch(config, 4, seed=1, step=0)
    x0b, y0b = make_batch(config, 4, seed=1, step=0)
    x1, _ = make_batch(config, 4, seed=1, step=1)
    assert torch.equal(x0, x0b) and torch.equal(y0, y0b) and not torch.equal(x0, x1)
    if kind == "transformer":
        assert x0.shape == y0.shape == (4, config.transformer.seq_len)
        assert torch.equal(x0[:, 1:], y0[:, :-1])  # next-token targets
    else:
        assert x0.shape == (4, 3, 32, 32) and y0.shape == (4,) and int(y0.max()) < 10


@pytest.mark.parametrize("kind", MODELS)
def test_stage_io_shapes_match_a_real_forward(kind):
    config = TINY[kind]
    stages = split_stages(build_model(config, 0), 3)
    shapes = stage_io_shapes(stages, config, microbatch_size=2)
    x, _ = make_batch(config, 2, 0, 0)
    for stage, (shape_in, shape_out) in zip(stages, shapes, strict=True):
        assert x.shape == shape_in
        x = stage(x)
        assert x.shape == shape_out


# --- one stage: F, B, I, W -------------------------------------------------------------------------------------


class OpCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func.__name__)
        return func(*args, **(kwargs or {}))

    def count(self, prefix: str) -> int:
        return sum(1 for op in self.ops if op.startswith(prefix))


def _runner(kind: str, stage: int, num_stages: int = 2, recompute: bool = False):
    config = TINY[kind]
    stages = split_stages(build_model(config, 0), num_stages)
    shapes = stage_io_shapes(stages, config, 2)
    runner = StageRunner(stage, stages[stage], stage == 0, stage == num_stages - 1, loss_fn(config), 0.5, recompute)
    inputs, targets = make_batch(config, 2, 0, 0)
    x = inputs if stage == 0 else torch.randn(shapes[stage][0], generator=torch.Generator().manual_seed(1))
    grad = None if stage == num_stages - 1 else torch.randn(shapes[stage][1])
    return runner, x, targets, grad


@pytest.mark.parametrize("kind,stage,recompute", list(itertools.product(MODELS, (0, 1), (False, True))))
def test_split_backward_equals_full_backward(kind, stage, recompute):
    runner, x, target, grad = _runner(kind, stage, recompute=recompute)
    _, stash = runner.forward(x, target)
    input_grad = runner.backward(stash, grad)
    expected = [p.grad.clone() for p in runner.parameters()]
    for p in runner.parameters():
        p.grad = None
    _, stash = runner.forward(x, target, split=True)
    input_grad_i, work = runner.backward_input(stash, grad)
    assert all(p.grad is None for p in runner.parameters())  # I computed no weight gradient
    runner.backward_weight(work)
    for got, want in zip((p.grad for p in runner.parameters()), expected, strict=True):
        assert (got - want).abs().max() <= 1e-6 * max(1.0, float(want.abs().max()))
    if stage == 0:
        assert input_grad is None and input_grad_i is None
    else:
        assert torch.allclose(input_grad, input_grad_i, atol=1e-7)


def test_split_backward_falls_back_to_autograd_for_other_leaves():
    """PReLU has no dW-only formula here: W asks autograd on the retained graph, still exact."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.PReLU(), torch.nn.Linear(6, 3))
    runner = StageRunner(1, module, is_first=False, is_last=False, loss_fn=None, scale=1.0)
    x, grad = torch.randn(5, 4), torch.randn(5, 3)
    _, stash = runner.forward(x)
    input_grad = runner.backward(stash, grad)
    expected = [p.grad.clone() for p in runner.parameters()]
    for p in runner.parameters():
        p.grad = None
    _, stash = runner.forward(x, split=True)
    input_grad_i, work = runner.backward_input(stash, grad)
    assert len(work.fallback) == 1 and len(work.explicit) == 2
    runner.backward_weight(work)
    assert torch.allclose(input_grad, input_grad_i)
    for got, want in zip((p.grad for p in runner.parameters()), expected, strict=True):
        assert torch.allclose(got, want, atol=1e-7)


@pytest.mark.parametrize("kind", MODELS)
def test_w_does_not_redo_input_gradient_work(kind):
    """Matmul/conv counts: I + W == B, and W runs none of the input-gradient kernels."""
    runner, x, target, grad = _runner(kind, 1)
    _, stash = runner.forward(x, target)
    with OpCounter() as b:
        runner.backward(stash, grad)
    _, stash = runner.forward(x, target, split=True)
    with OpCounter() as i:
        _, work = runner.backward_input(stash, grad)
    with OpCounter() as w:
        runner.backward_weight(work)
    for prefix in ("mm", "addmm", "bmm", "convolution_backward"):
        assert i.count(prefix) + w.count(prefix) == b.count(prefix), prefix
    assert w.count("mm") + w.count("convolution_backward") > 0
    for kernel in ("threshold_backward", "max_pool2d_with_indices_backward", "_scaled_dot_product", "_log_softmax"):
        assert w.count(kernel) == 0, kernel


@pytest.mark.parametrize("kind", MODELS)
def test_stash_bytes_scale_with_the_microbatch(kind):
    runner, x, target, _ = _runner(kind, 1)
    activation, weight = measure_stash_bytes(runner, x, target)
    assert activation >= x.numel() * 4 and 0 < weight <= activation
    doubled, _ = measure_stash_bytes(runner, torch.cat([x, x]), torch.cat([target, target]))
    assert 1.8 <= doubled / activation <= 2.05  # activations only: parameters are excluded


# --- runtime on one rank (local hand-overs, no transfers) ------------------------------------------------------


def _one_rank_schedule(split: bool):
    """Two stages on one rank, microbatches one after another: every tensor is handed over locally."""
    actions = []
    for mb in range(3):
        actions += [Action.parse(f"0F{mb}"), Action.parse(f"1F{mb}")]
        if split:
            actions += [
                Action.parse(f"1I{mb}"),
                Action.parse(f"0I{mb}"),
                Action.parse(f"1W{mb}"),
                Action.parse(f"0W{mb}"),
            ]
        else:
            actions += [Action.parse(f"1B{mb}"), Action.parse(f"0B{mb}")]
    return make_schedule("local", 1, 3, [0, 0], [actions])


@pytest.mark.parametrize("kind,split,recompute", list(itertools.product(MODELS, (False, True), (False, True))))
def test_runtime_on_one_rank_matches_the_full_model(kind, split, recompute):
    config, batch = TINY[kind], 6
    schedule = _one_rank_schedule(split)
    model = build_rank_model(
        schedule, config, seed=2, microbatch_size=batch // 3, rank=0, device=torch.device("cpu"), recompute=recompute
    )
    runtime = PipelineRuntime(
        schedule, 0, model.runners, model.shapes, None, HostClock(), stash_bytes=model.stash_bytes
    )
    inputs, targets = make_batch(config, batch, 2, step=0)
    cpu = torch.device("cpu")
    record = runtime.run_step(microbatches(inputs, 3, cpu), microbatches(targets, 3, cpu))
    expected = full_model_grads(config, split_stages(build_model(config, 2), 2), batch, 2)
    for stage in (0, 1):
        for got, want in zip((p.grad for p in model.runners[stage].parameters()), expected[stage], strict=True):
            assert float((got - want).abs().max()) <= 1e-5
    assert [str(a) for a, _, _ in record.spans] == [str(a) for a in schedule.actions[0]]
    assert all(end >= start for _, start, end in record.spans)
    assert record.loss is not None and record.comm == []
    assert record.peak_stash_bytes > 0


def test_runtime_validates_the_schedule_with_pipesim_once():
    """The runtime trusts a schedule only after pipesim.semantics.validate: a bad one is refused before anything
    runs."""
    from pipesim.semantics.validate import ScheduleError

    good = _one_rank_schedule(split=False)
    rows = list(good.actions[0])
    bad_order = make_schedule("x", 1, 3, [0, 0], [[rows[2], *rows[:2], *rows[3:]]])
    model = build_rank_model(good, TINY["transformer"], seed=0, microbatch_size=2, rank=0, device=torch.device("cpu"))
    with pytest.raises(ScheduleError, match="before F"):
        PipelineRuntime(bad_order, 0, model.runners, model.shapes, None, HostClock())
    missing = make_schedule("x", 1, 3, [0, 0], [rows[:-1]])
    with pytest.raises(ScheduleError, match="missing backward"):
        PipelineRuntime(missing, 0, model.runners, model.shapes, None, HostClock())


# --- timing and profile conversions ----------------------------------------------------------------------------


def test_assemble_measured_aligns_steps_on_one_clock():
    steps = [
        [
            {"start": 100.0, "end": 110.0, "spans": [["0F0", 101.0, 103.0]], "comm": []},
            {"start": 200.0, "end": 209.0, "spans": [["0F0", 200.5, 202.0]], "comm": [["send", 1, "0F0", 203, 203.01]]},
        ],
        [
            {
                "start": 100.5,
                "end": 112.0,
                "spans": [["1F0", 104.0, 106.0]],
                "comm": [["recv", 0, "0F0", 103.5, 104.0]],
            },
            {"start": 200.2, "end": 208.0, "spans": [["1F0", 203.0, 204.0]], "comm": []},
        ],
    ]
    timeline, step_times = assemble_measured(2, "x", steps, [0.0, 0.0])
    assert step_times == [12.0, 9.0]
    by = {(s.rank, s.step): (s.start, s.end) for s in timeline.spans}
    assert by[(0, 0)] == (1.0, 3.0) and by[(1, 0)] == (4.0, 6.0) and by[(1, 1)] == (3.0, 4.0)
    assert [(c.kind, c.step) for c in timeline.comm] == [("recv", 0)]  # a send that did not block is dropped
    shifted, _ = assemble_measured(2, "x", steps, [0.0, -1.0])
    assert {(s.rank, s.step): s.start for s in shifted.spans}[(1, 0)] == pytest.approx(3.5)  # origin moves to 99.5


def test_clock_offset_estimate():
    # rank 0's clock is 5 ms ahead; one-way delays 1 ms, then a slow round trip that must be ignored
    assert offset_from_samples([(10.0, 16.0, 12.0), (20.0, 29.0, 30.0)]) == pytest.approx(5.0)


def test_resolve_backend():
    cpu = resolve_backend("auto", "auto", 2, 0, gpu_count=0)
    assert cpu.transport == "gloo" and cpu.device.type == "cpu"
    assert resolve_backend("auto", "auto", 2, 1, gpu_count=2).transport == "nccl"
    staged = resolve_backend("auto", "auto", 4, 3, gpu_count=2)
    assert staged.transport == "staged" and staged.device.index == 1
    assert resolve_backend("cuda", "gloo", 2, 0, gpu_count=1).transport == "staged"
    with pytest.raises(ValueError, match="moves CUDA tensors"):
        resolve_backend("cpu", "nccl", 2, 0, gpu_count=0)
    with pytest.raises(ValueError, match="one GPU per rank"):
        resolve_backend("cuda", "nccl", 4, 0, gpu_count=2)
    with pytest.raises(ValueError, match="no CUDA GPU"):
        resolve_backend("cuda", "auto", 2, 0, gpu_count=0)


@pytest.mark.parametrize("gpus", [0, 1, 2, 4])
@pytest.mark.parametrize("backend", ["auto", "gloo", "nccl", "staged"])
@pytest.mark.parametrize("device", ["auto", "cpu", "cuda"])
def test_launcher_and_ranks_resolve_devices_alike(device, backend, gpus, monkeypatch):
    """The launcher's check and each rank's choice are one set of rules (pipesim_executor.devices)."""
    from pipesim_executor.host import checks

    monkeypatch.setattr(checks, "gpu_probe", lambda: checks.GpuProbe(gpus))
    config = run_config(num_ranks=2, device=device, backend=backend)
    try:
        host = checks._resolve_device(config)
    except ValueError:
        with pytest.raises(ValueError):
            resolve_backend(device, backend, 2, 0, gpu_count=gpus)
        return
    rank = resolve_backend(device, backend, 2, 1, gpu_count=gpus)
    assert (rank.device.type, rank.transport) == (host.devices.device, host.devices.backend)
    # a rank reading the resolved config (what config.json records) makes the same choice again
    again = resolve_backend(host.devices.device, host.devices.backend, 2, 1, gpu_count=gpus)
    assert again == rank


def test_profile_conversions():
    measure = {
        "f": 2.0,
        "f_split": 2.2,
        "b": 4.0,
        "i": 2.5,
        "w": 2.0,
        "activation_bytes": 100.0,
        "weight_grad_bytes": 40.0,
        "input_bytes": 10.0,
        "output_bytes": 10.0,
        "param_bytes": 7.0,
    }
    plain = stage_cost(measure, split=False, recompute=False)
    assert plain.backward_ms == 4.0 and plain.forward_ms == 2.0 and 0 < plain.weight_ms < 4.0
    split = stage_cost(measure, split=True, recompute=False)
    assert split.i_ms == pytest.approx(2.5) and split.w_ms == 2.0  # the simulator sees the measured I and W
    recomputed = stage_cost({**measure, "b": 6.0}, split=False, recompute=True)
    assert recomputed.backward_ms + recomputed.forward_ms == pytest.approx(6.0)
    link = link_cost({"small_ms": 0.1, "small_bytes": 4.0, "large_ms": 1.1, "large_bytes": 4.0 + 1e6})
    assert link.transfer_ms(4.0 + 1e6) == pytest.approx(1.1) and link.transfer_ms(4.0) == pytest.approx(0.1)
    assert link_cost({"small_ms": 0.3, "small_bytes": 4.0, "large_ms": 0.2, "large_bytes": 400.0}).latency_ms == 0.2
    assert link_cost(None).transfer_ms(1e9) == 0.0


def test_run_config_is_one_config_per_concern_and_reads_old_folders():
    """config.json is nested by concern; a flat one (run folders from before) still loads; bad values refused."""
    config = run_config(
        schedule="zbv", num_ranks=2, num_microbatches=4, batch_size=8, lr=0.5, device="cpu", nnodes=1, profile=True
    )
    data = config.to_dict()
    assert set(data) == {
        *("pipeline", "model", "training", "devices", "nodes", "compute", "inject"),
        *("profile", "reference", "timeout_s"),
    }
    assert data["pipeline"]["schedule"] == "zbv" and data["training"]["lr"] == 0.5
    assert data["devices"]["device"] == "cpu"
    assert RunConfig.from_dict(data) == config
    flat = {
        "schedule": "zbv",
        "num_ranks": 2,
        "num_microbatches": 4,
        "batch_size": 8,
        "lr": 0.5,
        "device": "cpu",
        "profile": True,
        "model": {"kind": "transformer", "split_points": None},
    }
    assert RunConfig.from_dict(flat) == config
    assert config.microbatch_size == 2
    for bad, message in [
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"batch_size": -4}, "batch_size must be a positive integer"),
        ({"lr": float("nan")}, "lr must be a finite number > 0"),
        ({"batch_size": 6}, "does not split into 4"),
        ({"speed": 3}, "unknown run config field 'speed'"),
        ({"device": "tpu"}, "valid: auto, cpu, cuda"),
    ]:
        with pytest.raises(ValueError, match=message):
            run_config(**{"num_microbatches": 4, "batch_size": 8, **bad})
