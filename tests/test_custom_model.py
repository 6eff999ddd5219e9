"""Your own model (`--model package.module:factory`), bf16 mixed precision, and the shipped GPT example:
single-process tests (the torchrun ones are in tests/test_data_parallel.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from pipesim.ir import Action, make_schedule
from pipesim_executor import processes
from pipesim_executor.config import ModelConfig, run_config
from pipesim_executor.custom_model import load_custom_model, model_verdict, parse_spec
from pipesim_executor.host import cli, phase
from pipesim_executor.host.model_check import check_custom_model
from pipesim_executor.rank.model import build_model, loss_fn, make_batch, model_parts, split_stages
from pipesim_executor.rank.runtime import PipelineRuntime, build_rank_model, microbatches
from pipesim_executor.rank.stage import StageRunner
from pipesim_executor.rank.timing import HostClock

GPT = "examples.gpt_small:build"
TINY_GPT = "examples.gpt_small:build_tiny"
HELPERS = "tests.helpers.custom_models"
CPU = torch.device("cpu")
BF16_LOSS_TOLERANCE = 0.01  # relative, per step, bf16 against fp32 (README; measured 0.02% on the GPT example)


@pytest.mark.parametrize(
    "spec,match",
    [
        ("examples.gpt_small", "must look like"),
        ("os.system('x'):build", "must look like"),
        ("examples.gpt_small:build()", "must look like"),
        ("no_such_package.mod:build", "cannot import module"),
        ("examples.gpt_small:missing", "has no attribute 'missing'"),
        (f"{HELPERS}:NOT_CALLABLE", "not callable"),
        (f"{HELPERS}:wrong_return", "must return"),
        (f"{HELPERS}:not_modules", "list of nn.Module"),
        (f"{HELPERS}:raises", "factory raised RuntimeError: the factory broke"),
        (f"{HELPERS}:bad_batch", "make_batch must return"),
    ],
)
def test_bad_specs_are_one_clear_error(spec, match):
    """What the check's child process reports (pipesim_executor.custom_model.model_verdict, run here in-process for
    speed: tests/test_model_check.py runs it as the launcher does, in a child)."""
    with pytest.raises(ValueError, match=match):
        parse_spec(spec)
        model_verdict(spec)


def test_the_launchers_check_reports_the_childs_verdict():
    with pytest.raises(ValueError, match="factory raised RuntimeError: the factory broke") as caught:
        check_custom_model(f"{HELPERS}:raises", 2, None)
    assert "\n" not in str(caught.value)


def test_spec_text_is_checked_by_the_config_without_importing():
    assert parse_spec("a.b_c:d") == ("a.b_c", "d")
    with pytest.raises(ValueError, match="must look like"):
        ModelConfig(kind="custom", spec="a b:c")
    with pytest.raises(ValueError, match="needs spec"):
        ModelConfig(kind="custom")
    with pytest.raises(ValueError, match="needs spec"):
        ModelConfig(kind="transformer", spec="a:b")


def test_too_few_layers_and_split_points_are_refused():
    with pytest.raises(ValueError, match="has 3 layers but the schedule has 4 stages"):
        check_custom_model(f"{HELPERS}:mlp", 4, None)
    assert check_custom_model(f"{HELPERS}:mlp", 2, (1,)).units == 3
    with pytest.raises(ValueError, match="split_points"):
        check_custom_model(f"{HELPERS}:mlp", 2, (3,))


def _torchrun_spy(started: list):
    """Popen that records every start but the model check's own child (pipesim_executor.host.model_check), which
    runs."""
    real = subprocess.Popen

    def spy(argv, *args, **kwargs):
        if "pipesim_executor.custom_model" in argv:
            return real(argv, *args, **kwargs)
        started.append(argv)

    return spy


CLI_BAD = {
    "missing module": ["--model", "nope_pkg.mod:build"],
    "missing factory": ["--model", "examples.gpt_small:nope"],
    "wrong return": ["--model", f"{HELPERS}:wrong_return"],
    "too few layers": ["--model", f"{HELPERS}:mlp", "--ranks", "4"],
    "size flags on a custom model": ["--model", GPT, "--layers", "3"],
    "bad spec": ["--model", "gpt small"],
    "data parallel 0": ["--data-parallel", "0"],
    "unknown dtype": ["--dtype", "fp8"],
    "reference with data parallel": ["--data-parallel", "2", "--reference"],
}


@pytest.mark.parametrize("case", sorted(CLI_BAD))
def test_cli_refuses_before_anything_starts(case, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    started = []
    monkeypatch.setattr(phase.subprocess, "Popen", _torchrun_spy(started))
    monkeypatch.syspath_prepend(str(processes.REPO_ROOT))
    exit_info = cli.main(["run", "--device", "cpu", *CLI_BAD[case]])
    assert exit_info == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m executor: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert started == [] and list(tmp_path.iterdir()) == []


def test_launcher_imports_no_torch_without_a_custom_model():
    probe = (
        "import sys; from pipesim_executor.host import checks, cli; from pipesim_executor.config import run_config; "
        "checks.check_run(run_config(device='cpu')); print('torch' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=processes.REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_torchrun_runs_replicas_times_ranks_processes(tmp_path):
    config = run_config(num_ranks=2, data_parallel=3, device="cpu", batch_size=4, num_microbatches=2)
    command = processes.torchrun_command(config, tmp_path / "r", port=1234)
    assert command[command.index("--nproc-per-node") + 1] == "6"


# --- the GPT example ---------------------------------------------------------------------------------------------


def test_gpt_small_is_a_list_of_layers_that_learns_in_one_process():
    config = ModelConfig(kind="custom", spec=GPT)
    layers, batch_fn, loss = model_parts(config, 0)
    assert len(layers) == 6  # embeddings, 4 blocks, head
    same = build_model(config, 0)
    assert all(
        torch.equal(a, b)
        for x, y in zip(layers, same, strict=True)
        for a, b in zip(x.parameters(), y.parameters(), strict=True)
    )
    inputs, targets = batch_fn(8, 0, 0)
    assert inputs.shape == (8, 32) and torch.equal(make_batch(config, 8, 0, 0)[1], targets)
    model = torch.nn.Sequential(*layers)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        value = loss(model(inputs), targets)
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
        losses.append(float(value.detach()))
    assert losses[-1] < 0.8 * losses[0]


def _one_rank_schedule(split: bool, microbatches_: int = 2):
    actions = []
    for mb in range(microbatches_):
        actions += [Action.parse(f"0F{mb}"), Action.parse(f"1F{mb}")]
        actions += (
            [Action.parse(f"1I{mb}"), Action.parse(f"0I{mb}"), Action.parse(f"1W{mb}"), Action.parse(f"0W{mb}")]
            if split
            else [Action.parse(f"1B{mb}"), Action.parse(f"0B{mb}")]
        )
    return make_schedule("local", 1, microbatches_, [0, 0], [actions])


def _runtime(config: ModelConfig, split: bool, dtype: str, batch: int = 4, recompute: bool = False):
    schedule = _one_rank_schedule(split)
    model = build_rank_model(
        schedule, config, seed=1, microbatch_size=batch // 2, rank=0, device=CPU, dtype=dtype, recompute=recompute
    )
    runtime = PipelineRuntime(
        schedule,
        0,
        model.runners,
        model.shapes,
        None,
        HostClock(),
        dtype=model.wire_dtype,
        stash_bytes=model.stash_bytes,
    )
    return model, runtime


@pytest.mark.parametrize("split", [False, True])
def test_gpt_small_pipelined_in_one_process_matches_the_full_model(split):
    config = ModelConfig(kind="custom", spec=TINY_GPT)
    model, runtime = _runtime(config, split, "fp32")
    inputs, targets = make_batch(config, 4, 1, 0)
    runtime.run_step(microbatches(inputs, 2, CPU), microbatches(targets, 2, CPU))
    stages = split_stages(build_model(config, 1), 2)
    out = inputs
    for stage in stages:
        out = stage(out)
    loss_fn(config)(out, targets).backward()
    for s in (0, 1):
        for got, want in zip(model.runners[s].parameters(), stages[s].parameters(), strict=True):
            assert float((got.grad - want.grad).abs().max()) <= 1e-5


# --- bf16 ------------------------------------------------------------------------------------------------------


def test_bf16_split_backward_matches_bf16_full_backward():
    """Under autocast, I then W gives the weight gradients B gives (bf16 rounding apart)."""
    config = ModelConfig(kind="custom", spec=TINY_GPT)
    stages = split_stages(build_model(config, 0), 2)
    runner = StageRunner(
        1, stages[1], False, True, loss_fn(config), 0.5, autocast_dtype=torch.bfloat16, wire_dtype=torch.bfloat16
    )
    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    _, target = make_batch(config, 2, 0, 0)
    _, stash = runner.forward(x, target)
    input_grad = runner.backward(stash, None)
    assert input_grad.dtype == torch.bfloat16  # what goes back over the wire
    expected = [p.grad.clone() for p in runner.parameters()]
    for p in runner.parameters():
        p.grad = None
    _, stash = runner.forward(x, target, split=True)
    input_grad_i, work = runner.backward_input(stash, None)
    runner.backward_weight(work)
    for p, want in zip(runner.parameters(), expected, strict=True):
        assert p.grad.dtype == torch.float32  # fp32 master gradients
        assert float((p.grad - want).abs().max()) <= 0.02 * max(float(want.abs().max()), 1e-3)
    assert float((input_grad.float() - input_grad_i.float()).abs().max()) <= 0.02 * float(input_grad.abs().max())


def test_bf16_halves_the_bytes_between_stages_and_measures_the_stash_under_autocast():
    config = ModelConfig(kind="custom", spec=TINY_GPT)
    full, runtime32 = _runtime(config, False, "fp32")
    half, runtime16 = _runtime(config, False, "bf16")
    assert half.wire_dtype == torch.bfloat16 and runtime16.dtype == torch.bfloat16
    inputs, _ = make_batch(config, 2, 1, 0)
    out, _ = half.runners[0].forward(inputs)
    out32, _ = full.runners[0].forward(inputs)
    assert out.dtype == torch.bfloat16 and out.shape == out32.shape
    assert out.numel() * out.element_size() * 2 == out32.numel() * out32.element_size()
    assert all(p.dtype == torch.float32 for p in half.parameters())  # fp32 master weights
    # The stash is measured under autocast: what autograd really keeps (bf16 activations, but also the bf16
    # copies of the weights it saves per microbatch and the fp32 inputs of layer norms), so not simply half.
    assert half.stash_bytes[1][0] != full.stash_bytes[1][0]


@pytest.mark.parametrize("split,recompute", [(False, False), (True, False), (True, True)])
def test_bf16_losses_stay_within_tolerance_of_fp32(split, recompute):
    config = ModelConfig(kind="custom", spec=TINY_GPT)
    curves = {}
    for dtype in ("fp32", "bf16"):
        model, runtime = _runtime(config, split, dtype, recompute=recompute)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        losses = []
        for step in range(5):
            inputs, targets = make_batch(config, 4, 1, step)
            record = runtime.run_step(microbatches(inputs, 2, CPU), microbatches(targets, 2, CPU))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(float(record.loss))
        curves[dtype] = losses
    errors = [abs(b - a) / a for a, b in zip(curves["fp32"], curves["bf16"], strict=True)]
    assert max(errors) <= BF16_LOSS_TOLERANCE, (curves, errors)
    assert curves["bf16"] != curves["fp32"]  # autocast really ran


def test_load_custom_model_leaves_the_rng_alone():
    torch.manual_seed(5)
    before = torch.random.get_rng_state()
    load_custom_model(TINY_GPT, seed=0)
    assert torch.equal(before, torch.random.get_rng_state())


def test_ranks_can_import_a_model_from_where_the_user_launched(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = processes.run_environment(run_config(model=ModelConfig(kind="custom", spec="mine:build"), device="cpu"))
    assert str(tmp_path) in env["PYTHONPATH"].split(":")
    builtin = processes.run_environment(run_config(device="cpu"))
    assert str(tmp_path) not in builtin["PYTHONPATH"].split(":")


def test_gradient_buckets_and_when_a_stage_is_done():
    from pipesim.schedules import build_schedule
    from pipesim_executor.rank.grad_sync import buckets, last_grad_actions

    params = [torch.nn.Parameter(torch.zeros(n)) for n in (4, 4, 10, 2)]  # 16, 16, 40, 8 bytes
    cut = buckets(params, bucket_bytes=32)
    assert [[p.numel() for p in b] for b in cut] == [[2], [10], [4, 4]]  # last first; one too big alone
    assert sum(len(b) for b in buckets(params, 10**9)) == 4 and len(buckets(params, 10**9)) == 1
    zb = build_schedule("zb-h1", 2, 4)
    assert {str(a) for a in last_grad_actions(zb, 0)} == {"0W3"}
    inter = build_schedule("interleaved-1f1b", 2, 4, num_virtual_stages=2)
    done = last_grad_actions(inter, 0)
    assert sorted(done.values()) == [0, 2] and all(a.kind.value == "B" for a in done)
