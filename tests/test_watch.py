"""Runs followed from their folder (pipesim_executor.host.watch), whoever launched them (issue 13: reattach after a
reload).

Fast tests build run folders by hand or launch a stand-in command (no torch); the `torchrun` test starts a real
run with `python -m executor run` in another process, follows it, and cancels it through the folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipesim.io.formats import schedule_to_dict, write_json
from pipesim.schedules import build_schedule
from pipesim_executor.config import run_config
from pipesim_executor.host import launch, run_folder, watch
from pipesim_executor.processes import run_processes
from pipesim_executor.progress import PROGRESS_PREFIX
from pipesim_executor.run_files import CANCEL_FILE, PROGRESS_FILE, STOP_FILE
from tests.test_launch import PopenSpy, assert_no_process_left, cpu_config, fake_command

ROOT = Path(__file__).resolve().parents[1]


def make_folder(root: Path, name: str = "elsewhere") -> Path:
    """A run folder as the launcher leaves it before any result: config, schedule, logs."""
    folder = (root / name).resolve()
    (folder / "logs").mkdir(parents=True)
    write_json(run_config(schedule="1f1b", num_ranks=2, num_microbatches=4, steps=4, device="cpu").to_dict(),
               folder / "config.json")  # fmt: skip
    write_json(schedule_to_dict(build_schedule("1f1b", 2, 4)), folder / "schedule.json")
    return folder


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


STEP = {"event": "step", "rank": 0, "step": 2, "steps": 4, "phase": "measure", "part": "run"}


def test_a_folder_with_a_live_launcher_reads_as_running(tmp_path):
    """progress.json written by a live process (this one stands for the launcher): progress, events, log."""
    folder = make_folder(tmp_path)
    run_folder.write_progress(folder, {"status": "running", "progress": 0.625, "events": [STEP],
                                       "log": [f"[rank{i}] line {i}" for i in range(100)]})  # fmt: skip
    run = watch.attach(folder)
    assert run is not None and run.status == "running" and not run.done()
    assert run.progress == 0.625 and run.events() == [STEP]
    assert run.log_tail(3) == "[rank97] line 97\n[rank98] line 98\n[rank99] line 99"
    assert run.config.pipeline.schedule == "1f1b" and run.schedule.num_ranks == 2
    assert [r.run_dir for r in watch.running_runs(tmp_path)] == [folder]
    assert run_folder.load_run(folder).status == "running"


def test_a_folder_whose_launcher_and_processes_are_gone_reads_as_failed(tmp_path):
    folder = make_folder(tmp_path)
    write_json({"status": "running", "progress": 0.5, "pid": dead_pid(), "pid_start": None}, folder / PROGRESS_FILE)
    assert watch.attach(folder) is None and watch.running_runs(tmp_path) == []
    result = run_folder.load_run(folder)
    assert result.status == "failed" and "launcher was killed" in result.message


def test_a_reused_pid_is_not_the_launcher(tmp_path):
    """The pid alone is not enough: a pid reused by another program has another start time."""
    folder = make_folder(tmp_path)
    run_folder.write_progress(folder, {"status": "running"})
    assert run_folder.launcher_alive(folder)
    data = json.loads((folder / PROGRESS_FILE).read_text())
    write_json({**data, "pid_start": "1"}, folder / PROGRESS_FILE)
    assert not run_folder.launcher_alive(folder) and watch.attach(folder) is None


def test_a_finished_run_is_not_followed(tmp_path):
    folder = make_folder(tmp_path)
    run_folder.write_progress(folder, {"status": "running", "progress": 0.5})
    write_json({"status": "ok", "message": ""}, folder / "result.json")
    assert watch.attach(folder) is None
    assert watch.FolderRun(folder).progress == 1.0 and watch.FolderRun(folder).status == "ok"


def test_without_progress_json_the_log_tail_comes_from_the_ranks_logs(tmp_path):
    folder = make_folder(tmp_path)
    (folder / "logs" / "rank0.log").write_text("hello\nstep 3\n")
    run = watch.FolderRun(folder)
    assert run.log_tail(5) == "[rank0] hello\n[rank0] step 3" and run.events() == [] and run.progress in (0.0, 1.0)


def test_cancel_writes_the_file_and_waits_for_the_launchers_result(tmp_path):
    """The follower asks; the launcher (a thread standing in for it) answers with result.json."""
    folder = make_folder(tmp_path)
    run_folder.write_progress(folder, {"status": "running", "progress": 0.5})

    def launcher() -> None:
        deadline = time.monotonic() + 30
        while not (folder / CANCEL_FILE).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)  # the launcher's teardown takes a moment
        write_json({"status": "cancelled", "message": "cancelled by the caller"}, folder / "result.json")

    thread = threading.Thread(target=launcher)
    thread.start()
    run = watch.attach(folder)
    run.cancel(timeout=30)
    thread.join()
    assert run.done() and run.status == "cancelled" and run.wait(timeout=1).status == "cancelled"


def test_the_cancel_command(tmp_path, capsys):
    from pipesim_executor.host import cli

    folder = make_folder(tmp_path)
    run_folder.write_progress(folder, {"status": "running", "progress": 0.5})

    def launcher() -> None:  # answers the cancel file, however long the command takes to write it (a busy machine)
        deadline = time.monotonic() + 60
        while not (folder / CANCEL_FILE).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        write_json({"status": "cancelled", "message": ""}, folder / "result.json")

    thread = threading.Thread(target=launcher)
    thread.start()
    assert cli.main(["cancel", str(folder), "--timeout", "30"]) == 0
    thread.join()
    assert (folder / CANCEL_FILE).exists() and capsys.readouterr().out.strip() == "elsewhere: cancelled"
    assert cli.main(["cancel", str(folder)]) == 0 and "not running (cancelled)" in capsys.readouterr().out
    stop = cli.main(["cancel", str(tmp_path / "nothing")])
    assert stop == 2 and "no such run" in capsys.readouterr().err


LINGER = (  # a rank left behind by a killed launcher: it stops at a step boundary when asked (the stop file)
    "import pathlib, sys, time\n"
    "stop = pathlib.Path(sys.argv[2]) / 'stop'\n"
    "deadline = time.monotonic() + 120\n"
    "while not stop.exists() and time.monotonic() < deadline:\n"
    "    time.sleep(0.05)\n"
)


def test_cancel_without_a_launcher_ends_the_processes_and_claims_no_result(tmp_path):
    folder = make_folder(tmp_path)
    write_json({"status": "running", "pid": dead_pid(), "pid_start": None}, folder / PROGRESS_FILE)
    rank = subprocess.Popen([sys.executable, "-c", LINGER, "--run-dir", str(folder), "--launch-node", "0"])
    try:
        deadline = time.monotonic() + 30
        while not run_processes(folder) and time.monotonic() < deadline:
            time.sleep(0.05)
        run = watch.attach(folder)
        assert run is not None  # its rank is alive
        run.cancel(timeout=60)
        assert rank.wait(timeout=30) == 0  # it stopped calmly, at the stop file
    finally:
        if rank.poll() is None:
            rank.kill()
    assert (folder / STOP_FILE).exists() and run_processes(folder) == []
    assert not (folder / "result.json").exists()  # nobody knows the outcome: the folder reads as failed
    assert run.status == "failed"


HANG_WITH_STEPS = (
    "import time\n"
    "for step in range(100000):\n"
    "    print('[rank0]:" + PROGRESS_PREFIX + '{"event": "step", "rank": 0, "step": \' + str(step % 4) +'
    ' \', "steps": 4, "phase": "run"}\', flush=True)\n'
    "    time.sleep(0.05)\n"
)


def test_the_launcher_publishes_progress_and_obeys_the_cancel_file(tmp_path, monkeypatch):
    """A stand-in command: the launcher's progress.json follows its handle; a cancel from the folder is the
    handle's own cancel (status cancelled, nothing left)."""
    spy = PopenSpy(monkeypatch)
    fake_command(monkeypatch, HANG_WITH_STEPS)
    handle = launch.start_run(cpu_config(), runs_root=tmp_path)
    run = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (run is not None and run.events() and run.progress > 0):
        time.sleep(0.1)
        run = run or watch.attach(handle.run_dir)
    assert run is not None and run.progress > 0, "progress.json never showed progress"
    assert run.events()[-1]["event"] == "step" and "[rank0]" in run.log_tail()
    state = run_folder.read_progress(handle.run_dir)
    assert state["pid"] == os.getpid() and state["status"] == "running"
    run.cancel(timeout=60)  # returns once result.json is written; the handle marks itself done just after
    assert handle.wait(timeout=60).message.startswith("cancelled by the caller")
    assert handle.done() and handle.status == "cancelled" and run.status == "cancelled"
    assert_no_process_left(handle.run_dir, pgid=spy.procs[0].pid)
    assert run_folder.read_progress(handle.run_dir)["status"] == "cancelled"  # the last word, on finish


