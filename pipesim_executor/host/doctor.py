"""`python -m executor doctor`: a few minutes of real runs that tell whether this machine runs pipesim right.

Usage:
    python -m executor doctor [--device auto|cpu|cuda] [--out runs/doctor-NAME] [--timeout S]

On 1 GPU the ranks take turns on it (staged), on 2 or more each has its own (NCCL); without a GPU the doctor
says so and runs the CPU half of its checks on 2 CPU ranks (gloo). It launches small runs of a tiny Transformer
through the ordinary launcher (pipesim_executor.host.launch), one after another, each a run folder under --out, and
checks (pipesim_executor.host.doctor_checks):

1. 1f1b, zbv and interleaved-1f1b in fp32 end ok, with the losses of a single-process CPU run of the same seed;
2. on every measured timeline each consumer on another rank starts after its producer ends, no wait negative;
3. bf16 zbv's losses within 1% of bf16 1f1b's;
4. data parallel 2 ranks x 2 replicas (4 GPUs only): replica 0's losses equal one process on twice the batch;
5. every rank's peak memory holds at least its parameters, gradients and optimizer state;
6. no NCCL watchdog error or teardown abort in any run's logs.

Then it prints one summary to paste into an issue (device, versions, each check, the prediction error of the
profiled fp32 1f1b run) and writes it, with doctor.json, into the --out folder. Progress goes to stderr.
Exit status: 0 when no check failed, 1 when one did, 2 for bad input (nothing started), 130 interrupted.
No torch in this process until the single-process reference (CPU only: the GPUs are left to the runs), and
nothing of streamlit or plotly: a GPU machine with torch alone runs it.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from pipesim.flags import float_flag
from pipesim.io.formats import read_json, write_file, write_json
from pipesim.limits import MAX_TIMEOUT_S
from pipesim.programs import in_checkout
from pipesim.schedules import in_situ_representatives, schedule_info
from pipesim_executor.config import DEVICES, ModelConfig, RunConfig, run_config
from pipesim_executor.host import doctor_checks as checks
from pipesim_executor.processes import REPO_ROOT
from pipesim_executor.run_files import DOCTOR_FILE

TINY = ModelConfig.of_transformer(vocab_size=128, hidden_size=64, num_heads=4, ffn_size=128, num_layers=2, seq_len=32)


def _stands_for(split_backward: bool, chunked: bool) -> str:
    """The family the registry has stand for a class of schedule (its in-situ representative): the doctor runs
    classes, not names, so a family renamed or replaced in the registry is picked up here."""
    return next(i.name for i in in_situ_representatives() if (i.split_backward, i.chunked) == (split_backward, chunked))


PLAIN = _stands_for(False, False)  # 1f1b: profiled, and the reference of the losses, the bf16 pair and the memory
SPLIT_CHUNKED = _stands_for(True, True)  # zbv: a split backward over two stages per rank, the most moving parts
FP32_SCHEDULES = (PLAIN, SPLIT_CHUNKED, _stands_for(False, True))  # and interleaved-1f1b: chunks without the split


@dataclass(frozen=True)
class DoctorConfig:
    """The runs' shared settings: a tiny Transformer (4 units: 2 stages per rank for zbv and interleaved-1f1b),
    Adam (so optimizer state counts in check 5), a few steps."""

    model: ModelConfig = TINY
    batch_size: int = 16
    num_microbatches: int = 4
    steps: int = 3
    warmup_steps: int = 1
    lr: float = 1e-2  # large enough that the loss moves well past the checks' tolerances in a few steps
    seed: int = 0
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        number = isinstance(self.timeout_s, (int, float)) and not isinstance(self.timeout_s, bool)
        if not (number and math.isfinite(self.timeout_s) and self.timeout_s > 0):
            raise ValueError(f"--timeout must be a finite number of seconds > 0, got {self.timeout_s!r}")
        run_config(**self.flat(PLAIN, "cpu"))  # the run settings themselves are checked by the run's config

    def flat(self, schedule: str, device: str, **extra: object) -> dict:
        """run_config's keywords for one run."""
        return dict(
            schedule=schedule, num_ranks=2, num_microbatches=self.num_microbatches,
            num_virtual_stages=schedule_info(schedule).build_options().get("num_virtual_stages"), model=self.model,
            batch_size=self.batch_size, steps=self.steps, warmup_steps=self.warmup_steps, seed=self.seed,
            optimizer="adam", lr=self.lr, device=device, timeout_s=self.timeout_s, **extra,
        )  # fmt: skip


@dataclass(frozen=True)
class Spec:
    """One run of the doctor: its folder name and its config."""

    name: str
    config: RunConfig


