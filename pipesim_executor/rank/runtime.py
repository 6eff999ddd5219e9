"""Interprets one rank's action list of a pipesim Schedule, timing every action.

The schedule is data; this module does not re-encode any schedule as control
flow. Each rank walks `schedule.actions[rank]` in order:

* F(s, m): take the input (the microbatch on stage 0, else from stage s-1),
  forward, hand the output to stage s+1 (the last stage computes the loss).
* B(s, m): take the output gradient (unless last), backward, hand the input
  gradient to stage s-1 (unless first).
* I(s, m) / W(s, m): the split backward (see pipesim_executor.rank.stage).
* OFFLOAD / RELOAD (a schedule with memory moves): issued to the rank's copy engine when the rank ends the
  copy's gate action (pipesim.semantics.lower.memory_moves); the first backward of an offloaded microbatch waits
  for its RELOAD (pipesim_executor.rank.offload).

"Hand to" is a local hand-over when both stages live on this rank, an isend
otherwise. Receives are posted ahead: from the schedule every rank knows the
exact order in which each peer sends to it, so it posts irecvs in that order,
at most `lookahead` per peer beyond what it has consumed (None: every receive of
the step when it starts), and transfers overlap compute. Nothing synchronises
per transfer: sends are waited for at the end of the step (or reaped once
complete).

Over gloo (CPU ranks, and GPU ranks staged through host memory) every receive of a
step is posted when it starts (`ahead_for`): posting one mid-step waits on gloo's
I/O thread, which on busy cores is descheduled for milliseconds at a time. Measured
on 2 CPU cores: GPipe, 16 microbatches of examples.gpt_small on 2 ranks,
took 40-43 ms a step with 4 posted ahead (three or four 1-5 ms stalls in posting)
and 28-29 ms with all posted at the start, as the simulation predicts; 1F1B 31-33 ms
against 29-31. NCCL keeps a window of 4 (each posted receive holds a GPU buffer).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from torch.profiler import record_function

from pipesim.ir import Action, ActionKind, Schedule
from pipesim.semantics.lower import (
    ACT,
    RELOAD_SERVES,
    Message,
    StashSizes,
    changes_at_start,
    comm_plan,
    compute_only,
    memory_moves,
    needed_message,
    overlap_groups,
    produced_message,
    stash_change,
)
from pipesim.semantics.validate import validate
from pipesim_executor.rank.moe import A2A
from pipesim_executor.rank.offload import RankCopies, StepCopies
from pipesim_executor.rank.rank_model import RankModel, build_rank_model, microbatches  # noqa: F401 - imported from here
from pipesim_executor.rank.seq_chunks import SeqChunks
from pipesim_executor.rank.stage import StageRunner, WeightWork
from pipesim_executor.rank.torch_profile import action_label
from pipesim_executor.rank.transport import PendingRecv, SendHandle

F, B, I, W = ActionKind.FORWARD, ActionKind.BACKWARD, ActionKind.BACKWARD_INPUT, ActionKind.BACKWARD_WEIGHT


def schedule_links(schedule: Schedule) -> list[tuple[int, int]]:
    """The directed links that carry messages (every rank creates the same groups, in this order)."""
    return comm_plan(schedule).sorted_links()


# --- records ----------------------------------------------------------------------------------------------


@dataclass
class StepRecord:
    """One step on one rank; times are clock markers until `resolve`d."""

    spans: list[tuple[Action, Any, Any]] = field(default_factory=list)
    comm: list[tuple[str, int, Action, Any, Any]] = field(default_factory=list)
    loss: Tensor | None = None
    peak_stash_bytes: int = 0
    moved_bytes: dict[int, int] = field(default_factory=dict)  # per stage, the most bytes one OFFLOAD moved

    def resolved(self, clock: Any) -> dict[str, Any]:
        return {
            "spans": [[str(a), clock.resolve(s), clock.resolve(e)] for a, s, e in self.spans],
            "comm": [[k, p, str(a), clock.resolve(s), clock.resolve(e)] for k, p, a, s, e in self.comm],
        }


def _is_pair(group: tuple[Action, ...]) -> bool:
    """A forward and a backward (full or for inputs), the overlapped pair `_Step.run_pair` runs at once."""
    return len(group) == 2 and group[0].kind is F and group[1].kind in (B, I)


def ahead_for(transport: str) -> int | None:
    """How many receives per peer a rank keeps posted beyond those it consumed: all of the step's over gloo
    (see the module docstring), 4 over NCCL."""
    return None if transport in ("gloo", "staged") else 4


class _Inbox:
    """Receives from one peer, posted in the peer's send order, at most `lookahead` ahead (None: all)."""

    def __init__(self, runtime: PipelineRuntime, src: int, keys: tuple[Message, ...]) -> None:
        self.runtime, self.src, self.keys = runtime, src, keys
        self.next = 0
        self.consumed = 0
        self.posted: dict[Message, PendingRecv] = {}

    def _post(self) -> None:
        if self.next >= len(self.keys):
            raise RuntimeError(f"rank {self.runtime.rank}: waiting for more messages than rank {self.src} sends")
        key = self.keys[self.next]
        shape = self.runtime.message_shape(key)
        self.posted[key] = self.runtime.transport.irecv(shape, self.runtime.dtype, self.src, tag=self.next)
        self.next += 1

    def top_up(self) -> None:
        window = self.runtime.lookahead
        while self.next < len(self.keys) and (window is None or self.next - self.consumed < window):
            self._post()

    def take(self, key: Message) -> PendingRecv:
        while key not in self.posted:
            self._post()
        self.consumed += 1
        return self.posted.pop(key)

    def check_done(self) -> None:
        if self.next != len(self.keys) or self.posted:
            raise RuntimeError(f"rank {self.runtime.rank}: messages from rank {self.src} left unconsumed")


