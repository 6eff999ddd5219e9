"""The mixture-of-experts Transformer (`executor run --model moe`) and its expert parallelism.

In process: a token's output depends on that token alone (no capacity, no batch-wide term), so microbatches and
expert placement cannot change the result; top-k routing mixes exactly the chosen experts; an expert's gradient
is divided by the replicas and kept out of the data-parallel all-reduce; the configs and the launcher's checks.
Under torchrun (2 pipeline ranks x 2 replicas, 4 processes; tiny sizes, 3 steps): training equals one process's
with every expert local, within 1e-4, and every all-to-all is a span on its rank's link lane; 1f1b-overlap,
its pairs run at once, trains as 1f1b.
"""

from __future__ import annotations

import pytest
import torch

from pipesim.cost.links import LinkCost
from pipesim.cost.model import CostModel
from pipesim.io.formats import read_json, timeline_from_dict
from pipesim.ir import ActionKind
from pipesim.records import LINK_KINDS
from pipesim.schedules import build_schedule
from pipesim_executor.config import ModelConfig, RunConfig, run_config
from pipesim_executor.host.checks import check_run
from pipesim_executor.rank import grad_sync
from pipesim_executor.rank.grad_sync import GradSync
from pipesim_executor.rank.model import model_parts
from pipesim_executor.rank.moe import A2A, MoEFeedForward, moe_modules
from pipesim_executor.rank.profile import stage_cost

TINY = ModelConfig.of_moe(num_layers=2, hidden_size=32, ffn_size=64, num_heads=2, seq_len=16, vocab_size=64)
TRAIN = {"num_ranks": 2, "num_microbatches": 4, "batch_size": 8, "steps": 3, "warmup_steps": 0, "lr": 0.5}
TOLERANCE = 1e-4  # losses against one process (fp32)


# --- in process --------------------------------------------------------------------------------------------------


def test_a_tokens_output_depends_on_that_token_alone():
    """The whole batch at once and the batch in two halves give the same outputs: what a microbatched,
    expert-parallel run relies on to equal one process (a capacity limit or a batch-wide routing term breaks it)."""
    layers, make_batch, _ = model_parts(TINY, seed=3)
    model = torch.nn.Sequential(*layers)
    inputs, _ = make_batch(8, 3, 0)
    with torch.no_grad():
        whole = model(inputs)
        halves = torch.cat([model(inputs[:4]), model(inputs[4:])])
    assert torch.allclose(whole, halves, atol=1e-6, rtol=0)


@pytest.mark.parametrize("top_k", [1, 2])
def test_each_token_mixes_its_chosen_experts_by_their_gates(top_k):
    torch.manual_seed(0)
    block = MoEFeedForward(8, 16, num_experts=4, top_k=top_k)
    x = torch.randn(2, 5, 8)
    with torch.no_grad():
        out = block(x).reshape(-1, 8)
        tokens = x.reshape(-1, 8)
        probs = torch.softmax(block.router(tokens), dim=-1)
        for t, token in enumerate(tokens):
            gates, chosen = probs[t].topk(top_k)
            gates = gates / gates.sum() if top_k > 1 else gates  # top-1 keeps its probability (Switch's)
            expected = sum(g * block.experts[int(e)](token) for g, e in zip(gates, chosen, strict=True))
            assert torch.allclose(out[t], expected, atol=1e-6), t
    assert len(moe_modules([block])) == 1


class _Runner:
    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module

    def parameters(self) -> list[torch.nn.Parameter]:
        return list(self.module.parameters())


class _Clock:
    def mark(self) -> float:
        return 0.0

    def mark_when_done(self, work: object) -> None:
        return None


class _Done:
    def is_completed(self) -> bool:
        return True

    def wait(self) -> None:
        return None


def test_an_experts_gradient_is_divided_by_the_replicas_and_never_all_reduced(monkeypatch):
    """An expert held by one process already sums every replica's tokens' gradients: divided by D it is the
    global batch's; all-reduced as well, it would be counted D times over."""
    reduced: list[int] = []

    def all_reduce(tensor, group=None, async_op=False):
        reduced.append(tensor.numel())
        tensor.mul_(2)  # two equal replicas
        return _Done()

    monkeypatch.setattr(grad_sync.dist, "all_reduce", all_reduce)
    stage = torch.nn.Sequential(torch.nn.Linear(4, 4, bias=False), torch.nn.Linear(4, 4, bias=False))
    shared, alone = stage.parameters()
    for param in (shared, alone):
        param.grad = torch.ones_like(param)
    sync = GradSync(build_schedule("1f1b", 2, 2), 0, {0: _Runner(stage)}, None, replicas=2, alone=[alone])
    last = [a for a in build_schedule("1f1b", 2, 2).actions[0] if a.kind is ActionKind.BACKWARD][-1]
    sync.after(last, _Clock())
    sync.finish(_Clock(), [])
    assert reduced == [shared.numel()]
    assert torch.equal(shared.grad, torch.ones(4, 4)) and torch.equal(alone.grad, torch.full((4, 4), 0.5))


