"""Issue 30, what-if: a slow rank and a slow link priced once (pipesim.cost.perturb) for the simulator, compare's
sensitivities, the planner and the API; the flags read strictly."""

from __future__ import annotations

import json

import pytest

from pipesim.analysis.compare import compare_schedules
from pipesim.analysis.sensitivity import rank_sensitivity
from pipesim.api import simulate
from pipesim.cli.main import main
from pipesim.cost.model import CostModel
from pipesim.cost.perturb import Perturbation, parse_link_delay, parse_slow_rank
from pipesim.ir import ActionKind
from pipesim.schedules import build_schedule

SHAPES = [("1f1b", {}), ("interleaved-1f1b", {"num_virtual_stages": 2}), ("zbv", {}), ("zb-h1", {})]


def _per_stage(schedule, f, b, w, comm):
    """A cost model written out stage by stage (the closed form a slow rank must equal)."""
    return CostModel.per_stage(f, b, w, comm)


@pytest.mark.parametrize("name,options", SHAPES)
@pytest.mark.parametrize("rank,factor", [(1, 1.5), (3, 1.2), (0, 0.8)])
def test_a_slow_rank_is_its_stages_scaled(name, options, rank, factor):
    schedule = build_schedule(name, 4, 8, **options)
    n = schedule.num_stages
    f = [1.0 + 0.1 * s for s in range(n)]
    b = [2.0 + 0.2 * s for s in range(n)]
    w = [0.9 + 0.05 * s for s in range(n)]
    scale = [factor if schedule.stage_to_rank[s] == rank else 1.0 for s in range(n)]
    expected = simulate(
        schedule,
        _per_stage(
            schedule,
            [x * k for x, k in zip(f, scale, strict=True)],
            [x * k for x, k in zip(b, scale, strict=True)],
            [x * k for x, k in zip(w, scale, strict=True)],
            0.3,
        ),
    )
    got = simulate(schedule, _per_stage(schedule, f, b, w, 0.3), Perturbation(((rank, factor),)))
    assert got.step_ms == expected.step_ms
    assert [(s.start, s.end) for s in got.timeline.spans] == [(s.start, s.end) for s in expected.timeline.spans]
    plain = simulate(schedule, _per_stage(schedule, f, b, w, 0.3))
    durations = {s.action: s.end - s.start for s in plain.timeline.spans}
    for span in got.timeline.spans:  # independently: every action on the rank, and only there, takes factor x
        want = durations[span.action] * (factor if span.rank == rank else 1.0)
        assert span.end - span.start == pytest.approx(want)


@pytest.mark.parametrize("name,options", SHAPES)
@pytest.mark.parametrize("kinds", ["W", "I", "F", "B", "FW"])
def test_a_rank_slow_in_some_kinds_is_those_parts_scaled(name, options, kinds):
    schedule = build_schedule(name, 4, 8, **options)
    n, on = schedule.num_stages, [schedule.stage_to_rank[s] == 2 for s in range(schedule.num_stages)]
    f, i, w = [1.0 + 0.1 * s for s in range(n)], [1.2] * n, [0.8] * n
    k = {part: [1.5 if slow and part in kinds.replace("B", "IW") else 1.0 for slow in on] for part in "FIW"}
    fs = [a * b for a, b in zip(f, k["F"], strict=True)]
    ws = [a * b for a, b in zip(w, k["W"], strict=True)]
    bs = [a * b + c for a, b, c in zip(i, k["I"], ws, strict=True)]
    expected = simulate(schedule, CostModel.per_stage(fs, bs, ws, 0.1))
    base = CostModel.per_stage(f, [a + b for a, b in zip(i, w, strict=True)], w, 0.1)
    got = simulate(schedule, base, Perturbation.parse([f"2:1.5:{kinds}"]))
    assert got.step_ms == pytest.approx(expected.step_ms, rel=1e-12)
    assert Perturbation.parse([f"2:1.5:{kinds}"]).slow_actions == ((2, kinds, 1.5),)


