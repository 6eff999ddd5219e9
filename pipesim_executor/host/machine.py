"""One timed job on a machine at a time: the lock every timed `executor run`, `profile` and `verify-plan` holds.

    lock = hold("run", run_dir="runs/x")     # MachineBusy (one line: who holds it) when another job holds it
    lock.update(run_dir="runs/y", step="run 2 of 6")
    lock.release()
    holder()                                  # who holds it now, or None

Two timed jobs on one machine share its cores and spoil each other's timings, so a second one is refused (or,
with `wait`, waits). The lock is `fcntl.flock` on one file per machine, not per runs folder: two runs folders on
one machine still share its CPUs. The kernel releases a flock when its holder dies, however it dies, so there is
no stale pid file to clean up. The file is PIPESIM_MACHINE_LOCK when set (the tests' own, per worker), else
`pipesim-machine.lock` in the system's temporary folder. Who holds it (command, run folder, started when, pid) is
a JSON file beside it, replaced whole on every change, read only while the lock is held.

flock locks an open file description: two opens in one process exclude each other, so the app's Plan
verification and its Run page's launch, in one server process, exclude each other too.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from pipesim.flags import Failure

LOCK_ENV = "PIPESIM_MACHINE_LOCK"
POLL_S = 0.5  # how often a waiting job tries again
# A holder writes its JSON just after taking the lock, and a probe (`holder`) holds a shared lock for an instant:
# a job refused within this long of either tries again before it says the machine is busy.
SETTLE_S = 1.0


class MachineBusy(Failure):
    """Another timed job holds the machine (its one line names it); nothing was started."""


@dataclass(frozen=True)
class Holder:
    """Who holds the machine: the command, its run folder now (a verification's changes per run), when it began,
    its process, and where a job of several runs is (`step`, `runs_done`)."""

    command: str
    run_dir: str = ""
    started_at: float = 0.0
    pid: int = 0
    job: str = ""
    step: str = ""
    runs_done: int = 0  # of a job of several runs (a verification): how many have ended, of `runs_total`
    runs_total: int = 1

    def line(self) -> str:
        """One line: `the machine is held by executor verify-plan (plan.json; run 2 of 6, run folder runs/x,
        started 05:31:02, pid 123)`."""
        started = datetime.datetime.fromtimestamp(self.started_at).strftime("%H:%M:%S") if self.started_at else "?"
        parts = [p for p in (self.job, self.step) if p]
        if self.run_dir:
            parts.append(f"run folder {self.run_dir}")
        parts += [f"started {started}", f"pid {self.pid}"]
        return f"the machine is held by executor {self.command} ({', '.join(parts)})"


def lock_path() -> Path:
    return Path(os.environ.get(LOCK_ENV) or Path(tempfile.gettempdir()) / "pipesim-machine.lock")


def _holder_path(lock: Path) -> Path:
    return lock.with_name(lock.name + ".json")


def _open(path: Path) -> int:
    """The lock file's descriptor (made with the umask's permissions; read-only where another user made it)."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except PermissionError:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


class MachineLock:
    """The held lock: `update` says where the job is, `release` ends the hold (also when the process dies)."""

    def __init__(self, fd: int, path: Path, holder: Holder) -> None:
        self._fd: int | None = fd
        self.path, self.holder = path, holder
        self._write()

    def update(self, **fields: object) -> None:
        self.holder = replace(self.holder, **fields)
        self._write()

    def _write(self) -> None:
        target = _holder_path(self.path)
        temporary = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        try:  # replaced whole: a reader sees the old holder or the new one, never half of one
            temporary.write_text(json.dumps(asdict(self.holder)))
            os.replace(temporary, target)
        except OSError:  # another user's file in a shared temporary folder: the lock still holds, unnamed
            with contextlib.suppress(OSError):
                temporary.unlink()

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        os.close(fd)  # closing the descriptor releases the flock

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> MachineLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _try(path: Path) -> int | None:
    fd = _open(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def hold(
    command: str,
    *,
    run_dir: str = "",
    job: str = "",
    wait: bool = False,
    on_wait: Callable[[Holder | None], None] | None = None,
    same_run_ok: bool = False,
) -> MachineLock | None:
    """Take the machine for `command`; MachineBusy naming the holder when another job has it (with `wait`: wait
    for it, calling `on_wait` once with the holder). `same_run_ok`: a launcher of another node of the same
    multi-node run (the same `run_dir`) holds it, so this one runs beside it and holds nothing (None)."""
    path = lock_path()
    settle = time.monotonic() + SETTLE_S
    told = False
    while True:
        fd = _try(path)
        if fd is not None:
            return MachineLock(fd, path, Holder(command, str(run_dir), time.time(), os.getpid(), job))
        other = holder()
        if same_run_ok and other is not None and run_dir and other.run_dir == str(run_dir):
            return None
        if time.monotonic() < settle:
            time.sleep(0.05)
            continue
        if not wait:
            said = other.line() if other is not None else "the machine is held by another timed job"
            raise MachineBusy(f"{said}; wait for it to end, or pass --wait to start once it has")
        if not told and on_wait is not None:
            on_wait(other)
            told = True
        time.sleep(POLL_S)


def holder() -> Holder | None:
    """Who holds the machine now; None when no one does. Probes with a shared lock (probes never exclude each
    other; a job that starts during the instant of a probe tries again, SETTLE_S)."""
    path = lock_path()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # no lock file: no job has ever held this machine
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_holder(path)
        return None
    finally:
        os.close(fd)


def _read_holder(path: Path) -> Holder:
    try:
        data = json.loads(_holder_path(path).read_text())
        return Holder(**{k: data[k] for k in Holder.__dataclass_fields__ if k in data})
    except (OSError, ValueError, TypeError):
        return Holder("(unknown)")
