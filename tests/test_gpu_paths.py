"""The GPU-only paths, checked on the CPU: staged copies, ranks sharing a GPU, NCCL's teardown barrier.

* Staged mode (ranks share a GPU, transfers through host memory): the copy of an action's output to host memory
  and of its input back to the GPU are inside that action's span, once each; the link then carries, and the
  profile prices, the host-to-host part alone. Before, the device-to-host copy sat after the span: the dispatch
  gap (a median over every action of the rank, most of which send nothing) and the link's ping-pong both held it.
* Ranks taking turns on one GPU are simulated as sharing one device (processor sharing, as CPU ranks share
  cores), and the prediction says so.
* The teardown barrier on an NCCL default group names the rank's GPU.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.cost.model import CostModel, Provenance
from pipesim.cost.runtime import RankRuntime
from pipesim.schedules import build_schedule
from pipesim.semantics.lower import comm_plan
from pipesim_executor.host.predict import predict_step, sharing_of
from pipesim_executor.rank import teardown
from pipesim_executor.rank.calibrate import shared_slots, sharing_note
from tests.helpers.fake_transport import run_pipeline


@pytest.mark.parametrize("name", ["1f1b", "zbv", "interleaved-1f1b"])
def test_staged_copies_are_inside_the_spans_of_the_actions_they_serve(name: str) -> None:
    """Every remote message is copied to host memory once, inside its producer's span, and back once, inside
    its consumer's span (breakage caught: a copy outside the span, or twice)."""
    schedule = build_schedule(name, 2, 4, **({"num_virtual_stages": 2} if name == "interleaved-1f1b" else {}))
    _, _, _, ranks = run_pipeline(schedule, "fp32", "fifo", staged=True)
    plan = comm_plan(schedule)
    for rank, (record, transport) in enumerate(ranks):
        remote_out = sum(len(keys) for src, keys in plan.incoming(1 - rank).items() if src == rank)
        remote_in = sum(len(keys) for keys in plan.incoming(rank).values())
        kinds = [what for what, _ in transport.copies]
        assert kinds.count("to_wire") == remote_out and kinds.count("to_compute") == remote_in, rank
        spans = [(start, end) for _, start, end in record.spans]
        for what, count in transport.copies:
            assert any(start <= count < end for start, end in spans), f"rank {rank}: {what} outside every span"


def test_staged_ranks_share_their_gpus_as_cpu_ranks_share_cores() -> None:
    assert shared_slots("cuda", 2, gpus=1) == 1  # 2 ranks, 1 GPU: one runs at full speed at a time
    assert shared_slots("cuda", 4, gpus=2) == 2
    assert shared_slots("cuda", 2, gpus=2) is None  # a GPU each (nccl): no sharing
    assert shared_slots("cuda", 8, gpus=8) is None
    note = sharing_note("cuda", 2, 1)
    assert "take turns on 1 GPU" in note and "processor sharing" in note
    assert sharing_note("cuda", 2, None) is None
    assert "core" in sharing_note("cpu", 4, 2)


def test_the_prediction_simulates_a_shared_gpu_and_says_so() -> None:
    """Two ranks on one GPU: the prediction is slower than with a GPU each (at most one computes at full speed)
    and carries the profile's words for it."""
    schedule = build_schedule("1f1b", 2, 4)
    note = sharing_note("cuda", 2, 1)
    own = CostModel.uniform()
    shared = replace(
        CostModel.uniform(),
        runtime=RankRuntime(shared_cores=1),
        provenance=Provenance(meta={"in_situ": {"sharing": note}}),
    )
    alone, together = predict_step(schedule, own), predict_step(schedule, shared)
    assert alone.sharing is None and together.sharing == note
    assert together.predicted_step_ms > alone.predicted_step_ms * 1.2
    assert (
        sharing_of(replace(CostModel.uniform(), runtime=RankRuntime(shared_cores=2)))
        == "ranks share 2 slot(s): processor sharing"
    )


class _FakeDist:
    def __init__(self, backend: str) -> None:
        self.backend, self.barriers, self.destroyed = backend, [], False

    def is_initialized(self) -> bool:
        return True

    def get_backend(self) -> str:
        return self.backend

    def barrier(self, **kwargs) -> None:
        self.barriers.append(kwargs)

    def destroy_process_group(self) -> None:
        self.destroyed = True


@pytest.mark.parametrize(("backend", "expected"), [("nccl", {"device_ids": [3]}), ("gloo", {})])
def test_teardown_barrier_names_the_rank_gpu_on_nccl(monkeypatch: pytest.MonkeyPatch, backend, expected) -> None:
    """On NCCL the barrier gets the rank's current GPU (torch would guess one and warn); gloo gets nothing."""
    import torch

    fake = _FakeDist(backend)
    monkeypatch.setattr(teardown, "dist", fake)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    teardown.release_distributed(synchronise=True)
    assert fake.barriers == [expected] and fake.destroyed
    fake.barriers.clear()
    teardown.release_distributed(synchronise=False)  # after a failure: no barrier at all
    assert fake.barriers == []
