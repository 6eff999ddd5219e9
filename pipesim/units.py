"""One unit system and one vocabulary for what pipesim shows: milliseconds for time, binary bytes (KiB, MiB,
GiB) for memory, and one name for each quantity.

The command line, the app's pages and the charts all print through these functions, so a number has the same
decimals wherever it appears (a card, a table, a tooltip, a chart title). The format specifications are the
same strings in Python (`format(x, TIME_SPEC)`) and in plotly's hover templates (d3-format: `%{x:,.2f}`), which
is why they are written once here.

The glossary (`QUANTITIES`) names each quantity once, with its definition, for the app's cards, tables and
charts (its labels and help texts) and for the CLI's words: "step time" is what simulate, compare and plan call
`step_ms` (the actions, the unhidden gradient reduction and each rank's overhead), "makespan" only the actions
alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType

TIME_DECIMALS = 2  # milliseconds: 10 us resolution, the executor's clock is no finer on a CPU
BYTES_DECIMALS = 2  # in the binary unit that makes the number at most 1023.99
PERCENT_DECIMALS = 1
RATIO_DECIMALS = 2

TIME_SPEC = f",.{TIME_DECIMALS}f"  # 3,165.00
BYTES_SPEC = f",.{BYTES_DECIMALS}f"
PERCENT_SPEC = f".{PERCENT_DECIMALS}%"  # 27.3%
SIGNED_PERCENT_SPEC = f"+.{PERCENT_DECIMALS}%"  # +11.9%, -5.6%
RATIO_SPEC = f".{RATIO_DECIMALS}f"
SIGNED_TIME_SPEC = f"+,.{TIME_DECIMALS}f"
COUNT_SPEC = ",d"
MISSING = "—"  # a figure that is not there (no prediction, a run without steps): cards, tables and the CLI alike


def _finite(value: float | None) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)


def format_ms(value: float | None, *, signed: bool = False, unit: bool = True) -> str:
    """A time in milliseconds, e.g. 3165 -> "3,165.00 ms"; MISSING for None or NaN; a nonzero time that rounds
    to zero says so ("<0.01 ms") rather than printing a 0 that is not one."""
    if not _finite(value):
        return MISSING
    suffix = " ms" if unit else ""
    if value != 0 and abs(value) < 0.5 * 10**-TIME_DECIMALS:
        sign = "-" if value < 0 else "+" if signed else ""
        return f"{sign}<{10**-TIME_DECIMALS:.{TIME_DECIMALS}f}{suffix}"
    return f"{value:{SIGNED_TIME_SPEC if signed else TIME_SPEC}}{suffix}"


def format_percent(value: float | None, *, signed: bool = False) -> str:
    """A fraction as a percentage, e.g. 0.2727 -> "27.3%" (signed: "+27.3%"); MISSING for None or NaN."""
    if not _finite(value):
        return MISSING
    return f"{value:{SIGNED_PERCENT_SPEC if signed else PERCENT_SPEC}}"


def format_ratio(value: float | None) -> str:
    """A dimensionless ratio (idle / busy, the slowest stage over the mean), e.g. 0.375 -> "0.38"."""
    return MISSING if not _finite(value) else f"{value:{RATIO_SPEC}}"


def format_count(value: int, noun: str = "", plural: str | None = None) -> str:
    """A count with thousands separators and its noun agreeing, e.g. (1, "microbatch") -> "1 microbatch"."""
    if not noun:
        return f"{value:{COUNT_SPEC}}"
    word = noun if value == 1 else (plural or noun + ("es" if noun.endswith(("ch", "sh", "s", "x")) else "s"))
    return f"{value:{COUNT_SPEC}} {word}"


def format_bytes(value: float) -> str:
    """Bytes in binary units, e.g. 1536 -> "1.50 KiB" (the CLI, the app and the charts print memory so)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:{BYTES_SPEC}} {unit}"
        value /= 1024
    return f"{value} B"  # unreachable


def format_memory(peak_bytes: float | None, stashed: int | None, bytes_known: bool) -> str:
    """Peak memory as every surface prints it: binary bytes when the costs carry real sizes (a cost file, a model
    description, the app's MiB per microbatch), else the microbatches stashed: times typed on the command line carry
    no sizes (1 per microbatch), where "8 B" would mean nothing."""
    if bytes_known and peak_bytes is not None:
        return format_bytes(peak_bytes)
    return format_count(stashed or 0, "microbatch")


