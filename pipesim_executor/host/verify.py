"""Verify a plan for real: run its top K candidates with the executor in interleaved rounds, compare predicted
with measured step times and peak memory.

    python -m executor verify-plan plan.json --top 3 [--rounds 3 --steps 30 --warmup-steps 3 --json OUT]

Each candidate runs on the plan's own model, optimizer and dtype (verify_config). The candidates run one at a
time (they would share the machine's cores otherwise) in interleaved rounds: A B C, A B C, ... (`rounds`, default
3), each run with its own warm-up and `steps` measured steps. A machine whose speed drifts over seconds then
slows every candidate alike, instead of whichever happened to run during the slow minute.

What is reported, per candidate: the predicted step with the plan's 90% interval (`step_ms_p05`, `step_ms_p95`,
when the plan carries them) and whether it was extrapolated; the measured median over every step of every round
with its 95% confidence interval (a bootstrap over steps and rounds, at least as wide as Student's t-interval over
the round medians, their spread pooled over every candidate of the verification, pipesim.analysis.stats); the
runs' own
coefficient of variation and the Run page's too-noisy verdict on it; predicted against measured peak memory per
rank (tracked tensor bytes on the CPU, `torch.cuda.max_memory_allocated` on a GPU). Over the candidates: the groups
the measurement cannot order (overlapping intervals), the Spearman rank correlation over the pairs it can, and how
far the recommended candidate (the plan's first) is from the measured best, or that the two are indistinguishable.
It is "not comparable" (status, exit 3) when its rounds moved together (pipesim.analysis.round_effect) or when
other work held the cores its ranks needed while they ran (the load is probed across the runs,
pipesim.analysis.machine_share): the errors then measure the machine, and the table is shown as measured.

Every verification's runs get new folders (`verify-<plan>-<n>-r<round>-c<index>`, n one more than any earlier
verification's under the runs folder), so verifying again keeps what was measured before. The comparison is
verify_compare's, and no torch is imported here: the app calls `verify_plan` (or `start_verify`, in the
background) with progress and cancel (docs/design.md).
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any

from pipesim.analysis.since_profile import SinceProfile, config_key, since_profile
from pipesim.analysis.stats import MAX_STEPS_PER_ROUND
from pipesim.cost.profile import UnitProfile
from pipesim.flags import one_line
from pipesim.io.cost_file import load_cost_file
from pipesim.io.formats import read_json, write_json
from pipesim.io.launch_history import append_record, model_key
from pipesim.io.launch_history import resolve as resolve_history
from pipesim.ir import Schedule
from pipesim.limits import MAX_PLAN_BYTES
from pipesim.numbers import check_number
from pipesim.programs import programs
from pipesim.sim.spread import VERIFY_ROUNDS, VERIFY_STEPS
from pipesim_executor.config import RunConfig
from pipesim_executor.host import machine
from pipesim_executor.host.machine import Holder, MachineLock
from pipesim_executor.host.machine_load import LoadProbe
from pipesim_executor.host.verify_compare import (
    DEFAULT_UNCERTAINTY,
    Verification,
    VerifyRow,
    compare,
    coverage_lines,
    indistinguishable,
    ranks_of,
    spearman,
    summary_lines,
)
from pipesim_executor.host.verify_config import (
    candidate_config,
    candidate_schedule,
    check_candidate,
    label,
    measured_memory,
    model_config,
    plan_candidates,
    predicted_interval,
    predicted_step_ms,
    run_settings,
)
from pipesim_executor.run_files import PLAN_PREDICTION_FILE

DEFAULT_STEPS = VERIFY_STEPS  # measured steps per candidate and round (what the planner's intervals are of)
# ... at least: a run also measures for this long (its predicted step sets how many steps that takes). A run of
# short steps measured 30 steps where one launch costs seconds, and their noise set its median: the tiny-layers
# zoo model's 7 ms steps vary 8-20% a step, so rounds of 10 steps had medians 7% apart.
DEFAULT_MIN_SECONDS = 1.0
MAX_MIN_SECONDS = 600.0
# A plan priced for another device (a description's GPU, say) predicts microseconds for a CPU run of milliseconds:
# --min-seconds adds at most this many times --steps (a test's 2 steps became 10,000 without it).
MAX_STEPS_FACTOR = 20
DEFAULT_WARMUP = 3
DEFAULT_ROUNDS = VERIFY_ROUNDS  # interleaved rounds: the fewest whose bootstrap over rounds sees the drift between them
MAX_ROUNDS = 50
DEFAULT_TOP = 3
DEFAULT_TIMEOUT_S = 300.0
__all__ = [  # the comparison lives in verify_compare, the plan's mapping in verify_config; callers find them here
    "Verification", "VerifyRow", "compare", "coverage_lines", "indistinguishable", "ranks_of", "spearman",
    "summary_lines", "VerifyProgress", "VerifyHandle", "VerifySettings", "start_verify", "verify_plan", "verify_with",
    "plan_candidates", "candidate_config", "model_config", "run_settings", "predicted_step_ms", "verification_prefix",
]  # fmt: skip


@dataclass(frozen=True)
class VerifySettings:
    """How a plan is verified, with its defaults: what `verify-plan`'s flags (their dests are these names) and the
    Plan page's Verify fill in, handed to `verify_plan` by `verify_with` alone."""

    top: int = DEFAULT_TOP
    steps: int = DEFAULT_STEPS
    warmup_steps: int = DEFAULT_WARMUP
    rounds: int = DEFAULT_ROUNDS
    min_seconds: float = DEFAULT_MIN_SECONDS
    device: str | None = None  # None: the device the plan was profiled on, else the CPU
    timeout_s: float = DEFAULT_TIMEOUT_S  # per candidate's run
    runs_root: Path = Path("runs")
    launch_history: str | None = None  # None: the default record (pipesim.io.launch_history), "none": no record

    @classmethod
    def of(cls, namespace: Any) -> VerifySettings:
        """The settings an object carries under these names (verify-plan's parsed flags)."""
        return cls(**{f.name: getattr(namespace, f.name) for f in fields(cls)})


