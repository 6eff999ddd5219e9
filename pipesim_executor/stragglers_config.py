"""The run's straggler configs: what it computes (the model, or each action's simulated cost slept) and
what it injects (a slow rank, a slow link). Two sections of `pipesim_executor.config.RunConfig`, their flags
generated from the fields like every other section's.

A slow rank and a slow link mean what `pipesim.cost.perturb.Perturbation` says they mean, and the run's prediction
prices the injection by that rule, so `prediction_error` compares like with like. Pure Python (no torch): the
launcher checks and the app reads these too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pipesim.cost.perturb import Perturbation, parse_link_delay, parse_slow_rank

if TYPE_CHECKING:
    from pipesim.cost.model import CostModel
    from pipesim.ir import Schedule

COMPUTE_MODES = ("model", "sleep")
INJECT_KINDS = ("slow-rank", "link-delay")
INJECT_STEPS = ("all", "alternate")


@dataclass(frozen=True)
class ComputeConfig:
    """Compute: run the model, or sleep each action's simulated cost (real processes and transfers, no model)."""

    compute: Literal["model", "sleep"] = "model"
    """model: run the model; sleep: each action sleeps its cost from --f/--b/--w/--comm or --cost (as `pipesim
    simulate` reads them) instead of computing, and small tensors cross between ranks over gloo, so many ranks
    run on few cores with predictable durations (CPU only, without --profile, --reference or data parallelism)."""
    sleep_f: tuple[float, ...] | None = field(default=None, metadata={"flag": "f", "metavar": "T,.."})
    """Sleep mode: forward ms per microbatch, one value or one per rank or stage (default 1)."""
    sleep_b: tuple[float, ...] | None = field(default=None, metadata={"flag": "b", "metavar": "T,.."})
    """Sleep mode: full backward ms (default 2F)."""
    sleep_w: tuple[float, ...] | None = field(default=None, metadata={"flag": "w", "metavar": "T,.."})
    """Sleep mode: weight-gradient part of the backward, ms (default half of B)."""
    sleep_comm: tuple[float, ...] | None = field(default=None, metadata={"flag": "comm", "metavar": "T,.."})
    """Sleep mode: the transfer time the prediction charges per cross-rank message on top of the one the run
    measures, ms (default 0)."""
    sleep_cost: str | None = field(default=None, metadata={"flag": "cost", "metavar": "FILE"})
    """Sleep mode: a pipesim cost file instead of --f/--b/--w/--comm (default: none, the typed times)."""

    def __post_init__(self) -> None:
        if self.compute not in COMPUTE_MODES:
            raise ValueError(f"unknown compute {self.compute!r}; valid: {', '.join(COMPUTE_MODES)}")
        times = {"f": self.sleep_f, "b": self.sleep_b, "w": self.sleep_w, "comm": self.sleep_comm}
        given = [f"--{name}" for name, value in times.items() if value is not None]
        if self.compute != "sleep" and (given or self.sleep_cost is not None):
            raise ValueError(f"{', '.join(given) or '--cost'} give the sleep mode's costs: add --compute sleep")
        if self.sleep_cost is not None and given:
            raise ValueError(f"--cost cannot be combined with {', '.join(given)}")
        for name, value in times.items():
            if value is None:
                continue
            values = tuple(value)
            object.__setattr__(self, f"sleep_{name}", values)
            if not values or not all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for v in values):
                raise ValueError(f"--{name} must be finite times in ms >= 0, got {value!r}")

    @property
    def sleeps(self) -> bool:
        return self.compute == "sleep"

    def cost_model(self, schedule: Schedule) -> CostModel:
        """The sleep mode's costs, cut for the schedule as `pipesim simulate` cuts them (`CostModel.for_schedule`: per
        chunk on a V or interleaved schedule, each of DualPipe's two chains a whole model)."""
        from pipesim.cost.convert import cost_from_times
        from pipesim.io.cost_file import load_cost

        if self.sleep_cost is not None:
            cost = load_cost(Path(self.sleep_cost))
        else:
            cost = cost_from_times(self.sleep_f or (1.0,), self.sleep_b, self.sleep_w, self.sleep_comm or (0.0,))
        cut = cost.for_schedule(schedule)
        cut.check_fits(schedule)
        # one cost per stage: read back (cost.json) it is taken as given, never cut per chunk a second time
        return replace(cut, stages=tuple(cut.stage(s) for s in range(schedule.num_stages)))


