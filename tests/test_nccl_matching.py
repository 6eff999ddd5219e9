"""The runtime under NCCL's matching rule, on the CPU: every registered schedule at 2 and 4 ranks, fp32 and bf16.

NCCL pairs the k-th receive on a communicator with the k-th send, ignoring tags; gloo pairs by tag. The torchrun
tests run gloo, so a receiver that posts its receives in another order than its peer sends would pass them and
corrupt data on GPUs. Here each rank's real PipelineRuntime runs in a thread of this process over a fake
transport (tests/helpers/fake_transport.py) with either rule; with the FIFO rule every message must reach the
receive its tag names, and the gradients and losses must equal the tag-matched run's bit for bit.

Breakage caught: a receive order that differs from the send order while the tags still say which message is
which (`test_fifo_rule_catches_a_receive_order_that_tags_hide`: gloo's rule hides it, NCCL's does not).
"""

from __future__ import annotations

import pytest
import torch

from pipesim.ir import Schedule
from pipesim.schedules import build_schedule
from pipesim_executor.rank import runtime as runtime_module
from pipesim_executor.rank.runtime import PipelineRuntime
from tests.helpers.fake_transport import run_pipeline
from tests.helpers.sizes import registered_at

# every family that promises these sizes (tests/helpers/sizes.py), built loudly: none is skipped quietly
CASES = [(s, dtype) for world in (2, 4) for s in registered_at(world, 2 * world) for dtype in ("fp32", "bf16")]


@pytest.mark.parametrize(("schedule", "dtype"), CASES, ids=[f"{s.name}-{s.num_ranks}ranks-{d}" for s, d in CASES])
def test_fifo_matching_equals_tag_matching(schedule: Schedule, dtype: str) -> None:
    fifo_grads, fifo_losses, fifo_hub, _ = run_pipeline(schedule, dtype, "fifo")
    tag_grads, tag_losses, _, _ = run_pipeline(schedule, dtype, "tag")
    assert not fifo_hub.tag_mismatches, (
        f"{schedule.name}: under NCCL's rule these receives got another message (link, k, receive tag, send "
        f"tag): {fifo_hub.tag_mismatches[:5]}"
    )
    assert sorted(fifo_grads) == list(range(schedule.num_stages))
    assert fifo_losses == tag_losses and len(fifo_losses) == schedule.pipelines  # a loss per direction
    for stage, expected in tag_grads.items():
        for got, want in zip(fifo_grads[stage], expected, strict=True):
            assert torch.equal(got, want), f"{schedule.name} {dtype}: stage {stage} gradients differ"


def test_fifo_rule_catches_a_receive_order_that_tags_hide(monkeypatch: pytest.MonkeyPatch) -> None:
    """The check is not vacuous: a receiver that posts two messages of one link in swapped order, each still with
    its true tag, is right under gloo's rule and wrong under NCCL's, and the FIFO run says so."""
    schedule = build_schedule("1f1b", 2, 4)
    original = PipelineRuntime.__init__

    def swapped_init(self, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        self._true_tag = {}
        for src, keys in list(self._incoming.items()):
            self._true_tag.update({(src, key): tag for tag, key in enumerate(keys)})
            if len(keys) >= 2:  # post the first two in the wrong order
                self._incoming[src] = (keys[1], keys[0], *keys[2:])

    def post_with_true_tag(self) -> None:
        key = self.keys[self.next]
        shape = self.runtime.message_shape(key)
        tag = self.runtime._true_tag[(self.src, key)]
        self.posted[key] = self.runtime.transport.irecv(shape, self.runtime.dtype, self.src, tag=tag)
        self.next += 1

    monkeypatch.setattr(PipelineRuntime, "__init__", swapped_init)
    monkeypatch.setattr(runtime_module._Inbox, "_post", post_with_true_tag)
    tag_grads, _, tag_hub, _ = run_pipeline(schedule, "fp32", "tag")
    monkeypatch.undo()
    right_grads, _, _, _ = run_pipeline(schedule, "fp32", "tag")
    assert not tag_hub.tag_mismatches
    for stage, expected in right_grads.items():  # gloo's rule: the swap is invisible
        assert all(torch.equal(a, b) for a, b in zip(tag_grads[stage], expected, strict=True))
    monkeypatch.setattr(PipelineRuntime, "__init__", swapped_init)
    monkeypatch.setattr(runtime_module._Inbox, "_post", post_with_true_tag)
    try:
        fifo_grads, _, fifo_hub, _ = run_pipeline(schedule, "fp32", "fifo")
    except AssertionError as error:  # sizes differed: a real GPU would hang
        assert "was paired with a message" in str(error)
        return
    assert fifo_hub.tag_mismatches  # same sizes: a real GPU would compute on swapped data
    assert any(
        not torch.equal(a, b)
        for stage in right_grads
        for a, b in zip(fifo_grads[stage], right_grads[stage], strict=True)
    )


GLOO_CASES = [s for s in registered_at(2, 4)]


@pytest.mark.parametrize("schedule", GLOO_CASES, ids=[s.name for s in GLOO_CASES])
def test_every_receive_posted_at_the_start_gives_the_same_step(schedule: Schedule) -> None:
    """Over gloo a rank posts every receive of its step when the step starts (`ahead_for`: posting mid-step waited
    on gloo's I/O thread for milliseconds on busy cores): the step computes what a window of 2 computes, under
    either matching rule."""
    assert runtime_module.ahead_for("gloo") is None and runtime_module.ahead_for("staged") is None
    assert runtime_module.ahead_for("nccl") == 4
    window_grads, window_losses, _, _ = run_pipeline(schedule, "fp32", "tag")
    for matching in ("tag", "fifo"):
        all_grads, all_losses, hub, _ = run_pipeline(schedule, "fp32", matching, lookahead=None)
        assert not hub.tag_mismatches and all_losses == window_losses
        for stage, expected in window_grads.items():
            assert all(torch.equal(a, b) for a, b in zip(all_grads[stage], expected, strict=True))
