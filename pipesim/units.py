"""One unit system for what pipesim prints: milliseconds for time, binary bytes (KiB, MiB, GiB) for memory."""

from __future__ import annotations


def format_bytes(value: float) -> str:
    """Bytes in binary units, e.g. 1536 -> "1.50 KiB" (the CLI, the app and the charts print memory so)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.2f} {unit}"
        value /= 1024
    return f"{value} B"  # unreachable


def format_memory(peak_bytes: float | None, stashed: int | None, bytes_known: bool) -> str:
    """Peak memory as every surface prints it: binary bytes when the costs carry real sizes (a cost file, a model
    description, the app's MiB per microbatch), else the microbatches stashed: times typed on the command line carry
    no sizes (1 per microbatch), where "8 B" would mean nothing."""
    if bytes_known and peak_bytes is not None:
        return format_bytes(peak_bytes)
    count = stashed or 0
    return f"{count} microbatch{'' if count == 1 else 'es'}"


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