def plan_runs(doctor: DoctorConfig, device: str, gpus: int) -> list[Spec]:
    """The runs, in order: the three fp32 schedules (1f1b profiled), bf16 zbv and 1f1b, and with 4 GPUs 2x2."""
    specs = [
        Spec(f"fp32-{name}", run_config(**doctor.flat(name, device, profile=name == PLAIN))) for name in FP32_SCHEDULES
    ]
    pair = (SPLIT_CHUNKED, PLAIN)
    specs += [Spec(f"bf16-{name}", run_config(**doctor.flat(name, device, dtype="bf16"))) for name in pair]
    if device == "cuda" and gpus >= 4:
        specs.append(Spec(f"fp32-{PLAIN}-dp2", run_config(**doctor.flat(PLAIN, device, data_parallel=2))))
    return specs


@dataclass
class Outcome:
    """What the doctor found: the report's lines, the checks, and every run."""

    header: list[tuple[str, str]]
    checks: list[checks.Check]
    footer: list[tuple[str, str]]
    runs: dict[str, checks.DoctorRun] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(c.status == checks.FAIL for c in self.checks)

    def report(self) -> str:
        return checks.format_report(self.header, self.checks, self.footer)


PREDICTION_GOOD = 0.10  # a step-time prediction within 10% of the measured median is called good


def choose_device(asked: str) -> tuple[str, int, str]:
    """(cpu | cuda, GPUs, the device line of the report); ValueError for --device cuda without a usable GPU."""
    from pipesim_executor.host.checks import gpu_probe  # lazily, as the launcher: `python -m executor list` stays light

    if asked == "cpu":
        return "cpu", 0, "cpu (asked for): 2 ranks over gloo"
    probe = gpu_probe()
    if probe.count == 0:
        if asked == "cuda":
            raise ValueError(f"device cuda was asked for but {probe.reason()}")
        return "cpu", 0, f"cpu: no GPU ({probe.reason()}): the CPU half of the checks, 2 ranks over gloo"
    mode = "staged: both ranks take turns on GPU 0" if probe.count == 1 else "nccl: a GPU per rank"
    return "cuda", probe.count, f"cuda: {probe.count} GPU(s) {_gpu_names()}, 2 ranks ({mode})"


def _gpu_names() -> str:
    """The GPUs and driver as nvidia-smi names them (the doctor never initialises CUDA itself)."""
    try:
        answer = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "(nvidia-smi not available)"
    names = [line.strip() for line in answer.stdout.splitlines() if line.strip()]
    return f"[{'; '.join(names)}]" if names else "(nvidia-smi listed none)"


def _versions() -> str:
    import torch  # lazily: only the doctor's report and reference need it here, never the CUDA runtime

    commit = ""
    try:  # the checkout's commit; installed, REPO_ROOT is site-packages, which may sit in a user's own repository
        if in_checkout():
            commit = subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
            ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return (
        f"python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda or 'none'}), "
        f"pipesim {pipesim_version()}{f' (git {commit})' if commit else ''}, {platform.system()} "
        f"{platform.release()}, {os.cpu_count()} cores"
    )


def pipesim_version() -> str:
    """The installed distribution's version, else the package's own (a checkout never installed)."""
    try:
        return importlib.metadata.version("pipesim")
    except importlib.metadata.PackageNotFoundError:
        import pipesim

        return pipesim.__version__


def _run(spec: Spec, out: Path, say: Callable[[str], None]) -> checks.DoctorRun:
    from pipesim_executor.host.launch import run as launch_run
    from pipesim_executor.host.run_folder import RunResult

    started = time.monotonic()
    try:
        result = launch_run(spec.config, runs_root=out, name=spec.name)
    except ValueError as error:  # refused before starting (e.g. a schedule that does not fit): a failed run
        result = RunResult(out / spec.name, "failed", f"refused: {error}", spec.config, None)
    measured = {}
    if (result.run_dir / "measured.json").is_file():
        try:
            measured = read_json(result.run_dir / "measured.json")
        except ValueError as error:  # a damaged file fails the checks that read it, not the doctor
            say(f"doctor: {spec.name}: {error}")
    say(f"doctor: {spec.name}: {result.status} in {time.monotonic() - started:.0f} s")
    return checks.DoctorRun(spec.name, result, measured)


def _prediction_line(run: checks.DoctorRun | None) -> str:
    if run is None or not run.ok:
        return "no profiled run finished"
    r = run.result
    if r.predicted_step_ms is None or r.prediction_error is None:
        return f"{run.name}: no prediction ({r.message or 'cost.json missing'})"
    analysis = r.analysis or {}
    sharing = (analysis.get("prediction") or {}).get("sharing")
    spread_doc = analysis.get("spread") or {}
    spread = spread_doc.get("step_cv")  # noisy steps make the error no fact about the model
    noise = f"; step times vary {spread:.1%}" if isinstance(spread, (int, float)) else ""
    return (
        f"{run.name} profiled: predicted {r.predicted_step_ms:.2f} ms, measured {r.measured_step_ms:.2f} ms, "
        f"error {100 * r.prediction_error:+.1f}%{noise}"
        + (f" ({sharing})" if sharing else "")
        + f": {prediction_verdict(r.prediction_error, spread, spread_doc.get('load_1min'), os.cpu_count())}"
    )


