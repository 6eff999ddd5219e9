"""Things declared once: a copy that drifts from its original fails here."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

from pipesim.io.run_record import RunOutputs
from pipesim.schedules import schedule_names
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


def _name_tests(source: str, names: set[str]) -> list[int]:
    """Lines of `source` that compare something with a registered family's name (==, !=, in a literal)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for inner in ast.walk(node):
                if isinstance(inner, ast.Constant) and isinstance(inner.value, str) and inner.value.lower() in names:
                    lines.append(node.lineno)
    return lines


def test_no_module_outside_the_registry_tests_a_familys_name():
    """A family's facts live in its registry entry (placement, chunks, split backward, its in-situ class): a module
    that asks `name == "1f1b"` instead keeps a second copy, which a new or renamed family silently misses."""
    root = Path(__file__).resolve().parent.parent
    names = {name.lower() for name in schedule_names()}
    found = []
    for folder in ("pipesim", "pipesim_executor", "app_pages"):
        for path in sorted((root / folder).rglob("*.py")):
            if path.parent.name == "schedules":
                continue
            found += [f"{path.relative_to(root)}:{line}" for line in _name_tests(path.read_text(), names)]
    assert not found, "read the registry's facts instead of testing a family's name: " + ", ".join(found)
    assert _name_tests('profile = name == "1f1b" or kind in ("ZBV", "x")', names) == [1, 1]
