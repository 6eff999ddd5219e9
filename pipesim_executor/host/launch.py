"""Start a real run under torchrun, stream its progress, end it cleanly, collect its results.

    handle = start_run(run_config(schedule="1f1b", num_ranks=2), runs_root=Path("runs"))
    handle.progress, handle.events(), handle.log_tail()    # while it runs (the app polls these)
    result = handle.wait()                                 # RunResult, also in runs/NAME/result.json

Why it is built this way:
* Everything that can be refused is refused before a process starts or a
  folder is made (`check_run`): a bad run costs the user nothing.
* The run folder is pipesim_executor.host.run_folder's, the command line and ending a
  process tree pipesim_executor.processes', reading torchrun's output
  pipesim_executor.host.torchrun_log's; this module supervises.
* One torchrun launch (spawn, relay its lines into logs and events, wait, end every process) is
  pipesim_executor.host.phase's `Phase`; the run and its torch reference are one each.
* A run's timeout covers the whole launch, the reference run included.
* Any process can follow and cancel the run from its folder (pipesim_executor.host.watch): the launcher rewrites
  progress.json while it runs and takes a `cancel` file in the folder as a cancel; `RunHandle.cancel` writes
  that very file, so there is one way to cancel.
* A timed run holds the machine (pipesim_executor.host.machine) from before its folder is made until its result
  is written: a second timed job on the same cores would spoil both timings, so it is refused (or waits).
* No torch import at module level: the Streamlit app imports this module.
"""

from __future__ import annotations

import atexit
import collections
import shutil
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path

from pipesim.io.formats import UnwritableOutput, read_json, save_schedule, write_json
from pipesim.ir import Schedule
from pipesim_executor.config import RunConfig
from pipesim_executor.host import machine, predict, run_folder
from pipesim_executor.host.checks import check_run
from pipesim_executor.host.phase import STOP_GRACE_S, Phase
from pipesim_executor.host.run_folder import RunResult, check_name, load_run, make_run_dir
from pipesim_executor.processes import (
    GRACE_S,
    REFERENCE_MODULE,
    run_environment,
    torchrun_command,
)
from pipesim_executor.progress import measured_so_far, outcome_sentence, step_fraction
from pipesim_executor.run_files import (
    CONFIG_FILE,
    LOGS_DIR,
    MEASURED_FILE,
    PROGRESS_EVERY_S,
    REFERENCE_FILE,
    SCHEDULE_FILE,
    result_file,
)

EventCallback = Callable[[dict], None]
CANCEL_WAIT_S = STOP_GRACE_S + 4 * GRACE_S + 10  # the longest a cancel takes, end to end

# Runs this process started and that have not ended. The one piece of module state here, and on purpose: when
# the process that launched runs exits (the Streamlit server stopped, the CLI ended by a signal), every run it
# started is ended with it rather than left running with no one to collect it (torchrun has its own session,
# so it would survive its parent).
_LIVE: weakref.WeakSet[RunHandle] = weakref.WeakSet()


@atexit.register
def _cancel_live_runs() -> None:
    for handle in list(_LIVE):
        handle.cancel()


# --- the handle ------------------------------------------------------------------------------------------------


