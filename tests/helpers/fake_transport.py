"""In-process ranks: each rank's real PipelineRuntime in its own thread, joined by a fake transport.

Two matching rules, the two the executor meets:

* "tag" (gloo): a receive takes the message sent on its link with its own tag;
* "fifo" (NCCL): the k-th receive posted on a link takes the k-th message sent on it, whatever the tags. A
  receive whose order differs from the sender's gets another message's bytes: silent corruption on a real GPU
  when the sizes agree, a hang when they do not. Here a size or dtype mismatch raises at once, naming both, and
  every pairing whose tags disagree is recorded (`Hub.tag_mismatches`) though the data still flows as NCCL's
  would.

`run_pipeline` runs one training step of a schedule on such ranks (the models built first, in this thread: their
weights come from the seeded global RNG, which threads share). `Hub.fail` wakes every waiting rank when one
thread fails, so a broken case ends at once instead of each rank waiting for its timeout.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from pipesim.ir import Schedule
from pipesim_executor.config import ModelConfig
from pipesim_executor.rank.runtime import PipelineRuntime, build_rank_model, microbatches

WAIT_S = 60.0  # generous: the machine is shared; a correct run never waits more than a moment
SEED = 11
CPU = torch.device("cpu")


class Hub:
    """The wires between in-process ranks: per directed link, the messages in the order they were sent."""

    def __init__(self, matching: str) -> None:
        if matching not in ("fifo", "tag"):
            raise ValueError(f"matching must be fifo or tag, got {matching!r}")
        self.matching = matching
        self.cond = threading.Condition()
        self.sent: dict[tuple[int, int], list[tuple[int, torch.Tensor]]] = defaultdict(list)
        self.taken: dict[tuple[int, int], set[int]] = defaultdict(set)  # indices of sent messages received
        self.posted: dict[tuple[int, int], int] = defaultdict(int)  # receives posted per link (fifo's k)
        self.tag_mismatches: list[tuple[tuple[int, int], int, int, int]] = []  # (link, k, receive tag, send tag)
        self.failure: str | None = None

    def fail(self, reason: str) -> None:
        with self.cond:
            self.failure = self.failure or reason
            self.cond.notify_all()

    def endpoint(self, rank: int, staged: bool = False) -> FakeTransport:
        return FakeTransport(self, rank, staged)


class FakeSend:
    """A send is buffered at once (its bytes copied), so it is always complete."""

    def is_completed(self) -> bool:
        return True

    def wait(self) -> None:
        pass


class FakeRecv:
    def __init__(self, hub: Hub, link: tuple[int, int], k: int, tag: int, shape: torch.Size, dtype: torch.dtype):
        self.hub, self.link, self.k, self.tag, self.shape, self.dtype = hub, link, k, tag, shape, dtype

    def _pick(self) -> int | None:
        sent = self.hub.sent[self.link]
        if self.hub.matching == "fifo":
            return self.k if len(sent) > self.k else None
        for index, (tag, _) in enumerate(sent):
            if tag == self.tag and index not in self.hub.taken[self.link]:
                return index
        return None

    def wait(self) -> torch.Tensor:
        hub = self.hub
        with hub.cond:
            index = None
            if not hub.cond.wait_for(lambda: hub.failure is not None or self._pick() is not None, timeout=WAIT_S):
                hub.fail(f"link {self.link}: receive {self.k} (tag {self.tag}) got no message in {WAIT_S:g} s")
            if hub.failure is not None:
                raise RuntimeError(f"another rank failed: {hub.failure}")
            index = self._pick()
            assert index is not None
            hub.taken[self.link].add(index)
            send_tag, tensor = hub.sent[self.link][index]
        if send_tag != self.tag:
            with hub.cond:
                hub.tag_mismatches.append((self.link, self.k, self.tag, send_tag))
        if tensor.shape != self.shape or tensor.dtype != self.dtype:
            reason = (
                f"link {self.link}: receive {self.k} posted for {tuple(self.shape)} {self.dtype} was paired with "
                f"a message of {tuple(tensor.shape)} {tensor.dtype} ({hub.matching} matching)"
            )
            hub.fail(reason)
            raise AssertionError(reason)
        return tensor.clone()


class FakeTransport:
    """One rank's end of the hub, with Transport's interface. `staged` counts the copies to and from host memory
    the runtime asks for (`copies`), each with the clock mark count at that moment (`marks` of the rank's clock)."""

    def __init__(self, hub: Hub, rank: int, staged: bool) -> None:
        self.hub, self.rank, self.staged = hub, rank, staged
        self.device = self.wire_device = torch.device("cpu")
        self.copies: list[tuple[str, int]] = []  # (to_wire | to_compute | isend_copy, clock marks so far)
        self.clock: CountingClock | None = None

    def _note(self, what: str) -> None:
        if self.staged:
            self.copies.append((what, self.clock.count if self.clock else -1))

    def to_wire(self, tensor: torch.Tensor) -> torch.Tensor:
        self._note("to_wire")
        return tensor.detach().clone() if self.staged else tensor

    def to_compute(self, tensor: torch.Tensor) -> torch.Tensor:
        self._note("to_compute")
        return tensor

    def isend(self, tensor: torch.Tensor, dst: int, tag: int) -> FakeSend:
        link = (self.rank, dst)
        with self.hub.cond:
            self.hub.sent[link].append((tag, tensor.detach().clone()))
            self.hub.cond.notify_all()
        return FakeSend()

    def irecv(self, shape: torch.Size, dtype: torch.dtype, src: int, tag: int) -> FakeRecv:
        link = (src, self.rank)
        with self.hub.cond:
            k = self.hub.posted[link]
            self.hub.posted[link] += 1
        return FakeRecv(self.hub, link, k, tag, torch.Size(shape), dtype)


class CountingClock:
    """A host clock whose marks are counted (where a copy falls among an action's marks)."""

    def __init__(self) -> None:
        self.count = 0
        self.marks: list[int] = []

    def begin_step(self) -> None:
        pass

    def mark(self) -> int:
        self.count += 1
        return self.count

    def mark_when_done(self, work: Any) -> None:
        return None

    def finish_step(self) -> None:
        pass

    def resolve(self, marker: int) -> float:
        return float(marker)


def run_ranks(num_ranks: int, work: Callable[[int], Any], hub: Hub) -> list[Any]:
    """`work(rank)` in one thread per rank; every result, or the first failure raised here."""
    results: list[Any] = [None] * num_ranks
    errors: list[BaseException] = []

    def target(rank: int) -> None:
        try:
            results[rank] = work(rank)
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            errors.append(error)
            hub.fail(f"rank {rank}: {type(error).__name__}: {error}")

    threads = [threading.Thread(target=target, args=(rank,), daemon=True) for rank in range(num_ranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT_S * 2)
    if any(thread.is_alive() for thread in threads):
        hub.fail("a rank thread did not end")
        raise TimeoutError(f"rank threads still running after {2 * WAIT_S:g} s: {hub.failure}")
    if errors:
        raise errors[0]
    return results


def _config(world: int) -> ModelConfig:
    """Enough layers for two stages per rank (8 units at 4 ranks)."""
    return ModelConfig.of_transformer(
        vocab_size=24, hidden_size=8, num_heads=2, ffn_size=16, num_layers=2 * world - 2, seq_len=4
    )


def run_pipeline(
    schedule: Schedule, dtype: str, matching: str, staged: bool = False, lookahead: int | None = 2
) -> tuple[dict, list, Hub, list[tuple]]:
    """One training step of `schedule` on in-process ranks: every stage's gradients, the losses, the hub, and per
    rank (its StepRecord, its transport)."""
    config = _config(schedule.num_ranks)
    batch_size = 2 * schedule.num_microbatches * schedule.pipelines  # DualPipe: each direction its microbatches
    hub = Hub(matching)

    # built here, one after another: a model's weights come from the global RNG (seeded), which threads share
    models = [
        build_rank_model(schedule, config, seed=SEED, microbatch_size=2, rank=rank, device=CPU, dtype=dtype)
        for rank in range(schedule.num_ranks)
    ]

    def rank_work(rank: int) -> tuple[dict, float | None, object]:
        model = models[rank]
        transport, clock = hub.endpoint(rank, staged), CountingClock()
        transport.clock = clock
        runtime = PipelineRuntime(
            schedule, rank, model.runners, model.shapes, transport, clock, dtype=model.wire_dtype, lookahead=lookahead
        )
        inputs, targets = model.make_batch(batch_size, SEED, 0)
        m = schedule.num_microbatches * schedule.pipelines
        first = any(r.is_first for r in model.runners.values())  # a chain's first or last stage (two in DualPipe)
        last = any(r.is_last for r in model.runners.values())
        record = runtime.run_step(
            microbatches(inputs, m, CPU) if first else None,
            microbatches(targets, m, CPU) if last else None,
        )
        grads = {s: [p.grad.clone() for p in r.parameters()] for s, r in model.runners.items()}
        return grads, None if record.loss is None else float(record.loss), (record, transport)

    results = run_ranks(schedule.num_ranks, rank_work, hub)
    grads = {s: g for rank_grads, _, _ in results for s, g in rank_grads.items()}
    losses = [loss for _, loss, _ in results if loss is not None]
    return grads, losses, hub, [extra for _, _, extra in results]
