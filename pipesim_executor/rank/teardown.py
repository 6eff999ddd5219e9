"""How a rank process ends: every process group released while Python is alive, then an exit without finalisation.

Every entry point that joins a process group (pipesim_executor.rank.worker, pipesim_executor.rank.reference, the test
helpers) ends
through `finish`. Why it is built this way:

* `dist.destroy_process_group()` shuts the groups down and forgets them, but the C++ ProcessGroupGloo objects
  live on while any Python object refers to them: our Transport holds one group per link, torch's
  PipelineStage holds its group, and reference cycles (autograd graphs, tracebacks) keep those alive until
  some later garbage collection. Their destructors, which stop gloo's worker and I/O threads, then run at a
  moment nobody chose: often during interpreter finalisation, racing libtorch's static destructors. On a
  loaded machine the race is lost now and then, and the rank aborts after its work is done with
  ``terminate called without an active exception`` (SIGABRT, exit -6): a run that succeeded reports a crash.
* So: wait until every rank is done with the groups (a barrier, on success only: after a failure the peers
  may be gone), drop our references and collect cycles so the destructors run here, destroy the groups,
  then flush and leave through `os._exit`, which runs no C++ static destructor. Files are all written and
  closed before this point (formats.write_json renames a finished file into place).
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from typing import NoReturn

import torch.distributed as dist


def release_distributed(*, synchronise: bool) -> None:
    """Destroy every process group of this process now, while the interpreter is whole.

    `synchronise` puts a barrier first, so no peer is still using a group when this rank destroys it; pass
    False after a failure, when a peer may already be dead and the barrier would only wait for the timeout.
    """
    if not dist.is_initialized():
        return
    if synchronise:
        dist.barrier(**barrier_arguments())
    gc.collect()  # objects in reference cycles that hold groups (Transport, PipelineStage) go now, not at exit
    dist.destroy_process_group()
    gc.collect()


def barrier_arguments() -> dict[str, list[int]]:
    """The teardown barrier's arguments: on an NCCL default group, `device_ids` names this rank's own GPU.

    A barrier on NCCL is an all-reduce on some GPU, and the world group has run no collective before it (the
    ranks talk over per-link groups). Told no device, torch guesses one from the global rank (rank % visible
    GPUs: right only where ranks and GPUs line up) and warns that it is guessing, at every rank's exit. The
    rank's own GPU is the current device (pipesim_executor.rank.transport.init_distributed set it). gloo needs nothing.
    """
    if dist.get_backend() != "nccl":
        return {}
    import torch

    return {"device_ids": [torch.cuda.current_device()]}


def finish(main: Callable[[], int]) -> NoReturn:
    """Run a rank's `main`, release the process groups, and exit with its status without finalisation.

    `main` returns 0 on success; it reports its own errors and returns non-zero (an exception escaping it
    counts as status 1, printed first).
    """
    try:
        code = main()
    except BaseException:  # noqa: BLE001 - the rank must still release its groups and exit with a status
        import traceback

        traceback.print_exc()
        code = 1
    try:
        release_distributed(synchronise=code == 0)
    except Exception as error:  # noqa: BLE001 - a teardown problem must not hide the run's own status
        print(f"process group teardown failed: {type(error).__name__}: {error}", file=sys.stderr)
        code = code or 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
