"""Pruning changes nothing the plan reports: over random grids, the pruned search names the same best,
the same runners-up, the same top K and the same Pareto front as the exhaustive one, with the same numbers and the
same reasons a candidate cannot be built; and every bound it prunes by is below the truth it stands for."""

from __future__ import annotations

import random

import pytest

from pipesim.cli.main import main
from pipesim.cost.description import ModelDescription
from pipesim.cost.model import LinkCost
from pipesim.ir import ActionKind
from pipesim.plan.candidates import shape_key
from pipesim.plan.report import best_candidate, pareto_front, ranked, runners_up, summary_lines
from pipesim.plan.search import Evaluator, PlanInputs, PlanSpace, candidate_grid, evaluate_all
from pipesim.schedules import build_schedule, options_for, schedule_info, schedule_names


def _numbers(c):
    return (c.label, c.error, c.step_ms, c.peak_memory_bytes, c.rank_memory, c.split, c.fits, c.bubble_fraction)


def _random_case(seed: int) -> tuple[PlanInputs, PlanSpace]:
    rng = random.Random(seed)
    model = ModelDescription(
        num_layers=rng.choice([6, 8, 12]),
        hidden_size=rng.choice([128, 256]),
        ffn_size=rng.choice([512, 1024]),
        num_heads=4,
        seq_len=rng.choice([64, 128]),
        vocab_size=1000,
        device_tflops=10.0,
        link_bandwidth_gbps=rng.choice([1.0, 10.0, 100.0]),
    )
    devices = rng.choice([4, 8])
    inputs = PlanInputs.from_description(
        model, devices=devices, global_batch=rng.choice([16, 32]), memory_cap_bytes=rng.choice([None, 2**26, 2**28])
    )
    space = PlanSpace(
        schedules=tuple(rng.sample(schedule_names(), 6)),
        microbatch_sizes=tuple(sorted(rng.sample([1, 2, 4], 2))),
        chunks=(1, 2, 4),
        recompute=(False, True),
        w_shares=(0.3, 0.5, 0.7),
        ranks=tuple(r for r in (1, 2, 4, 8) if r <= devices),
    )
    return inputs, space


@pytest.mark.parametrize("seed", range(4))
def test_pruned_search_reports_what_the_exhaustive_one_reports(seed: int) -> None:
    """Catches a bound above its candidate's truth (a candidate of the answer pruned), a tie pruned, or pruned
    candidates that lose the reason they cannot be built."""
    inputs, space = _random_case(seed)
    every = evaluate_all(inputs, space, prune=False)
    pruned = evaluate_all(inputs, space, workers=1 + seed % 2)  # odd seeds: two processes, each pruning alone
    assert [c.label for c in pruned] == [c.label for c in every]  # the grid's order
    assert [c.error for c in pruned] == [c.error for c in every]
    assert any(c.pruned for c in pruned) or seed  # the first case prunes something (else the test shows little)
    for mine, theirs in zip(pruned, every, strict=True):
        if mine.built:
            assert _numbers(mine) == _numbers(theirs)
        else:
            assert mine.step_ms is None and mine.peak_memory_bytes is None
    cap = inputs.memory_cap_bytes
    assert [_numbers(c) for c in pareto_front(pruned)] == [_numbers(c) for c in pareto_front(every)]
    best = best_candidate(every)
    assert (best_candidate(pruned) and _numbers(best_candidate(pruned))) == (best and _numbers(best))
    losers = [(loss.candidate.label, loss.reason) for loss in runners_up(every, best, cap)]
    assert [(loss.candidate.label, loss.reason) for loss in runners_up(pruned, best_candidate(pruned), cap)] == losers
    assert [c.label for c in ranked(pruned)[:6]] == [c.label for c in ranked(every)[:6]]
    assert summary_lines(pruned, cap)[1:] == summary_lines(every, cap)[1:]


