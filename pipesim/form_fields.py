"""A config dataclass as a form draws it: the app's twin of the flags `pipesim.flags` generates from the same fields,
so a page and the command line ask for the same things, under the same names, with the same help and defaults
(the Plan page's model form is `ModelDescription`'s fields).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from pipesim.flags import annotation_parts, default_of, field_docs, flag_of


@dataclasses.dataclass(frozen=True)
class FormField:
    """One field of a config dataclass as a form draws it (the app's twin of a generated flag): its name, its
    flag's name (the label, so the app and the command line say the same), its help, default and type, and its
    choices where the field names them (metadata "choices")."""

    name: str
    flag: str
    help: str
    default: Any
    kind: type
    choices: tuple[Any, ...] | None = None


def form_fields(cls: type) -> list[FormField]:
    """The fields of `cls` the command line makes flags of (metadata cli=False left out), in declaration order:
    a form built from these asks for exactly what the command line asks for."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    return [
        FormField(
            field.name,
            flag_of(field)[2:],
            docs.get(field.name, field.name.replace("_", " ")),
            default_of(field),
            annotation_parts(hints[field.name])[0],
            field.metadata.get("choices"),
        )
        for field in dataclasses.fields(cls)
        if field.metadata.get("cli", True)
    ]
