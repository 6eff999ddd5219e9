"""Issue 33 item 1: every run outcome (timed out, failed, cancelled, in each phase) told in one sentence that says
what was measured and what to do next, never torchrun's shutdown traceback."""

from __future__ import annotations

import pytest

from pipesim_executor.config import run_config
from pipesim_executor.progress import outcome_sentence

CONFIG = run_config(schedule="1f1b", num_ranks=2, num_microbatches=4, device="cpu", steps=5, timeout_s=10)


def _steps(phase: str, count: int, total: int, part: str = "run") -> list[dict]:
    """Both ranks' step events of one phase; measured steps carry their time."""
    return [
        {"event": "step", "rank": r, "step": s, "steps": total, "phase": phase, "part": part}
        | ({"ms": 10.0 + s + r} if phase == "measure" else {})
        for s in range(count)
        for r in range(2)
    ]


PROFILED = _steps("profile", 2, 6)
WARM = PROFILED + _steps("warmup", 1, 1)
MEASURING = WARM + _steps("measure", 3, 5)
REFERENCE = _steps("measure", 5, 5) + _steps("reference", 2, 7, part="reference")


@pytest.mark.parametrize(
    ("events", "where", "measured"),
    [
        ([], "while starting (before the first step)", "0 of 5 steps measured"),
        (PROFILED, "while profiling (step 2 of 6)", "0 of 5 steps measured"),
        (WARM, "while in the warm-up steps (step 1 of 1)", "0 of 5 steps measured"),
        (MEASURING, "while measuring (step 3 of 5)", "3 of 5 steps measured (median step 12.00 ms)"),
        (REFERENCE, "while running torch's reference (step 2 of 7)", "5 of 5 steps measured"),
    ],
)
def test_a_timeout_says_where_what_and_what_next(events: list[dict], where: str, measured: str) -> None:
    sentence = outcome_sentence("timeout", events, CONFIG, "timed out after 10 s\n--- last lines ---\nTraceback")
    assert sentence.startswith(f"Timed out after 10 s {where}, {measured}")
    assert "raise the timeout" in sentence and "Traceback" not in sentence and "\n" not in sentence


def test_a_failure_names_the_rank_its_error_and_the_phase() -> None:
    failure = "rank 1 failed (exit code 1): RuntimeError: boom\n--- last lines of rank 1 ---\nTraceback ..."
    sentence = outcome_sentence("failed", MEASURING, CONFIG, failure)
    assert sentence == (
        "Rank 1 failed (exit code 1) while measuring (step 3 of 5) with RuntimeError: boom; 3 of 5 steps measured "
        "(median step 12.00 ms). Read that rank's log below, fix the cause and launch again."
    )
    assert outcome_sentence("failed", [], CONFIG, "torchrun exited with code 1").startswith(
        "Torchrun exited with code 1 while starting (before the first step); 0 of 5 steps measured."
    )


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([], "Run cancelled while starting (before the first step), before any step was measured"),
        (PROFILED, "Run cancelled while profiling (step 2 of 6), before any step was measured"),
        (WARM, "Run cancelled while in the warm-up steps (step 1 of 1), before any step was measured"),
        (MEASURING, "Run cancelled after 3 of 5 steps measured (median step 12.00 ms)"),
    ],
)
def test_a_cancel_counts_the_steps_measured(events: list[dict], expected: str) -> None:
    sentence = outcome_sentence("cancelled", events, CONFIG, "cancelled by the caller")
    assert sentence.startswith(expected) and "launch it again" in sentence


def test_a_partial_run_says_what_went_well_and_what_did_not() -> None:
    sentence = outcome_sentence("partial", _steps("measure", 5, 5), CONFIG, "no reference run: needs 1 stage/rank")
    assert sentence == "5 of 5 steps measured (median step 13.00 ms), but no reference run: needs 1 stage/rank."