BINARY_UNITS = (("B", 1), ("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30), ("TiB", 2**40))


def binary_unit(largest: float) -> tuple[str, int]:
    """The binary unit an axis of byte values up to `largest` is drawn in, e.g. 3e7 -> ("MiB", 2**20).

    Charts divide by it and name it in the axis title: plotly's own "~s" ticks are decimal SI, where
    "26B" means 26 billion, not bytes.
    """
    for unit, size in reversed(BINARY_UNITS):
        if abs(largest) >= size:
            return unit, size
    return BINARY_UNITS[0]


def hover_ms(field: str) -> str:
    """A plotly hover-template piece for a time, formatted as `format_ms` prints it, e.g. "%{x:,.2f} ms"."""
    return f"%{{{field}:{TIME_SPEC}}} ms"


def hover_percent(field: str, signed: bool = False) -> str:
    return f"%{{{field}:{SIGNED_PERCENT_SPEC if signed else PERCENT_SPEC}}}"


@dataclass(frozen=True)
class Quantity:
    """One quantity's name (as a label starts: lower case), its unit and what it means."""

    name: str
    unit: str
    meaning: str

    @property
    def label(self) -> str:
        """The name as a card or a column heading starts: "Step time"."""
        return self.name[:1].upper() + self.name[1:]

    @property
    def heading(self) -> str:
        """The name with its unit, for a table column or an axis: "step time (ms)"."""
        return f"{self.name} ({self.unit})" if self.unit else self.name


QUANTITIES = MappingProxyType(
    {
        "step_time": Quantity(
            "step time",
            "ms",
            "One training step as the training loop runs it: the actions, the part of the gradient reduction that "
            "the remaining backward does not hide, and each rank's overhead after its last action (optimizer). "
            "What simulate, compare and plan report as step_ms.",
        ),
        "makespan": Quantity(
            "makespan",
            "ms",
            "The actions alone: from the first action's start to the last action's end, without the optimizer "
            "or anything after the last action.",
        ),
        "bubble_fraction": Quantity(
            "bubble",
            "%",
            "idle / (ranks × makespan): the share of the step the ranks sit idle, start ramp and drain included.",
        ),
        "bubble_ratio": Quantity("idle / busy", "", "Idle time over busy time, summed over the ranks."),
        "inner_bubble": Quantity(
            "per-stage bubble",
            "%",
            "Idle between each rank's first and last action over the time between them: the zero-bubble paper's "
            "per-stage bubble, which leaves out the ramp and the drain.",
        ),
        "peak_activations": Quantity(
            "peak activations",
            "bytes",
            "The most activation memory one rank holds stashed at once (forwards waiting for their backward); "
            "parameters, gradients and optimizer state come on top.",
        ),
        "stashed": Quantity(
            "microbatches stashed",
            "",
            "How many microbatches' activations a rank holds at its peak: one per forward whose backward has not "
            "freed it yet.",
        ),
        "peak_memory": Quantity(
            "peak memory",
            "bytes",
            "The fullest rank's memory at its peak: parameters, gradients, optimizer state and stashed activations.",
        ),
        "predicted_step": Quantity(
            "predicted step time", "ms", "The step time the simulation predicts with the run's profiled costs."
        ),
        "measured_step": Quantity(
            "measured step time", "ms", "The median step time over the measured steps (warm-up steps left out)."
        ),
        "prediction_error": Quantity(
            "prediction error",
            "%",
            "(predicted - measured) / measured: positive when the prediction is too slow, negative when too fast.",
        ),
        "action_difference": Quantity(
            "predicted - measured",
            "ms",
            "An action's simulated duration minus its measured one: the sign of the prediction error.",
        ),
        "lower_bound": Quantity(
            "lower bound",
            "ms",
            "A step time no order of these actions can beat under these costs: each rank's work plus the ramp "
            "before and after it (pipesim synthesize).",
        ),
        "gap": Quantity(
            "gap to the bound",
            "%",
            "(step time - lower bound) / step time: 0 proves the order optimal; otherwise at most this much faster "
            "is possible.",
        ),
        "throughput": Quantity("throughput", "samples/s", "Samples of the global batch per second of step time."),
        "imbalance": Quantity(
            "imbalance", "", "The slowest stage's time over the mean stage time (1.00: perfectly balanced)."
        ),
        "uniform_step": Quantity(
            "uniform step time",
            "ms",
            "The step time with every rank and link as costed: the what-if's slow ranks and delayed links left out.",
        ),
        "step_growth": Quantity(
            "step growth",
            "%",
            "step time with the what-if's slow ranks and delayed links / uniform step time - 1.",
        ),
        "sensitivity": Quantity(
            "sensitivity",
            "%",
            "The step's growth when one rank alone computes the given factor slower; the worst rank is the one whose "
            "slowdown costs the step most (pipesim.analysis.sensitivity).",
        ),
    }
)


def quantity(key: str) -> Quantity:
    """The glossary entry of `key`; a KeyError names the known ones (a typo in a page is a bug)."""
    try:
        return QUANTITIES[key]
    except KeyError:
        raise KeyError(f"no quantity {key!r}; known: {', '.join(QUANTITIES)}") from None
