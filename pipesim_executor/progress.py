"""Progress lines from a rank to the launcher (`PIPESIM {json}` on stdout, one write each), and what they mean
for the progress bar.

Ranks share torchrun's relay, so a line must never be split by another rank's output: it is written and
flushed in one call. The launcher (pipesim_executor.host.launch) parses these lines into events. No torch import: the
reference run emits before torch is loaded.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pipesim_executor.config import RunConfig

PROGRESS_PREFIX = "PIPESIM "  # a rank's progress line: this prefix, then one JSON object


def emit(event: str, **fields: Any) -> None:
    """One progress event, e.g. emit("step", rank=0, step=3, steps=5, phase="measure")."""
    sys.stdout.write(PROGRESS_PREFIX + json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


PROFILE_SHARE = 0.2  # of the progress bar, when the run profiles first


def step_fraction(event: dict, config: RunConfig) -> float | None:
    """How far one rank is, from its latest `step` event: profile, then warm-up, then measured steps.

    Workers count steps from 0 within each phase ("profile", "warmup", "measure"); other phases
    (the reference run's) count over the whole launch.
    """
    step, steps, phase = event.get("step"), event.get("steps"), event.get("phase")
    if not (isinstance(step, int) and isinstance(steps, int) and steps > 0 and isinstance(event.get("rank"), int)):
        return None
    within = min(1.0, (step + 1) / steps)
    profile = PROFILE_SHARE if config.profile else 0.0
    warmup = config.training.warmup_steps
    total = warmup + config.training.steps
    segments = {
        "profile": (0.0, profile),
        "warmup": (profile, (1 - profile) * warmup / total),
        "measure": (profile + (1 - profile) * warmup / total, (1 - profile) * config.training.steps / total),
    }
    start, width = segments.get(phase, (0.0, 1.0))
    return start + width * within


def readable_event(event: dict) -> str:
    """One progress event in words, e.g. "step 3/5 (measure)"; unknown events keep their fields."""
    kind = event.get("event", "?")
    if kind == "step" and isinstance(event.get("step"), int):
        return f"step {event['step'] + 1}/{event.get('steps', '?')} ({event.get('phase', 'run')})"
    rest = ", ".join(f"{k} {v}" for k, v in event.items() if k not in ("event", "rank"))
    return f"{kind}{': ' + rest if rest else ''}"


def readable_log(text: str, lines: int = 40) -> str:
    """The launcher's log (`[rankN] ...` lines) with each `PIPESIM {json}` line written in words; the last
    `lines` lines. The raw log stays in the run folder's logs/ and behind the Run page's download."""
    out = []
    for line in text.splitlines():
        head, sep, rest = line.partition(f"] {PROGRESS_PREFIX}")
        if sep:
            try:
                event, _ = json.JSONDecoder().raw_decode(rest.strip())
            except ValueError:
                event = None
            if isinstance(event, dict):
                line = f"{head}] {readable_event(event)}"
        out.append(line)
    return "\n".join(out[-lines:])


def _step_times(events: list[dict], parts: tuple[str, ...] = ("run",)) -> list[float]:
    """Each measured step's time from the step events (each rank's own `ms`; a step takes as long as its slowest
    rank), in step order."""
    steps: dict[int, float] = {}
    for event in events:
        if event.get("event") == "step" and event.get("phase") == "measure" and event.get("part", "run") in parts:
            if isinstance(event.get("step"), int) and isinstance(event.get("ms"), float):
                steps[event["step"]] = max(steps.get(event["step"], 0.0), event["ms"])
    return [steps[k] for k in sorted(steps)]


def _median_text(times: list[float]) -> str:
    """The median of a run's measured steps as every reader prints it: pipesim's one median (`median_step_ms`,
    the run's card's), pipesim.units' format."""
    from pipesim.io.run_record import median_step_ms
    from pipesim.units import format_ms

    return format_ms(median_step_ms(times))


def measured_so_far(events: list[dict], step_times_ms: list[float] | None = None) -> str:
    """What a run had measured when it was cancelled, in words: the steps the ranks wrote (`step_times_ms`, from
    measured.json, the very list the run's card takes its median of), else its step events. Empty when no
    measured step had finished."""
    total = next((e.get("steps") for e in reversed(events) if e.get("phase") == "measure" and "steps" in e), None)
    times = list(step_times_ms) if step_times_ms else _step_times(events, ("run", "launcher"))
    if not times:
        return ""
    return f"{len(times)} of {total or '?'} measured steps done, median step {_median_text(times)}"


PHASE_WORDS = {
    "profile": "profiling",
    "warmup": "in the warm-up steps",
    "measure": "measuring",
    "reference": "running torch's reference",
}


def _where(events: list[dict]) -> str:
    """Which phase the run had reached and how far into it, in words, from its latest step event."""
    steps = [e for e in events if e.get("event") == "step" and isinstance(e.get("step"), int)]
    if not steps:
        return "starting (before the first step)"
    last = steps[-1]
    phase = "reference" if last.get("part") == "reference" else str(last.get("phase", "run"))
    done = 1 + max(
        e["step"] for e in steps if e.get("phase") == last.get("phase") and e.get("part") == last.get("part")
    )
    return f"{PHASE_WORDS.get(phase, f'in phase {phase}')} (step {done} of {last.get('steps', '?')})"


def _measured(events: list[dict], config: RunConfig, step_times_ms: list[float] | None) -> tuple[int, str]:
    """How many measured steps finished, and those steps in words ("2 of 5 steps measured (median step 7.10
    ms)"): the ranks' own step times where given (measured.json), else the step events."""
    times = list(step_times_ms) if step_times_ms else _step_times(events)
    text = f"{len(times)} of {config.training.steps} steps measured"
    if times:
        text += f" (median step {_median_text(times)})"
    return len(times), text


def outcome_sentence(
    status: str, events: list[dict], config: RunConfig, failure: str = "", step_times_ms: list[float] | None = None
) -> str:
    """A run's outcome in one sentence: what happened, in which phase, what it had measured, what to do next.

    What the Run page and the CLI show first. The log tail (torchrun's own shutdown traceback after a timeout or
    a cancel) stays in the run folder's logs, never in this sentence. `failure` is the failed rank's own error
    line (pipesim_executor.host.torchrun_log.failure_message's first line). `step_times_ms`: what the ranks wrote
    (measured.json), so the sentence's median is the run card's.
    """
    where = _where(events)
    done, measured = _measured(events, config, step_times_ms)
    if status == "ok":
        return f"Run finished: {measured}."
    if status == "cancelled":
        if done:
            return f"Run cancelled after {measured}; launch it again to measure every step."
        return f"Run cancelled while {where}, before any step was measured; launch it again to measure."
    if status == "timeout":
        return (
            f"Timed out after {config.timeout_s:g} s while {where}, {measured}; raise the timeout "
            "(Timeout (s), --timeout) or ask for fewer steps, fewer microbatches or a smaller model."
        )
    said = failure.split("\n", 1)[0].strip().rstrip(".") or f"run {status}"
    said = said[0].upper() + said[1:]
    if status == "partial":  # every step measured; a part asked for (torch's reference) is missing
        return f"{measured[0].upper()}{measured[1:]}, but {said[0].lower()}{said[1:]}."
    if status != "failed":
        return f"{said}."
    who, _, why = said.partition(": ")  # "rank 1 failed (exit code 1)", "RuntimeError: boom"
    why = f" with {why}" if why else ""
    return f"{who} while {where}{why}; {measured}. Read that rank's log below, fix the cause and launch again."
