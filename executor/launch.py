"""Start a real run under torchrun, stream its progress, end it cleanly, collect its results.

    handle = start_run(RunConfig(schedule="1f1b", num_ranks=2), runs_root=Path("runs"))
    handle.progress, handle.events(), handle.log_tail()    # while it runs (the app polls these)
    result = handle.wait()                                 # RunResult, also in runs/NAME/result.json

Why it is built this way:
* Everything that can be refused is refused before a process starts or a
  folder is made (`check_run`): a bad run costs the user nothing.
* The torchrun command is an argument list, never a shell string.
* torchrun puts each worker in its own session, so ending a run means ending
  torchrun's process group *and* every process whose command line names the
  run folder (found in /proc); SIGTERM first, SIGKILL after a grace period.
* No torch import at module level: the Streamlit app imports this module.
"""

from __future__ import annotations

import collections
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from executor.config import PROGRESS_PREFIX, RunConfig
from executor import predict
from pipesim.ir import Schedule
from pipesim.formats import schedule_to_dict, write_json

# Re-exported so callers need one import: the run-folder readers live in predict.py.
from executor.predict import RunResult, list_runs, load_run  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parent.parent
WORKER_MODULE = "executor.worker"
REFERENCE_MODULE = "executor.reference"
GRACE_S = 5.0  # SIGTERM -> SIGKILL
MAX_CPU_RANKS = 16
_RANK_LINE = re.compile(r"^\[(?:rank|default)(\d+)\]:(.*)$")
_FAILED_RANK = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank")
_ERROR_LINE = re.compile(r"^(\[rank\d+\]:\s*)?[\w.]*(Error|Exception|Interrupt)\b")
# A rank whose error is one of these died because another rank did.
_PEER_FAILURE = ("Connection closed by peer", "remote worker crashing", "Connection reset by peer", "Broken pipe")
EventCallback = Callable[[dict], None]


# --- checks: everything refused before anything starts ----------------------------------------------------------


def check_run(config: RunConfig, schedule: Schedule | None = None) -> tuple[RunConfig, Schedule]:
    """Return the config with device and backend resolved, and the schedule; ValueError on any user mistake."""
    schedule = _checked_schedule(config, schedule)
    _check_model_fits(config, schedule)
    _check_nodes(config)
    config = _resolve_device(config)
    _check_cpu_ranks(config)
    return config, schedule


def _checked_schedule(config: RunConfig, schedule: Schedule | None) -> Schedule:
    from pipesim.cost import CostModel
    from pipesim.schedules import build_schedule
    from pipesim.simulate import simulate
    from pipesim.validate import validate

    if schedule is None:
        schedule = build_schedule(
            config.schedule, config.num_ranks, config.num_microbatches, num_virtual_stages=config.num_virtual_stages
        )
    elif (schedule.num_ranks, schedule.num_microbatches) != (config.num_ranks, config.num_microbatches):
        raise ValueError(
            f"schedule {schedule.name!r} is for {schedule.num_ranks} ranks and {schedule.num_microbatches} "
            f"microbatches but the run asks for {config.num_ranks} ranks and {config.num_microbatches}"
        )
    validate(schedule)  # ScheduleError (a ValueError) names rank, action and rule
    simulate(schedule, CostModel.uniform())  # DeadlockError says which rank waits on which action
    return schedule


def model_units(config: RunConfig) -> int:
    """Layers of the model that stages share out (mirrors executor.model.build_model without importing torch).

    Transformer: embedding, num_layers blocks, output projection. CNN: cnn_blocks conv blocks, 3 FC layers.
    """
    model = config.model
    return model.num_layers + 2 if model.kind == "transformer" else model.cnn_blocks + 3


def _check_model_fits(config: RunConfig, schedule: Schedule) -> None:
    units = model_units(config)
    if config.model.kind == "transformer":
        what, knob = f"embedding + {config.model.num_layers} blocks + output", "--layers"
    else:
        what, knob = f"{config.model.cnn_blocks} conv blocks + 3 FC layers", "--cnn-blocks"
    if schedule.num_stages > units:
        raise ValueError(
            f"schedule {schedule.name!r} has {schedule.num_stages} stages but the model has only {units} layers "
            f"({what}) and every stage needs one; use fewer ranks or virtual stages, or raise {knob}"
        )
    points = config.model.split_points
    if points is not None:
        if len(points) != schedule.num_stages - 1:
            raise ValueError(
                f"split_points {list(points)} give {len(points) + 1} stages but the schedule has "
                f"{schedule.num_stages}: give {schedule.num_stages - 1} layer indices"
            )
        if points and (list(points) != sorted(set(points)) or points[0] < 1 or points[-1] >= units):
            raise ValueError(f"split_points must increase strictly within 1..{units - 1}, got {list(points)}")