@pytest.mark.parametrize("workers", [1, 2])
def test_the_default_plan_pruned_names_the_exhaustive_runners_up(workers: int) -> None:
    """Catches a built candidate counted twice among the incumbents (one process added each twice, so the sixth
    fastest, interleaved-1f1b v2 at 10.40 ms, was pruned as if six were faster)."""
    inputs = PlanInputs.from_description(
        ModelDescription(num_layers=8, hidden_size=256), devices=4, global_batch=16, memory_cap_bytes=80 * 2**30
    )
    every = evaluate_all(inputs, PlanSpace(), prune=False)
    pruned = evaluate_all(inputs, PlanSpace(), workers=workers)
    cap = inputs.memory_cap_bytes
    assert summary_lines(pruned, cap)[1:] == summary_lines(every, cap)[1:]
    assert [c.label for c in ranked(pruned)[:6]] == [c.label for c in ranked(every)[:6]]


@pytest.mark.parametrize("seed", range(2))
def test_every_bound_is_below_its_candidates_truth(seed: int) -> None:
    """The closed forms (step and memory) under every candidate, and each shape's critical path under its
    siblings: a bound above the truth would prune a candidate that belongs in the answer."""
    inputs, space = _random_case(seed + 10)
    evaluator = Evaluator(inputs)
    grid = candidate_grid(inputs, space)
    bounds = [evaluator.bound(c) for c in grid]
    shapes: dict[tuple, list] = {}
    for c, bound in zip(grid, bounds, strict=True):
        if bound is not None:
            shapes.setdefault(shape_key(c), []).append((c, bound))
    checked = 0
    for group in shapes.values():
        paths = []
        for c, _ in group:
            evaluator.price(c)
        costs = {id(c): evaluator.priced_cost(c) for c, _ in group if c.error is None}
        for c, bound in group:
            if c.error is not None:
                continue
            path = evaluator.simulate(c)
            assert bound.step_ms <= c.step_ms * (1 + 1e-9), c.label
            assert bound.memory_bytes <= c.peak_memory_bytes * (1 + 1e-9), c.label
            paths.append((path, id(c), c.step_ms))
        for path, owner, _ in paths:
            for c, _ in group:
                if c.built and path is not None:
                    assert path.length_ms(costs[id(c)]) <= c.step_ms * (1 + 1e-9), (c.label, owner)
                    checked += 1
        evaluator.drop_shape(shape_key(group[0][0]))
    assert checked > 50


def test_each_familys_stash_fact_is_below_its_orders_peak() -> None:
    """`ScheduleInfo.stashed` against the forwards each rank's order really holds at once."""
    for name in schedule_names():
        info = schedule_info(name)
        if info.stashed is None:
            continue
        for ranks in (1, 2, 3, 4, 6):
            for microbatches in (1, 2, 3, 5, 8, 12, 13):
                for chunks in (2, 3) if info.takes_chunks else (1,):
                    try:
                        schedule = build_schedule(
                            name, ranks, microbatches, **options_for(name, num_virtual_stages=chunks)
                        )
                    except ValueError:
                        continue
                    for rank, actions in enumerate(schedule.actions):
                        level = peak = 0
                        for action in actions:
                            level += action.kind is ActionKind.FORWARD
                            level -= action.kind in (ActionKind.BACKWARD, ActionKind.BACKWARD_INPUT)
                            peak = max(peak, level)
                        assert info.stashed(ranks, microbatches, chunks)[rank] <= peak, (name, ranks, microbatches)


def test_a_link_slow_enough_to_dominate_still_prunes_soundly() -> None:
    """Transfers on the ramp and the tail: a slow link makes the hops the bound's largest part."""
    model = ModelDescription(num_layers=8, hidden_size=256, ffn_size=1024, num_heads=4, seq_len=128)
    inputs = PlanInputs(
        units=PlanInputs.from_description(model, devices=4, global_batch=16).units,
        devices=4,
        global_batch=16,
        link=LinkCost(latency_ms=5.0, bandwidth_gbps=0.1),
    )
    space = PlanSpace(schedules=tuple(schedule_names()), chunks=(1, 2), w_shares=(0.3, 0.6), ranks=(2, 4))
    every, pruned = evaluate_all(inputs, space, prune=False), evaluate_all(inputs, space)
    assert [_numbers(c) for c in pareto_front(pruned)] == [_numbers(c) for c in pareto_front(every)]
    assert _numbers(best_candidate(pruned)) == _numbers(best_candidate(every))


