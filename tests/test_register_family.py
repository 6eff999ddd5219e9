"""Registering a family is one line (its module in `pipesim.schedules.FAMILY_MODULES`), and every surface finds
it: list, simulate, compare, the torch CSV, synthesis, the planner by default, the app's pickers (through the
registry functions they call) and the executor's schedule resolution and torch counterpart.

The family is written here into a temporary module, as a contributor would write theirs (docs/design.md,
"Adding a schedule family"): 1F1B's order under a new name, with 1F1B's torch class.
"""

from __future__ import annotations

import textwrap

import pytest

import pipesim.schedules as registry
from pipesim.cli.commands import main
from pipesim.cost.model import CostModel
from pipesim.schedules import build_schedule

NAME = "my-1f1b"
MODULE = textwrap.dedent(
    f'''
    """A family registered by a test: 1F1B's order under another name."""

    import dataclasses

    from pipesim.schedules import ScheduleInfo
    from pipesim.schedules.basic import one_f_one_b


    def my_1f1b(num_ranks, num_microbatches):
        return dataclasses.replace(one_f_one_b(num_ranks, num_microbatches), name="{NAME}")


    SCHEDULES = [ScheduleInfo("{NAME}", my_1f1b, "1F1B again, registered by a test.", torch_class="Schedule1F1B")]
    '''
)


@pytest.fixture
def registered(tmp_path, monkeypatch):
    (tmp_path / "my_family.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "FAMILY_MODULES", [*registry.FAMILY_MODULES, "my_family"])  # the one line
    return NAME


def test_the_registry_and_the_app_pickers_list_it(registered, capsys):
    assert registered in registry.schedule_names()  # the Simulate page's and the DAG page's picker
    assert registered in registry.planned_schedule_names()  # Compare's and Plan's defaults, the presets
    assert main(["list"]) == 0
    assert registered in capsys.readouterr().out


def test_simulate_compare_and_the_torch_csv_take_it(registered, capsys, tmp_path):
    assert main(["simulate", "--schedule", registered, "--ranks", "3", "--microbatches", "4"]) == 0
    assert "makespan" in capsys.readouterr().out
    from pipesim.api import compare, load_torch_csv, to_torch_csv

    rows = compare([registered, "1f1b"], ranks=3, microbatches=4)
    assert rows[0].error is None and rows[0].makespan == rows[1].makespan
    schedule = build_schedule(registered, 3, 4)
    path = tmp_path / "my.csv"
    path.write_text(to_torch_csv(schedule))
    assert load_torch_csv(path).actions == schedule.actions


def test_synthesis_starts_from_it(registered):
    from pipesim.synth.problem import Instance, SynthesisProblem
    from pipesim.synth.search import registry_orders

    problem = SynthesisProblem(3, 4, CostModel.uniform(), memory_limit=4)
    assert registered in [name for name, _ in registry_orders(Instance(problem))]


def test_the_planner_tries_it_by_default(registered):
    from pipesim.cost.description import ModelDescription
    from pipesim.plan.search import PlanInputs, PlanSpace, evaluate_all

    space = PlanSpace(microbatch_sizes=(1,), recompute=(False,))
    assert registered in space.schedules
    model = ModelDescription(num_layers=4, hidden_size=64, ffn_size=128, num_heads=4, seq_len=16, vocab_size=100)
    inputs = PlanInputs.from_description(model, devices=2, global_batch=4)
    mine = [c for c in evaluate_all(inputs, space) if c.schedule == registered]
    assert mine and all(c.error is None and c.step_ms > 0 for c in mine)


def test_the_executor_resolves_it_and_finds_its_torch_counterpart(registered):
    pytest.importorskip("torch")
    from pipesim_executor.config import run_config
    from pipesim_executor.host.checks import check_run
    from pipesim_executor.rank.reference import torch_schedule_name

    _, schedule = check_run(run_config(schedule=registered, num_ranks=2, num_microbatches=4, device="cpu"))
    assert schedule.name == registered and schedule.num_stages == 2
    assert torch_schedule_name(registered) == "Schedule1F1B"