def test_a_profiled_stage_prices_its_all_to_alls_apart_from_its_compute():
    """F of 5 ms waited 2 ms in its two exchanges, B of 9 ms 2 ms in its two: one exchange is 1 ms on the link,
    and the passes compute 3 and 7 ms; an action alone then takes what it measured."""
    measure = {"f": 5.0, "b": 9.0, "f_split": 5.0, "i": 6.0, "w": 3.0, "a2a_f": 2.0, "a2a_b": 2.0, "moe_layers": 2}
    measure.update(activation_bytes=1.0, weight_grad_bytes=1.0, input_bytes=1.0, output_bytes=1.0, param_bytes=1.0)
    stage = stage_cost(measure, split=False, recompute=False)
    assert (stage.a2a_ms, stage.moe_layers, stage.forward_ms, stage.backward_ms) == (1.0, 2, 3.0, 7.0)
    cost = CostModel(stages=(stage,), links=(LinkCost(),))
    assert cost.duration_ms(0, ActionKind.FORWARD) == 5.0 and cost.duration_ms(0, ActionKind.BACKWARD) == 9.0
    dense = stage_cost({**measure, "a2a_f": 0.0, "a2a_b": 0.0}, split=False, recompute=False)
    assert (dense.a2a_ms, dense.forward_ms) == (0.0, 5.0)


def test_the_moe_model_reads_back_from_its_config_section():
    config = run_config(**TRAIN, model=ModelConfig.of_moe(experts=8, top_k=1, num_layers=2), device="cpu")
    back = RunConfig.from_dict(config.to_dict())
    assert back.model == config.model and back.model.moe.experts == 8 and back.model.moe.top_k == 1
    assert back.model.num_units == 4


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: check_run(run_config(**TRAIN, model=ModelConfig.of_moe(experts=3), data_parallel=2, device="cpu")),
         ["--experts 3", "--data-parallel 2"]),
        (lambda: ModelConfig.of_moe(experts=2, top_k=3), ["top_k 3", "2 experts"]),
    ],
)  # fmt: skip
def test_experts_that_cannot_be_placed_are_refused_in_one_line(make, words):
    with pytest.raises(ValueError) as refused:
        make()
    message = str(refused.value)
    assert "\n" not in message and all(word in message for word in words), message


# --- torchrun ------------------------------------------------------------------------------------------------------


def _run(tmp_path, name, **flags):
    from pipesim_executor.host import launch

    config = run_config(**{**TRAIN, **flags}, device="cpu", timeout_s=400)
    result = launch.run(config, runs_root=tmp_path, name=name)
    assert result.status == "ok", result.message
    return config, read_json(tmp_path / name / "measured.json")


@pytest.fixture(scope="module")
def expert_parallel_1f1b(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("moe"), "moe", schedule="1f1b", model=TINY, data_parallel=2)


@pytest.mark.torchrun
@pytest.mark.timeout(900)
def test_expert_parallel_training_equals_one_process_with_every_expert_local(expert_parallel_1f1b):
    from pipesim_executor.rank.single import reference_losses

    config, measured = expert_parallel_1f1b
    expected = reference_losses(config)
    difference = max(abs(a - b) for a, b in zip(measured["losses"], expected, strict=True))
    print(f"max |loss - one process's| = {difference:.3g} over {len(expected)} steps")
    assert len(measured["losses"]) == 3 and difference <= TOLERANCE, (measured["losses"], expected)


@pytest.mark.torchrun
@pytest.mark.timeout(900)
def test_every_all_to_all_is_a_span_on_its_ranks_link_lane(expert_parallel_1f1b):
    """Each F and B of a stage with MoE blocks runs a dispatch and a combine per block: two spans each, of kind
    "a2a" (the simulator's link-lane kind), peer -1, within the action's own span, on every replica."""
    config, measured = expert_parallel_1f1b
    timeline = timeline_from_dict(measured)
    assert A2A in LINK_KINDS
    layers, _, _ = model_parts(TINY, config.training.seed)
    bounds = [0, *measured["meta"]["split_points"], len(layers)]  # one stage per rank
    blocks = {rank: len(moe_modules(layers[bounds[rank] : bounds[rank + 1]])) for rank in range(2)}
    assert all(blocks.values())
    for span in timeline.spans:
        a2a = [
            c
            for c in timeline.comm
            if c.kind == A2A
            and (c.rank, c.replica, c.step, c.action) == (span.rank, span.replica, span.step, span.action)
        ]
        assert len(a2a) == 2 * blocks[span.rank], span
        assert all(c.peer == -1 and span.start <= c.start <= c.end <= span.end for c in a2a), span


@pytest.mark.torchrun
@pytest.mark.timeout(900)
def test_1f1b_overlap_runs_its_pairs_at_once_and_trains_as_1f1b(expert_parallel_1f1b, tmp_path):
    """Each (F, B) pair runs on two threads, each member's all-to-alls in their own group, so one member's
    exchange is in flight while the other computes; the training is 1F1B's all the same."""
    _, plain = expert_parallel_1f1b
    _, overlapped = _run(tmp_path, "overlap", schedule="1f1b-overlap", model=TINY, data_parallel=2, profile=True)
    assert overlapped["losses"] == pytest.approx(plain["losses"], abs=TOLERANCE)
    assert overlapped["meta"]["overlap_groups"] and "at once" in overlapped["meta"]["overlap"]
    # profiled: each stage's all-to-all priced apart from its compute, so the prediction draws the exchanges on
    # the link lane and lays each pair out as it ran, at once
    cost = read_json(tmp_path / "overlap" / "cost.json")
    assert all(stage["a2a_ms"] > 0 for stage in cost["stages"])
    simulated = timeline_from_dict(read_json(tmp_path / "overlap" / "simulated.json"))
    assert any(c.kind == A2A for c in simulated.comm) and simulated.meta["overlap_groups"]
    timeline = timeline_from_dict(overlapped)
    assert {c.action.kind for c in timeline.comm if c.kind == A2A} == {ActionKind.FORWARD, ActionKind.BACKWARD}
