"""Issue 35: generated hostile values at every number and choice flag of every command of both command lines.

The flags are read off the parsers themselves (a new flag is covered without a line here), and each command runs
in this process with the rest of its arguments sound. Every value generated is one no number flag may take
(full-width or Arabic-Indic digits, padding, empty list items, nan, 1e400, 3,000 digits, negative numbers, hex,
underscores) or no choice holds: each must end in exit 2 with one line on stderr, nothing started and nothing
written in the working folder.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipesim.cli.main import build_parser as pipesim_parser
from pipesim.cli.main import main as pipesim_main
from pipesim_executor.host.cli import build_parser as executor_parser
from pipesim_executor.host.cli import main as executor_main

NUMBER_TYPES = {"whole number", "number", "whole numbers", "numbers", "parse_bytes", "_byte_limit"}
# The rest of each command's arguments: sound, and small (a value accepted by mistake would run at once).
SOUND = {
    ("pipesim", "simulate"): ["--schedule", "1f1b", "--ranks", "2", "--microbatches", "2"],
    ("pipesim", "compare"): ["--schedules", "1f1b", "--ranks", "2", "--microbatches", "2"],
    ("pipesim", "import-trace"): ["trace.json"],
    ("pipesim", "balance"): ["--stages", "2"],
    ("pipesim", "plan"): ["--devices", "2", "--global-batch", "4", "--schedules", "1f1b", "--microbatch-sizes", "1"],
    ("pipesim", "synthesize"): ["--ranks", "2", "--microbatches", "2", "--memory-limit", "2", "--time-limit", "1"]
    + ["--csv", "s.csv", "--json", "s.json"],
    ("pipesim", "app"): ["--print-command"],
    ("pipesim", "stragglers"): ["runs/x"],
    ("executor", "profile"): ["--out", "prof"],
    ("executor", "show"): ["runs/x"],
    ("executor", "cancel"): ["runs/x"],
    ("executor", "verify-plan"): ["plan.json"],
}
MAINS = {"pipesim": pipesim_main, "executor": executor_main}


def _flags() -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(program, command, flag, its choices) for every flag that takes a number or one of a list of choices."""
    found = []
    for program, parser in (("pipesim", pipesim_parser()), ("executor", executor_parser())):
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for command, sub in commands.choices.items():
            for action in sub._actions:
                if not action.option_strings or action.nargs == 0:
                    continue
                if action.choices or getattr(action.type, "__name__", "") in NUMBER_TYPES:
                    found.append((program, command, action.option_strings[0], tuple(action.choices or ())))
    return found


FLAGS = _flags()

NON_ASCII_DIGITS = st.characters(whitelist_categories=("Nd",)).filter(lambda c: not c.isascii())
MALFORMED = st.one_of(
    st.sampled_from(["", " ", "nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-1e400", "1e99999", "0x10"]),
    st.sampled_from(["1_000", "1,,2", ",1", "1,", "10^20", "1e", ".", "--1", "\x00", "1\x002", "+-1", "one"]),
    st.integers(min_value=41, max_value=3000).map(lambda digits: "9" * digits),  # past any count
    st.integers(max_value=-1).map(str),
    st.floats(max_value=-1e-9, allow_nan=False).map(repr),
    st.text(NON_ASCII_DIGITS, min_size=1, max_size=6),  # ０, ٣: digits Python's int() takes
    st.integers(min_value=0, max_value=99).flatmap(
        lambda n: st.sampled_from([f" {n}", f"{n} ", f"\t{n}", f"{n}\n", f" {n},2"])
    ),
)


def test_every_number_flag_is_covered():
    """The parsers' own flags: the ones the issue names are among them."""
    named = {(c, f) for _, c, f, _ in FLAGS}
    for case in [("verify-plan", "--timeout"), ("cancel", "--timeout"), ("run", "--seed"), ("plan", "--memory-cap")]:
        assert case in named
    assert {("plan", "--devices"), ("balance", "--layer-ms"), ("app", "--port"), ("run", "--hidden")} <= named
    assert len(FLAGS) > 100


