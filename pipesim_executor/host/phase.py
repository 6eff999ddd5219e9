"""One torchrun launch of a run: spawn it, relay its output line by line into the rank logs and progress events,
wait with a deadline and a cancel, and end every process it started (pipesim_executor.host.launch supervises the phases:
the run, then the torch reference).

torchrun relays each rank's output with a `[rankN]:` prefix (`--tee 3`); the phase splits it into logs/rankN.log
and parses the `PIPESIM {json}` progress lines into events on its RunHandle.
"""

from __future__ import annotations

import collections
import json
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pipesim_executor.host import run_folder, torchrun_log
from pipesim_executor.processes import GRACE_S, REPO_ROOT, end_process_tree, run_processes
from pipesim_executor.progress import PROGRESS_PREFIX
from pipesim_executor.run_files import LOGS_DIR, STOP_FILE

if TYPE_CHECKING:
    from pipesim_executor.config import RunConfig


class PhaseOwner(Protocol):
    """The run a phase reports to (`pipesim_executor.host.launch.RunHandle` is one): where its folder is, its
    config, and the three things a phase tells it (a log line, a progress event, when to rewrite progress.json).
    Declared here, so that this module needs nothing of the launcher's."""

    run_dir: Path
    config: RunConfig

    def events(self) -> list[dict]: ...

    def add_line(self, line: str) -> None: ...

    def add_event(self, event: dict, part: str) -> None: ...

    def publish(self, force: bool = False) -> None: ...


STOP_GRACE_S = 20.0  # a cancel waits this long for the ranks to finish their step and write measured.json


def _rank_deque() -> collections.deque[str]:
    return collections.deque(maxlen=200)


@dataclass
class Outcome:
    status: str  # ok | failed | timeout | cancelled
    returncode: int | None
    message: str = ""


class Phase:
    """One torchrun launch: spawn, relay lines, wait with timeout and cancellation, end every process."""

    def __init__(
        self, argv: list[str], env: dict[str, str], handle: PhaseOwner, log_prefix: str, part: str = "run"
    ) -> None:
        self.argv, self.env, self.handle, self.log_prefix, self.part = argv, env, handle, log_prefix, part
        self.launcher_lines: collections.deque[str] = collections.deque(maxlen=400)
        self.rank_lines: dict[int, collections.deque[str]] = collections.defaultdict(_rank_deque)
        self.error_events: list[tuple[int, str]] = []  # (rank, message); rank -1: torchrun saw a failure

    def run(self, deadline: float, cancelled: threading.Event) -> Outcome:
        logs = self.handle.run_dir / LOGS_DIR
        proc = subprocess.Popen(
            self.argv, env=self.env, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        reader = threading.Thread(target=self._relay, args=(proc, logs), daemon=True)
        reader.start()
        outcome = self._watch(proc, deadline, cancelled)
        if outcome.status == "cancelled" and self.part == "run" and self._training():
            self._stop_gracefully(proc)
        node = self.handle.config.nodes.node_rank
        if outcome.status != "ok" or run_processes(self.handle.run_dir, node):
            end_process_tree(proc, self.handle.run_dir, node)
        reader.join(timeout=10)
        return outcome

    def _training(self) -> bool:
        """Whether the ranks are in their training steps (where they look for the stop file)."""
        return any(e.get("event") == "step" and e.get("phase") in ("warmup", "measure") for e in self.handle.events())

    def _stop_gracefully(self, proc: subprocess.Popen) -> None:
        """Ask the ranks to stop after the step in progress and write what they measured; the caller ends
        whatever is still there after STOP_GRACE_S."""
        try:
            (self.handle.run_dir / STOP_FILE).write_text("cancelled\n")
            proc.wait(timeout=STOP_GRACE_S)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def _watch(self, proc: subprocess.Popen, deadline: float, cancelled: threading.Event) -> Outcome:
        failure_seen: float | None = None
        while True:
            try:
                code = proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                code = None
            if code is not None:
                return Outcome("ok" if code == 0 else "failed", code)
            self.handle.publish()
            if cancelled.is_set() or run_folder.cancel_requested(self.handle.run_dir):  # ours, or the folder's
                cancelled.set()
                return Outcome("cancelled", None, "cancelled by the caller")
            if time.monotonic() > deadline:
                return Outcome("timeout", None, f"timed out after {self.handle.config.timeout_s:g} s")
            if self.error_events and failure_seen is None:
                failure_seen = time.monotonic()
            if failure_seen is not None and time.monotonic() - failure_seen > GRACE_S:
                return Outcome("failed", None)  # a rank died and torchrun did not end the rest in time

    def _relay(self, proc: subprocess.Popen, logs: Path) -> None:
        files: dict[str, object] = {}
        try:
            for raw in proc.stdout:  # type: ignore[union-attr]
                line = raw.decode("utf-8", "replace").rstrip("\n")
                match = torchrun_log.RANK_LINE.match(line)
                if match is None:
                    self._write(files, logs / f"{self.log_prefix}launcher.log", line)
                    self.launcher_lines.append(line)
                    self.handle.add_line(f"[torchrun] {line}")
                    if "exitcode" in line and "local_rank" in line:
                        self.error_events.append((-1, line))
                    continue
                rank, text = int(match.group(1)), match.group(2)
                self._write(files, logs / f"{self.log_prefix}rank{rank}.log", text)
                self.rank_lines[rank].append(text)
                self.handle.add_line(f"[rank{rank}] {text}")
                if text.startswith(PROGRESS_PREFIX):
                    self._progress(rank, text[len(PROGRESS_PREFIX) :])
        finally:
            for handle in files.values():
                handle.close()  # type: ignore[attr-defined]

    def _write(self, files: dict, path: Path, line: str) -> None:
        if str(path) not in files:
            files[str(path)] = open(path, "a", encoding="utf-8", buffering=1)
        files[str(path)].write(line + "\n")

    def _progress(self, rank: int, payload: str) -> None:
        try:
            event, _ = json.JSONDecoder().raw_decode(payload.strip())
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        event.setdefault("rank", rank)
        if event.get("event") == "error":
            self.error_events.append((rank, str(event.get("message", ""))))
        self.handle.add_event(event, part=self.part)

    def failure_message(self, outcome: Outcome) -> tuple[str, int | None]:
        return torchrun_log.failure_message(
            outcome.message, outcome.returncode, self.rank_lines, list(self.launcher_lines), self.error_events
        )
