"""`python -m executor doctor`: its checks, its report, its GPU wiring with fakes, and the no-GPU path
end to end on this CPU machine (torchrun, gloo; with streamlit, plotly, kaleido and pandas made unimportable in
every process: a GPU machine with torch, and numpy, which torch.distributed's object collectives need, must run
it)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pipesim.cost.model import CostModel
from pipesim.records import CommSpan, Span
from pipesim.schedules import build_schedule, options_for
from pipesim.sim.simulate import simulate
from pipesim_executor.config import run_config
from pipesim_executor.host import checks as host_checks
from pipesim_executor.host import cli_runs, doctor
from pipesim_executor.host import doctor_checks as dc
from pipesim_executor.host.gpu_probe import GpuProbe
from pipesim_executor.host.run_folder import RunResult, doctor_folders, list_runs
from pipesim_executor.rank.single import parameter_bytes_per_rank, reference_losses

ROOT = Path(__file__).resolve().parent.parent
TINY = doctor.DoctorConfig(
    model=replace(
        doctor.TINY,
        transformer=replace(
            doctor.TINY.transformer, vocab_size=32, hidden_size=16, num_heads=2, ffn_size=32, seq_len=8
        ),
    ),
    batch_size=8,
    steps=2,
)


def _run(name: str, schedule_name: str = "1f1b", losses=(3.0, 2.0), status: str = "ok", **extra) -> dc.DoctorRun:
    schedule = build_schedule(schedule_name, 2, 4, **({"num_virtual_stages": 2} if "interleaved" in name else {}))
    timeline = simulate(schedule, CostModel.uniform())
    result = RunResult(Path("/nonexistent") / name, status, "", None, schedule, measured=timeline, losses=list(losses))
    return dc.DoctorRun(name, result, extra)


def test_report_format() -> None:
    found = [
        dc.Check(1, "first", dc.PASS, "all equal"),
        dc.Check(2, "second", dc.FAIL, "rank 1 early"),
        dc.Check(3, "third", dc.SKIP, "needs 4 GPUs"),
    ]
    text = dc.format_report([("device", "cpu"), ("versions", "torch x")], found, [("predict", "error +1.0%")])
    assert text.splitlines() == [
        "pipesim executor doctor: 1 passed, 1 failed, 1 skipped",
        "device    cpu",
        "versions  torch x",
        "[PASS] 1 first",
        "         all equal",
        "[FAIL] 2 second",
        "         rank 1 early",
        "[SKIP] 3 third",
        "         needs 4 GPUs",
        "predict   error +1.0%",
    ]


def test_losses_check_passes_fails_and_refuses_a_vacuous_comparison() -> None:
    good = dc.check_losses([_run("a", losses=(3.0, 2.0))], [3.0, 2.0001], "cpu")
    assert good.status == dc.PASS and "loss 3.0000 -> 2.0001" in good.detail
    bad = dc.check_losses([_run("a", losses=(3.0, 2.01))], [3.0, 2.0], "cpu")
    assert bad.status == dc.FAIL and "worst step 1" in bad.detail
    flat = dc.check_losses([_run("a", losses=(3.0, 3.0))], [3.0, 3.0], "cpu")
    assert flat.status == dc.FAIL and "barely moved" in flat.detail
    failed = dc.check_losses([_run("a", status="failed")], [3.0, 2.0], "cpu")
    assert failed.status == dc.FAIL and "a: failed" in failed.detail
    assert dc.compare_losses([float("nan"), 1.0], [1.0, 1.0], 0.1)[0] is False
    assert dc.compare_losses([1.0], [1.0, 1.0], 0.1)[0] is False


def test_timeline_check_sees_a_consumer_before_its_producer_and_a_negative_wait() -> None:
    run = _run("fp32-1f1b")
    assert dc.check_timeline([run]).status == dc.PASS
    timeline = run.result.measured
    consumer = next(s for s in timeline.spans if s.rank == 1 and s.action.kind.value == "F")
    early = Span(consumer.rank, consumer.action, consumer.start - 1.0, consumer.end, consumer.step)
    spans = tuple(early if s == consumer else s for s in timeline.spans)
    broken = _run("broken")
    broken.result.measured = replace(timeline, spans=spans)
    result = dc.check_timeline([broken])
    assert result.status == dc.FAIL and f"{consumer.action} starts 1.000 ms before" in result.detail
    negative = _run("negative")
    wait = CommSpan(1, "recv", 0, consumer.action, 5.0, 4.0, 0)
    negative.result.measured = replace(timeline, comm=(wait,))
    assert "waits < 0" in dc.check_timeline([negative]).detail


def test_memory_and_exit_and_data_parallel_checks(tmp_path: Path) -> None:
    run = _run("fp32-1f1b", tracked_peak_bytes=[400, 399], peak_memory_bytes=[10, 10])
    assert dc.check_memory([run], [100, 100], gpu=False).status == dc.FAIL  # 399 < 4 x 100
    run.measured["tracked_peak_bytes"] = [400, 401]
    assert dc.check_memory([run], [100, 100], gpu=False).status == dc.PASS
    assert dc.check_memory([run], [100, 100], gpu=True).status == dc.FAIL  # the allocator's peak is read on a GPU
    logs = tmp_path / "r" / "logs"
    logs.mkdir(parents=True)
    (logs / "rank1.log").write_text("step 3\nterminate called without an active exception\n")
    aborted = _run("r")
    aborted.result.run_dir = tmp_path / "r"
    clean = dc.check_clean_exit([aborted])
    assert clean.status == dc.FAIL and "rank1.log: terminate called" in clean.detail
    assert dc.check_data_parallel(None, None, 1).status == dc.SKIP
    assert dc.check_data_parallel(_run("dp", losses=(3.0, 2.0)), [3.0, 2.0], 4).status == dc.PASS


def test_single_process_reference_reports_replica_rows() -> None:
    """With D replicas the reference trains on the global batch; its loss of replica 0's rows differs from the
    full batch's (so the data-parallel check compares like with like)."""
    config = run_config(**TINY.flat("1f1b", "cpu"))
    one = reference_losses(config)
    two = reference_losses(replace(config, pipeline=replace(config.pipeline, data_parallel=2)))
    assert len(one) == len(two) == TINY.warmup_steps + TINY.steps
    assert one[0] != two[0]
    sizes = parameter_bytes_per_rank(config, build_schedule("1f1b", 2, 4))
    assert len(sizes) == 2 and all(size > 0 for size in sizes)