@dataclass(frozen=True)
class InjectConfig:
    """Injection: make a rank or a link slow for real, to see what the schedule does with it."""

    inject: tuple[str, ...] = field(default=(), metadata={"metavar": "KIND=VALUE"})
    """Repeatable. slow-rank=R:FACTOR: each compute action on rank R sleeps (FACTOR - 1) x its own measured
    duration right after it (R:FACTOR:KINDS: only actions of those kinds, letters of FBIW); link-delay=A-B:MS:
    each send between ranks A and B leaves MS later (the sender goes on computing). Recorded in measured.json
    and priced into the prediction (pipesim.cost.perturb)."""
    inject_steps: Literal["all", "alternate"] = "all"
    """all: every step carries the injection; alternate: the steps alternate uniform and injected (measured steps
    0, 2, 4.. uniform, 1, 3, 5.. injected; the warm-ups continue the pattern backwards), so one run pairs the
    injection with the uniform case step by step and a machine's drift between launches cancels. measured.json's
    injected_steps says which steps carried it; the prediction and its error are the injected steps'."""

    def __post_init__(self) -> None:
        if isinstance(self.inject, str) or not all(isinstance(t, str) for t in self.inject):
            raise ValueError(f"inject must be a list of slow-rank=R:FACTOR or link-delay=A-B:MS, got {self.inject!r}")
        object.__setattr__(self, "inject", tuple(self.inject))
        if self.inject_steps not in INJECT_STEPS:
            raise ValueError(f"--inject-steps {self.inject_steps!r}: valid: {', '.join(INJECT_STEPS)}")
        if self.inject_steps == "alternate" and not self.inject:
            raise ValueError("--inject-steps alternate alternates an injection: add --inject")
        self.perturbation()  # every entry parses, or ValueError naming it

    @property
    def alternates(self) -> bool:
        """Whether the steps alternate uniform and injected (`inject_steps` alternate)."""
        return self.inject_steps == "alternate"

    def injected_at(self, measured_index: int) -> bool:
        """Whether the step `measured_index` steps after the first measured one (negative: a warm-up) carries the
        injection: every step, or under alternate the odd ones (a uniform step first, then its injected twin)."""
        return bool(self.inject) and (not self.alternates or measured_index % 2 == 1)

    def perturbation(self) -> Perturbation:
        """The injection as the one rule of stragglers (ValueError naming a bad entry and the valid forms)."""
        slow, links = [], []
        for text in self.inject:
            kind, sep, value = text.partition("=")
            if not sep or kind not in INJECT_KINDS:
                raise ValueError(
                    f"--inject {text!r}: expected slow-rank=R:FACTOR or link-delay=A-B:MS "
                    f"(kinds: {', '.join(INJECT_KINDS)})"
                )
            try:
                (slow if kind == "slow-rank" else links).append(
                    parse_slow_rank(value) if kind == "slow-rank" else parse_link_delay(value)
                )
            except ValueError as error:
                raise ValueError(f"--inject {text!r}: {error}") from None
        for entry in slow:
            if entry[1] < 1:
                raise ValueError(
                    f"--inject: a slow rank's factor must be >= 1 (sleeping cannot speed it up), got {entry[1]}"
                )
        return Perturbation.of(slow, links)


def check_stragglers(config: Any) -> None:
    """What the two sections of a `RunConfig` ask of the rest of the run (ValueError before anything starts). Typed
    Any: the run config's module imports this one."""
    compute, inject, pipeline = config.compute, config.inject, config.pipeline
    try:
        inject.perturbation().check_ranks(pipeline.num_ranks)
    except ValueError as error:
        raise ValueError(f"--inject: {error}") from None
    if inject.alternates and config.training.steps < 2:
        raise ValueError(
            f"--inject-steps alternate needs --steps >= 2 (a uniform step and its injected twin), got "
            f"{config.training.steps}"
        )
    if not compute.sleeps:
        return
    refused = {
        "--device cuda": config.devices.device == "cuda",
        "--profile": config.profile,
        "--reference": config.reference,
        "--data-parallel": pipeline.data_parallel > 1,
    }
    named = [flag for flag, on in refused.items() if on]
    if named:
        raise ValueError(f"--compute sleep runs no model: drop {', '.join(named)}")
