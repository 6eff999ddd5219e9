"""The C allocator settings every rank runs with, so that a process's speed does not depend on what it allocated
before.

glibc's malloc adapts two thresholds as a process runs: a freed block larger than the mmap threshold raises it, and
memory above the trim threshold at the top of the heap goes back to the kernel. A tensor above the current threshold
is mapped and unmapped on every allocation, and every page of it faults in again, zero-filled by the kernel. How
often that happens depends on the sizes the process allocated earlier. On this project's 2-core CPU machine, with
the thresholds left to adapt:

- the same run (`examples.zoo_embed_heavy`, 1F1B on 2 ranks) measured 36.4 ms per step at 8 microbatches of 2 and
  37.6-39.9 ms at 4 of 4;
- a unit profile, whose processes run several sizes one after another, priced the same stages 5-10% apart from those
  runs (lower at size 2, higher at size 4), and the step-level "in-situ factors" that corrected this read 1.2-2.0.

With the thresholds pinned (the values below, set for both), the runs took 30.6-31.9 ms, the in-situ factors of the
same stages read 1.00, and the profile's in-situ steps matched the runs within 2%. Pinning both thresholds is the
usual advice for CPU training (PyTorch's and Intel's tuning guides recommend a caching allocator for the same
reason); the executor pins glibc's own so that it needs nothing installed.

A value the user has set in the environment is kept. Other C libraries ignore these variables.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# glibc accepts an mmap threshold of at most half its heap size (32 MiB on 64-bit machines) and ignores a larger one;
# setting it also turns off its adaptation. Blocks above it are still mapped.
MMAP_THRESHOLD_BYTES = 32 << 20
# Free memory at the top of the heap is kept up to this much (the ranks live for one run or one profile).
TRIM_THRESHOLD_BYTES = 4 << 30
ALLOCATOR_ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD_BYTES),
    "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD_BYTES),
}


def allocator_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The allocator variables a rank's environment needs beyond `environ`: each of ALLOCATOR_ENV the user has not
    set."""
    return {name: value for name, value in ALLOCATOR_ENV.items() if name not in environ}


def allocator_settings() -> dict[str, str | None]:
    """What this process runs with, for a run's or a profile's provenance (None: not set)."""
    return {name: os.environ.get(name) for name in ALLOCATOR_ENV}