@pytest.mark.parametrize("name,options", SHAPES)
def test_a_delayed_link_adds_to_every_transfer_between_its_ranks(name, options):
    schedule = build_schedule(name, 4, 8, **options)
    n = schedule.num_stages
    ranks = schedule.stage_to_rank
    comm = [0.2 + (2.5 if {ranks[s], ranks[s + 1]} == {1, 2} else 0.0) for s in range(n - 1)]
    expected = simulate(schedule, CostModel.per_stage([1.0] * n, [2.0] * n, None, comm))
    got = simulate(schedule, CostModel.per_stage([1.0] * n, [2.0] * n, None, 0.2), Perturbation.parse([], ["2-1:2.5"]))
    assert (
        got.step_ms
        == expected.step_ms
        > simulate(schedule, CostModel.per_stage([1.0] * n, [2.0] * n, None, 0.2)).step_ms
    )


def test_per_rank_costs_are_cut_before_the_perturbation():
    schedule = build_schedule("interleaved-1f1b", 2, 4, num_virtual_stages=2)
    cost = CostModel.uniform(2.0, 4.0)  # per rank: each of 2 chunks takes half
    slowed = simulate(schedule, cost, Perturbation(((0, 2.0),)))
    spans = {(s.rank, s.action.kind): s.end - s.start for s in slowed.timeline.spans}
    assert spans[(0, ActionKind.FORWARD)] == pytest.approx(2.0) and spans[(1, ActionKind.FORWARD)] == pytest.approx(1.0)


def test_perturbation_round_trips_and_refuses_ranks_out_of_range():
    p = Perturbation.parse(["1:1.5", "1:2"], ["3-0:4"])
    assert p.kind_factors(1) == {"F": 3.0, "I": 3.0, "W": 3.0} and p.kind_factors(0) == {"F": 1.0, "I": 1.0, "W": 1.0}
    assert p.link_delays == ((0, 3, 4.0),)
    assert Perturbation.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    with pytest.raises(ValueError, match="rank 3 is not in a pipeline of 2 ranks"):
        p.apply(CostModel.uniform(), [0, 1])
    assert p.folded(2).link_delays == ((0, 1, 4.0),) and p.folded(3).link_delays == ()


@pytest.mark.parametrize(
    "text,needle",
    [
        ("1", "R:FACTOR"),
        ("x:2", "rank number"),
        ("1:0", "(0, 1000]"),
        ("1:inf", "finite"),
        ("-1:2", "rank number"),
        ("1:2:X", "letters of FBIW"),
        ("1:2:", "letters of FBIW"),
    ],
)
def test_slow_rank_text_is_strict(text, needle):
    with pytest.raises(ValueError, match=None) as info:
        parse_slow_rank(text)
    assert needle in str(info.value) and repr(text) in str(info.value)


