"""One unit system for what pipesim prints: milliseconds for time, binary bytes (KiB, MiB, GiB) for memory."""

from __future__ import annotations


def format_bytes(value: float) -> str:
    """Bytes in binary units, e.g. 1536 -> "1.50 KiB" (the CLI, the app and the charts print memory so)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.2f} {unit}"
        value /= 1024
    return f"{value} B"  # unreachable
