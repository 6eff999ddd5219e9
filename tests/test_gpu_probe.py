"""Device and backend choice for 0, 1, 2 and 8 GPUs, and a GPU probe that fails (issue 24, fault 1).

A probe that failed, timed out or looked only for /dev/nvidiaN (WSL2 has /dev/dxg) used to count as zero GPUs:
`--device auto` ran on the CPU without a word, `--device cuda` said "torch sees no CUDA GPU". Now the probe says
why (pipesim_executor.host.gpu_probe), auto warns on stderr naming it, and cuda is refused naming it.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pipesim_executor.config import run_config
from pipesim_executor.devices import resolve_device
from pipesim_executor.host import checks
from pipesim_executor.host.gpu_probe import GpuProbe, device_nodes, probe_gpus
from pipesim_executor.rank.transport import resolve_backend

# (device, backend, ranks on the node, GPUs) -> (device, transport), or the words of the refusal
CHOICES = {
    ("auto", "auto", 2, 0): ("cpu", "gloo"),
    ("auto", "auto", 2, 1): ("cuda", "staged"),
    ("auto", "auto", 2, 2): ("cuda", "nccl"),
    ("auto", "auto", 4, 2): ("cuda", "staged"),
    ("auto", "auto", 4, 8): ("cuda", "nccl"),
    ("auto", "auto", 8, 8): ("cuda", "nccl"),
    ("auto", "gloo", 2, 8): ("cpu", "gloo"),
    ("cpu", "auto", 2, 8): ("cpu", "gloo"),
    ("cuda", "auto", 2, 0): "no CUDA GPU",
    ("cuda", "auto", 2, 1): ("cuda", "staged"),
    ("cuda", "staged", 2, 2): ("cuda", "staged"),
    ("cuda", "gloo", 2, 2): ("cuda", "staged"),
    ("cuda", "nccl", 2, 1): "one GPU per rank",
    ("cuda", "nccl", 8, 8): ("cuda", "nccl"),
    ("auto", "nccl", 2, 0): "needs CUDA GPUs",
    ("cpu", "nccl", 2, 8): "moves CUDA tensors",
}


@pytest.mark.parametrize("case", sorted(CHOICES), ids=lambda c: "-".join(map(str, c)))
def test_device_and_backend_choice(case: tuple) -> None:
    device, backend, ranks, gpus = case
    expected = CHOICES[case]
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=expected):
            resolve_device(device, backend, ranks, gpus)
        return
    assert tuple(resolve_device(device, backend, ranks, gpus)) == expected


@pytest.mark.parametrize(
    ("gpus", "ranks", "local_rank", "index"), [(1, 2, 1, 0), (2, 2, 1, 1), (8, 8, 5, 5), (2, 4, 3, 1)]
)
def test_each_rank_takes_gpu_local_rank_mod_gpus(gpus: int, ranks: int, local_rank: int, index: int) -> None:
    choice = resolve_backend("auto", "auto", ranks, local_rank, gpu_count=gpus)
    assert choice.device.type == "cuda" and choice.device.index == index
    assert choice.transport == ("nccl" if gpus >= ranks else "staged")


class _Run:
    """subprocess.run's stand-in: answers with `result`, or raises it."""

    def __init__(self, result: object) -> None:
        self.result, self.calls = result, 0

    def __call__(self, argv, **kwargs) -> subprocess.CompletedProcess:
        self.calls += 1
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


def _answer(stdout: str = "", returncode: int = 0, stderr: str = "") -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess(["python"], returncode, stdout, stderr)


def _dev(tmp_path: Path, *names: str) -> Path:
    for name in names:
        (tmp_path / name).touch()
    return tmp_path


def _info(count: int, cuda: str | None = "12.4", error: str | None = None, visible: str | None = None) -> str:
    import json

    return json.dumps({"count": count, "torch": "2.13.0", "cuda": cuda, "visible": visible, "error": error}) + "\n"


def test_no_device_node_is_answered_without_asking_torch(tmp_path: Path) -> None:
    run = _Run(AssertionError("must not run"))
    probe = probe_gpus(_dev(tmp_path), run=run)
    assert probe == GpuProbe(0) and run.calls == 0 and not probe.gpu_seems_present and probe.warning() is None