def verify_with(plan_path: Path, settings: VerifySettings, **hooks: Any) -> Verification:
    """`verify_plan` under `settings`; `hooks` are its on_row, on_progress, cancel and json_out."""
    return verify_plan(
        plan_path,
        settings.top,
        runs_root=settings.runs_root,
        steps=settings.steps,
        warmup_steps=settings.warmup_steps,
        rounds=settings.rounds,
        min_seconds=settings.min_seconds,
        device=settings.device,
        timeout_s=settings.timeout_s,
        launch_history=settings.launch_history,
        **hooks,
    )


def _record_prediction(run_dir: Path, *, plan: dict[str, Any], plan_path: Path, row: VerifyRow) -> None:
    """The plan's prediction for this candidate, in its run folder: the Run page shows the same figure (and error)
    as the Plan page, with what it rests on (a profile, or an assumed device rate)."""
    calibration = plan.get("calibration") if isinstance(plan.get("calibration"), dict) else {}
    model = (plan.get("inputs") or {}).get("model") or {}
    document = {
        "predicted_step_ms": row.predicted_ms,
        "candidate": row.label,
        "plan": str(plan_path),
        "calibrated": calibration.get("calibrated"),
        "calibration_note": calibration.get("note"),
        "device_tflops": model.get("device_tflops") if isinstance(model, dict) else None,
    }
    try:
        write_json(document, run_dir / PLAN_PREDICTION_FILE)
    except (OSError, ValueError):  # the run goes on; its page shows no prediction
        pass


@dataclass(frozen=True)
class VerifyProgress:
    """Where a verification is: `fraction` of it done, the run going (`index` of `total` runs), in words."""

    fraction: float
    index: int
    total: int
    text: str


def verification_prefix(runs_root: Path, plan_stem: str) -> str:
    """The run-name prefix of a new verification of plan `plan_stem`: verify-<stem>-<n>, n one more than the
    largest of any earlier verification's folder under `runs_root` (older ones, named verify-<stem>-<i>, count too)."""
    stem = re.sub(r"[^\w.-]+", "_", plan_stem).strip("._")[:60] or "plan"
    pattern = re.compile(rf"verify-{re.escape(stem)}-(\d+)(?:-.*)?")
    taken = [int(m.group(1)) for p in _entries(runs_root) if (m := pattern.fullmatch(p))]
    return f"verify-{stem}-{max(taken, default=-1) + 1}"


def _entries(folder: Path) -> list[str]:
    try:
        return [p.name for p in folder.iterdir()]
    except OSError:  # no runs folder yet
        return []