def test_gpu_mode_wiring_with_fake_runs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """4 GPUs (faked): the doctor plans the data-parallel run too, on cuda, and every check reads the right runs.
    The runs are fakes whose numbers are what correct GPU runs give: the reference's losses, a simulated
    timeline, an allocator peak of 1 GiB."""
    monkeypatch.setattr(host_checks, "gpu_probe", lambda: GpuProbe(4, ("/dev/nvidia0",)))
    monkeypatch.setattr(doctor, "_gpu_names", lambda: "[fake GPU]")
    planned = []

    def fake_run(spec: doctor.Spec, out: Path, say) -> dc.DoctorRun:
        planned.append(spec)
        p = spec.config.pipeline
        schedule = build_schedule(
            p.schedule,
            p.num_ranks,
            p.num_microbatches,
            **options_for(p.schedule, num_virtual_stages=p.num_virtual_stages),
        )
        timeline = simulate(schedule, CostModel.uniform())
        result = RunResult(out / spec.name, "ok", "", spec.config, schedule, measured=timeline)
        result.losses = reference_losses(spec.config)
        return dc.DoctorRun(spec.name, result, {"peak_memory_bytes": [2**30, 2**30]})

    monkeypatch.setattr(doctor, "_run", fake_run)
    outcome = doctor.run_doctor(tmp_path / "doc", "auto", TINY, say=lambda line: None)
    assert [c.status for c in outcome.checks] == [dc.PASS] * 6, outcome.report()
    assert {s.config.devices.device for s in planned} == {"cuda"}
    assert "fp32-1f1b-dp2" in outcome.runs and planned[-1].config.pipeline.data_parallel == 2
    assert outcome.header[0] == ("device", "cuda: 4 GPU(s) [fake GPU], 2 ranks (nccl: a GPU per rank)")
    assert [s.name for s in planned if s.config.profile] == ["fp32-1f1b"]


def test_device_choice() -> None:
    assert doctor.choose_device("cpu")[:2] == ("cpu", 0)


def test_cuda_asked_without_a_gpu_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host_checks, "gpu_probe", lambda: GpuProbe(0, ("/dev/dxg",), "exit status 1: no driver"))
    with pytest.raises(ValueError, match="device cuda was asked for but the GPU probe failed: exit status 1"):
        doctor.choose_device("cuda")
    device, gpus, line = doctor.choose_device("auto")
    assert (device, gpus) == ("cpu", 0) and "no GPU (the GPU probe failed: exit status 1: no driver)" in line


def _doctor(args: list[str], env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "executor", "doctor", *args],
        cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--timeout", "-1"], "--timeout: expected a number > 0"),
        (["--timeout", "inf"], "--timeout: expected a number > 0"),
        (["--device", "tpu"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str], words: str) -> None:
    done = _doctor([*args, "--out", str(tmp_path / "doc")], timeout=120)
    assert done.returncode == 2 and words in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert done.stdout == "" and not (tmp_path / "doc").exists()


