"""pipesim.semantics.lower: the one statement of what a schedule means for data (messages, producers, liveness)."""

from __future__ import annotations

import pytest

from pipesim.ir import Action, B, CommAction, CommKind, F, I, W
from pipesim.schedules import build_schedule, schedule_names
from pipesim.semantics.lower import (
    ACT,
    GRAD,
    Message,
    StashSizes,
    changes_at_start,
    comm_plan,
    needed_message,
    peer_stage,
    produced_message,
    producer_ids,
    producer_stage,
    producers_of,
    served_kinds,
    stash_change,
    transfer_message,
    transfers_of,
)
from tests.helpers.sizes import built_schedules


def test_one_f_one_b_messages_in_each_senders_order():
    plan = comm_plan(build_schedule("1f1b", 2, 3))
    assert plan.links[(0, 1)] == tuple(Message(ACT, 1, m) for m in range(3))
    assert plan.links[(1, 0)] == tuple(Message(GRAD, 0, m) for m in range(3))
    assert plan.send_tags(0) == {Message(ACT, 1, m): m for m in range(3)}
    assert plan.incoming(0) == {1: tuple(Message(GRAD, 0, m) for m in range(3))}
    assert plan.producer[Message(GRAD, 0, 2)] == Action(1, B, 2)


def test_interleaved_sends_wrap_around_from_the_last_rank():
    # 2 ranks, 2 chunks: stages 0,2 on rank 0 and 1,3 on rank 1; stage 1 -> 2 crosses back to rank 0
    schedule = build_schedule("interleaved-1f1b", 2, 2, num_virtual_stages=2)
    plan = comm_plan(schedule)
    assert sorted(plan.links) == [(0, 1), (1, 0)]
    forward_back = [m for m in plan.links[(1, 0)] if m.what == ACT]
    assert forward_back == [Message(ACT, 2, 0), Message(ACT, 2, 1)]
    # rank 0 sends in the order its own list produces: the F of stage 0 for both microbatches first
    sent = plan.links[(0, 1)]
    first_forwards = [m for m in sent if m.what == ACT][:2]
    assert first_forwards == [Message(ACT, 1, 0), Message(ACT, 1, 1)]


def test_v_shapes_hand_the_turn_of_the_v_over_locally():
    for name in ("zbv", "dualpipev"):
        schedule = build_schedule(name, 2, 4)
        plan = comm_plan(schedule)
        # stages 1 and 2 both live on rank 1: the turn of the V never crosses a link
        for keys in plan.links.values():
            assert Message(ACT, 2, 0) not in keys and Message(GRAD, 1, 0) not in keys
        assert plan.is_local(Message(ACT, 2, 0)) and plan.is_local(Message(GRAD, 1, 0))
        assert not plan.is_local(Message(ACT, 1, 0))
        # every cross-rank message is sent exactly once
        sent = [key for keys in plan.links.values() for key in keys]
        assert len(sent) == len(set(sent)) == 2 * 2 * 4  # 2 crossing boundaries x (act + grad) x 4 microbatches


def test_message_rules_at_the_ends_of_the_pipeline():
    assert produced_message(Action(3, F, 0), 4) is None  # the last stage computes the loss
    assert produced_message(Action(0, B, 0), 4) is None  # the first stage's input needs no gradient
    assert needed_message(Action(0, F, 1), 4) is None  # stage 0 reads the microbatch
    assert needed_message(Action(3, I, 1), 4) is None  # the last stage starts from the loss
    assert needed_message(Action(2, W, 1), 4) is None  # W needs only its own I
    assert produced_message(Action(2, I, 1), 4) == Message(GRAD, 1, 1)


@pytest.mark.parametrize("name", schedule_names())
def test_fast_producer_ids_agree_with_the_readable_rules(name):
    for schedule in built_schedules(name):
        actions = [a for row in schedule.actions for a in row]
        ids = producer_ids(actions, schedule.num_stages, schedule.num_microbatches, seq_chunks=schedule.seq_chunks)
        present = set(actions)
        for action, found in zip(actions, ids, strict=True):
            options = producers_of(action, schedule.num_stages, schedule.seq_chunks)
            expected = [next(a for a in alternatives if a in present) for alternatives in options]
            assert [actions[i] for i in found] == expected, (name, action)


def test_liveness_rules():
    sizes = StashSizes(stash=10.0, weight=4.0)
    assert stash_change(F, sizes) == (1, 10.0)
    assert stash_change(B, sizes) == (-1, -10.0)
    assert stash_change(I, sizes) == (-1, -6.0)  # all but what W still needs
    assert stash_change(W, sizes) == (0, -4.0)
    assert changes_at_start(F) and not any(changes_at_start(k) for k in (B, I, W))
    # a split backward frees exactly what a full one does
    assert stash_change(I, sizes)[1] + stash_change(W, sizes)[1] == stash_change(B, sizes)[1]


def test_which_stage_a_send_or_receive_talks_to():
    """The one statement of a transfer's direction (validate, torch's lowering and the trace import use it):
    activations go on to the next stage, gradients back to the previous one. Catches a flipped direction."""
    assert peer_stage(CommAction(2, CommKind.SEND_F, 0)) == 3
    assert peer_stage(CommAction(2, CommKind.RECV_F, 0)) == 1
    assert peer_stage(CommAction(2, CommKind.SEND_B, 0)) == 1
    assert peer_stage(CommAction(2, CommKind.RECV_B, 0)) == 3
    assert transfer_message(CommAction(2, CommKind.SEND_B, 5)) == Message(GRAD, 1, 5)
    assert transfer_message(CommAction(2, CommKind.RECV_F, 5)) == Message(ACT, 2, 5)
    assert served_kinds(CommAction(2, CommKind.RECV_F, 0)) == (F,)
    assert served_kinds(CommAction(2, CommKind.SEND_B, 0)) == (B, I)


@pytest.mark.parametrize("name", schedule_names())
def test_every_message_of_every_schedule_has_a_send_and_a_receive_that_agree(name):
    for schedule in built_schedules(name):
        plan = comm_plan(schedule)
        for messages in plan.links.values():
            for message in messages:
                send, recv = transfers_of(message)
                assert transfer_message(send) == transfer_message(recv) == message
                assert send.stage == producer_stage(message) == plan.producer[message].stage
                assert peer_stage(send) == recv.stage and peer_stage(recv) == send.stage
                assert plan.producer[message].kind in served_kinds(send)
                consumer = next(
                    a
                    for a in schedule.actions[plan.destination(message)]
                    if needed_message(a, schedule.num_stages) == message
                )
                assert consumer.kind in served_kinds(recv) and consumer.stage == recv.stage