@pytest.fixture
def sealed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working folder, and no way for a run, a profile or a process to start."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"something was started: {args[:1]}")

    monkeypatch.chdir(tmp_path)
    for target in (
        "pipesim_executor.host.launch.start_handle",
        "pipesim_executor.host.unit_profile.start_handle",
        "subprocess.Popen",
        "os.execvp",
    ):
        monkeypatch.setattr(target, refuse)
    return tmp_path


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=st.sampled_from(FLAGS), data=st.data())
def test_hostile_values_at_every_flag_are_one_line_and_exit_2(sealed, case, data):
    program, command, flag, choices = case
    if choices:
        value = data.draw(st.one_of(MALFORMED, st.text(max_size=30)).filter(lambda v: v not in choices), "value")
    else:
        value = data.draw(MALFORMED, "value")
    sound = list(SOUND.get((program, command), []))
    if flag in sound:  # the flag under test replaces its sound value
        index = sound.index(flag)
        del sound[index : index + 2]
    if flag == "--memory-limit-bytes":  # one memory limit or the other
        index = sound.index("--memory-limit")
        del sound[index : index + 2]
    argv = [command, *sound, f"{flag}={value}"]  # `=`: a value starting with '-' is still this flag's
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = MAINS[program](argv)
    message = err.getvalue()
    assert code == 2, (argv, code, message, out.getvalue()[:300])
    assert message.count("\n") == 1 and "Traceback" not in message and len(message) < 800, (argv, message)
    assert os.listdir(sealed) == [], (argv, os.listdir(sealed))


# --- paths: every flag and argument that names a file or folder ---------------------------------------------------

OUTPUTS = {"--json", "--csv", "--trace", "--html", "--png", "--svg", "--pdf", "--schedule-out", "--out"}


def _paths() -> list[tuple[str, str, str | None, bool]]:
    """(program, command, flag or None for a positional, whether it is an output) for every Path argument."""
    found = []
    for program, parser in (("pipesim", pipesim_parser()), ("executor", executor_parser())):
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for command, sub in commands.choices.items():
            for action in sub._actions:
                if getattr(action.type, "__name__", "") not in ("Path", "folder_flag"):
                    continue
                flag = action.option_strings[0] if action.option_strings else None
                found.append((program, command, flag, flag in OUTPUTS))
    return found


PATHS = _paths()


@pytest.fixture
def elsewhere(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder outside the working one holding what a hostile path may name: a FIFO, a folder, a symlink loop."""
    folder = tmp_path_factory.mktemp("elsewhere")
    os.mkfifo(folder / "fifo")
    (folder / "dir").mkdir()
    os.symlink(folder / "loop", folder / "loop")
    return folder


HOSTILE_PATHS = ["/dev/zero", "/dev/null", "fifo", "dir", "loop", "missing/x", "x" * 300, "\x00x", "é" * 200]


def test_every_path_argument_is_covered():
    assert ("executor", "verify-plan", None, False) in PATHS and ("pipesim", "simulate", "--cost", False) in PATHS
    assert ("pipesim", "synthesize", "--csv", True) in PATHS and ("executor", "run", "--runs-root", False) in PATHS


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=st.sampled_from(PATHS), name=st.sampled_from(HOSTILE_PATHS))
def test_hostile_paths_are_one_line_and_start_nothing(sealed, elsewhere, case, name):
    """An input that is a device, a FIFO, a folder, a link loop, missing or no name at all is a usage error (2);
    an output that cannot be written is 1 or 2; either way one line, nothing started, nothing written."""
    program, command, flag, output = case
    path = str(elsewhere / name) if name in ("fifo", "dir", "loop") else name
    folder = flag == "--runs-root" or (program, flag) == ("executor", "--out")
    if folder and name in ("dir", "missing/x"):
        return  # a folder, or one to be made: a sound runs, run or doctor folder
    sound = list(SOUND.get((program, command), []))
    if flag is None:  # the positional is the first sound argument
        sound[0] = path
        argv = [command, *sound]
    else:
        if flag in sound:
            index = sound.index(flag)
            del sound[index : index + 2]
        argv = [command, *sound, f"{flag}={path}"]
    if program == "pipesim" and command == "balance" and flag == "--cost":
        argv = [command, "--stages", "2", f"{flag}={path}"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = MAINS[program](argv)
    message = err.getvalue()
    assert code in ((1, 2) if output else (2,)), (argv, code, message, out.getvalue()[:300])
    assert message.count("\n") == 1 and "Traceback" not in message and len(message) < 800, (argv, message)
    assert os.listdir(sealed) == [], (argv, os.listdir(sealed))
