"""Terminal output: a progress bar on stderr only where stderr is a terminal; the launcher's
JSON event lines on stdout with --events or where stdout is not a terminal; the default plan tries chunk counts
only where the family takes them."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from pipesim import progress_bar
from pipesim.cli.main import main as pipesim_main
from pipesim.progress_bar import ProgressBar
from pipesim_executor.host.cli_run import EventOutput


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_bar_where_stderr_is_no_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    bar = ProgressBar("plan")
    assert not bar.shown
    bar.set(0.5, "half")
    bar.close()
    assert capsys.readouterr() == ("", "")


def test_a_bar_on_a_terminal_moves_forward_only(capsys: pytest.CaptureFixture[str]) -> None:
    with ProgressBar("plan", enabled=True) as bar:
        bar.set(0.5, "15/30 candidates")
        bar.set(0.25, "older")  # events from several threads arrive out of order: the bar never moves back
        assert bar._bar.n == 0.5
    err = capsys.readouterr().err
    assert "plan:  50%" in err and "15/30 candidates" in err


def test_event_lines_only_when_asked_or_read_by_a_program(monkeypatch: pytest.MonkeyPatch) -> None:
    event = {"event": "step", "rank": 0, "step": 2, "steps": 5, "phase": "measure"}
    terminal = Terminal()
    monkeypatch.setattr("sys.stdout", terminal)
    EventOutput("run", events=False)(event)
    assert terminal.getvalue() == ""  # a person at a terminal: the bar, not JSON
    EventOutput("run", events=True)(event)
    assert terminal.getvalue().startswith('{"event": "step"')
    piped = io.StringIO()
    monkeypatch.setattr("sys.stdout", piped)
    EventOutput("run", events=False)(event)
    assert piped.getvalue().count("\n") == 1  # a pipe or a file: a program reads the events


def test_plan_and_synthesize_draw_a_bar_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(progress_bar, "on_terminal", lambda stream=None: True)
    argv = ["plan", "--layers", "8", "--hidden", "256", "--devices", "4", "--global-batch", "16"]
    assert pipesim_main([*argv, "--memory-cap", "80GiB"]) == 0
    out, err = capsys.readouterr()
    assert "plan: 100%" in err and "candidates" in err and "%|" not in out
    synth = ["synthesize", "--ranks", "2", "--microbatches", "4", "--memory-limit", "2", "--time-limit", "1"]
    outputs = ["--csv", str(tmp_path / "s.csv"), "--json", str(tmp_path / "s.json")]
    assert pipesim_main([*synth, *outputs]) == 0
    out, err = capsys.readouterr()
    assert "synthesize:" in err and "%|" not in out


def test_the_default_plan_tries_chunks_only_where_the_family_takes_them(capsys: pytest.CaptureFixture[str]) -> None:
    """Catches "cannot be built (6): interleaved-1f1b needs num_virtual_stages >= 2" under the default --chunks 1,2:
    one chunk per rank is not interleaved-1f1b (min_chunks in its registry entry); an explicit --chunks 1 alone
    still says why."""
    argv = [
        "plan",
        "--layers",
        "8",
        "--hidden",
        "256",
        "--devices",
        "4",
        "--global-batch",
        "16",
        "--memory-cap",
        "80GiB",
    ]
    assert pipesim_main(argv) == 0
    out = capsys.readouterr().out
    assert "cannot be built (" not in out and "0 cannot be built" in out and "interleaved-1f1b P4 v2" in out
    pipesim_main([*argv, "--schedules", "interleaved-1f1b", "--chunks", "1"])
    assert "needs num_virtual_stages >= 2" in capsys.readouterr().out
