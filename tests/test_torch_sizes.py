"""Every size torch builds, pipesim builds, in torch's order; where torch refuses, the reference check says why.

For each pipesim family with a torch.distributed.pipelining counterpart (the registry entry's torch_class),
over a grid of ranks, microbatches and chunks: torch's class is constructed on mocked stages (no process group).
Where it builds, pipesim's builder must build the same size and give the same compute order per rank. 1F1B is
compared with what torch runs (`Schedule1F1B._step_microbatches`, driven here with a recording stage), not with
its IR, whose last rank starts at microbatch 1 in torch 2.13.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from unittest import mock

import pytest

from pipesim.schedules import build_schedule, options_for, schedule_info
from pipesim_executor.config import run_config
from pipesim_executor.rank.reference import torch_counterparts, torch_refusal, unavailable_reason

torch_schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
from torch.distributed.pipelining.stage import PipelineStage  # noqa: E402 - after the importorskip

GRID = [(p, m) for p in (1, 2, 3, 4) for m in (1, 2, 3, 4, 5, 6, 7, 8, 9, 12)]


def _chunks(name: str) -> tuple[int, ...]:
    if not schedule_info(name).takes_chunks:
        return (2,) if name in ("zbv", "dualpipev") else (1,)
    return (2, 3)


def _torch_instance(class_name: str, p: int, m: int, chunks: int):
    stage = mock.create_autospec(PipelineStage, instance=True)
    stage.group_rank, stage.group_size, stage.num_stages, stage.submod = 0, p, p * chunks, None
    cls = getattr(torch_schedules, class_name)
    if issubclass(cls, torch_schedules.PipelineScheduleSingle):
        return cls(stage, m)
    return cls([stage] * chunks, m)


def _ir_rows(instance, p: int) -> list[list[str]]:
    """Compute actions per rank from torch's IR: idle steps dropped, overlapped pairs as their members."""
    return [
        [
            str(x)
            for a in instance.pipeline_order[r]
            if a is not None
            for x in (a.sub_actions or (a,))
            if x.computation_type.value in "FBIW"
        ]
        for r in range(p)
    ]


def _runtime_1f1b_rows(p: int, m: int) -> list[list[str]]:
    """What torch's Schedule1F1B runs on each rank: its `_step_microbatches`, with a stage that records."""
    rows = []
    for rank in range(p):
        done: list[str] = []
        stage = SimpleNamespace(
            stage_index=rank,
            get_fwd_recv_ops=lambda mb: [],
            get_fwd_send_ops=lambda mb: [],
            get_bwd_recv_ops=lambda mb: [],
            get_bwd_send_ops=lambda mb: [],
            forward_one_chunk=lambda mb, *a, done=done, rank=rank, **k: done.append(f"{rank}F{mb}"),
            backward_one_chunk=lambda mb, *a, done=done, rank=rank, **k: done.append(f"{rank}B{mb}"),
            perform_reduce_grad=lambda *a, **k: None,
        )
        runner = torch_schedules.Schedule1F1B.__new__(torch_schedules.Schedule1F1B)
        runner._stage, runner._n_microbatches, runner._num_stages, runner.scale_grads = stage, m, p, True
        runner._check_inputs = lambda *a: ([()] * m, [{}] * m)
        for name in ("_initialize_stage", "_maybe_compute_loss", "_maybe_get_loss", "_update_losses"):
            setattr(runner, name, lambda *a, **k: None)
        with (
            mock.patch.object(torch_schedules, "_batch_p2p", lambda *a, **k: []),
            mock.patch.object(torch_schedules, "_wait_batch_p2p", lambda *a, **k: None),
        ):
            runner._step_microbatches()
        rows.append(done)
    return rows


@pytest.mark.parametrize("name", sorted(torch_counterparts()))
def test_every_size_torch_builds_pipesim_builds_in_torchs_order(name):
    class_name = torch_counterparts()[name]
    built = refused = 0
    logging.disable(logging.WARNING)
    try:
        for p, m in GRID:
            for chunks in _chunks(name):
                where = f"{name} p={p} m={m} chunks={chunks}"
                reason = torch_refusal(class_name, p, p * chunks, m)
                if reason is not None:
                    refused += 1
                    assert class_name in reason, where
                    continue
                schedule = build_schedule(name, p, m, **options_for(name, num_virtual_stages=chunks))
                if name == "1f1b":
                    theirs = _runtime_1f1b_rows(p, m)
                else:
                    theirs = _ir_rows(_torch_instance(class_name, p, m, chunks), p)
                assert schedule.text_rows() == theirs, where
                built += 1
    finally:
        logging.disable(logging.NOTSET)
    assert built >= 20, f"{name}: only {built} sizes compared"


def test_torchs_1f1b_ir_differs_from_what_it_runs():
    """Why 1F1B is compared with the runtime: torch 2.13's IR starts the last rank at microbatch 1."""
    ir = _ir_rows(_torch_instance("Schedule1F1B", 2, 3, 1), 2)
    assert ir[1][0] == "1F1" and _runtime_1f1b_rows(2, 3)[1][0] == "1F0"


def test_interleaved_sizes_torch_builds_and_megatron_did_not():
    """4 ranks x 6 microbatches was refused before; torch builds it in rounds of 6."""
    assert torch_refusal("ScheduleInterleaved1F1B", 4, 8, 6) is None
    schedule = build_schedule("interleaved-1f1b", 4, 6, num_virtual_stages=2)
    assert schedule.text_rows() == _ir_rows(_torch_instance("ScheduleInterleaved1F1B", 4, 6, 2), 4)


def test_the_reference_check_asks_torch():
    """zb-h1 on 2 ranks x 5 microbatches: pipesim builds it, torch refuses; the run is told before it starts."""
    schedule = build_schedule("zb-h1", 2, 5)
    config = run_config(schedule="zb-h1", num_ranks=2, num_microbatches=5, batch_size=10, device="cpu")
    reason = unavailable_reason(config, schedule)
    assert reason is not None and "Zero bubble requires" in reason
    assert (
        unavailable_reason(
            run_config(schedule="zb-h1", num_ranks=2, num_microbatches=4, device="cpu"), build_schedule("zb-h1", 2, 4)
        )
        is None
    )


def test_dualpipev_pairs_stand_where_torchs_do():
    """pipesim's dualpipev writes torch's DualPipeV compute_only file cell for cell, OVERLAP_F_B pairs included."""
    from pipesim.io.torch_csv import schedule_to_csv
    from pipesim.semantics.lower import overlap_groups

    compared = paired = 0
    logging.disable(logging.WARNING)
    try:
        for p, m in GRID:
            if torch_refusal("ScheduleDualPipeV", p, 2 * p, m) is not None:
                continue
            rows = _torch_instance("ScheduleDualPipeV", p, m, 2).pipeline_order
            theirs = "".join(",".join("" if a is None else str(a) for a in rows[r]) + "\r\n" for r in range(p))
            schedule = build_schedule("dualpipev", p, m)
            assert schedule_to_csv(schedule) == theirs, f"p={p} m={m}"
            compared += 1
            paired += len(overlap_groups(schedule))
    finally:
        logging.disable(logging.NOTSET)
    assert compared >= 10 and paired > 0
