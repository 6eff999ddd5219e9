"""What both command lines (`python -m pipesim`, `python -m executor`) share: flags generated from configs, the
one usage error, and the one way a command ends (`run_main`: an exit status, a one-line error, never a traceback).

Configs are the one source of their flags and help: a docstring under each dataclass field, read from the
source, and command-line flags generated from the fields (torchtitan's `config/` does the same with tyro).

    @dataclass(frozen=True)
    class Training:
        steps: int = field(default=5, metadata={"flag": "steps"})
        \"\"\"Measured steps.\"\"\"

    add_flags(parser, Training, "training")   # --steps N, help "Measured steps. (default 5)"
    given(parser.parse_args(argv), "training")   # {"steps": 7} for the flags the user gave

A field's metadata may name its `flag` (default: the field's name with dashes), `aliases` (more flags),
`metavar`, and `cli=False` to leave it out (a flag the command writes by hand). Flags default to nothing
(argparse.SUPPRESS): the config's own default applies, so defaults are written once, in the config, and `--help`
shows them from there. A field whose type is a dataclass is a section of its own: its fields get flags too, with
defaults from the parent's default value.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import os
import re
import sys
import textwrap
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from pipesim.numbers import read_float, read_int, read_list, shown  # noqa: F401 - shown: re-exported
from pipesim.programs import named_as_started


class UsageError(Exception):
    """A mistake in the command line (a flag, a value, an input file): one line on stderr, exit status 2."""


class Failure(Exception):
    """Good inputs, but the work failed or was refused: one line on stderr, exit status 1."""


class DefaultsShown(argparse.HelpFormatter):
    """argparse's help with each flag's default (argparse.ArgumentDefaultsHelpFormatter's idea), added where the
    help does not say it already (a generated flag's help carries its config's default) and where there is one: a
    switch that is off, or a flag without a default, says nothing."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if "default" in text or default in (None, False, argparse.SUPPRESS) or not action.option_strings:
            return text
        if isinstance(default, (tuple, list)):
            shown_default = ",".join(map(str, default))
        else:
            shown_default = f"{default:g}" if isinstance(default, float) else str(default)
        return f"{text} (default {shown_default.replace('%', '%%')})"


class _Commands(argparse._SubParsersAction):
    """Subcommands whose `--help` opens with their one-line help when they are given no description of their own."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        line = kwargs.get("help")
        if line and not kwargs.get("description"):
            kwargs["description"] = line[:1].upper() + line[1:] + "."
        return super().add_parser(name, **kwargs)


_LONG_QUOTED = re.compile(r"'([^']{61,})'")


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing its usage and exiting, so `run_main` reports it in one
    line; the line says which `--help` to read. Help shows every flag's default (DefaultsShown)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsShown)
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", _Commands)

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        """argparse's, but an unknown flag is refused by its subcommand's parser, naming the closest flag."""
        words = list(sys.argv[1:] if args is None else args)
        parsed, unknown = self.parse_known_args(words, namespace)
        if unknown:
            import difflib  # only to name the closest flag of a mistake

            inner, flags = self._innermost(words), [word.split("=")[0] for word in unknown if word.startswith("-")]
            names = [flag for action in inner._actions for flag in action.option_strings if flag.startswith("--")]
            close = [f"; did you mean {m}?" for flag in flags for m in difflib.get_close_matches(flag, names, 1, 0.75)]
            inner.error(f"unrecognized arguments: {' '.join(unknown)}" + "".join(close[:1]))
        return parsed

    def _innermost(self, words: list[str]) -> Parser:
        """The parser of the (sub)command `words` name: the first word that is one of its subcommands, down."""
        for action in (a for a in self._actions if isinstance(a, argparse._SubParsersAction)):
            chosen = next(((i, action.choices[w]) for i, w in enumerate(words) if w in action.choices), None)
            if chosen is not None and isinstance(chosen[1], Parser):
                return chosen[1]._innermost(words[chosen[0] + 1 :])
        return self

    def error(self, message: str) -> NoReturn:
        # argparse quotes a value it refuses whole ("invalid choice: '999...'"): a 3,000-character value is cut
        message = _LONG_QUOTED.sub(lambda match: shown(match.group(1)), message)
        raise UsageError(f"{message} (see: {self.prog} --help)")


def one_line(error: BaseException) -> str:
    return " | ".join(line.strip() for line in str(error).splitlines() if line.strip()) or type(error).__name__


def run_main(
    name: str,
    command: Callable[[], int],
    failures: tuple[type[BaseException], ...] = (),
) -> int:
    """Run a command and turn every way it can end into an exit status (USAGE_ERROR, FAILURE, BROKEN_PIPE), with
    one line on stderr: the one usage-error path of both command lines.

    `failures` are the exception types that mean good inputs that could not be carried out (FAILURE); any other
    ValueError or OSError is a usage error (a flag, a value, an input file). Order matters: a failure type may
    subclass ValueError (a deadlock is a ScheduleError).
    """
    try:
        return command()
    except BrokenPipeError:
        _silence_stdout()
        return BROKEN_PIPE
    except (Failure, *failures) as error:
        _error_line(name, error)
        return FAILURE
    except (UsageError, ValueError, OSError) as error:
        _error_line(name, error)
        return USAGE_ERROR


def _error_line(name: str, error: BaseException) -> None:
    try:
        print(f"{name}: error: {one_line(error)}", file=sys.stderr, flush=True)
    except OSError:  # stderr is gone too: the exit status still says it
        pass


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush does not raise Broken pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


USAGE_ERROR = 2  # the command line is wrong: a flag, a value, an input file; nothing was done
FAILURE = 1  # the inputs were good but the work failed or was refused: a run failed, a schedule deadlocks, an
# output could not be written, an image could not be rendered
BROKEN_PIPE = 141  # stdout was closed early (`| head`), as a Unix tool killed by SIGPIPE; every file was written
EXIT_STATUS_HELP = (
    "Exit status: 0 done; 1 the work failed or was refused (a failed run, a deadlocked schedule, an output that "
    "cannot be written); 2 a usage error (a flag, a value or an input file; one line on stderr, nothing written); "
    "141 stdout closed early (| head; the files were written)."
)
SEPARATOR = "."  # argparse dest of a generated flag: "section.field" (and deeper for nested sections)


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """{field name: its docstring} for a dataclass and its dataclass bases, read from their source (once per
    class: parsing the source is most of the time a parser takes to build)."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):  # no source (a frozen binary): flags still work, with shorter help
            continue
        body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
        for node, after in zip(body, body[1:], strict=False):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def summary(cls: type) -> str:
    """The first sentence of a class's docstring: a section's title in `--help`."""
    doc = " ".join((cls.__doc__ or cls.__name__).split())
    return doc.split(". ")[0].rstrip(".")


def flag_of(field: dataclasses.Field) -> str:
    return "--" + field.metadata.get("flag", field.name).replace("_", "-")


def annotation_parts(annotation: Any) -> tuple[Any, bool]:
    """(the type without None, whether None is allowed)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        return (inner[0] if len(inner) == 1 else annotation), len(inner) < len(typing.get_args(annotation))
    return annotation, False


def _flag_type(read: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """An argparse `type` from a strict reader (pipesim.numbers): its ValueError becomes argparse's one line,
    "argument --flag: expected ..., got '...'"."""

    def parse(text: str) -> Any:
        try:
            return read(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parse.__name__ = name
    return parse


def int_flag(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    """A flag's whole number: ASCII digits, in range (pipesim.numbers.read_int)."""
    return _flag_type(lambda text: read_int(text, minimum, maximum), "whole number")


def float_flag(
    minimum: float | None = None, maximum: float | None = None, above: float | None = None
) -> Callable[[str], float]:
    """A flag's number: finite, in range (pipesim.numbers.read_float)."""
    return _flag_type(lambda text: read_float(text, minimum, maximum, above), "number")


def int_list_flag(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], tuple[int, ...]]:
    """`2,4,6` -> (2, 4, 6): no empty item, each a whole number in range."""
    return _flag_type(lambda text: read_list(text, lambda item: read_int(item, minimum, maximum)), "whole numbers")