def _check_nodes(config: RunConfig) -> None:
    if config.nnodes < 1 or not 0 <= config.node_rank < config.nnodes:
        raise ValueError(f"node_rank must lie in 0..{config.nnodes - 1} (nnodes {config.nnodes})")
    if config.num_ranks % config.nnodes:
        raise ValueError(f"{config.num_ranks} ranks do not split evenly over {config.nnodes} nodes")
    if config.nnodes > 1 and not config.rdzv_endpoint:
        raise ValueError("a multi-node run needs rdzv_endpoint HOST:PORT (the same on every node)")
    if config.rdzv_endpoint and not re.fullmatch(r"[\w.\-\[\]:]+:\d{1,5}", config.rdzv_endpoint):
        raise ValueError(f"rdzv_endpoint must look like HOST:PORT, got {config.rdzv_endpoint!r}")


def ranks_per_node(config: RunConfig) -> int:
    return config.num_ranks // config.nnodes


def cuda_device_count() -> int:
    """Visible CUDA devices; imports torch (slow) only here."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _resolve_device(config: RunConfig) -> RunConfig:
    device, backend, per_node = config.device, config.backend, ranks_per_node(config)
    if device == "cpu" and backend in ("nccl", "staged"):
        raise ValueError(f"backend {backend} moves CUDA tensors; on device cpu use backend gloo (or auto)")
    if device == "cpu" or (device == "auto" and backend == "gloo"):
        return replace(config, device="cpu", backend="gloo")
    gpus = cuda_device_count()
    if device == "cuda" and gpus == 0:
        raise ValueError("device cuda was asked for but torch sees no CUDA GPU; use device cpu (backend gloo)")
    if device == "auto":
        if gpus == 0 and backend in ("nccl", "staged"):
            raise ValueError(f"backend {backend} needs CUDA GPUs and torch sees none; use backend gloo or auto")
        device = "cuda" if gpus else "cpu"
        if device == "cpu":
            return replace(config, device="cpu", backend="gloo")
    if backend == "nccl" and gpus < per_node:
        raise ValueError(
            f"backend nccl needs one GPU per rank: {per_node} ranks on this node but {gpus} GPU(s); "
            f"use backend staged (ranks share GPUs, transfers go through host memory) or fewer ranks"
        )
    if backend == "auto":
        backend = "nccl" if gpus >= per_node else "staged"
    return replace(config, device=device, backend=backend)


def max_cpu_ranks() -> int:
    """More CPU ranks than this only measure the OS scheduler: 2 per core, at most 16."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return min(MAX_CPU_RANKS, 2 * cores)


def _check_cpu_ranks(config: RunConfig) -> None:
    per_node, limit = ranks_per_node(config), max_cpu_ranks()
    if config.device == "cpu" and per_node > limit:
        raise ValueError(
            f"{per_node} CPU ranks on one node is too many for this machine: the limit is {limit} "
            f"(2 per core, at most {MAX_CPU_RANKS}); use fewer ranks or more nodes"
        )


# --- the command ------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun_command(
    config: RunConfig, run_dir: Path, port: int | None = None, module: str | None = None
) -> list[str]:
    """The torchrun argument list; `-u` keeps torchrun's relayed worker lines unbuffered."""
    endpoint = config.rdzv_endpoint or f"127.0.0.1:{port if port is not None else free_port()}"
    return [
        sys.executable, "-u", "-m", "torch.distributed.run",
        "--nnodes", str(config.nnodes),
        "--node-rank", str(config.node_rank),
        "--nproc-per-node", str(ranks_per_node(config)),
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", endpoint,
        "--rdzv-id", run_dir.name,
        "--max-restarts", "0",
        "--monitor-interval", "0.2",
        "--tee", "3",
        "--log-dir", str(run_dir / "logs" / "torchrun"),
        "-m", module or WORKER_MODULE,
        "--run-dir", str(run_dir),
    ]  # fmt: skip