def _row(c: dict[str, Any]) -> VerifyRow:
    low, high, given = predicted_interval(c)
    return VerifyRow(
        label(c),
        c,
        float(predicted_step_ms(c)),
        predicted_memory_bytes=c.get("rank_memory_bytes", []),
        predicted_p05_ms=low,
        predicted_p95_ms=high,
        has_predicted_interval=given,
        extrapolated=bool(c.get("extrapolated", False)),
    )


def verify_plan(
    plan_path: Path,
    top: int,
    *,
    runs_root: Path = Path("runs"),
    steps: int = DEFAULT_STEPS,
    warmup_steps: int = DEFAULT_WARMUP,
    rounds: int = DEFAULT_ROUNDS,
    min_seconds: float = DEFAULT_MIN_SECONDS,
    device: str | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    launch_history: str | None = None,
    on_row: Callable[[VerifyRow], None] | None = None,
    on_progress: Callable[[VerifyProgress], None] | None = None,
    cancel: threading.Event | None = None,
    json_out: Path | None = None,
    wait_for_machine: bool = False,
    on_wait: Callable[[Holder | None], None] | None = None,
) -> Verification:
    """Run the plan's top `top` candidates in `rounds` interleaved rounds and compare; writes PLAN-verify.json
    beside the plan (the latest), PLAN-verify-<n>.json (this verification's, kept) and `json_out`. `on_row` is
    called after each run with its candidate's row (updated with every round so far). `device` None: the device
    the plan was profiled on, else the CPU. `cancel` set: the running run is cancelled and no other starts (rows
    never measured say so). A candidate whose run fails is not run again. ValueError before anything runs for a
    plan that cannot be verified. The verification holds the machine from its first run to its last
    (pipesim_executor.host.machine: MachineBusy when another job holds it, or a wait with `wait_for_machine`), so
    no other job times on it between two of its runs."""
    if top < 1:
        raise ValueError(f"--top must be at least 1, got {top}")
    if not 1 <= rounds <= MAX_ROUNDS:
        raise ValueError(f"--rounds must be between 1 and {MAX_ROUNDS}, got {rounds}")
    check_number(min_seconds, "--min-seconds", minimum=0, maximum=MAX_MIN_SECONDS)
    plan = read_json(plan_path, MAX_PLAN_BYTES, "plan")
    if not isinstance(plan, dict):
        raise ValueError(f"{plan_path}: not a plan (expected a JSON object from {programs().pipesim} plan --json)")
    model_config(plan)  # refuse a plan without a model, or with settings the executor cannot run, before any run
    device = device or run_settings(plan)[2] or "cpu"
    calibration = plan.get("calibration") or {}
    uncertainty, calibrated = calibration.get("uncertainty", DEFAULT_UNCERTAINTY), calibration.get("calibrated") is True
    chosen = plan_candidates(plan, top)
    for number, c in enumerate(chosen, 1):
        check_candidate(plan, c, number)
    rows = [_row(c) for c in chosen]
    schedules = [candidate_schedule(c, f"the plan's candidate {n}") for n, c in enumerate(chosen, 1)]
    configs: list[RunConfig | None] = []
    for c, row in zip(chosen, rows, strict=True):
        try:
            # a plan priced from a profile predicts this machine's steps; a description's rates do not
            measured = steps_for(steps, min_seconds if calibrated else 0.0, predicted_step_ms(c))
            configs.append(candidate_config(plan, c, steps=measured, warmup_steps=warmup_steps, device=device,
                                            timeout_s=timeout_s))  # fmt: skip
        except ValueError as error:
            row.error = str(error).splitlines()[0]
            configs.append(None)
    prefix = verification_prefix(runs_root, plan_path.stem)
    total = rounds * len(chosen)
    job = f"verify-plan {plan_path.name}: top {len(chosen)}, {rounds} round{'s' if rounds > 1 else ''}"
    lock = machine.hold("verify-plan", job=job, wait=wait_for_machine, on_wait=on_wait)
    assert lock is not None  # only a multi-node run's second launcher runs beside the holder
    with lock:
        probe = LoadProbe()  # what else used the machine while the runs ran: contended runs are not comparable
        for round_ in range(rounds):
            for index, (row, config, schedule) in enumerate(zip(rows, configs, schedules, strict=True)):
                if row.error is not None or config is None:
                    continue
                if cancel is not None and cancel.is_set():
                    if not row.round_step_times_ms:
                        row.error = "cancelled before it ran"
                    continue
                done = round_ * len(chosen) + index
                where = f"round {round_ + 1} of {rounds}: running {row.label}"

                def progress(fraction: float, done: int = done, where: str = where) -> None:
                    if on_progress is not None:
                        on_progress(VerifyProgress((done + fraction) / total, done, total, where))

                record = partial(_record_prediction, plan=plan, plan_path=plan_path, row=row)
                lock.update(step=f"run {done + 1} of {total}, {row.label}", runs_done=done, runs_total=total)
                _run_once(row, config, runs_root, f"{prefix}-r{round_}-c{index}", cancel, progress, record, schedule,
                          lock)  # fmt: skip
                if on_row is not None:
                    on_row(row)
        load = probe.finish()
    verification = compare(rows, uncertainty, rounds)
    verification.machine_load = load
    verification.since_profile = _since_profile(plan, rows, verification.notes)
    verification.notes += _interval_notes(plan, rounds)
    _record_launch_spread(verification, plan, device, launch_history)
    disturbance = calibration.get("disturbance") if isinstance(calibration, dict) else None
    if isinstance(disturbance, dict) and disturbance.get("disturbed") is True:  # planned with the flag
        verification.notes.append("the plan was made from a disturbed profile (--accept-disturbed-profile)")
    document = {**verification.to_dict(), "verification": prefix}
    write_json(document, plan_path.with_name(plan_path.stem + "-verify.json"))  # the latest
    write_json(document, plan_path.with_name(f"{plan_path.stem}-verify-{prefix.rsplit('-', 1)[1]}.json"))
    if json_out is not None:
        write_json(document, json_out)
    if on_progress is not None:
        on_progress(VerifyProgress(1.0, total, total, "done"))
    return verification


