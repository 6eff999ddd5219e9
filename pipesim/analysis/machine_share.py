"""Whether other work shared the machine with a measurement, read from its load record.

The record is pipesim_executor.host.machine_load's: over the measurement's wall time, the cores other processes
used on average (`other_cores`), the cores the measurement's own process tree used (`own_cores`: the launcher and
every rank it waited for), the machine's cores, steal and the 1-minute load. A profile and a verification each
keep one.

A measurement is *contended* when other processes held at least MAX_QUIET_OTHER_SHARE of the cores AND the two
together filled the machine (at least SATURATED of its cores): the ranks then waited for cores that the other
work held, so each step timed the scheduler's share as much as the model. Seen on the 2-core development machine
with two busy loops beside a 2-rank profile: other processes held 1.13 of 2 cores, the profile's own check said
-5.6% (95% CI -13.5% to +3.2%) under a 29% spread, so no bias could be shown, and its plan's verifications then
measured 35% median errors. On a quiet run of the same machine the others held 0.00-0.03 cores. Other work on
spare cores (a 16-core machine, 2 ranks, 4 busy cores elsewhere) does not contend, and is not called so.
A record without `own_cores` (written before it was kept) cannot show contention: only the share is read then.
"""

from __future__ import annotations

import math
from typing import Any

# Other processes holding this share of the cores make the spread a measurement reports their spread too.
MAX_QUIET_OTHER_SHARE = 0.25
# The others and the measurement together using this share of the cores: nothing is left over, the ranks wait.
SATURATED = 0.9


def _figure(load: dict[str, Any], key: str) -> float | None:
    value = load.get(key)
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    return float(value) if ok else None


def other_share(load: Any) -> float:
    """The share of the machine's cores other processes used while the measurement ran (0 where unknown)."""
    if not isinstance(load, dict) or load.get("available") is not True:
        return 0.0
    other, cores = _figure(load, "other_cores"), _figure(load, "cores")
    return other / cores if other is not None and cores else 0.0


def contended(load: Any) -> bool:
    """Other processes held at least MAX_QUIET_OTHER_SHARE of the cores while they and the measurement together
    filled at least SATURATED of them (False where the record cannot tell)."""
    share = other_share(load)
    if share < MAX_QUIET_OTHER_SHARE:
        return False
    own, cores = _figure(load, "own_cores"), _figure(load, "cores")
    return own is not None and bool(cores) and share + own / cores >= SATURATED


def load_words(load: Any) -> str:
    """The machine's load during the measurement (a machine_load record) in words."""
    figures = ("other_cores", "steal", "load_1min_start", "load_1min_end", "cores")
    if not isinstance(load, dict) or load.get("available") is not True:
        return "the machine's load while it ran is unknown"
    values = {k: load.get(k) for k in figures}
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values.values()):
        return "the machine's load while it ran is unknown"
    own = _figure(load, "own_cores")
    return (
        f"other processes used {values['other_cores']:.2f} of its {values['cores']:g} cores on average while it ran"
        + ("" if own is None else f", its own processes {own:.2f}")
        + f" (1-minute load {values['load_1min_start']:.2f} at the start, {values['load_1min_end']:.2f} at the end; "
        f"steal {values['steal']:.1%})"
    )
