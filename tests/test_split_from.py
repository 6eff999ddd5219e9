"""One split policy: `executor run --split-from` cuts the model where the planner does, from a unit profile
(balance over F+B at the run's microbatch size, the planner's `Evaluator.split`) or from a plan (its best
candidate for the run, the split verify-plan runs too); and a run without either cuts the built-in Transformer
where the planner cuts its description."""

from __future__ import annotations

import pytest

from pipesim.cost.description import ModelDescription, parameter_split
from pipesim.io.cost_file import save_cost, save_profile
from pipesim.io.formats import write_json
from pipesim.plan.inputs import PlanInputs
from pipesim.plan.report import PLAN_FORMAT
from pipesim.plan.search import Evaluator
from pipesim_executor.config import ModelConfig, run_config
from pipesim_executor.host import cli
from pipesim_executor.host.split_from import split_from_file
from tests.test_unit_profile import profile


def _config(schedule: str = "1f1b", ranks: int = 2, recompute: bool = False):
    model = ModelConfig.of_transformer(num_layers=4)  # 6 units: the profile's embedding, 4 blocks and head
    return run_config(
        schedule=schedule, num_ranks=ranks, num_microbatches=4, batch_size=8, model=model, recompute=recompute
    )


@pytest.mark.parametrize("recompute", [False, True])
def test_a_unit_profile_gives_the_planners_split(tmp_path, recompute):
    path = tmp_path / "profile.json"
    measured = profile()
    save_profile(measured, path)
    for stages in (2, 3):
        config = _config(ranks=stages, recompute=recompute)
        inputs = PlanInputs.from_profile(measured, devices=stages, global_batch=8)
        planner = Evaluator(inputs).split(config.microbatch_size, stages, recompute)
        assert split_from_file(path, config, stages) == tuple(planner.split_points)


def test_a_plan_gives_its_best_candidate_for_this_run(tmp_path):
    def candidate(schedule, split, step, fits=True, error=None):
        return {"schedule": schedule, "ranks": 2, "split": split, "step_ms": step, "fits": fits, "error": error}

    plan = {
        "format": PLAN_FORMAT,
        "candidates": [
            candidate("1f1b", [3], 9.0),
            candidate("1f1b", [2], 5.0, fits=False),  # faster, but over the cap
            candidate("1f1b", [4], 7.0),
            candidate("gpipe", [1], 1.0),  # another schedule
            candidate("1f1b", [1], 1.0, error="cannot build"),
        ],
    }
    path = tmp_path / "plan.json"
    write_json(plan, path)
    assert split_from_file(path, _config(), 2) == (4,)
    with pytest.raises(ValueError, match="no built candidate for zbv"):
        split_from_file(path, _config("zbv"), 4)


def test_the_command_line_refuses_two_splits_and_a_stage_cost_file(tmp_path, capsys):
    path = tmp_path / "profile.json"
    save_profile(profile(), path)
    assert cli.main(["run", "--split-from", str(path), "--split-points", "3", "--layers", "4"]) == 2
    assert "give one" in capsys.readouterr().err
    from pipesim.cost.model import CostModel

    stages = tmp_path / "stages.json"
    save_cost(CostModel.uniform(), stages)
    assert cli.main(["run", "--split-from", str(stages), "--layers", "4", "--out", str(tmp_path / "r")]) == 2
    assert "not a unit profile or a plan" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()  # nothing written before every argument is checked


@pytest.mark.parametrize(
    "sizes",
    [
        {"num_layers": 4},  # the executor's small Transformer: its head is a third of a block
        {"num_layers": 6, "hidden_size": 64, "ffn_size": 256, "vocab_size": 8000},  # a head heavier than a block
        {"num_layers": 12, "hidden_size": 256, "ffn_size": 1024, "num_heads": 8, "seq_len": 128, "vocab_size": 32000},
    ],
)
@pytest.mark.parametrize("recompute", [False, True])
def test_a_run_without_split_points_is_cut_as_the_planner_cuts_its_description(sizes, recompute):
    """`executor run` with neither --split-points nor --split-from: the split the plan priced, not another."""
    model = ModelConfig.of_transformer(**sizes)
    inputs = PlanInputs.from_description(ModelDescription.of_shape(model.transformer), devices=4, global_batch=16)
    planner = Evaluator(inputs)
    for microbatch_size in (1, 4):
        config = run_config(
            schedule="1f1b", num_ranks=2, num_microbatches=16 // microbatch_size, batch_size=16, model=model,
            recompute=recompute,
        )  # fmt: skip
        for stages in (2, 3, 4):
            if stages > model.num_units:
                continue
            planned = tuple(planner.split(microbatch_size, stages, recompute).split_points)
            assert config.stage_split(stages) == planned, (sizes, microbatch_size, stages)


def test_a_model_without_times_is_cut_by_its_parameter_counts():
    """The CNN has no description: None, so the ranks balance its built layers' parameter counts; the
    parameters' balance is the splitter's own, every stage as full as the bottleneck allows."""
    assert ModelConfig.of_cnn().stage_split(3) is None
    assert ModelConfig.of_transformer(split_points=(2,)).stage_split(2) == (2,)
    assert parameter_split([1, 1, 8, 1, 1], 2) == (3,)
