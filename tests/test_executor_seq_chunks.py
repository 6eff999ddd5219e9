"""Sequence chunks for real (Seq1F1B): the built-in Transformer run chunk by chunk trains as the unchunked one.

In-process: a Transformer cut into two stages runs each microbatch as 2 or 3 sequence chunks, forwards first
chunk first, backwards last chunk first (the lowering's order), and its gradients equal one unchunked pass's within
1e-5 (fp32), for even and balanced cuts, a full or a split backward, with or without recomputation; without the
keys' and values' gradients handed back they do not. Under torchrun: `seq1f1b --seq-chunks 2` on 2 ranks trains
as 1f1b; other models are refused in one line.
"""

from __future__ import annotations

import statistics

import pytest
import torch

from pipesim.io.formats import read_json, timeline_from_dict
from pipesim.schedules import build_schedule
from pipesim_executor.config import ModelConfig, run_config
from pipesim_executor.host.checks import check_run
from pipesim_executor.rank.model import build_model, loss_fn, make_batch, split_stages
from pipesim_executor.rank.seq_chunks import SeqChunk, SeqChunks
from pipesim_executor.rank.stage import StageRunner
from pipesim_executor.seq_cut import token_bounds
from tests.helpers.sleep_runs import launch_until_on_prediction

# attention a large share of the compute (about 0.29), so a balanced cut differs from an even one
MODEL = ModelConfig.of_transformer(num_layers=2, hidden_size=16, ffn_size=32, num_heads=2, seq_len=32, vocab_size=64)
TINY = ModelConfig.of_transformer(num_layers=4, hidden_size=32, ffn_size=64, num_heads=2, seq_len=16, vocab_size=64)
TRAIN = {"num_ranks": 2, "num_microbatches": 4, "batch_size": 8, "steps": 3, "warmup_steps": 0, "lr": 0.5}
MICROBATCHES = 2


def _gradients(bounds: tuple[int, ...] | None, split: bool = False, recompute: bool = False):
    """Every parameter's gradient and the summed loss of one step over MICROBATCHES microbatches of 4 sequences,
    on two stages in this process; chunked where `bounds` is given."""
    stages = split_stages(build_model(MODEL, seed=0), 2, (2,))
    scale = 1.0 / MICROBATCHES
    runners = [StageRunner(s, stages[s], s == 0, s == 1, loss_fn(MODEL), scale, recompute) for s in range(2)]
    tokens, targets = make_batch(MODEL, 4 * MICROBATCHES, seed=0, step=0)
    chunks = 1 if bounds is None else len(bounds) - 1
    seq = SeqChunks(chunks, bounds)
    loss = 0.0
    for m in range(MICROBATCHES):
        rows = slice(4 * m, 4 * m + 4)
        stashes = {}
        for j in range(chunks):  # forwards, first chunk first
            unit = m * chunks + j
            x, target = tokens[rows], targets[rows]
            if bounds is not None:
                x, target = seq.chunk(0, unit).cut(x), seq.chunk(0, unit).cut(target)
            for s, runner in enumerate(runners):
                on_stage = None if bounds is None else seq.chunk(s, unit)
                x, stashes[s, j] = runner.forward(x, target if s == 1 else None, split=split, chunk=on_stage)
            loss += float(x)
        for j in reversed(range(chunks)):  # backwards, last chunk first
            grad = None
            for s in (1, 0):
                if split:
                    grad, work = runners[s].backward_input(stashes.pop((s, j)), grad)
                    runners[s].backward_weight(work)
                else:
                    grad = runners[s].backward(stashes.pop((s, j)), grad)
    seq.finish()
    return [p.grad.clone() for r in runners for p in r.parameters()], loss


def _max_difference(a, b) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def unchunked():
    return _gradients(None)


def _bounds(chunks: int, cut: str) -> tuple[int, ...]:
    return token_bounds(MODEL, build_schedule("seq1f1b", 2, 2, seq_chunks=chunks, seq_cut=cut))


def test_the_balanced_cut_differs_from_the_even_one():
    assert _bounds(2, "even") == (0, 16, 32) and _bounds(2, "balanced") == (0, 18, 32)
    assert _bounds(3, "balanced") != _bounds(3, "even")


@pytest.mark.parametrize("chunks", [2, 3])
@pytest.mark.parametrize("cut", ["even", "balanced"])
@pytest.mark.parametrize("mode", ["full", "split", "recompute"])
def test_chunked_gradients_equal_the_unchunked_models(unchunked, chunks, cut, mode):
    grads, loss = _gradients(_bounds(chunks, cut), split=mode == "split", recompute=mode == "recompute")
    difference = _max_difference(grads, unchunked[0])
    print(f"{chunks} chunks, {cut}, {mode}: max |grad difference| {difference:.2e}, loss {loss - unchunked[1]:+.2e}")
    assert difference <= 1e-5
    assert loss == pytest.approx(unchunked[1], abs=1e-5)


