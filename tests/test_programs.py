"""Program names as the user started the program: `pipesim` and `pipesim-run` under the console
scripts, `python -m pipesim` / `python -m executor` / `python -m pipesim_executor` by module, in every help text,
error line and hint; `plan --verify` prints the command it runs, runnable as printed."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pipesim.cli import plan as cli_plan
from pipesim.cli.main import main as pipesim_main
from pipesim.programs import Programs, in_checkout, programs

REPO = Path(__file__).resolve().parents[1]
CHECKOUT = Programs("python -m pipesim", "python -m executor")


def test_names_follow_how_the_process_was_started() -> None:
    assert in_checkout()
    for script in ("/venv/bin/pipesim", "/venv/bin/pipesim-run", r"C:\venv\Scripts\pipesim-run.exe"):
        assert programs(script) == Programs("pipesim", "pipesim-run"), script
    assert programs(str(REPO / "pipesim" / "__main__.py")) == CHECKOUT
    assert programs(str(REPO / "executor" / "__main__.py")) == CHECKOUT
    assert programs("/site-packages/pipesim_executor/__main__.py") == (
        "python -m pipesim",
        "python -m pipesim_executor",
    )
    assert programs("/venv/lib/python3.12/site-packages/pytest/__main__.py") == CHECKOUT  # not ours: the checkout's


def _console_script(folder: Path, name: str, entry: str) -> Path:
    """A script named as pip's console script is, calling the same entry point (sys.argv[0] is its path)."""
    module, function = entry.split(":")
    script = folder / name
    script.write_text(f"import sys\nfrom {module} import {function}\nsys.exit({function}())\n")
    return script


def _started(command: list[str | Path], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # a script's own folder is its path, not the checkout
    return subprocess.run(
        [str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=180, env=env
    )


@pytest.mark.parametrize(
    ("start", "name", "executor"),
    [
        (["-m", "pipesim"], "python -m pipesim", False),
        (["-m", "executor"], "python -m executor", True),
        (["-m", "pipesim_executor"], "python -m pipesim_executor", True),
        ("pipesim.cli.main:main", "pipesim", False),
        ("pipesim_executor.__main__:main", "pipesim-run", True),
    ],
    ids=["python-m-pipesim", "python-m-executor", "python-m-pipesim_executor", "pipesim", "pipesim-run"],
)
def test_help_and_errors_name_the_program_as_started(
    tmp_path: Path, start: list[str] | str, name: str, executor: bool
) -> None:
    """Catches a hard-coded `python -m executor` where the user typed `pipesim-run` (which has no such module
    installed): in a subcommand's usage line, the one-line error with its `see: ... --help`, and a hint."""
    if isinstance(start, str):  # a console script
        start = [str(_console_script(tmp_path, name, start))]
    command = "show" if executor else "simulate"
    usage = _started([sys.executable, *start, command, "--help"], REPO)
    assert usage.returncode == 0, usage.stderr
    assert usage.stdout.startswith(f"usage: {name} {command}"), usage.stdout[:200]
    wrong = _started([sys.executable, *start, command, "--no-such-flag"], REPO)
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1, wrong.stderr
    assert wrong.stderr.startswith(f"{name}: error: ") and f"(see: {name} {command} --help)" in wrong.stderr
    if executor:
        hint = _started([sys.executable, *start, "show", str(tmp_path / "nothing")], REPO)
        assert hint.returncode == 2 and f"({name} list shows the runs" in hint.stderr, hint.stderr


def test_plan_verify_prints_the_command_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Catches `verifying: -m pipesim_executor ...`: the printed line is the command run, interpreter included."""
    ran: list[list[str]] = []

    def fake_run(command: list[str], check: bool) -> subprocess.CompletedProcess:
        ran.append(command)
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(cli_plan.subprocess, "run", fake_run)
    plan = tmp_path / "plan.json"
    argv = ["plan", "--layers", "4", "--hidden", "64", "--devices", "2", "--global-batch", "8", "--memory-cap", "80GiB"]
    assert pipesim_main([*argv, "--schedules", "1f1b", "--json", str(plan), "--verify", "1"]) == 0
    (command,) = ran
    assert command[:3] == [sys.executable, "-m", "pipesim_executor"] and command[3:] == [
        "verify-plan",
        str(plan),
        "--top",
        "1",
    ]
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("verifying: ")]
    assert printed == ["verifying: " + shlex.join(command)]


def _subcommand_helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    (commands,) = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    return {name: sub.format_help() for name, sub in commands.choices.items()}


def test_no_help_names_a_module_path_under_the_console_scripts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Catches a help text (a flag generated from a config's docstring, a description, a hint) that says
    `python -m executor ...` to a user who typed `pipesim-run`: installed, there is no such module."""
    from pipesim.cli.commands import build_parser as pipesim_parser
    from pipesim_executor.host.cli import build_parser as executor_parser

    monkeypatch.setattr(sys, "argv", ["/venv/bin/pipesim-run"])
    helps = {f"pipesim {name}": text for name, text in _subcommand_helps(pipesim_parser()).items()}
    helps |= {f"pipesim-run {name}": text for name, text in _subcommand_helps(executor_parser()).items()}
    assert len(helps) >= 15
    wrong = {name: text for name, text in helps.items() if "python -m" in text or not text.startswith("usage: pipesim")}
    assert not wrong, wrong
