"""Sleep mode over the new families: each action sleeps what pipesim's simulation gives it (an overlapped pair its
layout shared among its members, an action alone its all-to-alls, a copy its priced time), the calibration prices
the runtime around those sleeps, and a real run of a few of bench/bench_sleep_new_families.py's cases on 2 ranks is
predicted within 3% (the bound and the quickest-step rule of tests/test_sleep_accuracy.py, for a busy machine)."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest

from pipesim.cost.convert import cost_from_times
from pipesim.ir import Action, ActionKind
from pipesim.schedules import build_schedule
from pipesim.semantics.lower import overlap_groups
from pipesim_executor.rank import inject
from pipesim_executor.rank.sleep_calibrate import span_excess

_SPEC = importlib.util.spec_from_file_location(
    "bench_sleep_new_families", Path(__file__).resolve().parent.parent / "bench" / "bench_sleep_new_families.py"
)
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)

BOUND = 0.03


def _moe_cost(a2a: float):
    cost = cost_from_times((10.0,), (20.0,), (10.0,))
    return dataclasses.replace(cost, stages=(dataclasses.replace(cost.stages[0], a2a_ms=a2a, moe_layers=1),))


def test_an_overlapped_pair_sleeps_its_layout_and_an_action_alone_its_all_to_alls():
    schedule = build_schedule("1f1b-overlap", 2, 4)
    cost = _moe_cost(15.0).for_pipeline(schedule.num_stages, schedule.num_ranks)
    slept = inject.slept_ms(schedule, cost, 0)
    pairs = [g for g in overlap_groups(schedule) if g[0].stage == 0]
    assert pairs
    for group in pairs:
        layout = cost.pair_ms(tuple((a.stage, a.kind) for a in group))
        # the all-to-alls hide under the other part's compute: the pair is shorter than its members alone
        assert sum(slept[a] for a in group) == pytest.approx(layout.makespan)
        assert layout.makespan < sum(cost.duration_ms(a.stage, a.kind) for a in group)
    alone = Action(0, ActionKind.FORWARD, 0)
    assert not any(alone in g for g in pairs) and slept[alone] == pytest.approx(10.0 + 2 * 15.0)


@pytest.mark.parametrize("name", ["dualpipe", "v-half", "1f1b-overlap"])
def test_sleep_mode_cuts_typed_times_as_pipesim_simulate_does(name):
    from pipesim.sim.steps import simulate_step
    from pipesim_executor.config import run_config

    schedule = build_schedule(name, 4, 8)
    config = run_config(
        schedule=name, num_ranks=4, num_microbatches=8, compute="sleep", sleep_f=(20.0,), sleep_b=(40.0,)
    )
    slept = config.compute.cost_model(schedule)
    typed = cost_from_times((20.0,), (40.0,)).for_schedule(schedule)  # what `pipesim simulate --f 20 --b 40` runs
    assert simulate_step(schedule, slept).step_ms == pytest.approx(simulate_step(schedule, typed).step_ms)


def test_a_sleep_runner_sleeps_its_actions_times_in_turn(monkeypatch):
    import torch

    slept: list[float] = []
    monkeypatch.setattr(inject, "precise_sleep", slept.append)
    costs = dict.fromkeys(ActionKind, 9.0)
    runner = inject.SleepRunner(0, True, False, costs, plan={ActionKind.FORWARD: (4.0, 2.0)})
    for _ in range(3):
        runner.forward(torch.zeros(2, 3))
    runner.backward((2, 3), None)
    assert slept == pytest.approx([0.004, 0.002, 0.004, 0.009])  # the plan in turn; B from its one cost


def test_the_calibration_excess_is_over_what_each_action_slept():
    a, b = Action(0, ActionKind.FORWARD, 0), Action(0, ActionKind.FORWARD, 1)
    records = [{"spans": [["0F0", 0.0, 40.2], ["0F1", 41.0, 67.8]]}, {"spans": [["0F0", 0.0, 40.1], ["0F1", 41, 67.9]]}]
    excess = span_excess(records, {a: 40.0, b: 26.6})  # 0F0 alone, 0F1 a member of a pair
    assert excess == {"0": {"F": pytest.approx(0.2)}}


CI_CASES = {  # (case of the sweep, microbatches at 2 ranks)
    "overlap-a2a-long": 4,  # all-to-alls longer than the other member's compute
    "offload-full-slow": 4,  # copies slower than the compute: the copy engine is the bottleneck
    "dualpipe-a2a": 4,
}


@pytest.mark.torchrun
@pytest.mark.parametrize("name", sorted(CI_CASES))
def test_a_sleep_mode_run_of_a_new_family_is_predicted_within_3_percent(name, tmp_path):
    case = next(c for c in bench.CASES if c.name == name)._replace(microbatches=CI_CASES[name])
    row = bench.run_case(case, ranks=2, steps=5, warmup=2, root=tmp_path)
    assert row["status"] == "ok", row.get("message")
    print(bench.table([row]))
    # the median on a quiet machine; under load the quickest step, which late wake-ups touch least (a wrong rule
    # moves every step, the quickest included)
    assert min(abs(row["error"]), abs(row["quickest_error"])) <= BOUND, bench.table([row])
