"""The planner's process pool: independent groups of work spread over worker processes, bounded by the cores.

Each task gets an interleaved slice of the groups (large and small alike), so that the pool's last tasks are
short. Forked where the platform can (nothing to import again); a pool that cannot start returns None and the
caller does the work itself.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the platform tells it, else the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def in_pool(
    work: Callable[[list[Any]], list[Any]],
    groups: list[Any],
    workers: int,
    progress: Callable[[int, int], None] | None,
    total: int,
) -> list[Any] | None:
    """`work` over interleaved slices of `groups` in `workers` processes, its results concatenated (in the order
    tasks finish); `progress(done, total)` after each task, counting the items `work` returned. None when no pool
    starts (a sandbox, a full process table)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    context = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else None)
    tasks = workers * 4
    chunks = [groups[i::tasks] for i in range(tasks)]
    results: list[Any] = []
    try:
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            futures = [pool.submit(work, chunk) for chunk in chunks if chunk]
            for future in as_completed(futures):
                results += future.result()
                if progress is not None:
                    progress(len(results), total)
    except (OSError, RuntimeError):
        return None
    return results