@pytest.mark.parametrize(("nodes", "count"), [(("nvidia0",), 1), (("nvidia0", "nvidia1"), 2), (("dxg",), 8)])
def test_gpus_found_through_nvidia_nodes_or_wsl2(tmp_path: Path, nodes: tuple, count: int) -> None:
    probe = probe_gpus(_dev(tmp_path, *nodes, "nvidiactl"), run=_Run(_answer(_info(count))))
    assert probe.count == count and not probe.gpu_seems_present
    assert probe.device_nodes == tuple(str(tmp_path / n) for n in nodes)  # nvidiactl is no GPU


FAILURES = {
    "timeout": (subprocess.TimeoutExpired("python", 120), "no answer from torch within 120 s"),
    "crash": (_answer(returncode=1, stderr="Traceback...\nImportError: libcuda.so.1: cannot open"), "libcuda.so.1"),
    "cannot start": (FileNotFoundError(2, "No such file or directory"), "could not start"),
    "garbage": (_answer("Segmentation fault?\n"), "unreadable answer"),
    "cpu build": (_answer(_info(0, cuda=None)), "CPU build"),
    "hidden": (_answer(_info(0, visible="")), "CUDA_VISIBLE_DEVICES=''"),
    "driver": (_answer(_info(0, error="RuntimeError: Found no NVIDIA driver on your system")), "no NVIDIA driver"),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_a_failed_probe_says_why(tmp_path: Path, case: str) -> None:
    result, words = FAILURES[case]
    probe = probe_gpus(_dev(tmp_path, "nvidia0"), run=_Run(result))
    assert probe.count == 0 and probe.gpu_seems_present
    assert words in probe.reason() and words in probe.warning() and "runs on the CPU" in probe.warning()


def test_device_nodes_of_this_machine_are_found_where_they_are() -> None:
    nodes = device_nodes()
    assert all(n.startswith("/dev/nvidia") or n == "/dev/dxg" for n in nodes)


def _resolved(monkeypatch: pytest.MonkeyPatch, probe: GpuProbe, device: str = "auto", ranks: int = 2):
    monkeypatch.setattr(checks, "gpu_probe", lambda: probe)
    config = checks._resolve_device(run_config(num_ranks=ranks, device=device))
    return config.devices.device, config.devices.backend


FAILED = GpuProbe(0, ("/dev/nvidia0",), "no answer from torch within 120 s (a hung driver or CUDA init)")


def test_auto_with_a_failed_probe_runs_on_the_cpu_and_says_why(monkeypatch, capsys) -> None:
    assert _resolved(monkeypatch, FAILED) == ("cpu", "gloo")
    err = capsys.readouterr().err
    assert err.startswith("warning: /dev/nvidia0 exist(s) but the GPU probe failed: no answer from torch")
    assert len(err.strip().splitlines()) == 1


def test_cuda_with_a_failed_probe_is_refused_naming_the_probe_error(monkeypatch) -> None:
    with pytest.raises(ValueError, match="device cuda was asked for but the GPU probe failed: no answer from torch"):
        _resolved(monkeypatch, FAILED, device="cuda")


def test_no_gpu_at_all_is_quiet(monkeypatch, capsys) -> None:
    assert _resolved(monkeypatch, GpuProbe(0)) == ("cpu", "gloo")
    assert capsys.readouterr().err == ""
    with pytest.raises(ValueError, match="no CUDA GPU"):
        _resolved(monkeypatch, GpuProbe(0), device="cuda")


WORKING = [(1, 2, ("cuda", "staged")), (2, 2, ("cuda", "nccl")), (8, 4, ("cuda", "nccl")), (2, 4, ("cuda", "staged"))]


@pytest.mark.parametrize(("gpus", "ranks", "expected"), WORKING)
def test_launcher_choice_with_working_gpus(monkeypatch, capsys, gpus: int, ranks: int, expected: tuple) -> None:
    assert _resolved(monkeypatch, GpuProbe(gpus, ("/dev/nvidia0",)), ranks=ranks) == expected
    assert capsys.readouterr().err == ""


def test_cpu_runs_never_probe(monkeypatch) -> None:
    def probe() -> GpuProbe:
        raise AssertionError("a CPU run must not start the probe")

    monkeypatch.setattr(checks, "gpu_probe", probe)
    config = checks._resolve_device(run_config(num_ranks=2, device="cpu"))
    assert (config.devices.device, config.devices.backend) == ("cpu", "gloo")
