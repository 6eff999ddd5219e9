"""Real runs under signals and across nodes (issue 9 items 4 and 8): nothing is left behind, one folder holds all.

SIGINT and SIGTERM to `python -m executor run` end torchrun and every rank, wait until they are gone, and
leave result.json saying cancelled. Two launchers on one machine, as two nodes of 2 ranks each, rendezvous on
127.0.0.1 and write one run folder with all four ranks' measured timeline.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipesim_executor.host.run_folder import load_run
from pipesim_executor.processes import free_port, run_processes

pytestmark = pytest.mark.torchrun
ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "--layers",
    "2",
    "--d-model",
    "16",
    "--heads",
    "2",
    "--ffn",
    "32",
    "--seq-len",
    "8",
    "--vocab",
    "32",
    "--device",
    "cpu",
]


def _sigint_by_default() -> None:
    """In the child: Ctrl-C's default action. A shell's background job (a CI step, `cmd &`) starts with SIGINT
    ignored, which its children inherit, and Python then installs no KeyboardInterrupt handler: the SIGINT
    below would do nothing, as it does to any `nohup`-style launcher on purpose."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def launcher(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "executor", "run", *TINY, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_sigint_by_default,
    )


def wait_for_measured_steps(proc: subprocess.Popen, timeout: float = 180) -> list[str]:
    """Read the launcher's event lines until a measured step has been reported."""
    seen, deadline = [], time.monotonic() + timeout
    for line in proc.stdout:  # type: ignore[union-attr]
        seen.append(line)
        if '"phase": "measure"' in line:
            return seen
        if time.monotonic() > deadline or proc.poll() is not None:
            break
    raise AssertionError("the run never reached a measured step:\n" + "".join(seen[-20:]))


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_to_the_launcher_ends_every_process_of_the_run(tmp_path, sig, code):
    out = tmp_path / "runs" / "long"
    proc = launcher(
        [
            "--schedule",
            "1f1b",
            "--ranks",
            "2",
            "--microbatches",
            "2",
            "--batch-size",
            "4",
            "--steps",
            "100000",
            "--timeout",
            "300",
            "--out",
            str(out),
        ]
    )
    try:
        wait_for_measured_steps(proc)
        assert run_processes(out.resolve())  # torchrun and its ranks are running
        proc.send_signal(sig)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, rest
    assert run_processes(out.resolve()) == []  # by process listing: nothing of the run is left
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "cancelled"
    assert load_run(out).status == "cancelled"


def test_two_nodes_on_one_machine_share_one_run_folder(tmp_path):
    out = tmp_path / "shared" / "mn"  # one folder, as on a shared filesystem
    endpoint = f"127.0.0.1:{free_port()}"
    common = [
        "--schedule",
        "1f1b",
        "--ranks",
        "4",
        "--microbatches",
        "4",
        "--batch-size",
        "8",
        "--steps",
        "2",
        "--nnodes",
        "2",
        "--rdzv-endpoint",
        endpoint,
        "--timeout",
        "240",
        "--out",
        str(out),
    ]
    nodes = [launcher([*common, "--node-rank", str(k)]) for k in (0, 1)]
    outputs = []
    try:
        for proc in nodes:
            outputs.append(proc.communicate(timeout=280)[0])
    finally:
        for proc in nodes:
            if proc.poll() is None:
                proc.kill()
    assert [p.returncode for p in nodes] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    result = load_run(out)
    assert result.status == "ok"
    assert {s.rank for s in result.measured.spans} == {0, 1, 2, 3}
    measured = json.loads((out / "measured.json").read_text())
    assert len(measured["meta"]["clock_offsets_ms"]) == 4 and measured["meta"]["clock_offsets_applied"] is True
    assert json.loads((out / "result-node1.json").read_text())["status"] == "ok"
    assert run_processes(out.resolve()) == []


