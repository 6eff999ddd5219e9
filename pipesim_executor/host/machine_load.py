"""What else used the machine while a profile ran: other processes' CPU time, steal and the load average.

A profile measured beside other work prices the model at that work's mercy (seen: a profile taken while other
jobs ran predicted its own steps -39% off, and nothing said why). `LoadProbe` reads the kernel's counters when the
profile starts and when it ends: the machine's busy CPU time from /proc/stat (user, nice, system, irq, softirq;
guest time is inside user), the share stolen by a hypervisor (steal), the 1-minute load from /proc/loadavg, and the
profile's own CPU time (this process and every child it waited for: the ranks under torchrun), so what is left is
the other processes'. Linux only: elsewhere, or when /proc cannot be read, the record says "unknown".

In the app several runs may share one server process: their CPU counts as the profile's own there, so the figure
is a lower bound of the other work.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from typing import Any

BUSY_FIELDS = (0, 1, 2, 5, 6)  # user, nice, system, irq, softirq (the columns after "cpu" in /proc/stat)
STEAL_FIELD = 7


@dataclass(frozen=True)
class Counters:
    """One reading: the machine's CPU jiffies (busy, steal, all), its cores, the 1-minute load, this process
    tree's own CPU seconds and the monotonic clock."""

    busy: int
    steal: int
    total: int
    cores: int
    load_1min: float
    own_s: float
    at: float


def read_counters() -> Counters | None:
    """The counters now; None where /proc/stat or /proc/loadavg cannot be read (not Linux)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            lines = f.read(1 << 20).splitlines()
        with open("/proc/loadavg", encoding="ascii") as f:
            load = float(f.read(256).split()[0])
        values = [int(v) for v in lines[0].split()[1:]]
        cores = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    except (OSError, ValueError, IndexError):
        return None
    if len(values) <= STEAL_FIELD or cores < 1:
        return None
    own = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return Counters(
        busy=sum(values[i] for i in BUSY_FIELDS),
        steal=values[STEAL_FIELD],
        total=sum(values[:8]),
        cores=cores,
        load_1min=load,
        own_s=sum(u.ru_utime + u.ru_stime for u in own),
        at=time.monotonic(),
    )


class LoadProbe:
    """`LoadProbe()` when the profile starts, `.finish()` when it ends: the record for the cost file."""

    def __init__(self) -> None:
        self.start = read_counters()

    def finish(self) -> dict[str, Any]:
        """{"available": True, wall_s, cores, other_cores (other processes' CPU, in cores on average), own_cores (this
        process tree's, the same way: pipesim.analysis.machine_share reads the two together), steal
        (the share of CPU time stolen), load_1min_start, load_1min_end}, or {"available": False, "why": ...}."""
        end = read_counters()
        if self.start is None or end is None:
            return {"available": False, "why": f"no /proc/stat on this system ({os.name})"}
        wall = end.at - self.start.at
        ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        total = end.total - self.start.total
        if wall <= 0 or total <= 0:
            return {"available": False, "why": "the counters did not advance"}
        busy_s = (end.busy - self.start.busy) / ticks
        own = end.own_s - self.start.own_s
        other = max(0.0, busy_s - own)
        return {
            "available": True,
            "wall_s": round(wall, 3),
            "cores": end.cores,
            "other_cores": round(other / wall, 3),
            "own_cores": round(max(0.0, own) / wall, 3),
            "steal": round((end.steal - self.start.steal) / total, 4),
            "load_1min_start": self.start.load_1min,
            "load_1min_end": end.load_1min,
        }
