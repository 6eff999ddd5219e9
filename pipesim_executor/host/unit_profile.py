"""`python -m executor profile`: profile a model unit by unit on this machine and write a unit profile (`D/cost.json`,
pipesim.cost.profile) that `python -m pipesim plan --cost D/cost.json` cuts into any split.

    handle = start_profile(ProfileConfig(model=ModelConfig(), microbatch_sizes=(1, 2)), Path("out/prof"))
    handle.progress, handle.events()        # while it runs
    result = handle.wait()                  # ProfileResult: status, message, the profile (D/cost.json)

The ranks (pipesim_executor.rank.unit_profile) run under torchrun as a run's do, supervised the same way (a RunHandle:
timeout, cancel from the handle or the folder's `cancel` file, logs, progress.json), with the profile's own entry
module. Everything that can be refused is refused before a process starts or the folder is made (the run's own
checks, `pipesim_executor.host.checks.check_run`, the custom model's sandboxed check among them). No torch import here.

How the link between ranks is priced: a ping-pong between ranks 0 and 1 through the run's own transport (gloo on
the CPU, NCCL or staged on GPUs), a tiny and a real boundary tensor, as a run's `--profile` does, its latency raised by
the in-situ steps' median hop beyond that price (`pipesim_executor.rank.unit_fit.in_run_link`); with `--ranks 1` there
is no link (a free hand-over), and a plan for more ranks prices its transfers as free.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from pipesim.analysis.machine_share import load_words
from pipesim.analysis.profile_check import check_line, check_summary, disturbance
from pipesim.cost.profile import UnitProfile
from pipesim.io.cost_file import load_cost_file
from pipesim.io.formats import UnwritableOutput, read_json, write_json
from pipesim.ir import Schedule
from pipesim.limits import MAX_MICROBATCHES, MAX_SEED, MAX_TIMEOUT_S
from pipesim.numbers import check_number
from pipesim.programs import programs
from pipesim.sim.memory import OPTIMIZER_STATES
from pipesim_executor.config import OPTIMIZERS, ModelConfig, RunConfig, run_config
from pipesim_executor.host.checks import check_run
from pipesim_executor.host.launch import EventCallback, RunHandle, start_handle, take_machine
from pipesim_executor.host.machine import Holder
from pipesim_executor.host.machine_load import LoadProbe
from pipesim_executor.host.model_memory import check_model_memory
from pipesim_executor.host.phase import Phase
from pipesim_executor.host.profile_merge import MAX_LAUNCHES, merge_profiles
from pipesim_executor.host.run_folder import check_name, make_run_dir
from pipesim_executor.processes import run_environment, torchrun_command
from pipesim_executor.run_files import CONFIG_FILE, COST_FILE, LOGS_DIR, PROFILE_REQUEST_FILE, result_file

PROFILE_MODULE = "pipesim_executor.rank.unit_profile"
MAX_SIZE = 4096  # samples per microbatch
MAX_SIZES = 16
MAX_REPEATS = 1000
MAX_GLOBAL_BATCH = MAX_SIZE * MAX_MICROBATCHES


@dataclass(frozen=True)
class ProfileConfig:
    """A unit profile: the model, the microbatch sizes and the optimizers to time, on how many processes and where."""

    model: ModelConfig = field(default_factory=ModelConfig, metadata={"cli": False})
    """The model (pipesim_executor.config.ModelConfig: built-in or your own factory)."""
    microbatch_sizes: tuple[int, ...] = field(default=(1, 2), metadata={"metavar": "N,N"})
    """Samples per microbatch to time every unit at: at least two, how each unit's time grows with the size is
    read off them (the planner plans these sizes as measured, others on the line through the nearest two)."""
    optimizers: tuple[str, ...] = field(default=OPTIMIZERS, metadata={"cli": False})
    """Optimizers whose step to time (sgd, sgd-momentum, adam): a plan may use only those."""
    ranks: int = 2
    """Processes that time at once, as the ranks of the runs you plan will share this machine; 2 or more also time
    the link between two of them and run the in-situ steps on that many ranks."""
    repeats: int = 20
    """Timed repetitions of every measurement (the median is kept; 3 untimed ones run first)."""
    in_situ_steps: int = 40
    """Most in-situ steps per schedule and size: they are added 8 at a time until each in-situ factor's 95% CI is
    within +-3% (the profile says which did not get there)."""
    launches: int = 1
    """Launches of the ranks, one after another, merged into one profile: each timing the median over them, and
    the spread of their speeds carried into every prediction's interval (a shared machine lands each launch at a
    speed of its own: 3 on a noisy one)."""
    global_batch: int | None = field(default=None, metadata={"metavar": "B"})
    """Samples per step of the plans this profile is for: the in-situ steps at size S then run B/S microbatches,
    the shape those plans' candidates run (an action's in-situ time depends on the step's shape); default 4 per
    rank."""
    dtype: Literal["fp32", "bf16"] = "fp32"
    """Compute precision, as python -m executor run --dtype."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """cpu, cuda, or auto: CUDA when torch sees GPUs, else CPU."""
    seed: int = 0
    """Seed of the weights and the synthetic data."""
    timeout_s: float = field(default=1800.0, metadata={"flag": "timeout", "metavar": "S"})
    """Seconds before every process of the profile is ended."""

    def __post_init__(self) -> None:
        sizes = self.microbatch_sizes
        whole = all(isinstance(s, int) and not isinstance(s, bool) for s in sizes)
        if not whole or len(sizes) < 2 or len(sizes) > MAX_SIZES or len(set(sizes)) != len(sizes):
            raise ValueError(
                f"microbatch sizes: give 2 to {MAX_SIZES} different whole numbers (how a unit's time grows with the "
                f"size is fitted from them), got {list(sizes)}"
            )
        if not all(1 <= s <= MAX_SIZE for s in sizes):
            raise ValueError(f"microbatch sizes must lie from 1 to {MAX_SIZE}, got {list(sizes)}")
        object.__setattr__(self, "microbatch_sizes", tuple(sorted(sizes)))
        unknown = [name for name in self.optimizers if name not in OPTIMIZERS]
        if unknown or not self.optimizers:
            named = unknown[0] if unknown else "(none)"
            raise ValueError(f"unknown optimizer {named!r}; valid: {', '.join(OPTIMIZERS)}")
        for name, value, low, high in (
            ("ranks", self.ranks, 1, 16),
            ("repeats", self.repeats, 3, MAX_REPEATS),
            ("in_situ_steps", self.in_situ_steps, 8, MAX_REPEATS),
            ("launches", self.launches, 1, MAX_LAUNCHES),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ValueError(f"{name} must be a whole number from {low} to {high}, got {value!r}")
        if self.global_batch is not None:
            check_number(self.global_batch, "global batch", minimum=1, maximum=MAX_GLOBAL_BATCH, whole=True)
        check_number(self.timeout_s, "timeout", above=0, maximum=MAX_TIMEOUT_S)
        check_number(self.seed, "seed", minimum=0, maximum=MAX_SEED, whole=True)

    def run_config(self) -> RunConfig:
        """The run the ranks are started as: 1F1B on `ranks` ranks (the in-situ steps' schedule), at the first
        size, with the first optimizer asked for."""
        microbatches = 4 * self.ranks
        return run_config(
            schedule="1f1b", num_ranks=self.ranks, num_microbatches=microbatches, model=self.model,
            batch_size=microbatches * self.microbatch_sizes[0], steps=1, warmup_steps=0,
            optimizer=self.optimizers[0], dtype=self.dtype, device=self.device, seed=self.seed,
            timeout_s=float(self.timeout_s),
        )  # fmt: skip


@dataclass
class ProfileResult:
    """What a profile left: its status (ok, failed, timeout, cancelled), a message, and the profile when ok."""

    run_dir: Path
    status: str
    message: str
    profile: UnitProfile | None = None

    @property
    def cost_file(self) -> Path:
        return self.run_dir / COST_FILE


class ProfileHandle(RunHandle):
    """A profile in progress: a RunHandle (events, log, cancel, wait) whose launch is the profile's ranks."""

    def __init__(
        self, run_dir: Path, config: RunConfig, schedule: Schedule, on_event: EventCallback | None = None,
        launches: int = 1,
    ) -> None:  # fmt: skip
        super().__init__(run_dir, config, schedule, on_event)
        self.launches, self.launch = launches, 0  # how many launches, and which one runs (from 0)

    @property
    def progress(self) -> float:
        """Fraction done: the slowest rank's parts (units at each size, optimizers, link, in-situ steps)."""
        if self._status != "running":
            return 1.0
        latest: dict[int, float] = {}
        for event in self.events():
            if event.get("event") == "launch":  # a new launch: its ranks count from the start again
                latest.clear()
            step, steps = event.get("step"), event.get("steps")
            if event.get("event") == "step" and isinstance(step, int) and isinstance(steps, int) and steps > 0:
                latest[event.get("rank", 0)] = min(1.0, (step + 1) / steps)
        done = min(latest.values(), default=0.0) if len(latest) == self.config.world_size else 0.0
        return min((self.launch + done) / self.launches, 0.99)

    def _supervise_run(self) -> None:
        started = time.time()
        probe = LoadProbe()  # what else used the machine while the profile ran
        deadline = time.monotonic() + self.config.timeout_s
        command: list[str] = []
        status, message, profile = "failed", "", None
        try:
            documents = []
            for launch in range(self.launches):
                self.launch = launch
                # each launch's own log files (the first keeps the plain names) and its own cost file
                phase = Phase(
                    torchrun_command(self.config, self.run_dir, module=PROFILE_MODULE), run_environment(self.config),
                    self, f"launch{self.launch + 1}-" if self.launch else "",
                )  # fmt: skip
                command = phase.argv
                self._launch_event("launch", command=phase.argv, launch=self.launch + 1, launches=self.launches)
                self.publish(force=True)
                outcome = phase.run(deadline, self._cancelled)
                status = outcome.status
                if status != "ok":
                    message = phase.failure_message(outcome)[0]
                    break
                if self.launches > 1:
                    documents.append(read_json(self.run_dir / COST_FILE))
                    (self.run_dir / COST_FILE).rename(self.run_dir / f"launch{self.launch + 1}-{COST_FILE}")
            if status == "ok" and documents:
                write_json(merge_profiles(documents), self.run_dir / COST_FILE)
            if status == "ok":
                try:
                    loaded = load_cost_file(self.run_dir / COST_FILE)
                    profile = loaded if isinstance(loaded, UnitProfile) else None
                    if profile is not None:
                        profile = checked_profile(profile, self.run_dir / COST_FILE, probe.finish())
                except ValueError as error:
                    status, message = "failed", f"the ranks wrote no readable profile: {error}"
        except Exception as error:  # the launcher itself broke: still leave a result behind
            status, message, profile = "failed", f"launcher error: {error!r}", None
        summary = {"status": status, "message": message, "command": command, "started_at": started,
                   "finished_at": time.time(), "wall_s": round(time.time() - started, 3)}  # fmt: skip
        try:
            write_json(summary, self.run_dir / result_file(0))
        except (OSError, ValueError) as error:
            summary["message"] = f"{message}\ncannot write {result_file(0)}: {error}".strip()
        self._result = ProfileResult(self.run_dir, status, summary["message"], profile)  # type: ignore[assignment]
        self._status = status
        self.publish(force=True)
        self.release_machine()
        self._launch_event("finished", status=status, message=summary["message"])
        self._finished.set()


def checked_profile(profile: UnitProfile, cost_file: Path, load: dict | None = None) -> UnitProfile:
    """`profile` with its check against its own in-situ steps (pipesim.analysis.profile_check) in its
    provenance (`check`, with the verdict on a bias: `check.disturbance`) and the machine's load while it ran
    (`machine_load`, pipesim_executor.host.machine_load), written into `cost_file` too; unchanged where there
    was nothing to record. The mark is for people reading the file: `pipesim plan --cost` decides afresh."""
    from pipesim.plan.in_situ_check import check_profile  # the planner: only once a profile is done

    try:
        summary = check_summary(check_profile(profile))
        added = {} if load is None else {"machine_load": load}
        if summary is not None:
            added["check"] = {**summary, "disturbance": disturbance(summary, load)}
        if not added:
            return profile
        document = read_json(cost_file)
        document.setdefault("provenance", {}).update(added)
        write_json(document, cost_file)
    except Exception:  # noqa: BLE001 - the check only reports: a profile it cannot check is still the profile
        return profile
    return replace(profile, provenance={**profile.provenance, **added})


def start_profile(
    config: ProfileConfig,
    out: Path,
    on_event: EventCallback | None = None,
    wait_for_machine: bool = False,
    on_wait: Callable[[Holder | None], None] | None = None,
) -> ProfileHandle:
    """Check everything (ValueError before anything starts), take the machine (a profile is timed:
    pipesim_executor.host.machine's MachineBusy, or a wait with `wait_for_machine`), make the folder `out` (never an
    existing one), write the run's config and the request, and start the ranks in the background."""
    check_name(out.name)
    run, schedule = check_run(config.run_config())
    heaviest = max(config.optimizers, key=OPTIMIZER_STATES.__getitem__)  # the largest size, the most state
    check_model_memory(config.model, max(config.microbatch_sizes), heaviest, config.dtype, 1, run.devices.device)
    config = replace(config, device=run.devices.device)
    lock = take_machine("profile", run, out.parent, out.name, wait=wait_for_machine, on_wait=on_wait)
    try:
        run_dir = make_run_dir(out.parent, out.name, run)
        if lock is not None:
            lock.update(run_dir=str(run_dir))
        try:
            (run_dir / LOGS_DIR).mkdir()
            write_json(run.to_dict(), run_dir / CONFIG_FILE)
            write_json(
                {"microbatch_sizes": list(config.microbatch_sizes), "optimizers": list(config.optimizers),
                 "repeats": config.repeats, "in_situ_steps": config.in_situ_steps,
                 "global_batch": config.global_batch},
                run_dir / PROFILE_REQUEST_FILE,
            )  # fmt: skip
        except (OSError, ValueError) as error:
            reason = getattr(error, "strerror", None) or error
            raise UnwritableOutput(f"cannot write the profile folder {run_dir}: {reason}") from None
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return start_handle(ProfileHandle(run_dir, run, schedule, on_event, config.launches), lock)


def summary_lines(result: ProfileResult) -> list[str]:
    """The profile in words: what was measured, the fits' worst residual, the runtime terms, where it is."""
    lines = [f"profile  {result.run_dir}", f"status   {result.status}"]
    if result.message:
        lines.append("message  " + result.message.replace("\n", "\n         "))
    profile = result.profile
    if profile is None:
        return lines
    sizes = ",".join(map(str, profile.microbatch_sizes))
    total = {s: sum(u.cost_at(s, False).forward_ms + u.cost_at(s, False).backward_ms for u in profile.units)
             for s in profile.microbatch_sizes}  # fmt: skip
    lines += [
        f"units    {len(profile.units)} ({', '.join(u.name for u in profile.units[:6])}"
        + (", ..." if len(profile.units) > 6 else "")
        + f") at microbatch sizes {sizes}",
        "model    F+B of every unit: "
        + ", ".join(f"{total[s]:.3g} ms at {s}" for s in profile.microbatch_sizes)
        + f"; worst affine-fit residual {profile.worst_residual():.1%}",
        f"runtime  dispatch gap {profile.dispatch_ms:.3f} ms per action, tail {profile.tail_ms:.3f} ms per step, "
        f"cut stages pay F {profile.action.start.get('forward_ms', 0):+.3f} / B "
        f"{profile.action.start.get('backward_ms', 0):+.3f} ms at a cut start, F "
        f"{profile.action.end.get('forward_ms', 0):+.3f} / B {profile.action.end.get('backward_ms', 0):+.3f} at an end",
        "optim    "
        + ", ".join(
            f"{n} {t.fixed_ms:.3f} ms + {t.ms_per_byte * 1e6:.4f} ms/MB" for n, t in profile.optimizers.items()
        ),  # fmt: skip
        f"link     {profile.link.latency_ms:.3f} ms + bytes / {profile.link.bandwidth_gbps:.3g} GB/s "
        f"(ping-pong between ranks 0 and 1{_hop_note(profile)})"
        if profile.link.latency_ms or math.isfinite(profile.link.bandwidth_gbps)
        else "link     none measured (one rank)",
        *in_situ_lines(profile),
        *_drift_lines(profile),
        *check_line(profile.provenance.get("check") if isinstance(profile.provenance, Mapping) else None),
        *_disturbance_lines(profile),
        f"wrote    {result.cost_file} ({programs().pipesim} plan --cost {result.cost_file} ...)",
    ]
    return lines


def _disturbance_lines(profile: UnitProfile) -> list[str]:
    """The machine's load while the profile ran, and the check's verdict when it found a bias (one line)."""
    provenance = profile.provenance if isinstance(profile.provenance, Mapping) else {}
    check = provenance.get("check")
    verdict = check.get("disturbance") if isinstance(check, dict) else None
    if isinstance(verdict, dict) and verdict.get("disturbed"):
        return [f"DISTURBED {verdict['line']} ({programs().pipesim} plan --cost refuses it without "
                "--accept-disturbed-profile)"]  # fmt: skip
    return [f"machine  {load_words(provenance.get('machine_load'))}"] if "machine_load" in provenance else []


def _drift_lines(profile: UnitProfile) -> list[str]:
    """How far the machine's speed moves, as the profile measured it: between its in-situ rounds, and between its
    launches when it had several (pipesim_executor.host.profile_merge)."""
    launches = profile.provenance.get("launches") if isinstance(profile.provenance, dict) else None
    if isinstance(launches, dict) and launches.get("count", 1) > 1:
        return [
            f"launches {launches['count']} merged (each timing their median): their speeds differ by "
            f"{launches.get('spread', 0.0):.1%} (SD); with the drift inside a launch, every prediction's interval "
            f"carries {profile.spread_drift:.1%}"
        ]
    if not profile.spread_drift:
        return []
    return [
        f"drift    the machine's speed moved {profile.spread_drift:.1%} (SD) from one in-situ round to the next "
        "beyond its steps' noise: every prediction's interval carries it"
    ]


def _hop_note(profile: UnitProfile) -> str:
    """What the in-situ steps' hops added to the ping-pong's latency, in words ('' when nothing was measured)."""
    hop = profile.provenance.get("in_run_hop") if isinstance(profile.provenance, Mapping) else None
    if not isinstance(hop, dict) or not isinstance(hop.get("excess_ms"), (int, float)):
        return ""
    return f", +{hop['excess_ms']:.3f} ms: a message's hop inside the in-situ steps"


def in_situ_lines(profile: UnitProfile) -> list[str]:
    """Each class's in-situ factors with their 95% CIs (the profile's provenance), and how many got within the
    target (adaptive steps: pipesim_executor.rank.calibrate); one line per class."""
    in_situ = profile.provenance.get("in_situ") if isinstance(profile.provenance, Mapping) else None
    rows = in_situ.get("ci") if isinstance(in_situ, dict) else None
    if not rows:
        return []
    target = in_situ.get("target_ci", 0.03)
    lines = []
    for name in dict.fromkeys(r["class"] for r in rows):
        mine = [r for r in rows if r["class"] == name]
        known = [r["ci"] for r in mine if r["ci"] is not None]
        within = sum(ci <= target for ci in known)
        low, high = min(r["factor"] for r in mine), max(r["factor"] for r in mine)
        widest = f"+-{max(known):.1%}" if known else "unknown"
        lines.append(
            f"{'in-situ' if not lines else '':<8} {name}: {len(mine)} factors x{low:.2f}..x{high:.2f}, "
            f"95% CI up to {widest}; {within} of {len(mine)} within +-{target:.0%} after up to "
            f"{max(r['steps'] for r in mine)} steps"
        )
    total = sum(r["ci"] is not None and r["ci"] <= target for r in rows)
    lines.append(
        f"{'':<8} every in-situ factor within +-{target:.0%}"
        if total == len(rows)
        else f"{'':<8} {len(rows) - total} of {len(rows)} in-situ factors not within +-{target:.0%}: a noisy machine; "
        "predictions of those classes are less certain (profile again when it is quieter, or with more --in-situ-steps)"
    )
    return lines