def test_without_the_key_value_gradients_handed_back_the_gradients_differ(unchunked, monkeypatch):
    """The check above can fail: drop what later chunks leave for an earlier chunk's keys and values."""
    monkeypatch.setattr(SeqChunk, "key_value_grads", lambda self: ([], []))
    grads, loss = _gradients(_bounds(2, "even"))
    assert loss == pytest.approx(unchunked[1], abs=1e-5)  # the forward, cache and all, is still right
    assert _max_difference(grads, unchunked[0]) > 1e-3


def test_without_the_cache_the_loss_differs(unchunked, monkeypatch):
    """Attention over the chunk's own positions alone is another model."""
    own_only = lambda self, block, q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    monkeypatch.setattr(SeqChunk, "attend", own_only)
    assert abs(_gradients(_bounds(2, "even"))[1] - unchunked[1]) > 1e-3


@pytest.mark.parametrize(
    "flags, words",
    [
        ({"model": ModelConfig.of_cnn()}, ["sequence chunks", "not a cnn model", "--model transformer"]),
        ({"model": TINY, "offload": "full"}, ["sequence chunks", "--offload none"]),
    ],
)
def test_what_cannot_run_chunks_is_refused_in_one_line(flags, words):
    config = run_config(**{**TRAIN, "schedule": "seq1f1b", "seq_chunks": 2, **flags}, device="cpu")
    with pytest.raises(ValueError) as refused:
        check_run(config)
    message = str(refused.value)
    assert "\n" not in message and all(word in message for word in words), message


# --- torchrun ------------------------------------------------------------------------------------------------------


def _measured(tmp_path, name, **flags) -> dict:
    from pipesim_executor.host import launch

    config = run_config(**{**TRAIN, **flags}, model=TINY, device="cpu", timeout_s=300)
    result = launch.run(config, runs_root=tmp_path, name=name)
    assert result.status == "ok", result.message
    return read_json(tmp_path / name / "measured.json")


@pytest.mark.torchrun
def test_seq1f1b_trains_as_1f1b(tmp_path):
    plain = _measured(tmp_path, "plain", schedule="1f1b")["losses"]
    measured = _measured(tmp_path, "chunked", schedule="seq1f1b", seq_chunks=2)
    chunked = measured["losses"]
    assert measured["meta"]["seq_bounds"] == [0, 8, 16]  # 16 tokens, even
    difference = max(abs(a - b) for a, b in zip(plain, chunked, strict=True))
    print(f"1f1b {plain}\nseq1f1b {chunked}\nmax |loss difference| {difference:.2e}")
    assert chunked == pytest.approx(plain, abs=1e-4)


@pytest.mark.torchrun
def test_a_sleep_mode_seq1f1b_run_sleeps_each_chunks_share_and_lands_on_its_prediction(tmp_path):
    """Each chunk sleeps its share of F 20 / B 40 ms (here half: an even cut of a cost without attention), and the
    prediction prices the chunks so: slept whole, every action would take twice its simulated time. The tolerance
    is for a loaded machine (seen: -2.1% to +1.8% against the median at load 15-17)."""
    config = run_config(
        schedule="seq1f1b", seq_chunks=2, num_ranks=2, num_microbatches=4, compute="sleep", sleep_f=(20.0,),
        sleep_b=(40.0,), steps=5, warmup_steps=2, device="cpu", timeout_s=300,
    )  # fmt: skip
    bound = 0.08
    result, tries = launch_until_on_prediction(config, tmp_path, "sleep", bound)
    data = read_json(tmp_path / f"sleep-{len(tries) - 1}" / "measured.json")
    forwards = [s.end - s.start for s in timeline_from_dict(data).spans if s.action.kind.value == "F" and s.step == 0]
    print(f"forward spans {forwards} ms; " + "; ".join(t.describe() for t in tries))
    # 2 ranks x 4 microbatches x 2 chunks, each sleeping about 10 ms: a whole sleep would be 20 ms or more, and a
    # loaded machine makes the odd sleep late (seen: 15.7 ms), not the median
    assert len(forwards) == 2 * 8 and statistics.median(forwards) < 15.0, forwards
    assert abs(tries[-1].error) <= bound, "; ".join(t.describe() for t in tries)
