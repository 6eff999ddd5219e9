"""Synthesized orders in the planner: `plan --schedules ...,synthesized` adds one per shape,
recommends it where it is faster, writes its CSV, and refuses a bad budget before any work."""

from __future__ import annotations

import pytest

from pipesim.cli import plan_synth
from pipesim.cli.main import main
from pipesim.io.formats import load_schedule, read_json
from pipesim.plan import synthesized as plan_synthesized
from pipesim.plan.evaluator import Evaluator
from pipesim.plan.search import PlanInputs, PlanSpace, evaluate_all
from pipesim.sim.steps import simulate_step
from pipesim.synth.problem import SYNTH_NAME

# balanced stages, a slow link and a small W share: a case the named schedules leave room in at 2p memory
MODEL = ["--layers", "16", "--hidden", "256", "--ffn", "1024", "--heads", "4", "--seq-len", "128", "--vocab", "1000"]
MODEL += ["--tflops", "0.05", "--latency", "5"]
SPACE = ["--devices", "4", "--global-batch", "16", "--microbatch-sizes", "2", "--recompute", "off"]
SPACE += ["--w-shares", "0.3", "--ranks", "4"]


def test_the_cli_and_the_planner_name_the_same_constants():
    assert plan_synth.SYNTHESIZED == plan_synthesized.SYNTHESIZED == SYNTH_NAME
    assert plan_synth.DEFAULT_BUDGET_S == plan_synthesized.DEFAULT_BUDGET_S
    assert plan_synth.MAX_BUDGET_S == plan_synthesized.MAX_BUDGET_S


def test_plan_recommends_a_synthesized_order_where_it_is_faster_and_writes_its_csv(tmp_path, capsys):
    csv_out, json_out = tmp_path / "best.csv", tmp_path / "plan.json"
    argv = ["plan", *MODEL, *SPACE, "--schedules", "1f1b,zb-h1,zb-h2,synthesized", "--synth-budget", "3"]
    assert main([*argv, "--csv", str(csv_out), "--json", str(json_out)]) == 0
    plan = read_json(json_out)
    names = [c["schedule"] for c in plan["candidates"]]
    assert names.count(SYNTH_NAME) == 1 and {"1f1b", "zb-h1", "zb-h2"} <= set(names)
    best = plan["best"]
    assert best["schedule"] == SYNTH_NAME
    assert plan["inputs"]["space"]["synthesized_budget_s"] == 3.0
    others = [c["step_ms"] for c in plan["candidates"] if c["schedule"] != SYNTH_NAME]
    assert best["step_ms"] < min(others)
    assert f"wrote {csv_out}" in capsys.readouterr().out
    schedule = load_schedule(csv_out)  # torch's CSV, read back
    assert schedule.num_ranks == 4 and schedule.num_microbatches == best["microbatches"]
    assert schedule.uses_split_backward


def test_a_synthesized_candidate_steps_as_costed_and_its_csv_reads_back_as_the_same_order(tmp_path):
    """The synthesized schedule, simulated with the candidate's cost model, gives the plan's step; the CSV the
    plan writes of it reads back as the same order."""
    description = PlanInputs.from_description
    from pipesim.cost.description import ModelDescription
    from pipesim.cost.model import LinkCost

    model = ModelDescription(
        num_layers=16, hidden_size=256, ffn_size=1024, num_heads=4, seq_len=128, vocab_size=1000, device_tflops=0.05
    )
    base = description(model, devices=4, global_batch=16)
    inputs = PlanInputs(units=base.units, devices=4, global_batch=16, link=LinkCost(latency_ms=5.0))
    space = PlanSpace(schedules=("zb-h2",), microbatch_sizes=(2,), recompute=(False,), w_shares=(0.3,), ranks=(4,))
    made = plan_synthesized.synthesized_candidates(inputs, space, 2.0)
    assert len(made) == 1 and made[0].schedule is not None
    candidate, schedule = made[0].candidate, made[0].schedule
    family = evaluate_all(inputs, space, prune=False)[0]
    assert candidate.step_ms < family.step_ms  # faster than zb-h2 at its own shape
    cost = Evaluator(inputs).cost_model(candidate, candidate.split, schedule)
    assert simulate_step(schedule, cost).step_ms == pytest.approx(candidate.step_ms)
    lines = plan_synth.write_recommended_csv(tmp_path / "s.csv", candidate, inputs, {id(candidate): schedule})
    assert lines == [f"wrote {tmp_path / 's.csv'} (the schedule of {candidate.label})"]
    assert load_schedule(tmp_path / "s.csv").actions == schedule.actions


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--schedules", "zb-h1,synthesized", "--synth-budget", "0"], "--synth-budget"),
        (["--schedules", "zb-h1,synthesized", "--synth-budget", "nan"], "--synth-budget"),
        (["--schedules", "zb-h1", "--synth-budget", "5"], "applies with synthesized"),
        (["--schedules", "zb-h1,nosuch"], "nosuch"),
    ],
)
def test_bad_synthesis_flags_are_refused_in_one_line_before_any_output(tmp_path, capsys, extra, message):
    csv_out = tmp_path / "never.csv"
    code = main(["plan", *MODEL, *SPACE, *extra, "--csv", str(csv_out)])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not csv_out.exists()


def test_a_memory_cap_below_the_static_bytes_leaves_the_synthesized_candidate_unbuilt_with_its_reason():
    from pipesim.cost.description import ModelDescription

    model = ModelDescription(num_layers=4, hidden_size=128, ffn_size=512, num_heads=4, seq_len=64)
    inputs = PlanInputs.from_description(model, devices=2, global_batch=8, memory_cap_bytes=1.0)
    space = PlanSpace(schedules=("zb-h1",), microbatch_sizes=(2,), recompute=(False,), ranks=(2,))
    made = plan_synthesized.synthesized_candidates(inputs, space, 0.5)
    assert made[0].schedule is None and "no room for activations" in made[0].candidate.error
    with pytest.raises(ValueError, match="synthesis budget"):
        plan_synthesized.synthesized_candidates(inputs, space, 0.0)
