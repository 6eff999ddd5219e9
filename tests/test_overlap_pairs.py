"""Overlapped forward-backward pairs priced layer by layer, with an MoE stage's all-to-alls on the link."""

from __future__ import annotations

import pytest

from pipesim.cost.model import CostModel
from pipesim.cost.overlap import pair_timeline
from pipesim.cost.stage import StageCost
from pipesim.io.torch_csv import schedule_from_csv, schedule_to_csv
from pipesim.ir import Action, B, F
from pipesim.schedules import build_schedule
from pipesim.semantics.lower import back_to_back
from pipesim.semantics.validate import validate
from pipesim.sim.metrics import compute_metrics, link_busy_ms
from pipesim.sim.simulate import simulate


def _moe(forward: float, backward: float, a2a: float, layers: int = 1) -> CostModel:
    return CostModel(stages=(StageCost(forward, backward, activation_bytes=1.0, a2a_ms=a2a, moe_layers=layers),))


def test_an_all_to_all_shorter_than_the_other_parts_compute_hides_entirely() -> None:
    """F = 2 ms of compute, B = 4, each all-to-all 0.5 (two per part), one layer. By hand: F computes 0-1, its
    dispatch 1-1.5; B's combine-gradient 0-0.5, its expert backward 1-3; F's experts 3-4 while B's dispatch
    gradient runs 3-3.5; F's combine 4-4.5 while B's attention backward runs 4-6. The pair takes 6, its compute:
    every all-to-all hid. Alone they take 3 + 5 = 8."""
    layout = pair_timeline(2.0, 0.5, 4.0, 0.5, layers=1)
    assert layout.makespan == 6.0
    assert [(s.part, s.resource, s.start, s.end) for s in layout.segments] == [
        (0, "compute", 0.0, 1.0),
        (1, "link", 0.0, 0.5),
        (0, "link", 1.0, 1.5),
        (1, "compute", 1.0, 3.0),
        (0, "compute", 3.0, 4.0),
        (1, "link", 3.0, 3.5),
        (0, "link", 4.0, 4.5),
        (1, "compute", 4.0, 6.0),
    ]


def test_all_to_alls_longer_than_compute_cost_what_the_link_lane_says() -> None:
    """F = B = 1 ms of compute, each all-to-all 2 ms. By hand: F computes 0-0.5, B's combine gradient holds the
    link 0-2, F's dispatch 2-4 (B computes 2-2.5), B's dispatch gradient 4-6 (F computes 4-4.5), F's combine
    6-8 (B computes 6-6.5): the link is busy 8 ms without a break and the pair takes exactly that."""
    layout = pair_timeline(1.0, 2.0, 1.0, 2.0, layers=1)
    assert layout.busy_ms("link") == 8.0
    assert layout.makespan == 8.0
    finer = pair_timeline(1.0, 2.0, 1.0, 2.0, layers=4)  # more layers: still link-bound
    assert finer.makespan >= 8.0


def test_the_simulated_pair_costs_its_layout() -> None:
    """One rank, two microbatches, 1f1b-overlap: F0 alone (2 + 2 x 0.5 = 3), then the pair (F1; B0) = 6 by the
    hand layout above, then B1 alone (4 + 1 = 5): 14, against 1F1B's 3 + 5 + 3 + 5 = 16."""
    cost = _moe(2.0, 4.0, 0.5)
    schedule = build_schedule("1f1b-overlap", 1, 2)
    assert [str(e) for e in schedule.order[0]] == ["0F0", "(0F1;0B0)OVERLAP_F_B", "0B1"]
    timeline = simulate(schedule, cost)
    assert compute_metrics(timeline).makespan == 14.0
    assert compute_metrics(simulate(build_schedule("1f1b", 1, 2), cost)).makespan == 16.0
    spans = {s.action: (s.start, s.end) for s in timeline.spans}
    assert spans[Action(0, F, 1)][0] == 3.0 and spans[Action(0, B, 0)][1] == 9.0  # the pair: 3 to 9
    a2a = sorted((c.start, c.end) for c in timeline.comm if c.kind == "a2a" and c.start >= 3.0 and c.end <= 9.0)
    assert a2a == [(3.0, 3.5), (4.0, 4.5), (6.0, 6.5), (7.0, 7.5)]  # the layout's link segments, from 3
    assert link_busy_ms(schedule, cost) == [8 * 0.5]


def test_without_all_to_alls_the_overlap_factor_still_prices_a_pair() -> None:
    plain = CostModel(stages=(StageCost(2.0, 4.0),), overlap_factor=0.75)
    assert plain.pair_ms(((0, F), (0, B))).makespan == pytest.approx(0.75 * 6.0)


@pytest.mark.parametrize("p", [2, 4])
def test_overlap_beats_1f1b_when_all_to_alls_are_large_and_torchs_default_runs_them_in_turn(p: int) -> None:
    cost = _moe(1.0, 2.0, 0.5, layers=2)
    schedule = build_schedule("1f1b-overlap", p, 2 * p)
    validate(schedule)
    overlapped = compute_metrics(simulate(schedule, cost)).makespan
    one = compute_metrics(simulate(build_schedule("1f1b", p, 2 * p), cost)).makespan
    in_turn = compute_metrics(simulate(back_to_back(schedule), cost)).makespan
    assert overlapped < one <= in_turn


def test_the_pairs_round_trip_through_torchs_csv() -> None:
    schedule = build_schedule("1f1b-overlap", 4, 8)
    back = schedule_from_csv(schedule_to_csv(schedule, "auto"))
    assert back.order == schedule.order
    cost = _moe(1.0, 2.0, 0.5)
    assert compute_metrics(simulate(back, cost)).makespan == compute_metrics(simulate(schedule, cost)).makespan


def test_its_memory_is_one_microbatch_more_than_1f1b() -> None:
    cost = _moe(1.0, 2.0, 0.0)
    for p in (2, 4, 8):
        overlapped = compute_metrics(simulate(build_schedule("1f1b-overlap", p, 2 * p), cost), cost)
        assert overlapped.ranks[0].peak_activations == min(p + 1, 2 * p)


@pytest.mark.parametrize("module", ["pipesim.cost.overlap", "pipesim.cost.seq_chunks", "pipesim.sim.offload"])
def test_the_examples_in_the_new_pricing_modules_hold(module: str) -> None:
    import doctest
    import importlib

    failures, tried = doctest.testmod(importlib.import_module(module))
    assert tried and not failures


def test_a_cost_file_keeps_an_moe_stages_all_to_all_and_writes_a_dense_one_as_before(tmp_path) -> None:
    import json

    from pipesim.io.cost_file import load_cost, save_cost

    moe, dense = _moe(1.0, 2.0, 0.5, layers=3), _moe(1.0, 2.0, 0.0)
    for cost, name in ((moe, "moe.json"), (dense, "dense.json")):
        save_cost(cost, tmp_path / name)
        assert load_cost(tmp_path / name).stages == cost.stages
    assert {"a2a_ms", "moe_layers"} <= set(json.loads((tmp_path / "moe.json").read_text())["stages"][0])
    assert not {"a2a_ms", "moe_layers"} & set(json.loads((tmp_path / "dense.json").read_text())["stages"][0])
