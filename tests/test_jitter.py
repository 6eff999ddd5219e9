"""A prediction with its interval: every action's time drawn from its spread, every draw simulated at
once. No spread gives the deterministic step exactly; draws are seeded; the penalty grows with the spread; the
CLI's simulate and compare report step_ms, step_ms_p05 and step_ms_p95."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from pipesim.cli.main import main
from pipesim.cost.collectives import DataParallelGroup
from pipesim.cost.links import LinkCost
from pipesim.cost.model import CostModel
from pipesim.cost.runtime import RankRuntime
from pipesim.ir import ActionKind
from pipesim.schedules import build_schedule, options_for, schedule_names
from pipesim.semantics.dag import dependencies
from pipesim.sim.jitter import sampled_steps, step_interval, sweep_samples
from pipesim.sim.simulate import engine_inputs, sweep
from pipesim.sim.spread import Spread, cost_spread
from pipesim.sim.steps import simulate_step


def uneven(num_stages: int) -> CostModel:
    """Stages of different speeds, a transfer, a dispatch gap and an overhead: every term of a step in play."""
    model = CostModel.per_stage(
        [1.0 + 0.3 * s for s in range(num_stages)], [2.0 + 0.1 * s for s in range(num_stages)], comm_ms=0.2
    )
    return replace(model, runtime=RankRuntime((0.5,), (0.05,)))


def built(name: str, ranks: int = 4, microbatches: int = 8):
    return build_schedule(name, ranks, microbatches, **options_for(name, num_virtual_stages=2))


@pytest.mark.parametrize("name", schedule_names())
def test_no_spread_gives_the_deterministic_step_exactly(name):
    """Catches a sampled sweep whose arithmetic or order differs from the engine's: equality, not approx."""
    schedule = built(name)
    cost = uneven(schedule.num_stages)
    steps, deterministic = sampled_steps(schedule, cost, Spread(), samples=7, seed=3)
    assert deterministic == simulate_step(schedule, cost).step_ms
    assert steps.tolist() == [deterministic] * 7


@pytest.mark.parametrize(
    "variant",
    [
        {"dp_group": DataParallelGroup(4, LinkCost(0.1, 1.0))},  # the all-reduce after the last backward
        {"runtime": RankRuntime((0.5,), (0.05,), shared_cores=2)},  # ranks sharing two cores: one engine per draw
        {"recompute": True},
    ],
)
def test_no_spread_is_exact_with_data_parallel_shared_cores_and_recomputation(variant):
    schedule = built("zb-h1")
    cost = replace(uneven(schedule.num_stages), **variant)
    cost = replace(cost, stages=tuple(replace(s, param_bytes=4e6) for s in cost.stages))
    steps, deterministic = sampled_steps(schedule, cost, Spread(), samples=4)
    assert deterministic == simulate_step(schedule, cost).step_ms
    assert steps.tolist() == [deterministic] * 4


def test_the_sampled_sweep_is_the_engine_sweep_column_by_column():
    """Each draw's ends equal the engine's sweep run on that draw's durations alone."""
    schedule = built("interleaved-1f1b")
    cost = uneven(schedule.num_stages)
    deps = dependencies(schedule)
    inputs = engine_inputs(schedule, cost, deps)
    rng = np.random.default_rng(5)
    durations = np.asarray(inputs.durations)[:, None] * rng.lognormal(0.0, 0.3, (len(inputs.durations), 6))
    ends = sweep_samples(deps, durations, inputs.hops, inputs.gaps)
    for s in range(6):
        _, expected, stuck = sweep(deps, durations[:, s].tolist(), inputs.hops, inputs.gaps)
        assert not stuck and ends[:, s].tolist() == expected


def test_draws_are_seeded():
    schedule, spread = built("1f1b"), Spread.uniform(0.2)
    cost = uneven(schedule.num_stages)
    first, _ = sampled_steps(schedule, cost, spread, 50, seed=11)
    again, _ = sampled_steps(schedule, cost, spread, 50, seed=11)
    other, _ = sampled_steps(schedule, cost, spread, 50, seed=12)
    assert first.tolist() == again.tolist()
    assert first.tolist() != other.tolist()


def test_the_penalty_grows_with_the_spread_and_the_interval_holds_the_point():
    """The issue's measurement: a step waits on the slowest of noisy actions, so its median grows with the CV."""
    schedule = build_schedule("gpipe", 4, 16)
    cost = CostModel.uniform(1.0, 2.0)
    points = []
    for cv in (0.0, 0.1, 0.2, 0.4):
        interval = step_interval(schedule, cost, Spread.uniform(cv), 400, seed=1)
        assert interval.p05_ms <= interval.step_ms <= interval.p95_ms
        points.append(interval.step_ms / interval.deterministic_ms - 1)
    assert points[0] == 0.0
    assert points[0] < points[1] < points[2] < points[3]
    assert 0.02 < points[2] < 0.2  # the issue measured 8.7% for GPipe at 4 x 16 with its costs


