"""A model profiled unit by unit: the size curves and their fit, the cost file's version 2, and the
planner pricing every candidate from it through the one step-time function."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from pipesim.cli.main import main
from pipesim.cost.description import stage_costs_from_units
from pipesim.cost.links import LinkCost
from pipesim.cost.model import DataParallelGroup
from pipesim.cost.profile import (
    BYTE_KINDS,
    TIME_KINDS,
    ActionConstants,
    InSituTerms,
    ProfiledUnit,
    SizeCurve,
    UnitProfile,
)
from pipesim.cost.runtime import OptimizerTime, RuntimeTerms
from pipesim.io.cost_file import COST_UNITS, load_cost, load_cost_file, save_profile
from pipesim.plan.inputs import PlanInputs
from pipesim.plan.report import best_candidate, pareto_front
from pipesim.plan.search import Evaluator, PlanSpace, evaluate_all
from pipesim.schedules import build_schedule, options_for
from pipesim.sim.memory import rank_memory
from pipesim.sim.steps import simulate_step

SIZES = (1, 2, 4)


def curve(a: float, b: float, bend: float = 0.0) -> SizeCurve:
    """a + b x size, plus `bend` x size^2 (a unit whose time is not a straight line in the size)."""
    return SizeCurve(SIZES, tuple(a + b * s + bend * s * s for s in SIZES))


def unit(name: str, scale: float, params: float, bend: float = 0.0) -> ProfiledUnit:
    times = {
        "forward_ms": curve(0.1 * scale, 1.0 * scale, bend),
        "backward_ms": curve(0.2 * scale, 2.0 * scale, bend),
        "forward_split_ms": curve(0.1 * scale, 1.1 * scale, bend),
        "input_ms": curve(0.1 * scale, 1.2 * scale),
        "weight_ms": curve(0.1 * scale, 1.0 * scale),
        "forward_recompute_ms": curve(0.05 * scale, 0.8 * scale),
        "backward_recompute_ms": curve(0.3 * scale, 3.0 * scale),
        "input_recompute_ms": curve(0.2 * scale, 2.1 * scale),
    }
    sizes = {
        "activation_bytes": curve(0, 1000.0 * scale),
        "weight_grad_bytes": curve(0, 400.0 * scale),
        "input_bytes": curve(0, 256.0),
        "output_bytes": curve(0, 256.0),
    }
    return ProfiledUnit(name, params, {**times, **sizes})


def factors(*values: float) -> SizeCurve:
    """In-situ factors at the sizes 1, 2, 4 (one value: the same at every size)."""
    return SizeCurve(SIZES, values if len(values) == 3 else values * 3)


def profile(**changes) -> UnitProfile:
    units = (
        unit("embedding", 0.2, 4e5),
        *(unit(f"block{i}", 1.0, 8e5, 0.05) for i in range(4)),
        unit("head", 0.6, 4e5),
    )
    base = UnitProfile(
        units=units,
        microbatch_sizes=SIZES,
        action=ActionConstants(
            start=dict(zip(TIME_KINDS, (0.05, 0.08, 0.05, 0.06, 0.02, 0.04, 0.1, 0.07), strict=True)),
            end=dict(zip(TIME_KINDS, (-0.02, 0.2, -0.01, 0.15, 0.01, 0.0, 0.2, 0.12), strict=True)),
        ),
        dispatch_ms=0.1,
        tail_ms=0.4,
        optimizers={"sgd": OptimizerTime(0.05, 1e-7), "adam": OptimizerTime(0.1, 5e-7)},
        link=LinkCost(0.05, 2.0),
        core_slots=2,
        model={"kind": "transformer"},
        provenance={"device": "cpu", "process_spread": 0.04},
        in_situ={  # "split-chunked" left out: it takes "split"'s
            "plain": InSituTerms(
                0.1, 0.4, {"backward_ms": factors(1.2, 1.1, 1.0), "forward_recompute_ms": factors(1.05)}
            ),
            "split": InSituTerms(0.08, 0.45, {"input_ms": factors(1.1), "forward_split_ms": factors(0.95, 1.0, 1.05)}),
            "plain-chunked": InSituTerms(
                0.12, 0.5, {"backward_ms": factors(1.3), "forward_ms": factors(1.25, 1.2, 1.3)}
            ),
        },
    )
    return replace(base, **changes)


# --- the size curves ------------------------------------------------------------------------------------------


def test_a_curve_is_exact_where_measured_and_on_the_nearest_segment_elsewhere():
    c = SizeCurve((1, 2, 4), (1.0, 1.5, 3.5))
    assert [c.at(s) for s in (1, 2, 4)] == [1.0, 1.5, 3.5]
    assert c.at(3) == pytest.approx(2.5)  # between 2 and 4
    assert c.at(8) == pytest.approx(7.5)  # the last segment extended
    assert SizeCurve((2, 4), (1.0, 3.0)).at(1) == 0.0  # never below 0
    assert SizeCurve((2,), (3.0,)).at(4) == pytest.approx(6.0)  # one size: in proportion


@pytest.mark.parametrize(
    "values",
    [(3.0, 1.0), (1.0, 3.0, 2.0, 5.0), (5.0, 4.0, 3.0, 2.0), (0.0, 0.0, 0.1, 0.05), (2.0, 2.5, 1.0, 9.0)],
)
def test_a_fitted_time_never_falls_with_the_microbatch_size_nor_below_zero(values):
    """Issue 29: noise that made a larger size cheaper bent the fit down, and its end segment carried a schedule's
    price below anything measured. The fit pools such sizes (pool adjacent violators), at every size from 1 to 64,
    profiled or not, inside or beyond the profiled range."""
    sizes = (2, 4, 8, 16)[: len(values)]
    curve = SizeCurve(sizes, values)
    read = [curve.at(size) for size in range(1, 65)]
    assert all(v >= 0 for v in read)
    assert all(b >= a for a, b in zip(read, read[1:], strict=False)), read
    fitted = curve.fitted
    assert sum(fitted) == pytest.approx(sum(values))  # pooling keeps the mean of what it pools
    if list(values) == sorted(values):
        assert fitted == values  # a non-decreasing measurement is read as measured


def test_a_ratio_curve_is_read_as_measured_and_held_flat_beyond_its_sizes():
    """In-situ factors are ratios: not forced monotone, and never extended along a line past the profile."""
    ratio = SizeCurve((2, 4), (1.4, 1.1), monotone=False)
    assert [ratio.at(s) for s in (1, 2, 3, 4, 9)] == [1.4, 1.4, pytest.approx(1.25), 1.1, 1.1]


def test_the_affine_fit_and_its_residual_have_their_closed_forms():
    """Catches a fit that is not least squares (or a residual that is not relative to the mean)."""
    straight = SizeCurve((1, 2, 4), (1.5, 2.5, 4.5))
    assert straight.affine() == pytest.approx((0.5, 1.0)) and straight.residual() == pytest.approx(0.0, abs=1e-12)
    bent = SizeCurve((1, 2, 3), (1.0, 1.0, 4.0))
    a, b = bent.affine()
    assert (a, b) == pytest.approx((-1.0, 1.5))  # slope cov/var = 3/2, intercept mean_y - b mean_x = 2 - 3
    residuals = [a + b * x - y for x, y in zip((1, 2, 3), (1.0, 1.0, 4.0), strict=True)]
    assert bent.residual() == pytest.approx(math.sqrt(sum(r * r for r in residuals) / 3) / 2.0)


@pytest.mark.parametrize(
    ("sizes", "values"),
    [((), ()), ((1, 2), (1.0,)), ((2, 1), (1.0, 1.0)), ((0, 1), (1.0, 1.0)), ((1, 2), (1.0, math.nan))],
)
def test_a_bad_curve_is_refused(sizes, values):
    with pytest.raises(ValueError):
        SizeCurve(sizes, values)


def test_a_unit_gives_the_kind_of_backward_and_forward_each_candidate_runs():
    """Split schedules pay I + W and the capturing forward; recomputing ones the forward without a graph, and a
    backward that gives the measured recomputing backward once the cost model adds that forward back."""
    u = unit("block", 1.0, 8e5)
    plain, split = u.cost_at(2, False), u.cost_at(2, True)
    assert plain.forward_ms == pytest.approx(2.1) and plain.backward_ms == pytest.approx(4.2)
    assert split.forward_ms == pytest.approx(2.3) and split.backward_ms == pytest.approx(2.5 + 2.1)
    assert split.weight_ms == pytest.approx(2.1)
    redo = u.cost_at(2, False, recompute=True)
    assert redo.forward_ms == pytest.approx(1.65) and redo.forward_ms + redo.backward_ms == pytest.approx(6.3)
    redo_split = u.cost_at(2, True, recompute=True)
    assert redo_split.i_ms + redo_split.forward_ms == pytest.approx(4.4)  # I with its forward run again


# --- the cost file, version 2 ---------------------------------------------------------------------------------


def test_a_unit_profile_round_trips_and_old_cost_files_still_load(tmp_path):
    path = tmp_path / "cost.json"
    save_profile(profile(), path)
    loaded = load_cost_file(path)
    assert isinstance(loaded, UnitProfile) and loaded == profile()
    data = json.loads(path.read_text())
    assert data["version"] == 2 and len(data["fits"]) == 6 and data["fits"][1]["forward_ms"]["residual"] > 0
    with pytest.raises(ValueError, match="profiled unit by unit"):
        load_cost(path)  # simulate and compare take a run's stage costs, and say what this file is
    stage_file = tmp_path / "stages.json"
    stage_file.write_text(
        json.dumps(
            {
                "format": "pipesim.cost",
                "version": 1,
                "units": COST_UNITS,
                "stages": [{"forward_ms": 1, "backward_ms": 2}],
            }
        )
    )
    assert load_cost_file(stage_file).stages[0].backward_ms == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["units"][0].update(extra=1), r"units\[0\]: unknown fields \['extra'\]"),
        (lambda d: d["units"][0].update(forward_ms=[1.0]), r"units\[0\].forward_ms must list one value per"),
        (lambda d: d["units"][1]["backward_ms"].__setitem__(0, "1"), r"backward_ms\[0\] must be a finite number"),
        (lambda d: d["units"][1]["backward_ms"].__setitem__(0, 1e300), r"<= 1e\+12, got '1e\+300'"),
        (lambda d: d.update(optimizers={"lion": {"fixed_ms": 0, "ms_per_byte": 0}}), "unknown optimizer 'lion'"),
        (lambda d: d.update(microbatch_sizes=[2, 1, 4]), "increasing whole numbers"),
        (lambda d: d.update(core_slots=True), "core_slots must be"),
        (lambda d: d.update(kind="stages"), '"kind": "unit-profile"'),
        (lambda d: d.update(units=[]), "units must be a list of 1"),
    ],
)
def test_the_profile_file_is_read_strictly(tmp_path, change, message):
    path = tmp_path / "cost.json"
    save_profile(profile(), path)
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        load_cost_file(path)


def test_nan_in_a_profile_is_refused(tmp_path):
    path = tmp_path / "cost.json"
    save_profile(profile(), path)
    path.write_text(path.read_text().replace('"tail_ms": 0.4', '"tail_ms": NaN'))
    with pytest.raises(ValueError):
        load_cost_file(path)


# --- the planner prices every candidate through the one step function ------------------------------------------


IN_SITU_OF = {  # a candidate's class (split backward, chunked) -> the class whose in-situ terms it takes
    (False, False): "plain", (True, False): "split", (False, True): "plain-chunked", (True, True): "split",
}  # fmt: skip


def stage_kinds_here(p: UnitProfile, size: int, start: int, stop: int, scale: dict) -> dict[str, float]:
    """A stage's times by the rule written out here: at each profiled size, timed whole where the profile did,
    else the units' shares plus the constants of a cut start and a cut end, scaled by its class's in-situ factors;
    then read at `size` off the closest non-decreasing fit over the profiled sizes."""

    def at(s: int) -> dict[str, float]:
        if (s, start, stop) in p.stages:
            times = dict(p.stages[(s, start, stop)])
        else:
            times = {
                k: sum(u.curves[k].at(s) for u in p.units[start:stop])
                + (p.action.start.get(k, 0.0) if start > 0 else 0.0)
                + (p.action.end.get(k, 0.0) if stop < len(p.units) else 0.0)
                for k in TIME_KINDS
            }
        return {k: v * (scale[k].at(s) if k in scale else 1.0) for k, v in times.items()}

    rows = [at(s) for s in p.microbatch_sizes]
    return {k: SizeCurve(p.microbatch_sizes, tuple(max(0.0, r[k]) for r in rows)).at(size) for k in TIME_KINDS}


def test_a_stages_fitted_times_never_fall_with_the_size_whatever_the_stages_and_factors_measured():
    """Issue 29: a stage timed whole at one size (slow), the units' sums at another, and in-situ factors that fall
    steeply with the size gave a larger microbatch a cheaper stage. The fit over the profiled sizes forbids it,
    at every size from 1 to 12 and for every kind; where nothing falls, the profiled sizes read as before."""
    slow = {k: 30.0 + i for i, k in enumerate(TIME_KINDS)}
    falling = {k: SizeCurve(SIZES, (2.0, 1.0, 0.4), monotone=False) for k in TIME_KINDS}
    p = replace(profile(), stages={(2, 0, 3): slow})
    terms = InSituTerms(0.1, 0.4, falling)
    for kind in TIME_KINDS:
        read = [p.stage_kinds(size, 0, 3, terms)[kind] for size in range(1, 13)]
        assert all(v >= 0 for v in read) and all(b >= a - 1e-12 for a, b in zip(read, read[1:], strict=False)), kind
    plain = profile()
    for size in SIZES:
        assert plain.stage_kinds(size, 1, 4) == pytest.approx(stage_kinds_here(plain, size, 1, 4, {}))


def as_action_times(t: dict[str, float], split: bool, recompute: bool) -> dict[str, float]:
    forward = t["forward_recompute_ms"] if recompute else t["forward_split_ms" if split else "forward_ms"]
    if split:
        i_ms = t["input_recompute_ms"] - forward if recompute else t["input_ms"]
        return {"forward_ms": forward, "backward_ms": i_ms + t["weight_ms"], "weight_ms": t["weight_ms"]}
    backward = t["backward_recompute_ms"] - forward if recompute else t["backward_ms"]
    return {
        "forward_ms": forward,
        "backward_ms": backward,
        "weight_ms": backward * t["weight_ms"] / (t["input_ms"] + t["weight_ms"]),
    }


@pytest.mark.parametrize("timed_whole", [False, True])
def test_every_candidate_equals_simulate_step_on_a_cost_model_built_here(timed_whole):
    """Each candidate's step against `simulate_step` on stage times summed here from the profile's units, the
    constants at cut starts and ends and the in-situ factors (or a stage's own times where the profile timed it
    whole), and each rank's tail plus its optimizer step on its own parameters, with the dispatch gap.

    Catches a planner that prices a profiled candidate without the runtime terms (the dispatch gap, the
    per-rank optimizer), without the in-situ factors and terms of the candidate's class of schedule, with the plain
    forward for a split schedule, ignoring a stage the profile timed whole, or with a second step formula."""
    p = profile()
    if timed_whole:  # the balanced 2-stage cut at size 2 and the 4-stage one at size 1, timed whole
        bumped = {k: 10.0 + i for i, k in enumerate(TIME_KINDS)}
        p = replace(p, stages={(2, 0, 3): bumped, (2, 3, 6): bumped, (1, 2, 3): bumped})
    inputs = PlanInputs.from_profile(p, devices=2, global_batch=8, optimizer="adam")
    space = PlanSpace(schedules=("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv"), microbatch_sizes=(1, 2, 3))
    every = evaluate_all(inputs, space, prune=False)
    candidates = [c for c in every if c.error is None]
    assert len(candidates) >= 20
    pruned = evaluate_all(inputs, space)  # the bounds under a profile's runtime terms: the same answer
    assert [(c.label, c.step_ms) for c in pareto_front(pruned)] == [(c.label, c.step_ms) for c in pareto_front(every)]
    assert best_candidate(pruned).label == best_candidate(every).label
    used = 0
    for c in candidates:
        schedule = build_schedule(
            c.schedule, c.ranks, c.microbatches, **options_for(c.schedule, num_virtual_stages=c.virtual_stages)
        )
        split = schedule.uses_split_backward
        terms = p.in_situ[IN_SITU_OF[split, schedule.num_stages > schedule.num_ranks]]
        units = [u.cost_at(c.microbatch_size, split, c.recompute) for u in p.units]
        cost = stage_costs_from_units(units, c.split, recompute=c.recompute, link=p.link)
        bounds = [0, *c.split, len(units)]
        stages = []
        for stage, (a, b) in zip(cost.stages, zip(bounds, bounds[1:], strict=False), strict=True):
            used += (c.microbatch_size, a, b) in p.stages
            times = as_action_times(stage_kinds_here(p, c.microbatch_size, a, b, terms.scale), split, c.recompute)
            stages.append(replace(stage, **{k: max(0.0, v) for k, v in times.items()}))
        cost = replace(cost, stages=tuple(stages))
        params = [sum(cost.stages[s].param_bytes for s in schedule.stages_of_rank(r)) for r in range(c.ranks)]
        runtime = RuntimeTerms(terms.dispatch_ms, terms.tail_ms, OptimizerTime(0.1, 5e-7), 2).rank_runtime(params)
        overhead = terms.tail_ms + 0.1 + 5e-7 * params[0]
        assert runtime.dispatch_ms == (terms.dispatch_ms,) and runtime.step_overhead_ms[0] == pytest.approx(overhead)
        cost = replace(cost, runtime=runtime, dp_group=DataParallelGroup(1, p.link))
        step = simulate_step(schedule, cost)
        assert c.step_ms == pytest.approx(step.step_ms, rel=1e-9), c.label
        memory = rank_memory(schedule, cost, "adam", step.timeline)
        assert c.rank_memory == pytest.approx([m.peak_bytes for m in memory], rel=1e-12), c.label
    assert bool(used) == timed_whole
    # the materialised candidate is the same cost model (what the app draws and exports)
    evaluator = Evaluator(inputs)
    best = evaluator.evaluate(candidates[0])
    schedule, cost = evaluator.materialise(best)
    assert simulate_step(schedule, cost).step_ms == pytest.approx(best.step_ms, rel=1e-12)


def test_the_runtime_terms_share_cores_only_when_the_processes_outnumber_them():
    terms = RuntimeTerms(0.1, 0.2, OptimizerTime(0.0, 1e-6), core_slots=2)
    assert terms.rank_runtime([1e6, 2e6]).shared_cores is None  # 2 ranks on 2 cores
    assert terms.rank_runtime([1e6] * 4).shared_cores == 2  # 4 ranks on 2 cores: processor sharing
    assert terms.rank_runtime([1e6, 2e6], replicas=2).shared_cores == 1  # each replica has 1 core
    assert terms.rank_runtime([1e6, 0.0]).step_overhead_ms == pytest.approx((0.2 + 1.0, 0.2))  # nothing to step


def test_a_plan_for_an_optimizer_the_profile_did_not_time_is_refused():
    with pytest.raises(ValueError, match="timed no 'sgd-momentum' optimizer step.*timed: adam, sgd"):
        PlanInputs.from_profile(profile(), devices=2, global_batch=8, optimizer="sgd-momentum")


def test_plan_cost_reads_a_unit_profile_and_records_the_model_it_was_made_for(tmp_path, capsys):
    path, out = tmp_path / "cost.json", tmp_path / "plan.json"
    save_profile(profile(), path)
    argv = ["plan", "--cost", str(path), "--devices", "2", "--global-batch", "8", "--optimizer", "sgd"]
    assert main([*argv, "--microbatch-sizes", "1,2", "--json", str(out)]) == 0
    plan = json.loads(out.read_text())
    assert plan["inputs"]["executor_model"] == {"kind": "transformer"}
    assert plan["calibration"]["calibrated"] and plan["calibration"]["uncertainty"] == pytest.approx(0.02)
    built = [c for c in plan["candidates"] if c["error"] is None and c.get("pruned") is None]
    assert built and all(len(c["rank_memory_bytes"]) == c["ranks"] for c in built)
    assert main([*argv, "--calibrate-from", str(tmp_path)]) == 2
    assert "--calibrate-from calibrates a model description" in capsys.readouterr().err


def test_an_uncalibrated_description_says_so(tmp_path, capsys):
    out = tmp_path / "plan.json"
    argv = ["plan", "--layers", "2", "--hidden", "32", "--ffn", "64", "--heads", "2", "--seq-len", "16"]
    assert main([*argv, "--vocab", "64", "--devices", "2", "--global-batch", "8", "--json", str(out)]) == 0
    assert "note: uncalibrated" in capsys.readouterr().out
    assert json.loads(out.read_text())["calibration"]["calibrated"] is False


def test_the_kinds_and_sizes_cover_the_file():
    assert set(TIME_KINDS) | set(BYTE_KINDS) == set(profile().units[0].curves)


def test_a_units_own_output_in_its_stash_round_trips_and_is_counted_once_per_stage(tmp_path):
    """Issue 29: `output_stash_bytes` (a ReLU's kept result, which the next unit keeps as its input) is optional in
    the file and subtracted once for every unit followed by another of its stage."""
    from pipesim.cost.description import stage_costs_from_units

    base = profile()
    shared = SizeCurve(SIZES, (100.0, 200.0, 400.0))
    units = tuple(replace(u, curves={**u.curves, "output_stash_bytes": shared}) for u in base.units)
    path = tmp_path / "cost.json"
    save_profile(replace(base, units=units), path)
    loaded = load_cost_file(path)
    assert loaded.units[2].curves["output_stash_bytes"] == shared
    costs = loaded.unit_costs(2)
    stages = stage_costs_from_units(list(costs), (2,))
    whole = sum(c.activation_bytes for c in costs[:2])
    assert stages.stages[0].activation_bytes == pytest.approx(whole - 200.0)  # one internal boundary
    assert stages.stages[1].activation_bytes == pytest.approx(sum(c.activation_bytes for c in costs[2:]) - 3 * 200.0)
    old = load_cost_file(save_profile(base, tmp_path / "old.json") or tmp_path / "old.json")  # no field: as before
    assert stage_costs_from_units(list(old.unit_costs(2)), (2,)).stages[0].activation_bytes == pytest.approx(whole)
