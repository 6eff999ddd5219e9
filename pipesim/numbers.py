"""The one strict reader of numbers given as text (a flag, a URL value, a schedule's action) or held in a file.

Python's own `int()` and `float()` are generous: they take `' 80'`, `'1_000'`, full-width and Arabic-Indic digits
(`'０'`), `'nan'`, `'inf'`, and `float('1e400')` is infinity. A number a user types means something only when it
is plain ASCII digits, finite and in range, so every command line, file reader and app page reads numbers here:

    read_int("8", minimum=1)              -> 8
    read_float("0.5", minimum=0)          -> 0.5
    read_list("1,2,4", read_int)          -> (1, 2, 4)     ("1,,2" refused: an empty item is no number)
    check_number(value, "forward_ms", minimum=0)   a number out of a JSON file: finite, in range, not a bool

Each refusal is a ValueError of one line saying what was expected, quoting the text cut short (a 3,000-digit
number is refused by its length before it is converted, and is never printed whole).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import TypeVar

Number = TypeVar("Number", int, float)

# Longer texts are refused before they are converted: 40 digits is past any count, size or time pipesim takes,
# and int() of a 10^6-digit text is quadratic in it.
MAX_NUMBER_CHARS = 40
MAX_LIST_ITEMS = 4096  # items of one comma-separated list (per-stage times, sizes to try)
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,4})?")
_DIGITS = re.compile(r"[0-9]+")


def shown(text: object, limit: int = 60) -> str:
    """A user's text quoted in an error, cut short: a 5000-digit number must not make the one line 5000 long."""
    if not isinstance(text, str):  # a value out of a file: as Python writes it, cut short
        written = repr(text)
        return written if len(written) <= limit else written[: limit - 3] + "..."
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _bounds(minimum: float | None, maximum: float | None, above: float | None) -> str:
    parts = []
    if above is not None:
        parts.append(f"> {above:g}")
    if minimum is not None:
        parts.append(f">= {minimum:g}" if isinstance(minimum, float) else f">= {minimum}")
    if maximum is not None:
        parts.append(f"<= {maximum:g}" if isinstance(maximum, float) else f"<= {maximum:,}")
    return " and ".join(parts)


def _in_range(
    value: Number, text: str, kind: str, minimum: float | None, maximum: float | None, above: float | None
) -> Number:
    if (
        (minimum is not None and value < minimum)
        or (maximum is not None and value > maximum)
        or (above is not None and not value > above)
    ):
        raise ValueError(f"expected {kind} {_bounds(minimum, maximum, above)}, got {shown(text)}")
    return value


def is_digits(text: str) -> bool:
    """Whether `text` is ASCII digits only (`str.isdigit` also takes `'０'` and `'٣'`): for counts inside other
    text, such as a schedule action's stage and microbatch."""
    return _DIGITS.fullmatch(text) is not None


def read_int(text: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """A whole number written in ASCII digits (a sign allowed), no spaces, at most MAX_NUMBER_CHARS, in range."""
    kind = "a whole number"
    if not isinstance(text, str) or len(text) > MAX_NUMBER_CHARS or not _INT.fullmatch(text):
        bounds = _bounds(minimum, maximum, None)
        raise ValueError(f"expected {kind}{' ' + bounds if bounds else ''}, got {shown(text)}")
    return _in_range(int(text), text, kind, minimum, maximum, None)


def read_float(
    text: str, minimum: float | None = None, maximum: float | None = None, above: float | None = None
) -> float:
    """A finite decimal number (`0.5`, `1e9`, `-2`) in ASCII, no spaces, no `nan`/`inf`, no 1e400, in range."""
    kind = "a number"
    if not isinstance(text, str) or len(text) > MAX_NUMBER_CHARS or not _FLOAT.fullmatch(text):
        bounds = _bounds(minimum, maximum, above)
        raise ValueError(f"expected {kind}{' ' + bounds if bounds else ''}, got {shown(text)}")
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {shown(text)}")
    return _in_range(value, text, kind, minimum, maximum, above)


def read_list(text: str, read_one: Callable[[str], Number]) -> tuple[Number, ...]:
    """`1,2,4` -> (1, 2, 4), each item through `read_one`; no empty items (`1,,2`), at most MAX_LIST_ITEMS."""
    if not isinstance(text, str) or text.count(",") >= MAX_LIST_ITEMS:
        raise ValueError(f"expected at most {MAX_LIST_ITEMS:,} comma-separated items, got {shown(text)}")
    items = text.split(",")
    if any(item == "" for item in items):
        raise ValueError(f"expected comma-separated numbers with no empty item, got {shown(text)}")
    values = []
    for item in items:
        try:
            values.append(read_one(item))
        except ValueError as error:
            raise ValueError(f"{error} (in {shown(text)})" if len(items) > 1 else str(error)) from None
    return tuple(values)


def check_number(
    value: object,
    what: str,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    whole: bool = False,
) -> float:
    """A number out of a parsed file (JSON): an int or a float, not a bool, finite, in range; ValueError naming
    `what` otherwise. JSON's own reader turns 1e400 into infinity, so this is where it is refused."""
    kind = "a whole number" if whole else "a finite number"
    ok_type = isinstance(value, int) if whole else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        raise ValueError(f"{what} must be {kind}, got {shown(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, got {shown(value)}")
    try:
        return _in_range(value, repr(value), kind, minimum, maximum, above)
    except ValueError as error:
        raise ValueError(f"{what}: {error}") from None