def float_list_flag(minimum: float | None = None, maximum: float | None = None) -> Callable[[str], tuple[float, ...]]:
    """`1,4.5,6` -> (1.0, 4.5, 6.0): no empty item, each finite and in range."""
    return _flag_type(lambda text: read_list(text, lambda item: read_float(item, minimum, maximum)), "numbers")


def folder_flag(text: str) -> Path:
    """A folder to make things in (`--runs-root`): it may not exist yet, but it may not be a file or a device
    (`/dev/null`), a usage error before anything starts rather than a failure after."""
    path = Path(text)
    too_long = any(len(part.encode("utf-8", "surrogateescape")) > 255 for part in path.parts)  # NAME_MAX
    if not text or "\0" in text or len(text) > 4096 or too_long:
        raise argparse.ArgumentTypeError(f"expected a folder name (at most 255 bytes a part), got {shown(text)}")
    if os.path.lexists(path) and not path.is_dir():  # a file, a device, a link to nothing or a link loop
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a folder")
    return path


_whole_number = int_flag()
_number = float_flag()
whole_numbers = int_list_flag()


def numbers(text: str) -> tuple[float, ...]:
    """`1,2.5` -> (1.0, 2.5)."""
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {shown(text)}") from None


def _argument(field: dataclasses.Field, annotation: Any) -> dict[str, Any]:
    """argparse keywords for one field's type: a parser, choices, or a switch."""
    kind, _ = annotation_parts(annotation)
    if kind is bool:
        return {"action": "store_true"}
    if typing.get_origin(kind) is typing.Literal:
        return {"choices": typing.get_args(kind)}
    if "choices" in field.metadata:
        return {"choices": field.metadata["choices"]}
    parsers: dict[Any, Callable[[str], Any]] = {int: _whole_number, float: _number, str: str}
    if kind in parsers:
        metavar = {int: "N", float: "X", str: "TEXT"}[kind]
        return {"type": parsers[kind], "metavar": field.metadata.get("metavar", metavar)}
    if typing.get_origin(kind) is tuple and typing.get_args(kind)[:1] == (int,):
        return {"type": whole_numbers, "metavar": field.metadata.get("metavar", "A,B,..")}
    if typing.get_origin(kind) is tuple and typing.get_args(kind)[:1] == (float,):
        return {"type": numbers, "metavar": field.metadata.get("metavar", "X,Y,..")}
    if typing.get_origin(kind) is tuple and typing.get_args(kind)[:1] == (str,):  # repeatable: one per use
        return {"type": str, "action": "append", "metavar": field.metadata.get("metavar", "TEXT")}
    raise TypeError(f"no flag for field {field.name} of type {annotation!r}: give it metadata cli=False")