@pytest.mark.parametrize(
    "text,needle", [("1:2", "A-B:MS"), ("1-1:2", "different"), ("0-1:nan", "finite"), ("0-1:-1", "[0")]
)
def test_link_delay_text_is_strict(text, needle):
    with pytest.raises(ValueError) as info:
        parse_link_delay(text)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["simulate", "--schedule", "1f1b", "--ranks", "4", "--microbatches", "8", "--slow-rank", "4:1.5"], "rank 4"),
        (["simulate", "--schedule", "1f1b", "--ranks", "4", "--microbatches", "8", "--slow-rank", "1:abc"], "'1:abc'"),
        (["compare", "--schedules", "1f1b", "--ranks", "2", "--microbatches", "4", "--link-delay", "0-2:1"], "rank 2"),
        (["compare", "--schedules", "1f1b", "--ranks", "2", "--microbatches", "4", "--sensitivity", "0.9"], "'0.9'"),
        (["plan", "--layers", "4", "--devices", "2", "--global-batch", "4", "--slow-rank", "2:1.2"], "rank 2"),
    ],
)
def test_cli_refuses_bad_whatif_values_in_one_line(capsys, tmp_path, argv, needle):
    out = tmp_path / "o.json"
    code = main([*argv, "--json", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and needle in err and "Traceback" not in err, err
    assert not out.exists()


def test_compare_reports_sensitivity_and_prices_the_perturbation(capsys, tmp_path):
    out = tmp_path / "rows.json"
    argv = ["compare", "--schedules", "1f1b,zbv", "--ranks", "4", "--microbatches", "8", "--json", str(out)]
    assert main([*argv, "--slow-rank", "2:1.5"]) == 0
    doc = json.loads(out.read_text())
    assert doc["perturbation"]["slow_ranks"] == [{"rank": 2, "factor": 1.5}]
    for row in doc["rows"]:
        s = row["sensitivity"]
        assert s["slowdown"] == 1.2 and len(s["rank_growth"]) == 4
        assert s["worst_growth"] == max(s["rank_growth"]) >= 0
    assert "sensitivity" in capsys.readouterr().out
    slowed = compare_schedules(["1f1b"], 4, 8, CostModel.uniform(), perturbation=Perturbation(((2, 1.5),)))
    plain = compare_schedules(["1f1b"], 4, 8, CostModel.uniform())
    assert doc["rows"][0]["step_ms"] == slowed[0].step_ms > plain[0].step_ms


def test_sensitivity_matches_one_simulation_per_rank():
    schedule = build_schedule("zb-h1", 4, 8)
    cost = CostModel.uniform(1.0, 2.0, 1.0)
    s = rank_sensitivity(schedule, cost, 1.3)
    base = simulate(schedule, cost).step_ms
    for rank, growth in enumerate(s.rank_growth):
        step = simulate(schedule, cost, Perturbation(((rank, 1.3),))).step_ms
        assert growth == pytest.approx(step / base - 1)
    assert rank_sensitivity(schedule, cost, 1.0).worst_growth == 0.0


def test_the_planner_prices_a_straggler():
    from pipesim.cost.description import ModelDescription
    from pipesim.plan.inputs import PlanInputs
    from pipesim.plan.search import PlanSpace, evaluate_all

    inputs = PlanInputs.from_description(ModelDescription(num_layers=8), devices=4, global_batch=8)
    space = PlanSpace(schedules=("1f1b",), microbatch_sizes=(1,), chunks=(1,), recompute=(False,), ranks=(4,))
    [plain] = evaluate_all(inputs, space)
    from dataclasses import replace

    from pipesim.plan.search import Evaluator
    from pipesim.sim.steps import simulate_step

    slow_inputs = replace(inputs, perturbation=Perturbation(((1, 1.5),)))
    [slowed] = evaluate_all(slow_inputs, space)
    assert slowed.step_ms > plain.step_ms
    schedule, cost = Evaluator(slow_inputs).materialise(slowed)  # the planner's price is the simulator's
    assert cost.meta["perturbation"]["slow_ranks"] == [{"rank": 1, "factor": 1.5}]
    assert simulate_step(schedule, cost).step_ms == pytest.approx(slowed.step_ms)


def test_apply_keeps_every_field_it_does_not_mean_to_change():
    from dataclasses import fields, replace

    from pipesim.cost.model import DataParallelGroup, LinkCost, Provenance, RankRuntime

    cost = replace(
        CostModel.uniform(1.0, 2.0, 0.5, comm_ms=0.1),
        recompute=True,
        overlap_factor=0.8,
        runtime=RankRuntime(step_overhead_ms=(0.3,), dispatch_ms=(0.05,), shared_cores=2),
        dp_group=DataParallelGroup(2, LinkCost(0.2, 10.0)),
        provenance=Provenance("profile", meta={"device": "cpu"}),
    )
    schedule = build_schedule("1f1b", 2, 4)
    slowed = Perturbation(((1, 1.5),), ((0, 1, 2.0),)).apply(cost, schedule.stage_to_rank)
    for f in fields(CostModel):
        if f.name not in ("stages", "links", "provenance"):
            assert getattr(slowed, f.name) == getattr(cost, f.name), f.name
    assert slowed.provenance.source == "profile" and slowed.meta["device"] == "cpu"
    assert slowed.stages[0] == cost.stage(0) and slowed.stages[1].forward_ms == 1.5
    assert (
        slowed.links[0].latency_ms == pytest.approx(2.1)
        and slowed.links[0].bandwidth_gbps == cost.links[0].bandwidth_gbps
    )
