"""Terminal output: a progress bar on stderr only where stderr is a terminal; the launcher's
JSON event lines on stdout with --events or where stdout is not a terminal; the default plan tries chunk counts
only where the family takes them."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import pytest

from pipesim import progress_bar
from pipesim.cli.main import main as pipesim_main
from pipesim.progress_bar import ProgressBar
from pipesim_executor.host import cli_run
from pipesim_executor.host.cli import main as executor_main
from pipesim_executor.host.cli_run import EventOutput
from pipesim_executor.host.time_left import TimeLeft


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


def _shown(events: list[tuple[float, float]], until: float, every: float = 1.0) -> list[tuple[float, float]]:
    """(time, seconds left) at each redraw of a bar fed `events` ((time, fraction done)), redrawn every `every`."""
    left, shown, fraction, pending, now = TimeLeft(0.0), [], 0.0, sorted(events), every
    while now <= until:
        while pending and pending[0][0] <= now:
            fraction = pending.pop(0)[1]
        estimate = left.estimate(now, fraction)
        if estimate is not None:
            shown.append((now, estimate))
        now += every
    return shown


def test_time_left_does_not_jump_when_progress_comes_in_steps() -> None:
    """A profile's progress as the issue saw it: long frozen phases (203 s, 104 s), then a step; tqdm's rate-based
    estimate read 1:06:49, 13:55, 25:46. After the first minute no redraw moves the figure more than 2x."""
    events = [(2, 0.01), (5, 0.02), (208, 0.35), (212, 0.40), (316, 0.70), (320, 0.72), (500, 0.95)]
    shown = _shown(events, until=520)
    later = [(t, s) for t, s in shown if t >= 60]
    jumps = [max(a, b) / min(a, b) for (_, a), (_, b) in zip(later, later[1:], strict=False) if min(a, b) >= 10]
    assert jumps and max(jumps) <= 2.0
    assert all(s >= 1.0 for _, s in shown)  # never 0 while work is left


def test_time_left_is_right_for_steady_work() -> None:
    """Work that goes at one rate: the estimate is the time really left (catches an estimate off by its smoothing)."""
    total = 300.0
    events = [(t, t / total) for t in range(1, 300)]
    for now, left in _shown(events, until=290):
        if now >= 30:
            assert abs(left - (total - now)) <= 0.05 * total, (now, left)


def test_a_launch_bar_redraws_between_events(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """The bar ticks on its own (a profile's phases leave minutes between events): with no event at all, it is
    redrawn with its time left within a couple of ticks."""
    monkeypatch.setattr(cli_run, "REDRAW_S", 0.05)

    class Handle:
        progress = 0.25

    output = EventOutput("profile", events=False, enabled=True)
    output.follow(Handle())
    time.sleep(0.5)
    output.close()
    err = capsys.readouterr().err
    assert err.count("profile:  25%") >= 3  # several redraws, no event
    assert re.search(r"profile:  25%\|[^|]*\| \d\d:\d\d<\d\d:\d\d", err)  # elapsed<left, our estimate


def test_no_bar_before_the_launch_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """Profiling into a folder that exists: the one line says so, and no bar was drawn before it."""
    monkeypatch.setattr(progress_bar, "on_terminal", lambda stream=None: True)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "out" / "prof").mkdir(parents=True)
    assert executor_main(["profile", "--model", "cnn", "--out", "out/prof"]) == 2
    err = capsys.readouterr().err
    assert "already exists" in err and "%|" not in err and err.count("\n") == 1