def _default_text(value: Any) -> str:
    if value is None or value is False:
        return ""
    if isinstance(value, tuple):
        return f" (default {','.join(map(str, value))})"
    if isinstance(value, float):
        return f" (default {value:g})"
    return " (default: on)" if value is True else f" (default {value})"


def add_flags(
    parser: argparse.ArgumentParser, cls: type, section: str, defaults: Any = None
) -> dict[str, argparse._ArgumentGroup]:
    """One flag per field of the dataclass `cls` (in a group titled by its docstring's first sentence), help from
    the field's docstring and the default from `defaults` (an instance; default: `cls()`); nested dataclass fields
    recurse into groups of their own. Returns the groups by section, for flags a command adds by hand."""
    defaults = cls() if defaults is None else defaults
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    groups = {section: parser.add_argument_group(summary(cls))}
    nested = []
    for field in dataclasses.fields(cls):
        if not field.metadata.get("cli", True):
            continue
        if dataclasses.is_dataclass(annotation_parts(hints[field.name])[0]):
            nested.append(field)
            continue
        keywords = {k: v for k, v in _argument(field, hints[field.name]).items() if v is not None}
        flags = [flag_of(field), *("--" + alias for alias in field.metadata.get("aliases", ()))]
        doc = docs.get(field.name, field.name.replace("_", " ")).rstrip(".")
        help_text = doc + _default_text(getattr(defaults, field.name))
        groups[section].add_argument(
            *flags,
            dest=f"{section}{SEPARATOR}{field.name}",
            default=argparse.SUPPRESS,
            help=named_as_started(help_text).replace("%", "%%"),
            **keywords,
        )
    for field in nested:
        kind = annotation_parts(hints[field.name])[0]
        # the field's own default, not the parent instance's value (a config may resolve a default in
        # __post_init__ from other sections, such as RunConfig's batch size from the microbatches)
        groups.update(add_flags(parser, kind, f"{section}{SEPARATOR}{field.name}", default_of(field)))
    return groups


def from_flags(cls: type, args: argparse.Namespace, section: str, base: Any = None) -> Any:
    """The config the flags given for `section` describe: `base` (default: the class's defaults) with each given
    field replaced, nested sections built the same way. The config's own checks run (ValueError on bad values)."""
    hints = typing.get_type_hints(cls)
    values = given(args, section)
    for field in dataclasses.fields(cls):
        kind = annotation_parts(hints[field.name])[0]
        if dataclasses.is_dataclass(kind):
            inner = getattr(base, field.name) if base is not None else default_of(field)
            values[field.name] = from_flags(kind, args, f"{section}{SEPARATOR}{field.name}", inner)
    try:
        return cls(**values) if base is None else dataclasses.replace(base, **values)
    except ValueError as error:
        if type(error) is not ValueError or str(error).startswith("--"):  # a failure's own kind, or named already
            raise
        raise ValueError(_naming_flag(str(error), cls, given(args, section))) from None


def _naming_flag(message: str, cls: type, values: dict[str, Any]) -> str:
    """The message led by the flag of the given field it names first (`num_microbatches`, `cnn blocks`)."""
    fields = {field.name: field for field in dataclasses.fields(cls) if field.name in values}
    found = [(m.start(), flag_of(fields[name])) for name in fields
             if (m := re.search(rf"\b({re.escape(name)}|{re.escape(name.replace('_', ' '))})\b", message))]  # fmt: skip
    return f"{min(found)[1]}: {message}" if found else message


def default_of(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return None


def given(args: argparse.Namespace, section: str) -> dict[str, Any]:
    """{field: value} of the flags given for `section` (its own fields, not its nested sections')."""
    prefix = section + SEPARATOR
    return {
        key[len(prefix) :]: value
        for key, value in vars(args).items()
        if key.startswith(prefix) and SEPARATOR not in key[len(prefix) :]
    }


def given_flags(args: argparse.Namespace, cls: type, section: str) -> list[str]:
    """The flags the user gave for `section` and its nested sections, as they are spelled on the command line."""
    flags = []
    for field in dataclasses.fields(cls):
        key = f"{section}{SEPARATOR}{field.name}"
        if key in vars(args):
            flags.append(flag_of(field))
        kind = annotation_parts(typing.get_type_hints(cls)[field.name])[0]
        if dataclasses.is_dataclass(kind):
            flags += given_flags(args, kind, key)
    return flags
