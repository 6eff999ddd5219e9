"""Issue 31's faster paths against the plain code they replaced, equal to the last element: the interleaved
builder's closed form against its counters, and the planner's shared cost models against fresh ones."""

from __future__ import annotations

from pipesim.ir import Action, B, F, loop_placement, make_schedule
from pipesim.schedules.interleaved import check_interleaved, interleaved_1f1b, rounds_of


def _interleaved_by_counters(num_ranks: int, num_microbatches: int, num_virtual_stages: int):  # noqa: ANN202
    """The builder as it was: Megatron's order by a counter of microbatches taken per (kind, stage)."""
    check_interleaved(num_ranks, num_microbatches, num_virtual_stages)
    p, m, v = num_ranks, num_microbatches, num_virtual_stages
    per_round, total = rounds_of(p, m), m * v
    rows = []
    for rank in range(p):
        warmup = min((v - 1) * per_round + 2 * (p - rank - 1), total)
        taken: dict[tuple[object, int], int] = {}

        def take(kind, chunk: int, rank: int = rank, taken: dict = taken) -> Action:  # noqa: ANN001
            stage = chunk * p + rank
            taken[(kind, stage)] = taken.get((kind, stage), 0) + 1
            return Action(stage, kind, taken[(kind, stage)] - 1)

        row = [take(F, (k // per_round) % v) for k in range(warmup)]
        for i in range(total - warmup):
            row += [take(F, ((warmup + i) // per_round) % v), take(B, v - 1 - (i // per_round) % v)]
        row += [take(B, v - 1 - (k // per_round) % v) for k in range(total - warmup, total)]
        rows.append(row)
    return make_schedule("interleaved-1f1b", p, m, loop_placement(p, p * v), rows, num_virtual_stages=v)


def test_interleaved_closed_form_equals_the_counters() -> None:
    built = 0
    for ranks in range(1, 8):
        for microbatches in range(1, 34):
            for chunks in (2, 3, 4):
                try:
                    expected = _interleaved_by_counters(ranks, microbatches, chunks)
                except ValueError:
                    continue
                schedule = interleaved_1f1b(ranks, microbatches, chunks)
                assert schedule.actions == expected.actions, (ranks, microbatches, chunks)
                assert all(type(a) is Action for row in schedule.actions for a in row)
                built += 1
    assert built > 300


def test_the_planners_shared_cost_models_equal_fresh_ones() -> None:
    """Candidates of a layout that share their sizes share one cost model (`Evaluator.cost_model`'s cache); each
    must equal the model a fresh evaluator cuts for that candidate alone, stragglers and replicas included."""
    from dataclasses import replace

    from pipesim.cost.description import ModelDescription
    from pipesim.cost.perturb import Perturbation
    from pipesim.plan.candidates import PlanSpace, candidate_grid
    from pipesim.plan.evaluator import Evaluator
    from pipesim.plan.inputs import PlanInputs
    from pipesim.plan.layout import family_layout

    model = ModelDescription(num_layers=8, hidden_size=256, ffn_size=1024, num_heads=4, seq_len=128)
    inputs = PlanInputs.from_description(model, devices=8, global_batch=16, memory_cap_bytes=2**34)
    inputs = replace(inputs, perturbation=Perturbation(slow_ranks=((1, 1.5),), link_delays=((0, 1, 0.2),)))
    space = PlanSpace(
        ranks=(2, 4), microbatch_sizes=(1, 2), chunks=(1, 2), recompute=(False, True), w_shares=(0.3, 0.6)
    )
    shared = Evaluator(inputs)
    compared = 0
    for candidate in candidate_grid(inputs, space):
        if shared.bound(candidate) is None:
            continue
        layout = family_layout(candidate.schedule, candidate.ranks, candidate.virtual_stages or 1)
        split = shared.split(candidate.microbatch_size, layout.num_stages, candidate.recompute).split_points
        assert shared.cost_model(candidate, split, layout) == Evaluator(inputs).cost_model(candidate, split, layout)
        compared += 1
    assert compared > 50 and len(shared._costs) < compared  # shared, and compared one by one


def test_one_f_one_b_by_slices_equals_its_phases() -> None:
    """1F1B's rows filled by slices against its phases appended one action at a time (the builder as it was)."""
    from pipesim.schedules.basic import one_f_one_b

    for ranks in range(1, 9):
        for microbatches in range(1, 20):
            expected = []
            for rank in range(ranks):
                warmup = min(ranks - rank - 1, microbatches)
                row = [Action(rank, F, mb) for mb in range(warmup)]
                for i in range(microbatches - warmup):
                    row += [Action(rank, F, warmup + i), Action(rank, B, i)]
                row += [Action(rank, B, mb) for mb in range(microbatches - warmup, microbatches)]
                expected.append(tuple(row))
            built = one_f_one_b(ranks, microbatches).actions
            assert built == tuple(expected) and all(type(a) is Action for row in built for a in row)


def test_builders_that_skip_actions_new_still_make_actions() -> None:
    """Builders make their actions by tuple.__new__(Action, ...) (the planner builds 10^6): each is an Action
    whose fields are an int stage, an ActionKind and an int microbatch, as Action(...) makes them."""
    from pipesim.ir import ActionKind
    from tests.helpers.sizes import registered_at

    for ranks, microbatches in ((1, 1), (2, 5), (4, 8)):
        for schedule in registered_at(ranks, microbatches):
            for row in schedule.actions:
                for a in row:
                    assert type(a) is Action and type(a.kind) is ActionKind, (schedule.name, a)
                    assert type(a.stage) is int and type(a.microbatch) is int and a == Action(*a)