class RunHandle:
    """A run in progress (a background thread supervises it); poll it or `wait()` for its RunResult."""

    def __init__(self, run_dir: Path, config: RunConfig, schedule: Schedule, on_event: EventCallback | None = None):
        self.run_dir, self.config, self.schedule = run_dir, config, schedule
        self._on_event = on_event
        self._lock = threading.Lock()
        self._events: list[dict] = []
        self._lines: collections.deque[str] = collections.deque(maxlen=2000)
        self._fractions: dict[str, dict[int, float]] = collections.defaultdict(dict)
        self._alive: set[int] = set()
        self._status = "running"
        self._result: RunResult | None = None
        self._cancelled = threading.Event()
        self._finished = threading.Event()  # set once result.json is written
        self._published = -PROGRESS_EVERY_S  # time.monotonic() of the last progress.json
        self._thread = threading.Thread(target=self._supervise, name=f"run {run_dir.name}", daemon=True)
        self._machine: machine.MachineLock | None = None  # the machine's lock this run took (start_handle)

    # public, read by the app and the CLI
    @property
    def status(self) -> str:
        return self._status

    @property
    def progress(self) -> float:
        """Fraction done: the slowest rank's steps; the reference run, if any, is the last fifth."""
        if self._status != "running":
            return 1.0
        with self._lock:
            weights = {"run": 0.8, "reference": 0.2} if self.config.reference else {"run": 1.0}
            done = sum(w * min(self._fractions[p].values(), default=0.0) for p, w in weights.items())
        return min(done, 0.99)

    def events(self) -> list[dict]:
        with self._lock:
            return list(self._events)

    def log_tail(self, lines: int = 40) -> str:
        with self._lock:
            return "\n".join(list(self._lines)[-lines:])

    def done(self) -> bool:
        return self._status != "running"

    def cancel(self, timeout: float = CANCEL_WAIT_S) -> None:
        """End every process of the run; returns once they are gone and result.json is written.

        Waits on an Event, not Thread.join: under Python 3.11 a join interrupted by Ctrl-C leaves the thread's
        lock so that every later join returns at once, and the cancel would wait for nothing. The cancel file
        is the one way to cancel (a process that follows the run from its folder writes it too); the event
        makes it immediate and serves a folder that cannot be written. A run that has ended is left alone: its
        folder may be shared with another node's launcher still finishing (multi-node), which the file would
        cancel.
        """
        if self._finished.is_set():
            return
        try:
            run_folder.request_cancel(self.run_dir)
        except OSError:
            pass
        self._cancelled.set()
        self._finished.wait(timeout)

    def wait(self, timeout: float | None = None) -> RunResult:
        self._finished.wait(timeout)
        if self._result is None:
            raise TimeoutError(f"run {self.run_dir.name} still running after {timeout} s")
        return self._result

    # called by the supervising threads (pipesim_executor.host.phase.PhaseOwner)
    def add_line(self, line: str) -> None:
        with self._lock:
            self._lines.append(line)

    def add_event(self, event: dict, part: str) -> None:
        with self._lock:
            fraction = step_fraction(event, self.config)
            if fraction is not None:
                self._fractions[part][event["rank"]] = fraction
            kind = event.get("event")
            if kind in ("done", "exit", "error"):
                self._alive.discard(event["rank"])
            elif isinstance(event.get("rank"), int):
                self._alive.add(event["rank"])
            event = {**event, "part": part, "ranks_alive": sorted(self._alive)}
            self._events.append(event)
        self._emit(event)

    def _emit(self, event: dict) -> None:
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception as error:  # a broken callback must not break the run
                self.add_line(f"on_event callback failed: {error!r}")

    def publish(self, force: bool = False) -> None:
        """Rewrite progress.json (node 0; at most every PROGRESS_EVERY_S unless forced): what a process that
        follows the run from its folder shows, as the app shows an own run from this handle."""
        if self.config.nodes.node_rank != 0 or not (force or time.monotonic() - self._published >= PROGRESS_EVERY_S):
            return
        self._published = time.monotonic()
        with self._lock:  # the latest only: a long run's full event list is not copied twice a second
            events, lines = self._events[-50:], list(self._lines)[-400:]
        state = {"status": self._status, "progress": self.progress, "events": events, "log": lines}
        try:
            run_folder.write_progress(self.run_dir, state)
        except (OSError, ValueError):  # a full disk must not break the run; followers see older progress
            pass

    def _launch_event(self, kind: str, **fields: object) -> None:
        event = {"event": kind, "run_dir": str(self.run_dir), "part": "launcher", **fields}
        with self._lock:
            self._events.append(event)
        self._emit(event)

    def _supervise(self) -> None:
        try:
            self._supervise_run()
        finally:
            self.release_machine()
            self._finished.set()  # whatever happened, nobody waits forever
            _LIVE.discard(self)

    def release_machine(self) -> None:
        """Free the machine once the timing is over: before `wait` returns, so a caller's next run finds it free."""
        if self._machine is not None:
            self._machine.release()

    def _supervise_run(self) -> None:
        started = time.time()
        deadline = time.monotonic() + self.config.timeout_s
        env = run_environment(self.config)
        main = Phase(torchrun_command(self.config, self.run_dir), env, self, self._node_prefix)
        self._launch_event("launch", command=main.argv)
        self.publish(force=True)
        try:
            outcome = main.run(deadline, self._cancelled)
            if outcome.status == "cancelled":  # asked for: say so calmly, no log tail of the ranks' SIGTERM
                done = measured_so_far(self.events(), self._measured_steps())  # the card's steps, its median
                message, failed_rank = outcome.message + (f" ({done})" if done else ""), None
            else:
                message, failed_rank = main.failure_message(outcome) if outcome.status != "ok" else ("", None)
            summary = {"status": outcome.status, "message": message, "returncode": outcome.returncode,
                       "failed_rank": failed_rank, "command": main.argv}  # fmt: skip
            if outcome.status == "ok":
                summary.update(self._after_success(env, deadline))
        except Exception as error:  # the launcher itself broke: still leave a result behind
            summary = {"status": "failed", "message": f"launcher error: {error!r}", "returncode": None}
        # the one sentence every reader shows first; the log tail stays in `message` and logs/
        summary["outcome"] = outcome_sentence(
            summary["status"], self.events(), self.config, summary["message"], self._measured_steps()
        )
        summary.update(started_at=started, finished_at=time.time(), wall_s=round(time.time() - started, 3))
        try:
            write_json(summary, self.run_dir / self._result_name)
            if self.config.nodes.node_rank == 0:
                self._result = load_run(self.run_dir)
            else:  # the folder's result.json is node 0's; this node reports its own launch
                self._result = RunResult(
                    self.run_dir, summary["status"], summary["message"], self.config, self.schedule
                )
        except (OSError, ValueError, KeyError, TypeError) as error:  # e.g. a worker wrote a malformed file
            message = f"{summary['message']}\ncannot read the run's files: {error}".strip()
            summary.update(status="failed", message=message)
            self._result = RunResult(self.run_dir, "failed", summary["message"], self.config, self.schedule)
        self._status = summary["status"]
        self.publish(force=True)
        # The finished event before the wait ends: a caller that prints the summary once `wait` returns (the CLI)
        # must never have its line glued to the event's.
        self.release_machine()
        self._launch_event("finished", status=self._status, message=summary.get("message", ""),
                           failed_rank=summary.get("failed_rank"))  # fmt: skip
        self._finished.set()

    def _measured_steps(self) -> list[float] | None:
        """The step times the ranks wrote before they stopped (measured.json): what the run's card shows."""
        try:
            times = read_json(self.run_dir / MEASURED_FILE).get("step_times_ms")
        except (OSError, ValueError, AttributeError):
            return None
        if not isinstance(times, list) or not all(isinstance(t, (int, float)) for t in times):
            return None
        return [float(t) for t in times]

    @property
    def _node_prefix(self) -> str:
        """Log file prefix: "" on a single node, "node1-" for node 1 of a multi-node run (ranks' logs are named
        by global rank and never collide; each launcher's own log would)."""
        return f"node{self.config.nodes.node_rank}-" if self.config.nodes.nnodes > 1 else ""

    @property
    def _result_name(self) -> str:
        return result_file(self.config.nodes.node_rank)

    def _after_success(self, env: dict[str, str], deadline: float) -> dict:
        """Prediction (with profile) and the torch.distributed.pipelining reference (with reference)."""
        out = predict.analyse_run(self.run_dir, self.schedule, self.config)
        if self.config.reference:
            out.update(self._reference(env, deadline))
        return out

    def _reference(self, env: dict[str, str], deadline: float) -> dict:
        from pipesim_executor.rank.reference import unavailable_reason

        reason = unavailable_reason(self.config, self.schedule)
        if reason is not None:
            write_json({"torch_schedule": None, "error": reason, "step_times_ms": [], "losses": []},
                       self.run_dir / REFERENCE_FILE)  # fmt: skip
            return {"status": "partial", "reference_status": "unavailable", "message": f"no reference run: {reason}"}
        command = torchrun_command(self.config, self.run_dir, module=REFERENCE_MODULE)
        phase = Phase(command, env, self, f"reference-{self._node_prefix}", part="reference")
        self._launch_event("launch", command=phase.argv, part="reference")
        outcome = phase.run(deadline, self._cancelled)
        if outcome.status == "ok":
            return {"reference_status": "ok"}
        message, _ = phase.failure_message(outcome)
        if outcome.status in ("cancelled", "timeout"):
            status = outcome.status
            return {"status": status, "message": f"reference run: {message}", "reference_status": status}
        write_json({"torch_schedule": None, "error": message, "step_times_ms": [], "losses": []},
                   self.run_dir / REFERENCE_FILE)  # fmt: skip
        return {"status": "partial", "reference_status": "failed", "message": f"reference run failed: {message}"}


