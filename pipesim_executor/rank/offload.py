"""Activation offload for real: a rank's copy engine runs the schedule's OFFLOADs and RELOADs on a thread.

What moves and when is the schedule's (pipesim.semantics.lower.memory_moves: each copy is issued when the rank
ends its gate action, and a rank's copies run one at a time, in order); this module only carries them out.

* `HostCopies` (a model run): during the forward of an offloaded (stage, microbatch) a saved_tensors_hooks pack
  hook notes every storage autograd saves (parameters excluded), plus the stage input's. OFFLOAD copies each of
  them into a preallocated host buffer and frees the original by resizing its storage to 0 bytes; RELOAD resizes
  it back and copies the bytes in. Every tensor, view and autograd node keeps pointing at the same storage, so
  the backward reads what the forward saved, bit for bit (FSDP frees its parameters the same way). On a CPU the
  "host" is the same memory as the "device": the copy's time is still a real copy into a separate buffer, and the
  bytes freed are the storages' own.
* Sleep mode's copies (pipesim_executor.rank.inject.SleptCopies) sleep the priced copy time instead.

Storages that someone else reads while the copy engine holds them are never moved: the weights and buffers
every microbatch shares, the tensor handed on to the next stage (a send may be in flight; a local hand-over is
the next stage's input), the first stage's microbatch (a view of the step's whole batch) and the last stage's
targets.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

from pipesim.ir import CommKind
from pipesim.semantics.lower import Copy

OFFLOAD, RELOAD = CommKind.OFFLOAD, CommKind.RELOAD


def storage_key(t: Tensor) -> int:
    return t.untyped_storage().data_ptr()


class Held:
    """The storages one (stage, microbatch) offloads, and where their bytes sit while they are away."""

    def __init__(self, storages: list[Any], nbytes: int | None = None) -> None:
        self.storages = storages
        self.sizes = [s.nbytes() for s in storages]
        self.nbytes = sum(self.sizes) if nbytes is None else nbytes  # given: a stash priced, not held
        self.buffer: Tensor | None = None


def _bytes_of(storage: Any) -> Tensor:
    """A uint8 tensor over the whole storage (its current size)."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


class HostCopies:
    """A model run's copies: saved storages to preallocated host buffers and back (see the module docstring)."""

    def __init__(self, exclude: Iterable[Tensor] = ()) -> None:
        self._exclude = {storage_key(t) for t in exclude}  # the rank's parameters and buffers
        self._free: dict[int, list[Tensor]] = {}  # per stage, host buffers not in use
        self._lock = threading.Lock()

    def preallocate(self, stage: int, count: int, nbytes: int) -> None:
        """`count` host buffers of `nbytes` for `stage`, allocated now so that no copy allocates."""
        self._free.setdefault(stage, []).extend(torch.empty(nbytes, dtype=torch.uint8) for _ in range(count))

    @contextmanager
    def capture(self, skip: Iterable[Tensor]):
        """Note every storage autograd saves inside the block; yields the list it fills."""
        storages: dict[int, Any] = {}
        excluded = self._exclude | {storage_key(t) for t in skip if isinstance(t, Tensor)}

        def pack(t: Tensor) -> Tensor:
            key = storage_key(t)
            if key not in excluded and key not in storages and t.untyped_storage().nbytes():
                storages[key] = t.untyped_storage()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield storages

    def held(self, stage: int, storages: dict[int, Any], stash: Any, skip: Iterable[Tensor]) -> Held:
        """What one forward offloads: the storages it saved, and its stage input's (kept by the stash)."""
        excluded = self._exclude | {storage_key(t) for t in skip if isinstance(t, Tensor)}
        found = {key: storage for key, storage in storages.items() if key not in excluded}
        x = getattr(stash, "input", None)
        if isinstance(x, Tensor) and storage_key(x) not in excluded:
            found.setdefault(storage_key(x), x.untyped_storage())
        return Held(list(found.values()))

    def _buffer(self, stage: int, nbytes: int) -> Tensor:
        with self._lock:
            free = self._free.setdefault(stage, [])
            for i, buffer in enumerate(free):
                if buffer.numel() >= nbytes:
                    return free.pop(i)
        return torch.empty(nbytes, dtype=torch.uint8)  # more than preallocated: kept in the pool afterwards

    def offload(self, stage: int, held: Held) -> int:
        """Copy the storages out, free them; returns the bytes freed."""
        buffer = self._buffer(stage, held.nbytes)
        offset = 0
        for storage, size in zip(held.storages, held.sizes, strict=True):
            buffer[offset : offset + size].copy_(_bytes_of(storage))
            storage.resize_(0)
            offset += size
        held.buffer = buffer
        return held.nbytes

    def reload(self, stage: int, held: Held) -> int:
        """Give the storages their bytes back; returns the bytes taken."""
        buffer, offset = held.buffer, 0
        assert buffer is not None
        for storage, size in zip(held.storages, held.sizes, strict=True):
            storage.resize_(size)
            _bytes_of(storage).copy_(buffer[offset : offset + size])
            offset += size
        held.buffer = None
        with self._lock:
            self._free.setdefault(stage, []).append(buffer)
        return held.nbytes


def in_flight(copies: list[Copy]) -> dict[int, int]:
    """Per stage, the most host buffers its copies hold at once (an OFFLOAD takes one, its RELOAD gives it back)."""
    now: dict[int, int] = {}
    most: dict[int, int] = {}
    for copy in copies:
        stage = copy.entry.stage
        now[stage] = now.get(stage, 0) + (1 if copy.entry.kind is OFFLOAD else -1)
        most[stage] = max(most.get(stage, 0), now[stage])
    return most