class PipelineRuntime:
    """Runs rank `rank`'s actions of `schedule` over `runners` (its stages), one step per `run_step`.

    `shapes[s]` is (input shape, output shape) of stage s for one microbatch.
    `stash_bytes[s]` is (activation bytes, weight-gradient bytes, input bytes) per
    microbatch, for the tracked peak of stashed activations (what the CPU reports).
    """

    def __init__(
        self,
        schedule: Schedule,
        rank: int,
        runners: dict[int, StageRunner],
        shapes: Sequence[tuple[torch.Size, torch.Size]],
        transport: Any,
        clock: Any,
        dtype: torch.dtype = torch.float32,
        lookahead: int | None = 4,
        stash_bytes: dict[int, tuple[int, int, int]] | None = None,
        label_actions: bool = False,
        grad_sync: Any = None,
        copies: Any = None,
        seq_bounds: tuple[int, ...] | None = None,
        experts: Any = None,
        groups: bool = False,
    ) -> None:
        validate(schedule)  # once, here; from then on the schedule and its lowering are trusted
        moves = memory_moves(schedule)[rank]  # read before the order is dropped: the copies are the order's
        # an overlapped (F, B) pair runs at once where each member's all-to-alls have a group of their own to run
        # in while the other member computes (`_Step.run_pair`); elsewhere its members run back to back (one
        # device stream), which the measured timeline's meta says
        lanes = experts is not None and len(experts.groups) > 1 and not moves
        mine = set(schedule.actions[rank]) if lanes else set()
        pairs = [g for g in overlap_groups(schedule) if _is_pair(g) and g[0] in mine]
        # with `groups` (sleep mode, whose members sleep their shares of the pair), an overlapped group's first
        # member starts once every member's input is in, as the simulation starts a group
        grouped = set(schedule.actions[rank]) if groups else set()
        joined = [g for g in overlap_groups(schedule) if g[0] in grouped]
        # torch's full order (transfers, collectives, overlapped pairs) is not executed as written: the compute
        # actions run with pipesim's plan (the same messages, in the producers' order); nothing is sharded or
        # replicated, so UNSHARD, RESHARD and REDUCE_GRAD have nothing to do.
        schedule = compute_only(schedule)
        if set(runners) != set(schedule.stages_of_rank(rank)):
            raise ValueError(
                f"rank {rank} holds stages {schedule.stages_of_rank(rank)} but got runners for {sorted(runners)}"
            )
        if lookahead is not None and lookahead < 1:
            raise ValueError(f"lookahead must be at least 1 (or None: all), got {lookahead}")
        self.schedule, self.rank, self.runners = schedule, rank, runners
        self.shapes, self.transport, self.clock = list(shapes), transport, clock
        self.dtype, self.lookahead = dtype, lookahead
        self.stash_bytes = stash_bytes or {}
        self.grad_sync = grad_sync  # pipesim_executor.rank.grad_sync.GradSync with data parallelism, else None
        self.experts = experts  # pipesim_executor.rank.moe.ExpertParallel: its all-to-alls' times, else None
        self.plan = comm_plan(schedule)
        self._incoming = self.plan.incoming(rank)
        self._send_tag = self.plan.send_tags(rank)
        self._split = {(a.stage, a.microbatch) for a in schedule.actions[rank] if a.kind is I}
        # --torch-profile: each action inside record_function("PP:2F0"), as torch's runtime does. Only then: the
        # unprofiled loop stays free of profiler calls.
        self._labels = {a: action_label(a) for a in schedule.actions[rank]} if label_actions else None
        self.copies = RankCopies(moves, runners, self.stash_bytes, copies) if moves else None  # the copy engine
        # sequence chunks (Seq1F1B): where the sequence is cut (None in sleep mode) and the keys and values kept
        self.seq = SeqChunks(schedule.seq_chunks, seq_bounds) if schedule.seq_chunks > 1 else None
        self.overlaps = bool(pairs)  # whether overlapped pairs run at once (the measured timeline's meta says)
        partner = {g[0]: g for g in pairs}
        seconds = {g[1] for g in pairs}
        self._units = [partner.get(a, (a,)) for a in schedule.actions[rank] if a not in seconds]
        self._group_inputs = {g[0]: self._inputs_of(g) for g in joined}

    def _inputs_of(self, group: tuple[Action, ...]) -> list[Message]:
        """The messages the later members of an overlapped group need from outside the group."""
        needed = (needed_message(a, self.schedule.num_stages, self.schedule.pipeline_stages) for a in group[1:])
        return [k for k in needed if k is not None and self.plan.producer[k] not in group]

    def data_index(self, stage: int, mb: int) -> int:
        """Which of the step's microbatches (`run_step`'s inputs and targets) microbatch `mb` of `stage` is: with
        pipelines in both directions (DualPipe), each direction's own, direction d's microbatch m the (d x M + m)th."""
        chunks = self.schedule.seq_chunks  # a sequence chunk takes its microbatch's
        return stage // self.schedule.pipeline_stages * (self.schedule.num_microbatches // chunks) + mb // chunks

    def message_shape(self, key: Message) -> torch.Size:
        """ACT is the stage's input, GRAD has the shape of the stage's output (a sequence chunk's positions)."""
        shape = self.shapes[key.stage][0 if key.what == ACT else 1]
        return shape if self.seq is None else self.seq.shape(shape, key.microbatch)

    # --- one step -------------------------------------------------------------------------------------------
    def run_step(self, inputs: Sequence[Tensor] | None, targets: Sequence[Tensor] | None) -> StepRecord:
        """Run this rank's actions once. Gradients accumulate into .grad; the caller steps the optimizer.

        `inputs[m]` (rank of a first stage) and `targets[m]` (rank of a last stage) are microbatch m on the device
        (`data_index`: with two directions, the second direction's after the first's).
        """
        step = _Step(self, inputs, targets)
        for unit in self._units:
            if len(unit) > 1:
                step.run_pair(unit)
            elif self._labels is None:
                step.run(unit[0])
            else:
                with record_function(self._labels[unit[0]]):  # like torch's: the wait, the compute, the send
                    step.run(unit[0])
        step.finish()
        return step.record