def test_runs_end_with_the_process_that_started_them(tmp_path):
    """The app's server (or any program using the launcher) exiting must not orphan its runs: torchrun has a
    session of its own and would run on. An atexit hook cancels what is still running."""
    out = tmp_path / "runs" / "orphan"
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from pipesim_executor.host import launch\n"
        "from pipesim_executor.config import ModelConfig, run_config\n"
        "model = ModelConfig.of_transformer(num_layers=2, hidden_size=16, num_heads=2, ffn_size=32, seq_len=8,\n"
        "                                   vocab_size=32)\n"
        "config = run_config(num_ranks=2, num_microbatches=2, batch_size=4, steps=100000, device='cpu',\n"
        "                    timeout_s=300, model=model)\n"
        f"handle = launch.start_run(config, runs_root=Path({str(out.parent)!r}), name='orphan')\n"
        "while not any(e.get('phase') == 'measure' for e in handle.events()):\n"
        "    time.sleep(0.2)\n"
        "print('measuring', flush=True)\n"
        "sys.exit(0)  # the program ends while its run is in progress\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0 and "measuring" in done.stdout, done.stderr[-2000:]
    assert run_processes(out.resolve()) == []
    assert json.loads((out / "result.json").read_text())["status"] == "cancelled"


def test_a_launcher_killed_outright_leaves_no_run_behind(tmp_path):
    """SIGKILL leaves the launcher no chance to end its run (nor to enforce its timeout); the ranks see it gone
    at their next step, stop as on a cancel (writing the steps they measured) and torchrun ends with them."""
    out = tmp_path / "runs" / "killed"
    proc = launcher(
        [
            "--schedule",
            "1f1b",
            "--ranks",
            "2",
            "--microbatches",
            "2",
            "--batch-size",
            "4",
            "--steps",
            "100000",
            "--timeout",
            "300",
            "--out",
            str(out),
        ]
    )
    try:
        wait_for_measured_steps(proc)
        assert run_processes(out.resolve())
        proc.kill()
        proc.wait(timeout=30)  # reaped at once here; an unreaped (zombie) launcher counts as gone too
        deadline = time.monotonic() + 90
        while run_processes(out.resolve()) and time.monotonic() < deadline:
            time.sleep(0.5)
        left = run_processes(out.resolve())
    finally:
        if proc.poll() is None:
            proc.kill()
    assert left == [], "the run outlived its launcher"
    measured = json.loads((out / "measured.json").read_text())
    assert 0 < len(measured["step_times_ms"]) < 100000


def test_process_gone_sees_exits_and_zombies():
    from pipesim_executor.processes import process_gone

    assert not process_gone(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while not process_gone(child.pid) and time.monotonic() < deadline:  # exited, not reaped yet: a zombie
        time.sleep(0.05)
    assert process_gone(child.pid)
    child.wait()
    assert process_gone(child.pid)  # reaped: no /proc entry at all


def test_a_rank_ends_itself_when_its_launcher_is_gone_before_training():
    """Before the training loop's per-step check (setup, clock offsets, the profile) a watch thread ends the
    rank; while the launcher lives, or once the watch is stopped, it does nothing."""
    from pipesim_executor.processes import LAUNCHER_GONE_EXIT, LAUNCHER_PID_ENV

    rank = (
        "import sys, time\n"
        "from pipesim_executor.processes import exit_when_launcher_gone\n"
        "watch = exit_when_launcher_gone(0.05)\n"
        "if sys.argv[1] == 'stop':\n"
        "    watch.set()\n"
        "time.sleep(float(sys.argv[2]))\n"
    )
    launcher_proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    env = {**os.environ, LAUNCHER_PID_ENV: str(launcher_proc.pid)}
    started = time.monotonic()
    watched = subprocess.Popen(
        [sys.executable, "-c", rank, "watch", "60"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True
    )
    stopped = subprocess.Popen([sys.executable, "-c", rank, "stop", "4"], cwd=ROOT, env=env)
    try:
        assert watched.wait(timeout=45) == LAUNCHER_GONE_EXIT
        assert time.monotonic() - started < 45
        assert "the launcher is gone" in watched.stderr.read()
        assert stopped.wait(timeout=45) == 0  # it slept its 4 s out: the watch had been stopped
    finally:
        for proc in (launcher_proc, watched, stopped):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
