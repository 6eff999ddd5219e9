"""Things declared once (issue 32 item 5): a copy that drifts from its original fails here."""

from __future__ import annotations

from dataclasses import fields

from pipesim.io.run_record import RunOutputs
from pipesim_executor.host import run_folder
from pipesim_executor.host.run_folder import RunResult


def test_a_run_result_carries_every_output_the_reader_reads(tmp_path, monkeypatch):
    """RunResult extends RunOutputs and copies every field: an output added to RunOutputs cannot be dropped."""
    sentinels = {output.name: object() for output in fields(RunOutputs)}
    monkeypatch.setattr(run_folder, "read_outputs", lambda run_dir: RunOutputs(**sentinels))
    result = RunResult(tmp_path, "ok", "", None, None, measured_step_ms=1.0)  # no median of the sentinels
    run_folder._load_outputs(result)
    assert {name: getattr(result, name) for name in sentinels} == sentinels


def test_the_optimizers_are_one_list():
    """The planner's memory, the profile, the executor's flag and the Plan page all read pipesim's one list."""
    from typing import get_args, get_type_hints

    from pipesim.cost.runtime import OPTIMIZER_STATES, OPTIMIZERS
    from pipesim.sim.memory import OPTIMIZER_STATES as memory_states
    from pipesim_executor.config import TrainingConfig
    from pipesim_executor.host.unit_profile import ProfileConfig

    assert OPTIMIZERS == tuple(OPTIMIZER_STATES) and memory_states is OPTIMIZER_STATES
    assert get_args(get_type_hints(TrainingConfig)["optimizer"]) == OPTIMIZERS
    assert ProfileConfig().optimizers == OPTIMIZERS


def test_the_bubble_formulas_agree_between_the_metrics_and_the_functions():
    """compute_metrics and bubble_fraction / bubble_ratio share one formula each."""
    from pipesim.cost.model import CostModel
    from pipesim.schedules import build_schedule
    from pipesim.sim.metrics import bubble_fraction, bubble_ratio, compute_metrics
    from pipesim.sim.simulate import simulate

    timeline = simulate(build_schedule("1f1b", 4, 8), CostModel.uniform())
    metrics = compute_metrics(timeline)
    assert metrics.bubble_fraction == bubble_fraction(timeline) and metrics.bubble_ratio == bubble_ratio(timeline)
    assert [r.bubble_fraction for r in metrics.ranks] == [bubble_fraction(timeline, r) for r in range(4)]
