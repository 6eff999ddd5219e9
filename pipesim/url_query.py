"""The one reader of a web page's URL values (`?ranks=4&schedule=zbv`): what each key may hold, and why a value
is refused.

A link is input like any other: `?microbatches=99999999999999999999`, `?ranks=10^20`, a 3,000-digit number, a
run name longer than a file name may be, a schedule that does not exist, or a key no page knows. The app reads
its URL through `refused_values` before any page draws a widget from it; each refused key is dropped (the page
shows its default) and named, with the reason, in a notice on the page. Numbers go through the same strict
reader as every flag and file (pipesim.numbers): ASCII digits, finite, in range.

    fields = {"ranks": UrlField("int", 1, 32), "schedule": UrlField("choice", choices=("1f1b", "zbv"))}
    refused_values({"ranks": ["0"], "x": ["1"]}, fields)
    -> {"ranks": "expected a whole number >= 1 and <= 32, got '0'", "x": "no page reads this key"}
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pipesim.numbers import read_float, read_int, read_list, shown

MAX_URL_TEXT = 200  # characters of one text value (a list of sizes, a run's name)
MAX_URL_VALUES = 64  # repeated values of one key (a multiselect's picks)
MAX_URL_KEYS = 200  # keys in one URL: past them the rest are refused unread
_BOOLEANS = ("true", "false")

Kind = Literal["int", "float", "bool", "choice", "text", "ints", "floats"]


@dataclass(frozen=True)
class UrlField:
    """What one URL key may hold: a whole number or a number in [minimum, maximum] (or a comma-separated list of
    them, `ints` / `floats`, as a text field holds it: spaces around the commas, or nothing), true/false, one of
    `choices`, or text of at most `max_chars` matching `pattern`; `many`: how many values it may repeat (a
    multiselect's picks, a range slider's two ends)."""

    kind: Kind
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    max_chars: int = MAX_URL_TEXT
    pattern: str | None = None
    many: int = 1
    pattern_meaning: str = "letters, digits, '.', '-' or '_'"  # what `pattern` lets through, in the refusal

    def check(self, values: Sequence[str]) -> None:
        """ValueError of one line saying what was expected, for the first value that is not."""
        if len(values) > self.many:
            raise ValueError(f"expected at most {self.many} value{'s' if self.many > 1 else ''}, got {len(values)}")
        for value in values:
            self._check_one(value)

    def _check_one(self, value: str) -> None:
        if self.kind == "int":
            read_int(value, None if self.minimum is None else int(self.minimum), _whole(self.maximum))
        elif self.kind == "float":
            read_float(value, self.minimum, self.maximum)
        elif self.kind == "bool":
            if value.lower() not in _BOOLEANS:
                raise ValueError(f"expected true or false, got {shown(value)}")
        elif self.kind in ("ints", "floats"):
            if len(value) > self.max_chars:
                raise ValueError(f"expected at most {self.max_chars} characters, got {shown(value)}")
            if value.strip():
                read_number_list(value, self.kind == "ints", self.minimum, self.maximum)
        elif self.kind == "choice":
            if value not in self.choices:
                listed = ", ".join(self.choices[:12]) + (", ..." if len(self.choices) > 12 else "")
                raise ValueError(f"expected one of {listed}; got {shown(value)}")
        elif len(value) > self.max_chars or not value.isprintable():
            raise ValueError(f"expected printable text of at most {self.max_chars} characters, got {shown(value)}")
        elif self.pattern is not None and not re.fullmatch(self.pattern, value, re.ASCII):
            raise ValueError(f"expected {self.pattern_meaning}, got {shown(value)}")


def read_number_list(
    text: str, whole: bool, minimum: float | None = None, maximum: float | None = None
) -> tuple[float, ...]:
    """`1, 2, 4` as a person types it in a field (spaces around the commas), each item read strictly
    (pipesim.numbers) and in range; ValueError for an empty item or anything else."""
    items = ",".join(item.strip() for item in text.split(","))
    if whole:
        return read_list(items, lambda item: read_int(item, _whole(minimum), _whole(maximum)))
    return read_list(items, lambda item: read_float(item, minimum, maximum))


def _whole(value: float | None) -> int | None:
    return None if value is None else int(value)


def refused_values(query: Mapping[str, Sequence[str]], fields: Mapping[str, UrlField]) -> dict[str, str]:
    """{key: why} for every key of `query` whose values its field refuses, and every key no field names; in
    the URL's order. The keys not listed may be used as they are."""
    refused: dict[str, str] = {}
    for index, (key, values) in enumerate(query.items()):
        if index >= MAX_URL_KEYS:
            refused[key] = f"more than {MAX_URL_KEYS} settings in one link"
            continue
        field = fields.get(key)
        if field is None:
            refused[key] = "no page reads this setting"
            continue
        try:
            field.check(list(values)[: MAX_URL_VALUES + 1])
        except ValueError as error:
            refused[key] = str(error)
    return refused