# --- public entry points -----------------------------------------------------------------------------------------


def start_run(
    config: RunConfig,
    runs_root: Path = Path("runs"),
    *,
    name: str | None = None,
    schedule: Schedule | None = None,
    on_event: EventCallback | None = None,
    held: machine.MachineLock | None = None,
    wait_for_machine: bool = False,
    on_wait: Callable[[machine.Holder | None], None] | None = None,
) -> RunHandle:
    """Validate (ValueError before anything starts), take the machine (MachineBusy naming who holds it; with
    `wait_for_machine`, wait for it), write the run folder, start torchrun in the background. `held`: the machine's
    lock the caller holds already (a verification's runs): told this run's folder, left held when the run ends."""
    if name is not None:
        check_name(name)
    config, schedule = check_run(config, schedule)
    lock = take_machine("run", config, runs_root, name, held, wait_for_machine, on_wait)
    try:
        run_dir = make_run_dir(Path(runs_root), name, config)
        if held is not None:
            held.update(run_dir=str(run_dir))
        elif lock is not None:
            lock.update(run_dir=str(run_dir))
        try:  # every node of a multi-node run writes the same two files; the writes are atomic
            (run_dir / LOGS_DIR).mkdir(exist_ok=config.nodes.nnodes > 1)
            write_json(config.to_dict(), run_dir / CONFIG_FILE)
            save_schedule(schedule, run_dir / SCHEDULE_FILE)
        except (OSError, ValueError) as error:  # a full disk, say: leave no half-made folder behind
            if config.nodes.nnodes == 1:
                shutil.rmtree(run_dir, ignore_errors=True)
            reason = getattr(error, "strerror", None) or error
            raise UnwritableOutput(f"cannot write the run folder {run_dir}: {reason}") from None
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return start_handle(RunHandle(run_dir, config, schedule, on_event), lock)


