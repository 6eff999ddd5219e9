"""The six checks of `executor doctor`, as pure functions of what its runs left, and the report a user pastes.

Each check takes the runs it needs (`DoctorRun`: the run's name, its RunResult and its measured.json) and says
pass, fail or skip with one line of detail. No torch here: the numbers to compare against (a single-process
run's losses, each rank's parameter bytes) come in as plain lists (pipesim_executor.rank.single computes them).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipesim.semantics.lower import comm_plan, needed_message

if TYPE_CHECKING:
    from pipesim_executor.host.run_folder import RunResult

LOSS_RTOL = 1e-4  # fp32 losses against the single-process run (the "about 1e-4")
BF16_RTOL = 0.01  # a split-backward chunked schedule (zbv) against the plain one (1f1b), both bf16
ORDER_TOLERANCE_MS = 0.05  # CUDA event times come back through each rank's anchor: a few microseconds each
ADAM_STATES = 2  # exp_avg and exp_avg_sq, each the size of the parameters (the step counters are not counted)
# What a rank's log holds when NCCL's watchdog fired or a process died at teardown (pipesim_executor.rank.teardown).
BAD_EXIT = re.compile(
    r"watchdog|terminate called|core dumped|SIGABRT|ncclCommAbort|NCCL WARN|process group teardown failed",
    re.IGNORECASE,
)
PASS, FAIL, SKIP = "pass", "fail", "skip"


@dataclass
class DoctorRun:
    """One launch of the doctor: what it is for, and what it left."""

    name: str
    result: RunResult
    measured: dict[str, Any] = field(default_factory=dict)  # measured.json as read (empty when there is none)

    @property
    def ok(self) -> bool:
        return self.result.status == "ok"

    def failure(self) -> str:
        return (
            f"{self.name}: {self.result.status}: {self.result.message.splitlines()[0] if self.result.message else ''}"
        )


@dataclass(frozen=True)
class Check:
    number: int
    title: str
    status: str  # pass | fail | skip
    detail: str


def _relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-12)


def compare_losses(got: list[float], expected: list[float], rtol: float) -> tuple[bool, str]:
    """Step by step; (all within rtol, the worst step in words)."""
    if len(got) != len(expected) or not got:
        return False, f"{len(got)} losses against {len(expected)} expected"
    if not all(math.isfinite(x) for x in got):
        return False, f"non-finite loss in {got}"
    worst = max(range(len(got)), key=lambda i: _relative(got[i], expected[i]))
    error = _relative(got[worst], expected[worst])
    return error <= rtol, f"worst step {worst}: {got[worst]:.6g} vs {expected[worst]:.6g} (rel {error:.1e})"


def check_losses(runs: list[DoctorRun], expected: list[float], where: str) -> Check:
    """1: fp32 losses of each schedule equal a single-process CPU run with the same seed. The reference's loss
    must move by more than the tolerance over the steps, or equal losses would prove nothing of the gradients."""
    title = f"fp32 losses of {', '.join(r.name for r in runs)} equal a single-process CPU run (rtol {LOSS_RTOL:g})"
    failed = [r.failure() for r in runs if not r.ok]
    if failed:
        return Check(1, title, FAIL, "; ".join(failed))
    moved = max((_relative(loss, expected[0]) for loss in expected), default=0.0)
    if moved <= 10 * LOSS_RTOL:
        return Check(1, title, FAIL, f"the reference loss barely moved ({expected}): raise the learning rate")
    verdicts, good = [], True
    for run in runs:
        ok, text = compare_losses(run.result.losses, expected, LOSS_RTOL)
        good &= ok
        verdicts.append(f"{run.name} {text}" if not ok else f"{run.name} {text.rsplit('(rel ', 1)[-1].rstrip(')')}")
    steps = f"loss {expected[0]:.4f} -> {expected[-1]:.4f} over {len(expected)} steps on {where}"
    return Check(1, title, PASS if good else FAIL, f"{steps}; worst relative difference: " + ", ".join(verdicts))


def order_problems(run: DoctorRun) -> tuple[int, list[str]]:
    """(cross-rank consumers checked, problems): every consumer on another rank starts at or after its producer
    ends (step by step), and no receive wait ends before it starts."""
    timeline, schedule = run.result.measured, run.result.schedule
    if timeline is None or schedule is None:
        return 0, [f"{run.name}: no measured timeline"]
    plan, stages = comm_plan(schedule), schedule.num_stages
    ends = {(s.step, s.replica, s.action): s.end for s in timeline.spans}  # every replica is its own pipeline
    checked, problems = 0, []
    for span in timeline.spans:
        key = needed_message(span.action, stages)
        if key is None or plan.source(key) == span.rank:
            continue
        producer = plan.producer[key]
        end = ends.get((span.step, span.replica, producer))
        checked += 1
        if end is None:
            problems.append(f"{run.name} step {span.step}: {span.action} has no producer {producer} on the timeline")
        elif span.start < end - ORDER_TOLERANCE_MS:
            problems.append(
                f"{run.name} step {span.step}: {span.action} starts {end - span.start:.3f} ms before {producer} ends"
            )
    for comm in timeline.comm:
        if comm.kind == "recv" and comm.end < comm.start:
            problems.append(f"{run.name} step {comm.step}: rank {comm.rank}'s receive of {comm.action} waits < 0")
    return checked, problems


def check_timeline(runs: list[DoctorRun]) -> Check:
    """2: on each measured timeline, consumers on another rank start after their producers end."""
    title = "on every measured timeline, each consumer on another rank starts after its producer ends"
    measured = [r for r in runs if r.ok]
    if not measured:
        return Check(2, title, FAIL, "no run finished: " + "; ".join(r.failure() for r in runs))
    checked, problems = 0, []
    for run in measured:
        count, found = order_problems(run)
        checked, problems = checked + count, problems + found
    if problems:
        return Check(2, title, FAIL, f"{len(problems)} problem(s), first: {problems[0]}")
    if not checked:
        return Check(2, title, FAIL, "no cross-rank message on any timeline: nothing was checked")
    return Check(2, title, PASS, f"{checked} cross-rank consumers in {len(measured)} runs; no negative receive wait")


def check_bf16(split: DoctorRun, plain: DoctorRun) -> Check:
    """3: the bf16 run of a split-backward chunked schedule (zbv) against the plain one's (1f1b), step by step;
    each named by its run (bf16-<family>)."""
    title = f"{split.name.replace('-', ' ', 1)} losses within {BF16_RTOL:.0%} of {plain.name.replace('-', ' ', 1)}"
    failed = [r.failure() for r in (split, plain) if not r.ok]
    if failed:
        return Check(3, title, FAIL, "; ".join(failed))
    ok, text = compare_losses(split.result.losses, plain.result.losses, BF16_RTOL)
    return Check(3, title, PASS if ok else FAIL, text)


def check_data_parallel(run: DoctorRun | None, expected: list[float] | None, gpus: int) -> Check:
    """4: 2 ranks x 2 replicas: replica 0's losses equal one process trained on the global batch (twice the
    batch), evaluated on replica 0's rows."""
    title = "data parallel 2x2: losses equal one replica with twice the batch"
    if run is None or expected is None:
        return Check(4, title, SKIP, f"needs 4 GPUs (this machine: {gpus})")
    if not run.ok:
        return Check(4, title, FAIL, run.failure())
    ok, text = compare_losses(run.result.losses, expected, LOSS_RTOL)
    return Check(4, title, PASS if ok else FAIL, text)