def run_environment(config: RunConfig) -> dict[str, str]:
    """The parent's environment plus what the ranks need (crash-injection variables pass through)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = "[rank${rank}]:"
    env.pop("PYTHONUNBUFFERED", None)  # workers flush their own progress lines; see module docstring
    if config.device == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // ranks_per_node(config)))
    return env


# --- the run folder -----------------------------------------------------------------------------------------


def default_name(config: RunConfig) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{config.schedule}-{config.num_ranks}r"


def _check_name(name: str) -> None:
    if not re.fullmatch(r"[\w.\-]+", name) or name in (".", ".."):
        raise ValueError(f"run name {name!r} may hold only letters, digits, '.', '-' and '_'")


def make_run_dir(runs_root: Path, name: str | None, config: RunConfig) -> Path:
    """Create the run folder. A taken explicit name is refused; a taken default name gets -2, -3, ..."""
    runs_root.mkdir(parents=True, exist_ok=True)
    if name is not None:
        try:
            (runs_root / name).mkdir()
        except FileExistsError:
            raise ValueError(f"run folder {runs_root / name} already exists; choose another name") from None
        return (runs_root / name).resolve()
    base = default_name(config)
    for suffix in range(1, 1000):
        candidate = runs_root / (base if suffix == 1 else f"{base}-{suffix}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate.resolve()
    raise ValueError(f"no free run folder name under {runs_root} for {base}")


# --- processes ------------------------------------------------------------------------------------------------


def run_processes(run_dir: Path | str) -> list[int]:
    """Pids of live processes started with `--run-dir RUN_DIR` (Linux /proc; [] elsewhere).

    Matching the argument pair, not a substring, spares e.g. a shell whose command merely mentions the folder.
    """
    needle = b"\0--run-dir\0" + str(run_dir).encode() + b"\0"
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    pids = []
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                if needle in handle.read():
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def _signal_all(proc: subprocess.Popen, run_dir: Path, sig: int) -> None:
    for kill, target in [(os.killpg, proc.pid)] + [(os.kill, pid) for pid in run_processes(run_dir)]:
        try:
            kill(target, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end_process_tree(proc: subprocess.Popen, run_dir: Path, grace_s: float = GRACE_S) -> None:
    """SIGTERM torchrun's group and every process of `run_dir`; SIGKILL what is left after `grace_s`."""
    _signal_all(proc, run_dir, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc.poll() is not None and not run_processes(run_dir):
            break
        time.sleep(0.05)
    for _ in range(3):  # a process forked while we signalled still gets caught
        _signal_all(proc, run_dir, signal.SIGKILL)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        if not run_processes(run_dir):
            return
        time.sleep(0.1)


@dataclass
class _Outcome:
    status: str  # ok | failed | timeout | cancelled
    returncode: int | None
    message: str = ""


class _Phase:
    """One torchrun launch: spawn, relay lines, wait with timeout and cancellation, end every process."""

    def __init__(self, argv: list[str], env: dict[str, str], handle: "RunHandle", log_prefix: str) -> None:
        self.argv, self.env, self.handle, self.log_prefix = argv, env, handle, log_prefix
        self.launcher_lines: collections.deque[str] = collections.deque(maxlen=400)
        self.rank_lines: dict[int, collections.deque[str]] = collections.defaultdict(lambda: collections.deque(maxlen=200))
        self.error_ranks: list[int] = []

    def run(self, deadline: float, cancelled: threading.Event) -> _Outcome:
        logs = self.handle.run_dir / "logs"
        proc = subprocess.Popen(
            self.argv, env=self.env, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        reader = threading.Thread(target=self._relay, args=(proc, logs), daemon=True)
        reader.start()
        outcome = self._watch(proc, deadline, cancelled)
        if outcome.status != "ok" or run_processes(self.handle.run_dir):
            end_process_tree(proc, self.handle.run_dir)
        reader.join(timeout=10)
        return outcome

    def _watch(self, proc: subprocess.Popen, deadline: float, cancelled: threading.Event) -> _Outcome:
        failure_seen: float | None = None
        while True:
            try:
                code = proc.wait(timeout=0.1)
            except subprocess.TimeoutExpired:
                code = None
            if code is not None:
                return _Outcome("ok" if code == 0 else "failed", code)
            if cancelled.is_set():
                return _Outcome("cancelled", None, "cancelled by the caller")
            if time.monotonic() > deadline:
                return _Outcome("timeout", None, f"timed out after {self.handle.config.timeout_s:g} s")
            if self.error_ranks and failure_seen is None:
                failure_seen = time.monotonic()
            if failure_seen is not None and time.monotonic() - failure_seen > GRACE_S:
                return _Outcome("failed", None)  # a rank died and torchrun did not end the rest in time

    def _relay(self, proc: subprocess.Popen, logs: Path) -> None:
        files: dict[str, object] = {}
        try:
            for raw in proc.stdout:  # type: ignore[union-attr]
                line = raw.decode("utf-8", "replace").rstrip("\n")
                match = _RANK_LINE.match(line)
                if match is None:
                    self._write(files, logs / f"{self.log_prefix}launcher.log", line)
                    self.launcher_lines.append(line)
                    if "exitcode" in line and "local_rank" in line:
                        self.error_ranks.append(-1)
                    continue
                rank, text = int(match.group(1)), match.group(2)
                self._write(files, logs / f"{self.log_prefix}rank{rank}.log", text)
                self.rank_lines[rank].append(text)
                self.handle._add_line(f"[rank{rank}] {text}")
                if text.startswith(PROGRESS_PREFIX):
                    self._progress(rank, text[len(PROGRESS_PREFIX):])
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
            self.error_ranks.append(rank)
        self.handle._add_event(event, phase=self.log_prefix.rstrip("-") or "run")

    def failed_rank(self) -> int | None:
        """The rank that failed first: its own error event, else torchrun's root cause, else a traceback."""
        if any(r >= 0 for r in self.error_ranks):
            return next(r for r in self.error_ranks if r >= 0)
        text = "\n".join(self.launcher_lines)
        root = _FAILED_RANK.search(text, text.find("Root Cause") if "Root Cause" in text else 0)
        if root is not None:
            return int(root.group(1))
        crashed = [r for r, lines in sorted(self.rank_lines.items()) if any("Traceback" in x for x in lines)]
        own = [r for r in crashed if not any(m in "\n".join(self.rank_lines[r]) for m in _PEER_FAILURE)]
        return (own or crashed or [None])[0]

    def failure_message(self, outcome: _Outcome) -> tuple[str, int | None]:
        """Which rank failed, how (its last error line), and the tail of its log."""
        rank = self.failed_rank()
        lines = list(self.rank_lines.get(rank, [])) if rank is not None else list(self.launcher_lines)
        if outcome.message:
            head = outcome.message
        elif rank is None:
            head = f"torchrun exited with code {outcome.returncode}"
        else:
            text = "\n".join(self.launcher_lines)
            code = re.search(rf"rank\s*:\s*{rank}\s*\(local_rank[^\n]*\n\s*exitcode\s*:\s*(-?\d+)", text)
            head = f"rank {rank} failed" + (f" (exit code {code.group(1)})" if code else "")
            errors = [x for x in lines if _ERROR_LINE.search(x)]
            head += f": {errors[-1].strip()}" if errors else ""
        tail = "\n".join(lines[-20:])
        where = f"rank {rank}" if rank is not None else "torchrun"
        return (f"{head}\n--- last lines of {where} ---\n{tail}" if tail else head), rank


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
        self._thread = threading.Thread(target=self._supervise, name=f"run {run_dir.name}", daemon=True)

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

    def cancel(self) -> None:
        """End every process of the run; returns once they are gone and result.json is written."""
        self._cancelled.set()
        self._thread.join(timeout=4 * GRACE_S + 10)

    def wait(self, timeout: float | None = None) -> RunResult:
        self._thread.join(timeout)
        if self._result is None:
            raise TimeoutError(f"run {self.run_dir.name} still running after {timeout} s")
        return self._result

    # internal: called by the supervising threads
    def _add_line(self, line: str) -> None:
        with self._lock:
            self._lines.append(line)

    def _add_event(self, event: dict, phase: str) -> None:
        with self._lock:
            steps = event.get("steps")
            if isinstance(steps, int) and steps > 0 and isinstance(event.get("step"), int):
                self._fractions[phase][event["rank"]] = min(1.0, (event["step"] + 1) / steps)
            kind = event.get("event")
            if kind in ("done", "exit", "error"):
                self._alive.discard(event["rank"])
            elif isinstance(event.get("rank"), int):
                self._alive.add(event["rank"])
            event = {**event, "phase": phase, "ranks_alive": sorted(self._alive)}
            self._events.append(event)
        self._emit(event)

    def _emit(self, event: dict) -> None:
        if self._on_event is not None:
            try:
                self._on_event(event)
            except Exception as error:  # a broken callback must not break the run
                self._add_line(f"on_event callback failed: {error!r}")

    def _launch_event(self, kind: str, **fields: object) -> None:
        event = {"event": kind, "run_dir": str(self.run_dir), **fields}
        with self._lock:
            self._events.append(event)
        self._emit(event)

    def _supervise(self) -> None:
        started = time.time()
        deadline = time.monotonic() + self.config.timeout_s
        env = run_environment(self.config)
        main = _Phase(torchrun_command(self.config, self.run_dir), env, self, "")
        self._launch_event("launch", command=main.argv)
        try:
            outcome = main.run(deadline, self._cancelled)
            message, failed_rank = main.failure_message(outcome) if outcome.status != "ok" else ("", None)
            summary = {"status": outcome.status, "message": message, "returncode": outcome.returncode,
                       "failed_rank": failed_rank, "command": main.argv}  # fmt: skip
            if outcome.status == "ok":
                summary.update(self._after_success(env, deadline))
        except Exception as error:  # the launcher itself broke: still leave a result behind
            summary = {"status": "failed", "message": f"launcher error: {error!r}", "returncode": None}
        summary.update(started_at=started, finished_at=time.time(), wall_s=round(time.time() - started, 3))
        write_json(summary, self.run_dir / "result.json")
        self._result = load_run(self.run_dir)
        self._status = summary["status"]
        self._launch_event("finished", status=self._status, message=summary.get("message", ""))

    def _after_success(self, env: dict[str, str], deadline: float) -> dict:
        """Prediction (with profile) and the torch.distributed.pipelining reference (with reference)."""
        out = predict.analyse_run(self.run_dir, self.schedule)
        if self.config.reference:
            out.update(self._reference(env, deadline))
        return out

    def _reference(self, env: dict[str, str], deadline: float) -> dict:
        from executor.reference import unavailable_reason

        reason = unavailable_reason(self.config, self.schedule)
        if reason is not None:
            write_json({"torch_schedule": None, "error": reason, "step_times_ms": [], "losses": []},
                       self.run_dir / "reference.json")  # fmt: skip
            return {"reference_status": "unavailable", "message": f"no reference run: {reason}"}
        phase = _Phase(torchrun_command(self.config, self.run_dir, module=REFERENCE_MODULE), env, self, "reference-")
        self._launch_event("launch", command=phase.argv, phase="reference")
        outcome = phase.run(deadline, self._cancelled)
        if outcome.status == "ok":
            return {"reference_status": "ok"}
        message, _ = phase.failure_message(outcome)
        if outcome.status in ("cancelled", "timeout"):
            return {"status": outcome.status, "message": f"reference run: {message}", "reference_status": outcome.status}
        write_json({"torch_schedule": None, "error": message, "step_times_ms": [], "losses": []},
                   self.run_dir / "reference.json")  # fmt: skip
        return {"reference_status": "failed", "message": f"reference run failed: {message}"}


# --- public entry points -----------------------------------------------------------------------------------------


def start_run(
    config: RunConfig,
    runs_root: Path = Path("runs"),
    name: str | None = None,
    schedule: Schedule | None = None,
    on_event: EventCallback | None = None,
) -> RunHandle:
    """Validate (ValueError before anything starts), write the run folder, start torchrun in the background."""
    if name is not None:
        _check_name(name)
    config, schedule = check_run(config, schedule)
    run_dir = make_run_dir(Path(runs_root), name, config)
    (run_dir / "logs").mkdir()
    write_json(config.to_dict(), run_dir / "config.json")
    write_json(schedule_to_dict(schedule), run_dir / "schedule.json")
    handle = RunHandle(run_dir, config, schedule, on_event)
    handle._thread.start()
    return handle


def run(
    config: RunConfig,
    runs_root: Path = Path("runs"),
    name: str | None = None,
    schedule: Schedule | None = None,
    on_event: EventCallback | None = None,
) -> RunResult:
    """Blocking `start_run(...).wait()`; Ctrl-C cancels the run (every process ends) and re-raises."""
    handle = start_run(config, runs_root, name, schedule, on_event)
    try:
        return handle.wait()
    except KeyboardInterrupt:
        handle.cancel()
        raise
