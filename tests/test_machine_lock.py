"""One timed job per machine (pipesim_executor.host.machine): a second is refused with one line naming the first,
or waits for it with --wait; the lock goes when its holder dies, however it dies."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipesim_executor.host import launch, machine
from pipesim_executor.host.machine import MachineBusy
from tests.test_launch import PopenSpy, cpu_config, fake_command

ROOT = Path(__file__).resolve().parent.parent
HOLD = (
    "import sys, time\n"
    "from pipesim_executor.host import machine\n"
    "lock = machine.hold('run', run_dir='runs/other', job='a test')\n"
    "print('held', flush=True)\n"
    "time.sleep(float(sys.argv[1]))\n"
)


def _holder_process(seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(seconds)], cwd=ROOT, stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_hold_names_the_first_and_the_lock_goes_with_its_process() -> None:
    proc = _holder_process(120)
    try:
        held = machine.holder()
        assert held is not None and held.command == "run" and held.run_dir == "runs/other" and held.pid == proc.pid
        with pytest.raises(MachineBusy) as refused:
            machine.hold("run")
        line = str(refused.value)
        assert "\n" not in line and "executor run" in line and "runs/other" in line and "--wait" in line, line
    finally:
        proc.kill()  # no release: the kernel drops a dead process's flock
        proc.wait()
    assert machine.holder() is None
    with machine.hold("run") as lock:
        assert lock.held and machine.holder().pid == os.getpid()
    assert machine.holder() is None


def test_two_holds_in_one_process_exclude_each_other() -> None:
    """The app's Plan verification and its Run page's launch run in one server process."""
    with machine.hold("verify-plan", job="plan.json") as lock:
        lock.update(step="run 2 of 6", runs_done=1, runs_total=6)
        with pytest.raises(MachineBusy, match="verify-plan.*run 2 of 6"):
            machine.hold("run")
    machine.hold("run").release()


def test_a_held_machine_refuses_a_run_before_its_folder_is_made(tmp_path: Path, monkeypatch) -> None:
    spy = PopenSpy(monkeypatch)
    with machine.hold("profile", run_dir="runs/prof"):
        with pytest.raises(MachineBusy, match="profile"):
            launch.start_run(cpu_config(), runs_root=tmp_path / "runs")
    assert spy.calls == [] and not (tmp_path / "runs").exists()


def test_a_run_holds_the_machine_until_its_result_is_written(tmp_path: Path, monkeypatch) -> None:
    PopenSpy(monkeypatch)
    fake_command(monkeypatch, "import time; time.sleep(120)")
    handle = launch.start_run(cpu_config(), runs_root=tmp_path)
    try:
        held = machine.holder()
        assert held is not None and held.command == "run" and held.run_dir == str(handle.run_dir)
    finally:
        handle.cancel()
    assert handle.done() and machine.holder() is None


@pytest.mark.timeout(120)
def test_the_command_line_refuses_in_one_line(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "executor", "run", "--schedule", "gpipe", "--ranks", "2", "--microbatches", "2",
            "--batch-size", "4", "--steps", "1", "--runs-root", str(tmp_path)]  # fmt: skip
    proc = _holder_process(120)
    try:
        refused = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=90, env=dict(os.environ))
    finally:
        proc.kill()
        proc.wait()
    assert refused.returncode == 1, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "held by executor run" in lines[0] and "--wait" in lines[0], refused.stderr
    assert not any(tmp_path.iterdir())  # nothing started, no folder


def test_a_waiting_job_says_so_once_and_starts_when_the_holder_ends() -> None:
    proc = _holder_process(2)
    told: list = []
    try:
        started = time.monotonic()
        with machine.hold("verify-plan", wait=True, on_wait=told.append) as lock:
            assert lock.held and proc.poll() is not None  # the holder had ended
        assert len(told) == 1 and told[0].pid == proc.pid and time.monotonic() - started < 60
    finally:
        proc.kill()
        proc.wait()
