"""The processes of a run: the torchrun command line, its environment, and ending a whole process tree.

* The torchrun command is an argument list, never a shell string.
* torchrun puts each worker in its own session, so ending a run means ending torchrun's process group *and*
  every process whose command line names the run folder (found in /proc); SIGTERM first, SIGKILL after a
  grace period, and the caller is told only once nothing of the run is left.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from pipesim_executor.allocator import allocator_environment
from pipesim_executor.config import RunConfig, ranks_per_node

REPO_ROOT = Path(__file__).resolve().parent.parent
WORKER_MODULE = "pipesim_executor.rank.worker"
REFERENCE_MODULE = "pipesim_executor.rank.reference"
GRACE_S = 5.0  # SIGTERM -> SIGKILL


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun_command(config: RunConfig, run_dir: Path, port: int | None = None, module: str | None = None) -> list[str]:
    """The torchrun argument list; `-u` keeps torchrun's relayed worker lines unbuffered."""
    endpoint = config.nodes.rdzv_endpoint or f"127.0.0.1:{port if port is not None else free_port()}"
    return [
        sys.executable, "-u", "-m", "torch.distributed.run",
        "--nnodes", str(config.nodes.nnodes),
        "--node-rank", str(config.nodes.node_rank),
        "--nproc-per-node", str(ranks_per_node(config)),
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", endpoint,
        "--rdzv-id", run_dir.name,
        "--max-restarts", "0",
        "--monitor-interval", "0.2",
        "--tee", "3",
        "--log-dir", str(run_dir / "logs" / f"torchrun-node{config.nodes.node_rank}"),
        "-m", module or WORKER_MODULE,
        "--run-dir", str(run_dir),
        "--launch-node", str(config.nodes.node_rank),  # not "--node": torchrun would read it as its own
    ]  # fmt: skip


def run_environment(config: RunConfig) -> dict[str, str]:
    """The parent's environment plus what the ranks need (crash-injection variables pass through), with the C
    allocator's thresholds pinned where the user has not set them (pipesim_executor.allocator)."""
    env = dict(os.environ)
    # The ranks start in the repository; a custom model's module may live where the user launched from (the
    # launcher's check imported it from there), so that folder goes on their path too, after the repository.
    own = os.getcwd() if config.model.spec is not None else None
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH"), own) if p)
    env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = "[rank${rank}]:"
    # Workers' stdout goes to files that torchrun tails; block-buffered, each flushed progress line is
    # one write, so the tail never relays half a line (unbuffered, print writes text and newline apart).
    env.pop("PYTHONUNBUFFERED", None)
    env[LAUNCHER_PID_ENV] = str(os.getpid())
    if config.devices.device == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // ranks_per_node(config)))
    env.update(allocator_environment(os.environ))  # pinned, so a rank's speed does not depend on its history
    return env


LAUNCHER_PID_ENV = "PIPESIM_LAUNCHER_PID"  # set for the ranks: the launcher whose death stops them


def process_gone(pid: int) -> bool:
    """Whether process `pid` has ended (an unreaped zombie counts as ended). Linux /proc; elsewhere never."""
    if not os.path.isdir("/proc/self"):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return stat[stat.rindex(b")") + 2 :][:1] in (b"Z", b"X")  # the state field follows the command name


def launcher_gone() -> bool:
    """In a rank: whether the launcher that started this run has ended. A launcher killed outright (SIGKILL, the
    machine's OOM killer) cannot end its run, and nothing else enforces the run's timeout: its ranks would train
    on to the last step. They check this at each step and stop as on a cancel."""
    pid = os.environ.get(LAUNCHER_PID_ENV, "")
    return pid.isdigit() and process_gone(int(pid))


LAUNCHER_GONE_EXIT = 75  # a rank that ended itself because its launcher is gone (EX_TEMPFAIL)


def exit_when_launcher_gone(interval_s: float = 1.0) -> threading.Event:
    """In a rank, for the phases before the training loop's own per-step check (process-group setup, clock
    offsets, the profile): a daemon thread ends this process once the launcher is gone, since nothing measured
    is lost there. Every rank watches for itself, so none waits on a collective with a rank that left. Set the
    returned event to stop watching (the training loop then stops calmly, keeping its steps)."""
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(interval_s):
            if launcher_gone():
                print(
                    f"rank {os.environ.get('RANK', '?')}: the launcher is gone; ending this rank before training",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(LAUNCHER_GONE_EXIT)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()
    return stop


def run_processes(run_dir: Path | str, node: int | None = None) -> list[int]:
    """Pids of live processes started with `--run-dir RUN_DIR` (and `--launch-node NODE` when given; Linux /proc,
    [] elsewhere).

    Matching the argument pair, not a substring, spares e.g. a shell whose command merely mentions the folder.
    The node matters when several nodes of one run share a machine (the multi-node test does): a launcher
    ends its own node's processes, never another node's.
    """
    needle = b"\0--run-dir\0" + str(run_dir).encode() + b"\0"
    if node is not None:
        needle += b"--launch-node\0" + str(node).encode() + b"\0"
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


def _signal_all(proc: subprocess.Popen | None, run_dir: Path, node: int | None, sig: int) -> None:
    """`sig` to torchrun's process group (when this process started it) and to every process of the run."""
    group = [] if proc is None else [(os.killpg, proc.pid)]
    for kill, target in group + [(os.kill, pid) for pid in run_processes(run_dir, node)]:
        try:
            kill(target, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end_process_tree(proc: subprocess.Popen, run_dir: Path, node: int = 0, grace_s: float = GRACE_S) -> None:
    """SIGTERM torchrun's group and every process of `run_dir`; SIGKILL what is left after `grace_s`."""
    _signal_all(proc, run_dir, node, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc.poll() is not None and not run_processes(run_dir, node):
            break
        time.sleep(0.05)
    for _ in range(3):  # a process forked while we signalled still gets caught
        _signal_all(proc, run_dir, node, signal.SIGKILL)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
        if not run_processes(run_dir, node):
            return
        time.sleep(0.1)


def end_run_processes(run_dir: Path, grace_s: float = GRACE_S) -> bool:
    """End every process of `run_dir` found by its command line, when no launcher is left to do it (it was
    killed): SIGTERM, then SIGKILL after `grace_s`. True once nothing of the run is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        _signal_all(None, run_dir, None, sig)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if not run_processes(run_dir):
                return True
            time.sleep(0.05)
    return not run_processes(run_dir)
