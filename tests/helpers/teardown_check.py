"""A rank that leaves its process groups in a reference cycle, as a finished run does, then tears down.

    torchrun --standalone --nproc-per-node 2 tests/helpers/teardown_check.py OUT_DIR [raise]

Checks pipesim_executor.rank.teardown's contract: after `release_distributed`, no process group of this process is alive
(weak references to the WORLD group and every link group are dead), so no gloo destructor is left for the
interpreter's exit. Rank 0 writes OUT_DIR/teardown_RANK.json with the groups still alive. With `raise`, rank 1
raises from its main: `finish` must report it and exit 1 without waiting at the teardown barrier.
"""

from __future__ import annotations

import json
import os
import sys
import weakref
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pipesim_executor.rank.teardown import finish, release_distributed  # noqa: E402
from pipesim_executor.rank.transport import BackendChoice, Transport  # noqa: E402


class _Holder:
    """Stands for the objects of a finished run (Rank, PipelineRuntime, autograd graphs) that refer to each other."""


def make_cycle(rank: int, world: int) -> list[weakref.ref]:
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    links = [(a, b) for a in range(world) for b in range(world) if a != b]
    transport = Transport(BackendChoice("gloo", torch.device("cpu")), rank, links, timeout_s=60)
    transport.warm_up()
    holder = _Holder()
    holder.transport, holder.itself = transport, holder  # a cycle: only the garbage collector frees it
    groups = [dist.group.WORLD, *(g for g in transport._groups.values() if g is not None)]
    return [weakref.ref(g) for g in groups]


def main(out_dir: Path, fail: bool) -> int:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    refs = make_cycle(rank, world)
    if fail and rank == 1:
        raise RuntimeError("injected failure on rank 1")
    if fail:
        return 0
    release_distributed(synchronise=True)
    alive = sum(ref() is not None for ref in refs)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"teardown_{rank}.json").write_text(json.dumps({"groups": len(refs), "alive": alive}))
    return 0


if __name__ == "__main__":
    finish(lambda: main(Path(sys.argv[1]), len(sys.argv) > 2 and sys.argv[2] == "raise"))
