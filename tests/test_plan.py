"""The planner's parts against oracles: balancing against brute force, the fast memory walk and the fast step time
against the simulator's timeline, the Pareto front and the best candidate against brute-force definitions."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.cli.main import main
from pipesim.cost.balance import balance, stage_costs
from pipesim.cost.description import ModelDescription, stage_costs_from_units
from pipesim.cost.model import CostModel, DataParallelGroup, LinkCost, Provenance, RankRuntime, StageCost
from pipesim.plan.report import best_candidate, pareto_front, plan_document
from pipesim.plan.search import Candidate, PlanInputs, PlanSpace, evaluate_all
from pipesim.schedules import build_schedule, options_for, schedule_names
from pipesim.sim.memory import OrderWalk, peak_activations_by_order, rank_memory, static_bytes, total_memory_over_time
from pipesim.sim.metrics import compute_metrics, makespan
from pipesim.sim.simulate import simulate
from pipesim.sim.steps import simulate_step
from tests.helpers.sizes import registered_at

PLAN_KEYS = {
    "schedule",
    "ranks",
    "microbatches",
    "virtual_stages",
    "recompute",
    "split",
    "step_ms",
    "makespan_ms",  # deprecated, kept for one version
    "throughput",
    "peak_memory_bytes",
    "fits",
}


# --- balancing ------------------------------------------------------------------------------------------------


def brute_force_bottleneck(costs: list[int], stages: int) -> int:
    best = None
    for points in itertools.combinations(range(1, len(costs)), stages - 1):
        worst = max(stage_costs(costs, points))
        best = worst if best is None else min(best, worst)
    return best


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=9), st.data())
def test_balance_equals_brute_force(costs, data):
    stages = data.draw(st.integers(1, len(costs)))
    result = balance(costs, stages)
    assert len(result.split_points) == stages - 1
    assert list(result.split_points) == sorted(set(result.split_points))
    assert all(0 < p < len(costs) for p in result.split_points)
    assert result.stage_costs == stage_costs(costs, result.split_points)
    assert result.bottleneck == brute_force_bottleneck(costs, stages)


def test_balance_moves_layers_off_a_heavy_end():
    # a heavy last layer (the output head): an even split would put it with 2 other layers, the balanced one alone
    costs = [1, 1, 1, 1, 1, 5]
    assert balance(costs, 2).split_points == (5,) and balance(costs, 2).bottleneck == 5


def test_balance_refuses_more_stages_than_layers():
    with pytest.raises(ValueError, match="at least 3 layers"):
        balance([1, 2], 3)


def test_balance_cli_prints_executor_split_points(capsys):
    assert main(["balance", "--layer-ms", "1,1,1,1,1,5", "--stages", "2"]) == 0
    assert "--split-points 5" in capsys.readouterr().out
    assert main(["balance", "--layer-ms", "1,2", "--stages", "3"]) == 2


# --- memory -----------------------------------------------------------------------------------------------------


def uneven_cost(num_stages: int, recompute: bool = False) -> CostModel:
    stages = tuple(
        StageCost(
            forward_ms=1 + 0.3 * s,
            backward_ms=2 + 0.5 * s,
            weight_ms=0.8 + 0.2 * s,
            activation_bytes=100.0 + 10 * s,
            weight_grad_bytes=40.0 + s,
            input_bytes=7.0,
            output_bytes=7.0,
            param_bytes=1000.0 * (s + 1),
        )
        for s in range(num_stages)
    )
    return CostModel(stages=stages, recompute=recompute)


@pytest.mark.parametrize("recompute", [False, True])
@pytest.mark.parametrize("ranks,microbatches", [(2, 4), (3, 6), (4, 8)])
def test_order_walk_peak_equals_the_simulated_timelines_peak(ranks, microbatches, recompute):
    for schedule in registered_at(ranks, microbatches):
        cost = uneven_cost(schedule.num_stages, recompute)
        timeline = simulate(schedule, cost)
        from_metrics = [r.peak_activation_bytes for r in compute_metrics(timeline, cost).ranks]
        assert peak_activations_by_order(schedule, cost) == pytest.approx(from_metrics, rel=1e-12), schedule.name
        assert OrderWalk(schedule).peaks(cost) == pytest.approx(from_metrics, rel=1e-12), schedule.name


def test_static_memory_counts_parameters_gradients_and_optimizer_state():
    schedule = next(s for s in registered_at(2, 4) if s.name == "interleaved-1f1b")  # stages 0,2 on rank 0
    cost = uneven_cost(schedule.num_stages)
    params0 = 1000.0 + 3000.0
    assert static_bytes(schedule, cost, "sgd")[0] == (params0, params0, 0.0)
    assert static_bytes(schedule, cost, "sgd-momentum")[0] == (params0, params0, params0)
    assert static_bytes(schedule, cost, "adam")[0] == (params0, params0, 2 * params0)
    memory = rank_memory(schedule, cost, "adam", simulate(schedule, cost))
    assert memory[0].peak_bytes == 4 * params0 + memory[0].peak_activation_bytes > 4 * params0
    over_time = total_memory_over_time(simulate(schedule, cost), schedule, cost, "adam")
    assert max(level for _, level in over_time[0]) == pytest.approx(memory[0].peak_bytes)
    with pytest.raises(ValueError, match="valid: sgd"):
        static_bytes(schedule, cost, "lion")


def test_recompute_keeps_only_stage_inputs():
    schedule = next(s for s in registered_at(2, 4) if s.name == "1f1b")
    plain, recompute = uneven_cost(2), uneven_cost(2, recompute=True)
    assert peak_activations_by_order(schedule, recompute)[0] == 2 * 7.0  # rank 0 holds 2 microbatches' inputs
    assert peak_activations_by_order(schedule, plain)[0] == 2 * 100.0


# --- the planner ------------------------------------------------------------------------------------------------

SMALL = ModelDescription(
    num_layers=6,
    hidden_size=256,
    ffn_size=1024,
    num_heads=4,
    seq_len=128,
    vocab_size=1000,
    device_tflops=10.0,
    link_bandwidth_gbps=10.0,
)


def small_plan(cap: float | None = None, overhead_ms: float = 0.0, **space) -> list[Candidate]:
    inputs = PlanInputs.from_description(
        SMALL, devices=2, global_batch=8, memory_cap_bytes=cap, step_overhead_ms=overhead_ms
    )
    defaults = dict(
        schedules=tuple(schedule_names()), microbatch_sizes=(1, 2, 4), chunks=(1, 2), w_shares=(None, 0.3), ranks=(1, 2)
    )
    return evaluate_all(inputs, PlanSpace(**{**defaults, **space}), prune=False)


def test_every_candidate_equals_a_full_simulation_and_memory_walk():
    """Each candidate's step against `simulate_step` (the step time simulate, compare and the executor's
    prediction report) on a cost model built here from the description, not from the planner's own code.

    Catches a planner that computes its step its own way (it once added an unbucketed, unhidden all-reduce and
    the overhead to the makespan): the data-parallel candidates (1 rank x 2 replicas) and the overhead make any
    other formula show."""
    candidates = small_plan(overhead_ms=0.25)
    built = [c for c in candidates if c.error is None]
    assert len(built) > 40
    assert any(c.error for c in candidates)  # interleaved with one chunk: listed with its reason, not dropped
    replicated = [c for c in built if c.data_parallel > 1]
    assert replicated and all(c.data_parallel == 2 for c in replicated)
    hidden = 0
    for c in built:
        schedule = build_schedule(
            c.schedule, c.ranks, c.microbatches, **options_for(c.schedule, num_virtual_stages=c.virtual_stages)
        )
        units = SMALL.__class__(**{**SMALL.__dict__, "microbatch_size": c.microbatch_size}).unit_costs()
        if c.w_share is not None:
            units = [StageCost(**{**u.__dict__, "weight_ms": u.backward_ms * c.w_share}) for u in units]
        cost = stage_costs_from_units(units, c.split, SMALL, recompute=c.recompute)
        link = LinkCost(SMALL.link_latency_ms, SMALL.link_bandwidth_gbps)
        cost = replace(cost, runtime=RankRuntime((0.25,)), dp_group=DataParallelGroup(c.data_parallel, link))
        cost = cost.for_schedule(schedule)  # a sequence chunk's bytes (seq1f1b); the same model otherwise
        step = simulate_step(schedule, cost)
        assert c.step_ms == pytest.approx(step.step_ms, rel=1e-12), c.label
        assert c.to_dict()["makespan_ms"] == c.to_dict()["step_ms"] == c.step_ms  # the old name, for one version
        if c.data_parallel > 1:
            reductions = [x for x in step.timeline.comm if x.kind == "allreduce"]
            assert reductions and c.step_ms > makespan(step.timeline) + 0.25, c.label
            hidden += c.step_ms < makespan(step.timeline) + 0.25 + sum(x.end - x.start for x in reductions) - 1e-9
        else:
            assert c.step_ms == pytest.approx(makespan(step.timeline) + 0.25, rel=1e-12), c.label
        memory = rank_memory(schedule, cost, "adam", step.timeline)
        assert c.peak_memory_bytes == pytest.approx(max(m.peak_bytes for m in memory), rel=1e-12), c.label
    assert hidden  # some all-reduces overlap the backward still to run (the old formula added them whole)


def dominates(a: Candidate, b: Candidate) -> bool:
    return (
        a.step_ms <= b.step_ms
        and a.peak_memory_bytes <= b.peak_memory_bytes
        and (a.step_ms < b.step_ms or a.peak_memory_bytes < b.peak_memory_bytes)
    )


@pytest.mark.parametrize("cap", [None, 60e6, 30e6, 1.0])
def test_front_and_best_equal_brute_force(cap):
    candidates = small_plan(cap)
    built = [c for c in candidates if c.error is None]
    front = pareto_front(candidates)
    brute_front = [c for c in built if not any(dominates(o, c) for o in built)]
    assert sorted(map(id, front)) == sorted(map(id, brute_front)) and front
    fitting = [c for c in built if cap is None or c.peak_memory_bytes <= cap]
    best = best_candidate(candidates)
    if not fitting:
        assert best is None
    else:
        assert best.fits and best.step_ms == pytest.approx(min(c.step_ms for c in fitting), abs=1e-6)
        tied = [c for c in fitting if round(c.step_ms, 6) == round(best.step_ms, 6)]
        assert best.peak_memory_bytes == min(c.peak_memory_bytes for c in tied)  # less memory breaks a tie


def test_a_tighter_cap_moves_the_best_to_less_memory():
    candidates = small_plan(None)
    loose = best_candidate(candidates)
    least = min(c.peak_memory_bytes for c in candidates if c.error is None)
    assert least < loose.peak_memory_bytes  # else the cap below would not bind
    cap = (least + loose.peak_memory_bytes) / 2
    tight = best_candidate(small_plan(cap))
    assert tight is not None and tight.peak_memory_bytes <= cap
    assert tight.step_ms > loose.step_ms


def test_plan_document_has_the_promised_keys():
    doc = plan_document(small_plan(40e6), {"devices": 2}, 40e6)
    assert set(doc) >= {"candidates", "pareto", "best"}
    for entry in doc["candidates"] + doc["pareto"] + [doc["best"]]:
        assert PLAN_KEYS <= set(entry)
    assert any("lost on" in line for line in doc["summary"])


def test_plan_cli_writes_json_and_refuses_bad_input(tmp_path, capsys):
    out = tmp_path / "plan.json"
    argv = [
        "plan",
        "--layers",
        "6",
        "--hidden",
        "256",
        "--ffn",
        "1024",
        "--heads",
        "4",
        "--seq-len",
        "128",
        "--vocab",
        "1000",
        "--devices",
        "2",
        "--global-batch",
        "8",
        "--memory-cap",
        "40MiB",
        "--schedules",
        "1f1b,interleaved-1f1b,zbv",
        "--microbatch-sizes",
        "1,2",
        "--json",
        str(out),
    ]
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["best"]["fits"] and doc["best"]["peak_memory_bytes"] <= 40 * 2**20
    assert "cannot be built" in capsys.readouterr().out
    assert main(["plan", "--devices", "2", "--global-batch", "8", "--schedules", "nope"]) == 2
    assert "valid schedules" in capsys.readouterr().err
    assert main(["plan", "--devices", "2", "--global-batch", "8", "--memory-cap", "lots"]) == 2
    assert main(["plan", "--devices", "2", "--global-batch", "8", "--verify", "2"]) == 2  # needs --json


def test_torchtitan_settings_name_the_module_each_stage_starts_at():
    from pipesim.plan.report import torchtitan_settings

    best = best_candidate(small_plan(None, schedules=("1f1b",), ranks=(2,)))
    settings = torchtitan_settings(best, "s.csv", SMALL.num_layers)
    assert settings["pipeline_parallel_schedule_csv"] == "s.csv" and settings["pipeline_parallel_degree"] == 2
    assert settings["pipeline_parallel_microbatch_size"] == best.microbatch_size
    unit = best.split[0]
    assert settings["pipeline_parallel_split_points"] == [f"layers.{unit - 1}"]
    head = Candidate("1f1b", 2, 4, 1, False, 1, None, split=(SMALL.num_layers + 1,))
    assert torchtitan_settings(head, "s.csv", SMALL.num_layers)["pipeline_parallel_split_points"] == ["output"]


def test_plan_verify_hands_the_plan_to_the_executor(tmp_path, monkeypatch, capsys):
    calls = []

    class Done:
        returncode = 0

    monkeypatch.setattr("pipesim.cli.plan.subprocess.run", lambda argv, check: calls.append(argv) or Done())
    out = tmp_path / "plan.json"
    assert (
        main(
            [
                "plan",
                "--layers",
                "4",
                "--devices",
                "2",
                "--global-batch",
                "4",
                "--schedules",
                "1f1b",
                "--json",
                str(out),
                "--verify",
                "2",
            ]
        )
        == 0
    )
    assert calls and calls[0][1:] == ["-m", "pipesim_executor", "verify-plan", str(out), "--top", "2"]
    assert out.exists()


def test_plan_from_a_cost_file_reads_its_stages_as_units(tmp_path, capsys):
    from pipesim.io.cost_file import save_cost

    stages = tuple(
        StageCost(
            forward_ms=f, backward_ms=2 * f, activation_bytes=1e6, input_bytes=1e3, output_bytes=1e3, param_bytes=1e7
        )
        for f in (1, 1, 1, 1, 1, 5)
    )
    path = tmp_path / "cost.json"
    save_cost(CostModel(stages=stages, provenance=Provenance("profile", meta={"microbatch_size": 2})), path)
    out = tmp_path / "plan.json"
    assert (
        main(
            [
                "plan",
                "--cost",
                str(path),
                "--devices",
                "2",
                "--global-batch",
                "8",
                "--schedules",
                "1f1b,gpipe",
                "--microbatch-sizes",
                "2,4",
                "--optimizer",
                "sgd",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    best = json.loads(out.read_text())["best"]
    assert best["split"] == [5]  # the heavy last unit alone on the second rank
    assert main(["plan", "--cost", str(path), "--layers", "4", "--devices", "2", "--global-batch", "8"]) == 2
    assert "--cost replaces the model description" in capsys.readouterr().err


def test_steps_equal_but_for_the_last_bits_tie_and_less_memory_wins():
    """GPipe and 1F1B on 2 ranks have the same step, which float rounding once made 51.891833181710126 against
    51.89183318171015: the plan recommended GPipe with three times the memory (issue 18's bench)."""
    gpipe = Candidate("gpipe", 2, 8, 1, False, 2, None, step_ms=51.891833181710126, peak_memory_bytes=20e6, fits=True)
    onef = Candidate("1f1b", 2, 8, 1, False, 2, None, step_ms=51.89183318171015, peak_memory_bytes=7e6, fits=True)
    assert best_candidate([gpipe, onef]) is onef and best_candidate([onef, gpipe]) is onef


def test_best_per_schedule_takes_each_familys_fastest_fitting_candidate():
    """Issue 30 item 2 (the Plan page's sensitivity rows): one per family, the fastest that fits, never one that does
    not fit or was not built, in the plan's order."""
    from pipesim.plan.report import best_per_schedule

    def made(name: str, step: float, fits: bool = True, error: str | None = None) -> Candidate:
        return Candidate(
            name,
            4,
            8,
            1,
            False,
            1,
            None,
            step_ms=None if error else step,
            fits=fits,
            error=error,
            peak_memory_bytes=1.0,
        )

    candidates = [
        made("1f1b", 12.0),
        made("zb-h1", 9.0, fits=False),  # faster, but over the cap
        made("1f1b", 10.0),
        made("zb-h1", 11.0),
        made("gpipe", 1.0, error="cannot be built"),
        made("gpipe", 20.0, fits=False),  # no gpipe fits: no row
    ]
    best = best_per_schedule(candidates)
    assert [(c.schedule, c.step_ms) for c in best] == [("1f1b", 10.0), ("zb-h1", 11.0)]
