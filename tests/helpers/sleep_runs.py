"""A sleep-mode run judged against its own prediction, on a machine that may be busy.

A sleep needs no core, but its wake-up does: where other work holds both cores (CI runs three test workers on two),
every action of a run can wake late, and each step comes in late together. Load only ever adds, and a wrong rule in
the simulator shifts every step of every launch alike. So a run is judged by its median and by its quickest step,
and a launch that misses is launched again, up to `tries` in all: a prediction that is wrong misses on every try.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SleepTry:
    predicted_ms: float
    median_ms: float
    quickest_ms: float
    steps_ms: tuple[float, ...]

    @property
    def error(self) -> float:
        """The smaller error of the two readings (median, quickest step), signed."""
        errors = (self.predicted_ms / self.median_ms - 1, self.predicted_ms / self.quickest_ms - 1)
        return min(errors, key=abs)

    def describe(self) -> str:
        steps = ", ".join(f"{s:.1f}" for s in self.steps_ms)
        return (
            f"predicted {self.predicted_ms:.1f} ms, median {self.median_ms:.1f} "
            f"({self.predicted_ms / self.median_ms - 1:+.1%}), quickest {self.quickest_ms:.1f} "
            f"({self.predicted_ms / self.quickest_ms - 1:+.1%}); steps [{steps}]"
        )


def launch_until_on_prediction(config, root: Path, name: str, bound: float, tries: int = 3):
    """Launch `config` until one launch lands within `bound` of its prediction; return (last result, every try).

    The caller asserts on the tries: `abs(tries[-1].error) <= bound` with every try's description in the message.
    """
    from pipesim_executor.host import launch

    attempts: list[SleepTry] = []
    result = None
    for number in range(tries):
        result = launch.run(config, runs_root=root, name=f"{name}-{number}")
        assert result.status == "ok", result.message
        assert result.predicted_step_ms is not None and result.measured_step_ms is not None
        steps = tuple(result.step_times_ms)
        attempts.append(SleepTry(result.predicted_step_ms, result.measured_step_ms, min(steps), steps))
        if abs(attempts[-1].error) <= bound:
            break
    return result, attempts
