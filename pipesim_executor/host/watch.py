"""Follow a run from its folder, whoever launched it (`python -m executor run` in a terminal, another app server).

    run = watch.attach(Path("runs/NAME"))       # None unless that run is running
    run.progress, run.events(), run.log_tail()   # from progress.json, which the launcher rewrites
    run.cancel()                                 # the launcher's own cancel; returns once result.json is written
    result = run.wait()                          # RunResult

Why it is built this way:
* A `FolderRun` has the interface of pipesim_executor.host.launch.RunHandle, so the app shows a run the same way whether
  its own server started it or not. It only reads the folder and writes one file: the launcher stays the one
  process that supervises, stops and reports the run (pipesim_executor.host.run_folder holds the files' contract).
* Cancel writes the folder's cancel file, which the launcher takes exactly as `RunHandle.cancel`: the ranks
  finish their step, write what they measured, result.json says cancelled. Only when the launcher is gone (it
  was killed) does the follower end the run's processes itself; it then writes no result.json, since it knows
  no outcome (the folder reads as failed: the launcher was killed).
* No torch import: the Streamlit app imports this module.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pipesim.io.bounded import read_tail
from pipesim_executor.host.launch import CANCEL_WAIT_S, STOP_GRACE_S
from pipesim_executor.host.run_folder import (
    RunResult,
    launcher_alive,
    load_run,
    read_progress,
    read_setup,
    request_cancel,
    run_status,
)
from pipesim_executor.processes import end_run_processes, run_processes
from pipesim_executor.run_files import STOP_FILE

READ_EVERY_S = 0.25  # progress.json is read at most this often per follower (the app asks several times a rerun)
LOG_TAIL_BYTES = 64 * 1024  # of each rank's log, its end: the lines shown fit many times over
LAUNCHER_GONE_S = 2.0  # the launcher must be seen gone this long before a cancel ends the processes itself


class FolderRun:
    """A run in progress, read from its folder (the launcher is another process); ValueError: not a run folder."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir).resolve()
        self.config, self.schedule = read_setup(self.run_dir)
        self._progress: dict[str, Any] = {}
        self._read_at = -READ_EVERY_S

    def _state(self) -> dict[str, Any]:
        if time.monotonic() - self._read_at >= READ_EVERY_S:
            self._progress, self._read_at = read_progress(self.run_dir), time.monotonic()
        return self._progress

    @property
    def status(self) -> str:
        return run_status(self.run_dir)

    @property
    def progress(self) -> float:
        """The launcher's own fraction (RunHandle.progress), as of its last progress.json."""
        if self.done():
            return 1.0
        value = self._state().get("progress")
        return min(max(float(value), 0.0), 0.99) if isinstance(value, (int, float)) else 0.0

    def events(self) -> list[dict]:
        events = self._state().get("events")
        return [e for e in events if isinstance(e, dict)] if isinstance(events, list) else []

    def log_tail(self, lines: int = 40) -> str:
        """The launcher's latest lines (`[rankN] ...`, as an own run's); without progress.json, the ranks' logs."""
        log = self._state().get("log")
        if isinstance(log, list):
            return "\n".join(str(line) for line in log[-lines:])
        tails = []
        for path in sorted((self.run_dir / "logs").glob("rank*.log")):
            try:  # the end of the log only, and never a wait on a FIFO
                text = read_tail(path, LOG_TAIL_BYTES).splitlines()[-lines:]
            except ValueError as error:
                text = [str(error)]
            tails += [f"[{path.stem}] {line}" for line in text]
        return "\n".join(tails[-lines:])

    def done(self) -> bool:
        return self.status != "running"

    def cancel(self, timeout: float = CANCEL_WAIT_S) -> None:
        """Ask the launcher to cancel (the cancel file) and wait for its result.json; a launcher that is gone
        cannot answer, so then the run's processes are ended from here (after a graceful stop while training)."""
        if self.done():
            return
        request_cancel(self.run_dir)
        deadline, gone_since = time.monotonic() + timeout, None
        while time.monotonic() < deadline and not (self.run_dir / "result.json").exists():
            if launcher_alive(self.run_dir):
                gone_since = None
            elif gone_since is None:
                gone_since = time.monotonic()
            elif time.monotonic() - gone_since >= LAUNCHER_GONE_S:
                self._end_without_launcher()
                return
            time.sleep(0.1)

    def _end_without_launcher(self) -> None:
        if run_processes(self.run_dir):
            (self.run_dir / STOP_FILE).write_text("cancelled\n")  # the ranks stop at a step boundary, if training
            stop_by = time.monotonic() + STOP_GRACE_S
            while run_processes(self.run_dir) and time.monotonic() < stop_by:
                time.sleep(0.1)
        end_run_processes(self.run_dir)

    def wait(self, timeout: float | None = None) -> RunResult:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done():
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"run {self.run_dir.name} still running after {timeout} s")
            time.sleep(0.2)
        return load_run(self.run_dir)


def attach(run_dir: str | Path) -> FolderRun | None:
    """The run in `run_dir` to follow, or None when it is not running (finished, gone, not a run folder)."""
    run_dir = Path(run_dir).resolve()
    if not (run_dir / "config.json").exists() or run_status(run_dir) != "running":  # before parsing anything
        return None
    try:
        return FolderRun(run_dir)
    except (ValueError, OSError):
        return None


def running_runs(runs_root: str | Path) -> list[FolderRun]:
    """The runs under `runs_root` that are running, newest first (only folders without result.json are looked at)."""
    root = Path(runs_root)
    if not root.is_dir():
        return []
    candidates = [p for p in root.iterdir() if p.is_dir() and not (p / "result.json").exists()]
    found = [run for run in map(attach, candidates) if run is not None]
    return sorted(found, key=lambda run: _started(run.run_dir), reverse=True)


def _started(run_dir: Path) -> float:
    try:
        return (run_dir / "config.json").stat().st_mtime
    except OSError:
        return 0.0