def _record_launch_spread(verification: Verification, plan: dict[str, Any], device: str, history: str | None) -> None:
    """Add the verification's launch spread to the machine's record (pipesim.io.launch_history), for a plan of a
    profiled model and a comparable verification only: a machine that moved during it, or was shared, would
    record its own moves. A record that cannot be written is a note; the verification stands."""
    path = resolve_history(history)
    spread = verification.launch_spread
    model = (plan.get("inputs") or {}).get("executor_model")
    if path is None or spread is None or verification.status != "ok" or not isinstance(model, dict):
        return
    try:
        append_record(path, log_sd=spread.log_sd, dof=spread.dof, model=model_key(model), device=device)
    except (OSError, ValueError) as error:
        verification.notes.append(f"the launch history {path} was not updated ({one_line(error)})")


def _interval_notes(plan: dict[str, Any], rounds: int) -> list[str]:
    """A note where the plan's intervals are of a median over another number of launches than this verification's
    rounds (`plan --interval-of verification`): they are then too narrow (fewer rounds) or too wide (more). One
    step's intervals (the default) are wider than any median's: no note."""
    interval_of = (plan.get("inputs") or {}).get("interval_of")
    launches = interval_of.get("launches") if isinstance(interval_of, dict) else None
    if not isinstance(launches, int) or launches <= 1 or launches == rounds:
        return []
    return [f"the plan's intervals are of the median over {launches} launches, and this verification ran {rounds} "
            f"round{'s' * (rounds > 1)}: verify with --rounds {launches}, or plan with --interval-of step"]  # fmt: skip


def _since_profile(plan: dict[str, Any], rows: list[VerifyRow], notes: list[str]) -> SinceProfile | None:
    """For a plan priced from a unit profile (`inputs.cost_file`): the runs against the profile's own in-situ steps
    of the same configurations (pipesim.analysis.since_profile); None for another plan or when none is shared. A
    profile that cannot be read any more says so in `notes` (the verification stands)."""
    path = (plan.get("inputs") or {}).get("cost_file")
    measured = {
        config_key(c["schedule"], c["microbatch_size"], c["microbatches"], c["recompute"], c["split"]): r.measured_ms
        for r in rows
        if r.measured_ms is not None and isinstance(c := r.candidate, dict) and c.get("microbatch_size") is not None
    }
    if not isinstance(path, str) or not measured:
        return None
    from pipesim.plan.in_situ_check import check_profile  # the planner, only for a plan priced from a profile

    try:
        profile = load_cost_file(path)
        if not isinstance(profile, UnitProfile):
            return None
        return since_profile(check_profile(profile), measured)
    except (ValueError, TypeError, KeyError) as error:
        notes.append(
            f"the plan's profile {path} cannot be read ({one_line(error)}): no reading of the machine's move since it"
        )
        return None