def check_memory(runs: list[DoctorRun], param_bytes: list[int], gpu: bool) -> Check:
    """5: every rank's measured peak holds at least its parameters, their gradients and Adam's two states."""
    title = "every rank's peak memory >= its parameter + gradient + optimizer bytes"
    key = "peak_memory_bytes" if gpu else "tracked_peak_bytes"  # the CPU has no allocator peak: tracked tensors
    floor = [p * (2 + ADAM_STATES) for p in param_bytes]
    worst: tuple[float, str] | None = None
    for run in runs:
        if not run.ok:
            return Check(5, title, FAIL, run.failure())
        peaks = run.measured.get(key)
        if not isinstance(peaks, list) or len(peaks) < len(floor):
            return Check(5, title, FAIL, f"{run.name}: measured.json has no {key} per rank")
        for rank, (peak, need) in enumerate(zip(peaks, floor, strict=False)):
            margin = peak / need if need else math.inf
            text = f"{run.name} rank {rank}: {peak / 2**20:.2f} MiB vs {need / 2**20:.2f} MiB"
            if worst is None or margin < worst[0]:
                worst = (margin, text)
    assert worst is not None, "check_memory needs at least one run"
    status = PASS if worst[0] >= 1.0 else FAIL
    return Check(5, title, status, f"{key}; tightest: {worst[1]}")


def bad_exit_lines(run_dir: Path, limit: int = 3) -> list[str]:
    """Lines of the run's logs that say NCCL's watchdog fired or a process aborted at teardown."""
    found = []
    for log in sorted((run_dir / "logs").rglob("*.log")) if (run_dir / "logs").is_dir() else []:
        try:
            text = log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if BAD_EXIT.search(line):
                found.append(f"{log.name}: {line.strip()[:160]}")
                if len(found) >= limit:
                    return found
    return found


def check_clean_exit(runs: list[DoctorRun]) -> Check:
    """6: every run ended ok, with no NCCL watchdog error or teardown abort in its logs."""
    title = "no NCCL watchdog error or teardown abort"
    problems = [r.failure() for r in runs if not r.ok]
    for run in runs:
        problems += [f"{run.name}: {line}" for line in bad_exit_lines(run.result.run_dir)]
    if problems:
        return Check(6, title, FAIL, f"{len(problems)} problem(s), first: {problems[0]}")
    return Check(6, title, PASS, f"{len(runs)} runs exited 0; their logs are clean")


def format_report(header: list[tuple[str, str]], checks: list[Check], footer: list[tuple[str, str]]) -> str:
    """The summary a user pastes into an issue: the machine, each check's verdict, the prediction."""
    passed = sum(c.status == PASS for c in checks)
    failed = sum(c.status == FAIL for c in checks)
    skipped = sum(c.status == SKIP for c in checks)
    lines = [f"pipesim executor doctor: {passed} passed, {failed} failed, {skipped} skipped"]
    lines += [f"{key:<9} {value}" for key, value in header]
    for check in checks:
        lines.append(f"[{check.status.upper()}] {check.number} {check.title}")
        lines.append(f"         {check.detail}")
    lines += [f"{key:<9} {value}" for key, value in footer]
    return "\n".join(lines)