def test_workers_beyond_the_cores_are_capped_and_the_output_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--layers", "4", "--hidden", "128", "--ffn", "512", "--heads", "4", "--seq-len", "64"]
    argv += ["--devices", "2", "--global-batch", "8", "--schedules", "gpipe,1f1b", "--exhaustive"]
    assert main([*argv, "--workers", "100000"]) == 0
    out = capsys.readouterr().out
    assert "--workers 100000 capped at" in out and "the cores this process may use" in out
    assert main([*argv, "--workers", "1"]) == 0
    assert "capped" not in capsys.readouterr().out


def test_balance_reads_a_cost_file_of_many_stages_as_the_full_reader_does(tmp_path) -> None:
    """The linear reader (`pipesim.io.stage_times`) against `load_cost_file` on a valid file, and every bad record
    handed to the full reader for its message."""
    import json

    import numpy as np

    from pipesim.cost.model import CostModel, StageCost
    from pipesim.io.cost_file import cost_to_dict, load_cost_file
    from pipesim.io.stage_times import stage_times_ms

    rng = random.Random(3)
    stages = tuple(
        StageCost(forward_ms=rng.uniform(0.1, 2), backward_ms=rng.uniform(2, 4), weight_ms=rng.choice([None, 1.0]))
        for _ in range(12_000)
    )
    document = cost_to_dict(CostModel(stages=stages))
    path = tmp_path / "cost.json"
    path.write_text(json.dumps(document))
    expected = [s.forward_ms + s.backward_ms for s in load_cost_file(path).stages]
    import pipesim.io.stage_times as module

    original = module.SLICE_BYTES
    module.SLICE_BYTES = 1 << 14  # many slices: a record cut at a slice's end would show
    try:
        assert np.array_equal(stage_times_ms(path), np.array(expected))
        for bad, message in (
            ({"forward_ms": -1.0, "backward_ms": 1.0}, "forward_ms must be a finite number >= 0"),
            ({"forward_ms": True, "backward_ms": 1.0}, "must be a finite number, got True"),
            ({"forward_ms": 1.0, "backward_ms": 1.0, "colour": 1}, "unknown fields ['colour']"),
            ({"forward_ms": "1", "backward_ms": 1.0}, "must be a finite number, got '1'"),
            ({"forward_ms": 1.0, "backward_ms": 1.0, "weight_ms": 2.0}, "weight_ms (2.0) must lie between"),
            ({"backward_ms": 1.0}, "forward_ms"),
        ):
            broken = {**document, "stages": [*document["stages"][:10_000], bad, *document["stages"][10_000:]]}
            path.write_text(json.dumps(broken))
            with pytest.raises(ValueError, match="stages\\[10000\\]") as error:
                stage_times_ms(path)
            assert message in str(error.value)
    finally:
        module.SLICE_BYTES = original


def test_a_long_timeline_is_written_as_the_same_bytes_as_its_dict(tmp_path) -> None:
    """`save_timeline`'s span text against json's own writing of `timeline_to_dict` (issue 31's faster write)."""
    from dataclasses import replace

    from pipesim.cost.model import CostModel
    from pipesim.io.formats import json_text, load_timeline, save_timeline, timeline_to_dict
    from pipesim.sim.steps import simulate_step

    schedule = build_schedule("interleaved-1f1b", 16, 64, num_virtual_stages=2)
    timeline = simulate_step(schedule, CostModel.uniform(forward_ms=1.1, backward_ms=2.3)).timeline
    spans = list(timeline.spans)
    spans[3] = spans[3]._replace(replica=2, start=1)  # an int time and a replica, as measured timelines carry
    for kept in (timeline, replace(timeline, spans=tuple(spans))):  # floats alone, then the general path
        save_timeline(kept, tmp_path / "t.json", {"step_ms": 1.5})
        written = (tmp_path / "t.json").read_text()
        assert written == json_text(timeline_to_dict(kept, {"step_ms": 1.5}), "t.json")
        assert load_timeline(tmp_path / "t.json").spans == kept.spans