def test_each_draw_keeps_the_price_as_its_mean_and_the_mean_step_is_at_least_the_deterministic():
    """A profile prices each action at its mean (a step sums skewed actions, so it pays their mean): the draws are
    centred on the price as their mean, not their median, or the skew would be counted twice. A step is a convex
    function of its actions' times (sums and maxima), so the mean of the sampled steps is at least the step of the
    mean times (Jensen), while a lone chain of actions is no longer longer on average than its priced sum."""
    from pipesim.sim.jitter import _factors

    schedule = build_schedule("1f1b", 4, 8)
    deps = dependencies(schedule)
    factors = _factors(deps, Spread.uniform(0.3).widened(0.1), 20_000, np.random.default_rng(5))
    assert np.mean(factors) == pytest.approx(1.0, abs=0.01)
    assert np.median(factors) < 0.97  # a right-skewed draw: its median below its mean
    cost = uneven(schedule.num_stages)
    steps, deterministic = sampled_steps(schedule, cost, Spread.uniform(0.3), 2000, seed=3)
    assert steps.mean() >= deterministic
    chain = build_schedule("1f1b", 1, 8)  # one rank: the step is the sum of its actions, no waiting on another
    steps, deterministic = sampled_steps(chain, CostModel.uniform(1.0, 2.0), Spread.uniform(0.3), 4000, seed=4)
    assert steps.mean() == pytest.approx(deterministic, rel=0.01)


def test_a_prices_uncertainty_widens_the_interval_without_moving_the_point_much():
    schedule, cost = build_schedule("1f1b", 4, 8), CostModel.uniform(1.0, 2.0)
    jitter = Spread.uniform(0.1)
    plain = step_interval(schedule, cost, jitter, 400, seed=2)
    wider = step_interval(schedule, cost, jitter.widened(0.1), 400, seed=2)
    assert wider.p95_ms - wider.p05_ms > 1.5 * (plain.p95_ms - plain.p05_ms)
    assert wider.step_ms == pytest.approx(plain.step_ms, rel=0.05)


def test_a_bad_spread_or_sample_count_is_refused():
    with pytest.raises(ValueError, match="coefficient of variation"):
        Spread.uniform(-0.1)
    with pytest.raises(ValueError, match="keyed by action kind"):
        Spread({"F": 0.1})
    with pytest.raises(ValueError, match="samples"):
        step_interval(build_schedule("1f1b", 2, 2), CostModel.uniform(), Spread(), samples=0)
    assert Spread({ActionKind.FORWARD: 0.0}).is_zero


def test_simulate_and_compare_report_the_interval(tmp_path, capsys):
    out = tmp_path / "sim.json"
    argv = ["simulate", "--schedule", "1f1b", "--ranks", "4", "--microbatches", "8", "--json", str(out)]
    assert main([*argv, "--jitter", "0.2", "--samples", "100", "--seed", "4"]) == 0
    summary = json.loads(out.read_text())
    assert summary["step_ms_p05"] <= summary["step_ms"] <= summary["step_ms_p95"]
    assert summary["step_ms"] > summary["step_ms_deterministic"]
    assert "sampled step" in capsys.readouterr().out
    rows = tmp_path / "rows.json"
    cmp = ["compare", "--schedules", "gpipe,zb-h1", "--ranks", "4", "--microbatches", "8", "--jitter", "0.1"]
    assert main([*cmp, "--json", str(rows)]) == 0
    for row in json.loads(rows.read_text())["rows"]:
        assert row["step_ms_p05"] <= row["step_ms"] <= row["step_ms_p95"]
    assert "90% interval" in capsys.readouterr().out
    assert main([*argv, "--jitter", "7"]) == 2
    assert main([*argv, "--samples", "5"]) == 2  # --samples without --jitter samples nothing
    assert "give --jitter" in capsys.readouterr().err


def with_run_spread(cost: CostModel, cv: dict, repeats: int = 30) -> CostModel:
    """A run's stage costs as `executor run --profile` writes them: the in-situ spread in the meta."""
    meta = {**cost.provenance.meta, "spread": {"cv": cv, "repeats": repeats}}
    return replace(cost, provenance=replace(cost.provenance, meta=meta))


def test_a_runs_cost_file_spread_gives_the_executors_prediction_its_interval(tmp_path, capsys):
    from pipesim.io.cost_file import save_cost
    from pipesim_executor.host.predict import predict_step

    schedule = build_schedule("1f1b", 2, 8)
    plain = CostModel.uniform(1.0, 2.0)
    cost = with_run_spread(plain, {"F": 0.15, "B": 0.1})
    spread = cost_spread(cost)
    assert spread.cv == {ActionKind.FORWARD: 0.15, ActionKind.BACKWARD: 0.1}
    assert spread.price_se[ActionKind.FORWARD] == pytest.approx(1.2533 * 0.15 / 30**0.5, rel=1e-3)
    assert cost_spread(plain) is None
    with pytest.raises(ValueError, match="unknown action kind"):
        cost_spread(with_run_spread(plain, {"X": 0.1}))
    prediction = predict_step(schedule, cost)
    assert prediction.p05_ms <= prediction.predicted_step_ms <= prediction.p95_ms
    assert prediction.deterministic_ms == simulate_step(schedule, cost).step_ms
    assert set(prediction.interval_fields()) == {"step_ms", "step_ms_p05", "step_ms_p95", "step_ms_deterministic"}
    assert predict_step(schedule, plain).p05_ms is None  # no spread measured: the point alone, as before
    path, out = tmp_path / "cost.json", tmp_path / "sim.json"
    save_cost(cost, path)
    argv = ["simulate", "--schedule", "1f1b", "--ranks", "2", "--microbatches", "8", "--cost", str(path)]
    assert main([*argv, "--json", str(out)]) == 0
    assert "the cost file's measured spread" in capsys.readouterr().out
    assert json.loads(out.read_text())["step_ms_p95"] > json.loads(out.read_text())["step_ms_p05"]
