"""Number fields that say why a value is refused, next to the field.

A field bounded in the browser (`min_value`) refuses an out-of-range value with a small red "!" and keeps the old
value without a word, so the page went on drawing the old chart. These fields have no browser bounds: the value
reaches the page, the reason is written under the field's row at the width of its form (a field in a half-width
column would break the sentence mid-word), and the page marks its chart as not updated, naming every bad field.
"""

from __future__ import annotations

from typing import Any

import streamlit as st


def refusal(label: str, value: float | None, low: float | None = None, high: float | None = None) -> str | None:
    """Why `value` is refused for the field `label` (None when it is fine): the value and the valid range, whole
    numbers with thousands separators (100,000,000 microbatches, never 1e+08)."""
    if value is None:
        return f"{label}: empty; enter a number"
    valid = f" (valid: {_shown(low)} to {_shown(high)})" if low is not None and high is not None else ""
    if low is not None and value < low:
        return f"{label} = {_shown(value)} is below its minimum {_shown(low)}" + valid
    if high is not None and value > high:
        return f"{label} = {_shown(value)} is above its maximum {_shown(high)}" + valid
    return None


def _shown(value: float) -> str:
    whole = float(value).is_integer() and abs(value) < 1e15
    return f"{int(value):,}" if whole else f"{value:g}"


def number(
    where: Any,
    label: str,
    low: float | None,
    high: float | None,
    default: float,
    problems: list[str],
    **options: Any,
) -> Any:
    """`where.number_input(label, ...)` without browser bounds; a value out of [low, high] is written under the
    field's row in the caller's container, full width (st.error: `where` may be a half-width column), and appended
    to `problems`, which the page reads to mark its chart as not updated."""
    value = where.number_input(label, None, None, default, **options)
    reason = None if options.get("disabled") else refusal(label, value, low, high)
    if reason is not None:
        st.error(reason, icon=":material/error:")
        problems.append(reason)
    return value