def prediction_verdict(error: float, step_cv: float | None, load: float | None, cores: int | None) -> str:
    """A word on a prediction error: good within PREDICTION_GOOD, else whether the machine was too busy to judge
    (steps varying more than that, or more runnable processes than cores) or the prediction is off here."""
    if abs(error) <= PREDICTION_GOOD:
        return f"good (within {PREDICTION_GOOD:.0%})"
    busy = []
    if isinstance(step_cv, (int, float)) and step_cv > PREDICTION_GOOD:
        busy.append(f"step times vary {step_cv:.0%}")
    if isinstance(load, (int, float)) and cores and load > cores:
        busy.append(f"load {load:.1f} on {cores} cores")
    if busy:
        return f"not judged: the machine was busy ({', '.join(busy)}); run the doctor again on an idle machine"
    direction = "fast" if error < 0 else "slow"
    return (
        f"off: the step is predicted {abs(error):.0%} too {direction} on a quiet machine; paste this report into "
        "an issue"
    )


def run_doctor(out: Path, asked: str, doctor: DoctorConfig, say: Callable[[str], None]) -> Outcome:
    """Run every check; ValueError (nothing started) for bad input."""
    from pipesim_executor.rank.single import parameter_bytes_per_rank, reference_losses

    device, gpus, device_line = choose_device(asked)
    specs = plan_runs(doctor, device, gpus)
    try:
        out.mkdir(parents=True, exist_ok=True)
        write_json({"report": None, "checks": [], "status": "running"}, out / DOCTOR_FILE)  # a doctor's, not a run
    except OSError as error:
        raise ValueError(f"cannot create {out}: {error.strerror or error}") from None
    say(f"doctor: {device_line}; {len(specs)} runs under {out}")
    runs = {}
    for index, spec in enumerate(specs, 1):
        say(f"doctor: run {index}/{len(specs)}: {spec.name}")
        runs[spec.name] = _run(spec, out, say)
    fp32 = [runs[f"fp32-{name}"] for name in FP32_SCHEDULES]
    one_f_one_b = specs[0].config
    expected = reference_losses(one_f_one_b)
    dp = runs.get(f"fp32-{PLAIN}-dp2")
    dp_expected = reference_losses(replace(one_f_one_b, pipeline=dp.result.config.pipeline)) if dp else None
    schedule = fp32[0].result.schedule
    params = parameter_bytes_per_rank(one_f_one_b, schedule) if schedule is not None else [0, 0]
    found = [
        checks.check_losses(fp32, expected, device_line.split(":")[0]),
        checks.check_timeline(list(runs.values())),
        checks.check_bf16(runs[f"bf16-{SPLIT_CHUNKED}"], runs[f"bf16-{PLAIN}"]),
        checks.check_data_parallel(dp, dp_expected, gpus),
        checks.check_memory([runs[f"fp32-{PLAIN}"], runs[f"bf16-{PLAIN}"]], params, gpu=device == "cuda"),
        checks.check_clean_exit(list(runs.values())),
    ]
    header = [("device", device_line), ("versions", _versions())]
    footer = [("predict", _prediction_line(runs.get(f"fp32-{PLAIN}"))), ("runs", str(out))]
    return Outcome(header, found, footer, runs)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", choices=DEVICES, default="auto", help="auto: the GPUs if there are any")
    parser.add_argument("--out", type=Path, help="folder for the runs and the report (default runs/doctor-TIME)")
    parser.add_argument(
        "--timeout",
        type=float_flag(above=0, maximum=MAX_TIMEOUT_S),
        default=300.0,
        metavar="S",
        help="seconds per run before it is ended",
    )


def main(args: argparse.Namespace) -> int:
    """`python -m executor doctor`: the report on stdout, progress on stderr."""
    out = args.out or Path("runs") / time.strftime("doctor-%Y%m%d-%H%M%S")

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:  # a ValueError (bad input) goes to the CLI's one usage-error path (pipesim.flags.run_main): exit 2
        doctor = DoctorConfig(timeout_s=args.timeout)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise ValueError(f"--out {out} already exists and is not an empty folder; name a new one")
        outcome = run_doctor(out, args.device, doctor, say)
    except KeyboardInterrupt:  # the launcher has ended the run in progress
        print("interrupted: the doctor's runs were ended", file=sys.stderr)
        return 130
    report = outcome.report()
    print(report, flush=True)
    try:
        write_file(report + "\n", out / "report.txt")
        write_json({"report": report, "checks": [vars(c) for c in outcome.checks], "status": "done"}, out / DOCTOR_FILE)
    except (OSError, ValueError) as error:
        say(f"doctor: could not write the report into {out}: {error}")
    return 1 if outcome.failed else 0