def take_machine(
    command: str,
    config: RunConfig,
    runs_root: Path,
    name: str | None,
    held: machine.MachineLock | None = None,
    wait: bool = False,
    on_wait: Callable[[machine.Holder | None], None] | None = None,
) -> machine.MachineLock | None:
    """The machine's lock for a run about to start (None: `held` by the caller, or another node's launcher of the
    same multi-node run holds it on this machine); MachineBusy when another job holds it."""
    if held is not None:
        return None
    shared = config.nodes.nnodes > 1 and name is not None
    run_dir = str((Path(runs_root) / name).resolve()) if shared else ""
    return machine.hold(command, run_dir=run_dir, wait=wait, on_wait=on_wait, same_run_ok=shared)


def start_handle(handle: RunHandle, lock: machine.MachineLock | None = None) -> RunHandle:
    """Start a handle's supervising thread, which releases `lock` (the machine) when the run ends; it is ended
    with this process if it has not ended (`_LIVE`)."""
    handle._machine = lock
    _LIVE.add(handle)
    handle._thread.start()
    return handle


def run(
    config: RunConfig,
    runs_root: Path = Path("runs"),
    *,
    name: str | None = None,
    schedule: Schedule | None = None,
    on_event: EventCallback | None = None,
    wait_for_machine: bool = False,
) -> RunResult:
    """Blocking `start_run(...).wait()`; Ctrl-C cancels the run (every process ends) and re-raises."""
    handle = start_run(
        config, runs_root, name=name, schedule=schedule, on_event=on_event, wait_for_machine=wait_for_machine
    )
    try:
        return handle.wait()
    except KeyboardInterrupt:
        handle.cancel()
        raise