def test_an_own_cancel_is_the_cancel_file(tmp_path, monkeypatch):
    fake_command(monkeypatch, HANG_WITH_STEPS)
    handle = launch.start_run(cpu_config(), runs_root=tmp_path)
    handle.cancel()
    assert handle.status == "cancelled" and (handle.run_dir / CANCEL_FILE).exists()


def test_cancelling_an_ended_run_leaves_its_folder_alone(tmp_path):
    """At exit the launcher cancels its live runs; one that just ended must not drop a cancel file into a folder
    that another node's launcher, still finishing, shares (it would cancel that node)."""
    folder = make_folder(tmp_path)
    config = run_config(schedule="1f1b", num_ranks=2, num_microbatches=4, steps=4, device="cpu")
    handle = launch.RunHandle(folder, config, build_schedule("1f1b", 2, 4))
    handle._finished.set()  # the supervising thread has written result.json
    handle.cancel(timeout=1)
    assert not (folder / CANCEL_FILE).exists()


# --- a real run, launched by another process ----------------------------------------------------------------------

TINY = ["--layers", "2", "--d-model", "16", "--heads", "2", "--ffn", "32", "--seq-len", "8", "--vocab", "32",
        "--device", "cpu"]  # fmt: skip


@pytest.mark.torchrun
def test_a_run_of_the_command_line_is_followed_and_cancelled_from_its_folder(tmp_path):
    out = (tmp_path / "runs" / "cli").resolve()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "executor", "run", *TINY, "--schedule", "1f1b", "--ranks", "2", "--microbatches",
         "2", "--batch-size", "4", "--warmup-steps", "1", "--steps", "100000", "--timeout", "300", "--out", str(out)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        run, seen, deadline = None, [], time.monotonic() + 200
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()
            run = run or watch.attach(out)
            if run is not None:
                seen.append(run.progress)
                steps = {e["step"] for e in run.events() if e.get("event") == "step" and e.get("phase") == "measure"}
                if len(steps) >= 3:
                    break
            time.sleep(0.2)
        assert run is not None and len(steps) >= 3, f"never reached 3 measured steps: {seen[-5:]}"
        assert 0 < seen[-1] < 1 and seen[0] < seen[-1]  # live, rising progress (as the launcher's own)
        assert "[rank0]" in run.log_tail(200)
        run.cancel()
        assert proc.wait(timeout=60) == 1  # the launcher reports the cancelled run and exits
    finally:
        if proc.poll() is None:
            proc.kill()
    result = run.wait(timeout=5)
    assert result.status == "cancelled" and "measured steps done" in result.message, result.message
    assert result.measured is not None and len(result.step_times_ms) >= 3
    assert run_processes(out) == []
