"""Progress lines from a rank to the launcher: `PIPESIM {json}` on stdout, one write each.

Ranks share torchrun's relay, so a line must never be split by another rank's output: it is written and
flushed in one call. The launcher (executor.launch) parses these lines into events. No torch import: the
reference run emits before torch is loaded.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from executor.config import PROGRESS_PREFIX


def emit(event: str, **fields: Any) -> None:
    """One progress event, e.g. emit("step", rank=0, step=3, steps=5, phase="measure")."""
    sys.stdout.write(PROGRESS_PREFIX + json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()