def steps_for(steps: int, min_seconds: float, predicted_ms: float) -> int:
    """Measured steps for a candidate: `steps`, or as many as its predicted step takes to fill `min_seconds`
    (at most MAX_STEPS_FACTOR x `steps` and the steps a round's bootstrap takes, MAX_STEPS_PER_ROUND): the more
    of the two."""
    if not predicted_ms > 0 or not math.isfinite(predicted_ms):
        return steps
    filled = math.ceil(1000.0 * min_seconds / predicted_ms)
    return max(steps, min(MAX_STEPS_PER_ROUND, MAX_STEPS_FACTOR * steps, filled))


def _run_once(
    row: VerifyRow,
    config: RunConfig,
    runs_root: Path,
    name: str,
    cancel: threading.Event | None,
    progress: Callable[[float], None],
    record: Callable[[Path], None] | None = None,
    schedule: Schedule | None = None,
    held: MachineLock | None = None,
) -> None:
    """One run of one candidate (one round): its steps added to the row, or the row's error set. `record` is given
    the run's folder as soon as it exists (the plan's prediction written beside the run). `schedule`: the order
    the candidate carries (a synthesized one), else the run builds its family's by name."""
    from pipesim_executor.host.launch import start_run

    progress(0.0)
    try:
        handle = start_run(config, runs_root=runs_root, name=name, schedule=schedule, held=held)
    except ValueError as error:
        row.error = str(error).splitlines()[0]
        return
    if record is not None:
        record(handle.run_dir)
    while not handle.done():
        if cancel is not None and cancel.is_set():
            handle.cancel()
            break
        progress(handle.progress)
        try:
            handle.wait(0.25)
        except TimeoutError:
            pass
    result = handle.wait()
    if result.status == "ok" and result.measured_step_ms is not None and result.step_times_ms:
        row.add_round(list(result.step_times_ms), str(result.run_dir))
        memory, row.memory_kind = measured_memory(result.run_dir, config.devices.device)
        old = row.measured_memory_bytes
        row.measured_memory_bytes = [max(a, b) for a, b in zip(old, memory, strict=False)] if old else memory
    elif not row.round_step_times_ms:
        row.error = result.headline or f"run {result.status}"
    else:  # later rounds lost (cancelled, or failed): the rounds measured stand
        row.run_dir = str(result.run_dir)


class VerifyHandle:
    """A verification in the background (for the app): `progress`, `rows` so far, `cancel()`, `wait()`."""

    def __init__(self, plan_path: Path, top: int, **kwargs: Any) -> None:
        self._cancel = threading.Event()
        self._done = threading.Event()
        self.progress = VerifyProgress(0.0, 0, top, "starting")
        self.rows: list[VerifyRow] = []
        self.result: Verification | None = None
        self.error: Exception | None = None

        def work() -> None:
            try:
                self.result = verify_plan(
                    plan_path, top, on_row=self.rows.append, on_progress=self._set, cancel=self._cancel, **kwargs
                )
            except Exception as error:  # noqa: BLE001 - handed to the caller through `wait`
                self.error = error
            finally:
                self._done.set()

        self._thread = threading.Thread(target=work, name=f"verify {plan_path.name}", daemon=True)
        self._thread.start()

    def _set(self, progress: VerifyProgress) -> None:
        self.progress = progress

    def done(self) -> bool:
        return self._done.is_set()

    def cancel(self) -> None:
        """Cancel the running candidate (every process of its run ends) and skip the rest; returns at once."""
        self._cancel.set()

    def wait(self, timeout: float | None = None) -> Verification:
        """The verification; re-raises what stopped it before any run (a plan that cannot be verified)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"the verification is still running after {timeout} s")
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def start_verify(plan_path: Path, top: int, **kwargs: Any) -> VerifyHandle:
    """`verify_plan` in a background thread (keyword arguments as verify_plan's, but on_row, on_progress and
    cancel, which the handle holds)."""
    return VerifyHandle(plan_path, top, **kwargs)