class CopyEngine:
    """One thread that runs a rank's copies one at a time, in the order they are issued."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="copy engine", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                if self._error is None:
                    job()
            except BaseException as error:  # handed to the compute thread at its next wait
                self._error = error
            finally:
                self._jobs.task_done()

    def submit(self, job: Callable[[], None]) -> None:
        self.check()
        self._jobs.put(job)

    def drain(self) -> None:
        """Wait for every issued copy to end."""
        self._jobs.join()
        self.check()

    def check(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"a copy on the copy engine failed: {self._error!r}") from self._error

    def close(self) -> None:
        self._jobs.put(None)


class RankCopies:
    """A rank's copy engine for a run: which copies each compute action's end issues (its gate; None: at the
    step's start), which (stage, microbatch)s are offloaded, the thread, and how a stash moves (`copies`: sleep
    mode's, else `HostCopies` over host buffers preallocated from the schedule's copies)."""

    def __init__(self, moves: list[Copy], runners: dict[int, Any], stash_bytes: dict, copies: Any = None) -> None:
        self.after: dict[Any, list[Copy]] = {}
        for copy in moves:
            self.after.setdefault(copy.gate, []).append(copy)
        self.offloaded = {(c.entry.stage, c.entry.microbatch) for c in moves if c.entry.kind is OFFLOAD}
        if copies is None:
            # the weights and buffers (a mask, positions) every microbatch shares: never moved
            shared = [p for runner in runners.values() for p in runner.parameters()]
            shared += [b for runner in runners.values() if hasattr(runner, "module") for b in runner.module.buffers()]
            copies = HostCopies(shared)
            for stage, count in in_flight(moves).items():  # each buffer the size of one microbatch's stash
                copies.preallocate(stage, count, stash_bytes.get(stage, (0, 0, 0))[0])
        self.copies = copies
        self.engine = CopyEngine()


class StepCopies:
    """One step's copies on one rank: what each offloaded (stage, microbatch) holds, the RELOADs in flight.

    `record` is the step's (its comm list gets each copy's span, its moved_bytes the bytes); `change_stash`
    moves the tracked stash bytes: an OFFLOAD's bytes leave at its end, a RELOAD's come back at its start
    (pipesim.semantics.lower.offload_change)."""

    def __init__(self, rank: RankCopies, record: Any, change_stash: Callable[[int], None]) -> None:
        self.rank, self.record, self.change_stash = rank, record, change_stash
        self.held: dict[tuple[int, int], Held] = {}
        self.reloads: dict[tuple[int, int], threading.Event] = {}  # set when its RELOAD has ended

    def forward(self, action: Any, runner: Any, x: Tensor, target: Tensor | None, split: bool, own_input: bool):
        """The runner's forward, noting what it saves; `own_input`: x is the batch's or another stage's here."""
        skip = [t for t in (target, x if own_input else None) if t is not None]
        with self.rank.copies.capture(skip) as saved:
            out, stash = runner.forward(x, target, split=split)
        # the output handed on is never moved either: a send may be in flight, or the next stage reads it here
        self.held[(action.stage, action.microbatch)] = self.rank.copies.held(action.stage, saved, stash, [*skip, out])
        return out, stash

    def issue(self, gate: Any, clock: Any) -> None:
        """Hand the copies gated by `gate` to the copy engine, in the schedule's order."""
        for copy in self.rank.after.get(gate, ()):
            key = (copy.entry.stage, copy.entry.microbatch)
            done = None
            if copy.entry.kind is RELOAD:
                done = self.reloads[key] = threading.Event()
            elif key not in self.held:
                raise RuntimeError(f"{copy.entry} issued before the forward it offloads")
            self.rank.engine.submit(lambda copy=copy, key=key, done=done: self._copy(copy, key, done, clock))

    def _copy(self, copy: Copy, key: tuple[int, int], done: threading.Event | None, clock: Any) -> None:
        """One OFFLOAD or RELOAD, on the copy engine's thread; a copy-lane span either way."""
        stage, copies = key[0], self.rank.copies
        if copy.entry.kind is OFFLOAD:
            start = clock.mark()
            moved = copies.offload(stage, self.held[key])
            end = clock.mark()  # the bytes are gone from here (the tracker and the span agree on when)
            self.change_stash(-moved)
            self.record.moved_bytes[stage] = max(self.record.moved_bytes.get(stage, 0), moved)
        else:
            self.change_stash(self.held[key].nbytes)
            start = clock.mark()
            copies.reload(stage, self.held.pop(key))
            end = clock.mark()
        self.record.comm.append((copy.entry.kind.value.lower(), -1, str(copy.entry), start, end))
        if done is not None:
            done.set()

    def wait_reload(self, action: Any) -> None:
        """The first backward of an offloaded microbatch waits until its RELOAD has ended."""
        key = (action.stage, action.microbatch)
        if key not in self.held and key not in self.reloads:
            return
        event = self.reloads.pop(key, None)
        if event is None:
            raise RuntimeError(f"{action} needs activations offloaded and never reloaded")
        while not event.wait(0.05):
            self.rank.engine.check()

    def finish(self, rank: int) -> None:
        """Every copy of the step ended; nothing left on the host."""
        self.rank.engine.drain()
        if self.held or self.reloads:
            raise RuntimeError(f"rank {rank}: step ended with offloaded activations {sorted(self.held)}")