def test_an_out_folder_in_use_is_refused(tmp_path: Path) -> None:
    (tmp_path / "doc").mkdir()
    (tmp_path / "doc" / "keep.txt").write_text("mine")
    done = _doctor(["--out", str(tmp_path / "doc")], timeout=120)
    assert done.returncode == 2 and "already exists" in done.stderr
    assert [p.name for p in (tmp_path / "doc").iterdir()] == ["keep.txt"]


@pytest.mark.torchrun
@pytest.mark.timeout(600)
def test_the_doctors_plumbing_with_one_real_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The doctor's plumbing, not its verdicts: one real run (fp32 1f1b, profiled: the prediction and its verdict
    are real) and the other four answered with COPIES of that run's result, renamed (every launch costs torchrun
    and two ranks importing torch). So the checks below pass on the fp32 1f1b run's losses and timeline whatever
    the bf16, zbv or interleaved runs would have done: this tests the report, its files, the installed version
    and a folder that `list` keeps apart from the runs instead of calling it damaged. Each check's own logic is
    tested above on runs made for it; bench/bench_doctor.py runs all five for real."""
    real_run, first = doctor._run, []

    def one_real_run(spec: doctor.Spec, out: Path, say) -> dc.DoctorRun:
        if not first:
            first.append(real_run(spec, out, say))
        return replace(first[0], name=spec.name)

    monkeypatch.setattr(doctor, "_run", one_real_run)
    out = tmp_path / "runs" / "doc"
    args = argparse.Namespace(device="cpu", out=out, timeout=300.0)
    assert doctor.main(args) == 0, capsys.readouterr()
    report = capsys.readouterr().out
    lines = report.splitlines()
    assert lines[0] == "pipesim executor doctor: 5 passed, 0 failed, 1 skipped", report
    assert lines[1].startswith("device    cpu (asked for)")
    assert "torch 2." in lines[2] and f"pipesim {doctor.pipesim_version()}" in lines[2] and "unknown" not in lines[2]
    (predict,) = [line for line in lines if line.startswith("predict   ")]
    assert predict.startswith("predict   fp32-1f1b profiled: predicted")
    assert any(word in predict for word in (": good (within 10%)", ": not judged: the machine was busy", ": off: "))
    assert (out / "report.txt").read_text() == report
    saved = json.loads((out / "doctor.json").read_text())
    assert saved["status"] == "done" and [c["status"] for c in saved["checks"]] == [
        "pass", "pass", "pass", "skip", "pass", "pass"
    ]  # fmt: skip
    assert list_runs(tmp_path / "runs") == [] and doctor_folders(tmp_path / "runs") == [out]
    assert [r.run_dir.name for r in list_runs(out)] == ["fp32-1f1b"]
    assert cli_runs.cmd_list(argparse.Namespace(runs_root=tmp_path / "runs")) == 0
    listed = capsys.readouterr().out
    assert "damaged" not in listed and f"{out}: the doctor's runs (python -m executor list --runs-root {out})" in listed


def test_prediction_verdicts() -> None:
    """Catches an error printed without a word on it: good within 10%; a busy machine is not judged
    (steps varying more than 10%, or more load than cores); otherwise off, saying which way."""
    assert doctor.prediction_verdict(-0.05, 0.02, 0.5, 2) == "good (within 10%)"
    assert doctor.prediction_verdict(-0.628, 0.25, 1.0, 2).startswith("not judged: the machine was busy (step times")
    assert "load 5.0 on 2 cores" in doctor.prediction_verdict(0.3, 0.01, 5.0, 2)
    assert doctor.prediction_verdict(-0.3, 0.01, 0.2, 2).startswith("off: the step is predicted 30% too fast")
    assert "too slow" in doctor.prediction_verdict(0.3, None, None, None)


def test_a_doctor_folder_is_kept_apart_from_the_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Catches the doctor's folder listed as a damaged run, by `list` and by the app (both read
    list_runs), while a folder that is damaged is still listed as such."""
    (tmp_path / "doc").mkdir()
    (tmp_path / "doc" / "doctor.json").write_text('{"status": "running"}')
    (tmp_path / "broken").mkdir()
    assert [r.status for r in list_runs(tmp_path)] == ["damaged"]
    assert doctor_folders(tmp_path) == [tmp_path / "doc"]
    assert cli_runs.cmd_list(argparse.Namespace(runs_root=tmp_path)) == 0
    listed = capsys.readouterr().out.splitlines()
    assert listed[1].startswith("broken") and listed[2].startswith(f"{tmp_path / 'doc'}: the doctor's runs")