class _Step:
    """The mutable state of one step: stashes, hand-overs, receives and sends in flight."""

    def __init__(self, runtime: PipelineRuntime, inputs: Sequence[Tensor] | None, targets: Sequence[Tensor] | None):
        self.rt, self.inputs, self.targets = runtime, inputs, targets
        self.record = StepRecord()
        self.inboxes = {src: _Inbox(runtime, src, keys) for src, keys in runtime._incoming.items()}
        self.local: dict[Message, Tensor] = {}
        self.early: dict[Message, Tensor] = {}  # an overlapped group's later members' inputs, taken at its start
        self.stashes: dict[tuple[int, int], Any] = {}
        self.weight_work: dict[tuple[int, int], WeightWork] = {}
        self.sends: list[tuple[SendHandle, int, Action]] = []
        self.losses: list[Tensor] = []
        self.stash_now = 0
        self._stash_lock = threading.Lock()  # the copy engine frees and takes back bytes from its own thread
        self._pair_lock: threading.Lock | None = None  # held by an overlapped pair's members but while computing
        self.copies = None if runtime.copies is None else StepCopies(runtime.copies, self.record, self.change_stash)
        self._compute = {F: self._forward, B: self._backward, I: self._backward_input, W: self._backward_weight}
        for inbox in self.inboxes.values():
            inbox.top_up()
        if self.copies is not None:
            self.copies.issue(None, runtime.clock)
        if runtime.experts is not None:  # exchanges made outside a step (a profile's) are not this step's
            runtime.experts.clear()

    # --- data movement ----------------------------------------------------------------------------------------
    def receive(self, key: Message) -> Tensor:
        rt = self.rt
        if key in self.early:
            return self.early.pop(key)
        src = rt.plan.source(key)
        if src == rt.rank:
            return self.local.pop(key)
        pending = self.inboxes[src].take(key)
        before = rt.clock.mark()
        tensor = pending.wait()
        self.record.comm.append(("recv", src, rt.plan.producer[key], before, rt.clock.mark()))
        return tensor

    def deliver(self, key: Message, tensor: Tensor | None, action: Action) -> None:
        rt = self.rt
        if tensor is None:
            raise RuntimeError(f"rank {rt.rank}: {action} produced no tensor for {key}")
        dst = rt.plan.destination(key)
        if dst == rt.rank:
            self.local[key] = tensor
            return
        self.sends.append((rt.transport.isend(tensor, dst, tag=rt._send_tag[key]), dst, action))

    def reap_sends(self) -> None:
        """Drop sends that have completed, so their tensors can be freed; never blocks."""
        self.sends = [entry for entry in self.sends if not entry[0].is_completed()]

    def track(self, action: Action) -> None:
        """Stashed bytes after `action`, by pipesim's liveness rules (the simulator's memory metrics use the same)."""
        self.change_stash(int(stash_change(action.kind, self._stash_sizes(action.stage))[1]))

    def change_stash(self, delta: int) -> None:
        with self._stash_lock:
            self.stash_now += delta
            self.record.peak_stash_bytes = max(self.record.peak_stash_bytes, self.stash_now)

    # --- actions ----------------------------------------------------------------------------------------------
    def run(self, action: Action) -> None:
        """Wait for the input, compute, hand the result on. The span is the action's own work: the compute, and
        where ranks share a GPU (staged) the copies of its input from host memory and of its output to host
        memory, which occupy the rank's stream as the compute does (the link then carries the host-to-host part
        alone: each copy is counted once, in the span of the action it serves). It starts once the input is
        here and ends before the send is posted, so a consumer always starts after its producer ended."""
        rt = self.rt
        for inbox in self.inboxes.values():
            inbox.top_up()
        if self.sends:
            self.reap_sends()
        if rt.grad_sync is not None:
            rt.grad_sync.poll(rt.clock)
        key = needed_message(action, rt.schedule.num_stages, rt.schedule.pipeline_stages)
        received = self.receive(key) if key is not None else None
        for other in rt._group_inputs.get(action, ()):
            self.early[other] = self.receive(other)
        if self.copies is not None and action.kind in RELOAD_SERVES:
            self.copies.wait_reload(action)
        self.local_input = key is not None and rt.plan.source(key) == rt.rank
        start = rt.clock.mark()
        if key is not None and rt.plan.source(key) != rt.rank:
            received = rt.transport.to_compute(received)
        at_start = changes_at_start(action.kind)  # pipesim's rule: a forward's stash grows as it runs
        if at_start:
            self.track(action)
        produced = self.compute(action, received)
        if not at_start:
            self.track(action)
        out_key = produced_message(action, rt.schedule.num_stages, rt.schedule.pipeline_stages)
        if out_key is not None and produced is not None and rt.plan.destination(out_key) != rt.rank:
            produced = rt.transport.to_wire(produced)
        self.record.spans.append((action, start, rt.clock.mark()))
        if rt.experts is not None:  # the action's all-to-alls, on the link lane
            self.record.comm.extend((A2A, -1, action, a, b) for a, b in rt.experts.take(rt.experts.lane))
        if out_key is not None:
            self.deliver(out_key, produced, action)
        if rt.grad_sync is not None:  # after the hand-over: the next stage's work must not wait for it
            rt.grad_sync.after(action, rt.clock)
        if self.copies is not None:
            self.copies.issue(action, rt.clock)

    def compute(self, action: Action, received: Tensor | None) -> Tensor | None:
        """The action's own work. In an overlapped pair (`run_pair`) the pair's lock is let go meanwhile, so the
        other member's bookkeeping can run while this one computes."""
        experts, lock = self.rt.experts, self._pair_lock
        if experts is not None:  # forwards exchange on one lane, backwards on the other (ExpertParallel)
            experts.use_lane(0 if action.kind is F else 1)
        if lock is None:
            return self._compute[action.kind](action, received)
        lock.release()
        try:
            return self._compute[action.kind](action, received)
        finally:
            lock.acquire()

    def run_pair(self, pair: tuple[Action, ...]) -> None:
        """An overlapped (F, B) pair at once, as DualPipe and Megatron's combined 1F1B run it: the backward on a
        thread of its own, the forward on this one, so that one member's all-to-all is in flight (its own thread
        waiting in its own group, `ExpertParallel`) while the other member computes. Each member's receive,
        records and hand-over (`run`) hold one lock; only the compute runs outside it. The members are independent
        (the schedule pairs them so), and every replica runs the same pair: their exchanges match lane by lane."""
        lock = self._pair_lock = threading.Lock()
        failed: list[BaseException] = []

        labels = self.rt._labels

        def member(action: Action) -> None:
            try:
                with lock, record_function(labels[action]) if labels else contextlib.nullcontext():
                    self.run(action)
            except BaseException as error:  # re-raised on the step's thread
                failed.append(error)

        thread = threading.Thread(target=member, args=(pair[1],), name=f"pair {pair[1]}", daemon=True)
        thread.start()
        member(pair[0])
        thread.join()
        self._pair_lock = None
        if failed:
            raise failed[0]

    def _stash_sizes(self, stage: int) -> StashSizes:
        """What F of `stage` stashes (only its input under recomputation) and the part only W needs."""
        activation, weight, inputs = self.rt.stash_bytes.get(stage, (0, 0, 0))
        if self.rt.seq is not None:  # a sequence chunk stashes its share, as pipesim counts it (for_seq_chunks)
            activation, weight, inputs = (size // self.rt.seq.count for size in (activation, weight, inputs))
        stash = inputs if self.rt.runners[stage].recompute else activation
        return StashSizes(stash, min(weight, stash))

    def _forward(self, action: Action, received: Tensor | None) -> Tensor | None:
        stage, mb = action.stage, action.microbatch
        runner = self.rt.runners[stage]
        index = self.rt.data_index(stage, mb)
        x = received if received is not None else self.inputs[index]
        target = self.targets[index] if runner.is_last else None
        split = (stage, mb) in self.rt._split
        extra = {}
        if self.rt.seq is not None:  # a sequence chunk: its positions of the microbatch, its stage's keys and values
            chunk = extra["chunk"] = self.rt.seq.chunk(stage, mb)
            x = x if received is not None else chunk.cut(x)
            target = None if target is None else chunk.cut(target)
        if self.copies is not None and (stage, mb) in self.copies.rank.offloaded:
            # never moved: the microbatch (a view of the whole batch) or an input handed over on this rank (the
            # previous stage's output)
            out, stash = self.copies.forward(action, runner, x, target, split, received is None or self.local_input)
        else:
            out, stash = runner.forward(x, target, split=split, **extra)
        self.stashes[(stage, mb)] = stash
        if runner.is_last:
            self.losses.append(out)
            return None
        return out

    def _backward(self, action: Action, received: Tensor | None) -> Tensor | None:
        stage, mb = action.stage, action.microbatch
        grad = self.rt.runners[stage].backward(self.stashes.pop((stage, mb)), received)
        return grad

    def _backward_input(self, action: Action, received: Tensor | None) -> Tensor | None:
        stage, mb = action.stage, action.microbatch
        grad, work = self.rt.runners[stage].backward_input(self.stashes.pop((stage, mb)), received)
        self.weight_work[(stage, mb)] = work
        return grad

    def _backward_weight(self, action: Action, received: Tensor | None) -> None:
        self.rt.runners[action.stage].backward_weight(self.weight_work.pop((action.stage, action.microbatch)))
        return None

    # --- end of step ------------------------------------------------------------------------------------------
    def finish(self) -> None:
        rt = self.rt
        if self.copies is not None:
            self.copies.finish(rt.rank)
        for handle, dst, action in self.sends:
            before = rt.clock.mark()
            handle.wait()
            self.record.comm.append(("send", dst, action, before, rt.clock.mark()))
        self.sends.clear()
        if rt.grad_sync is not None:  # every all-reduce of the step, before the optimizer
            rt.grad_sync.finish(rt.clock, self.record.comm)
        for inbox in self.inboxes.values():
            inbox.check_done()
        if self.rt.seq is not None:
            self.rt.seq.finish()
        if self.local or self.stashes or self.weight_work:
            raise RuntimeError(
                f"rank {rt.rank}: step ended with unconsumed work: hand-overs {sorted(self.local)}, "
                f"stashes {sorted(self.stashes)}, pending W {sorted(self.weight_work)}"
            )
        if self.losses:
            self.record.loss = torch.stack(self.losses).sum()
