"""Builders: golden small schedules, the registry, constraint errors, properties over many sizes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.ir import B, F
from pipesim.schedules import build_schedule, schedule_info, schedule_names
from pipesim.schedules.basic import gpipe, naive, one_f_one_b
from pipesim.schedules.interleaved import interleaved_1f1b
from pipesim.semantics.validate import validate
from pipesim.sim.simulate import find_deadlock
from tests.helpers.sizes import registered_at


def rows(schedule):
    return [" ".join(row) for row in schedule.text_rows()]


def test_1f1b_golden_two_ranks_four_microbatches():
    assert rows(one_f_one_b(2, 4)) == [
        "0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3",
        "1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3",
    ]


def test_1f1b_golden_fewer_microbatches_than_ranks():
    # Warm-up is capped at m: rank 0 of 4 can only run 2 forwards before its backwards.
    assert rows(one_f_one_b(4, 2)) == [
        "0F0 0F1 0B0 0B1",
        "1F0 1F1 1B0 1B1",
        "2F0 2F1 2B0 2B1",
        "3F0 3B0 3F1 3B1",
    ]


def test_gpipe_golden():
    assert rows(gpipe(2, 3)) == ["0F0 0F1 0F2 0B0 0B1 0B2", "1F0 1F1 1F2 1B0 1B1 1B2"]


def test_naive_golden():
    assert rows(naive(3, 2)) == ["0F0 0B0 0F1 0B1", "1F0 1B0 1F1 1B1", "2F0 2B0 2F1 2B1"]


def test_interleaved_golden_megatron_order():
    # Worked by hand from Megatron's formulas: p=2, v=2, m=4; rank 0 holds stages 0 and 2.
    schedule = interleaved_1f1b(2, 4, num_virtual_stages=2)
    assert rows(schedule) == [
        "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3",
        "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3",
    ]
    assert schedule.stage_to_rank == (0, 1, 0, 1)
    assert schedule.params == {"num_virtual_stages": 2}


def test_registry_is_case_insensitive_and_lists_valid_names():
    assert schedule_info("GPipe").name == "gpipe"
    assert build_schedule(" 1F1B ", 2, 2).name == "1f1b"
    with pytest.raises(ValueError) as error:
        build_schedule("pipedream", 2, 2)
    for name in ("naive", "gpipe", "1f1b", "interleaved-1f1b"):
        assert name in str(error.value)
    assert {"naive", "gpipe", "1f1b", "interleaved-1f1b"} <= set(schedule_names())


def test_registry_refuses_options_a_family_does_not_take():
    with pytest.raises(ValueError, match="num_virtual_stages"):
        build_schedule("1f1b", 2, 2, num_virtual_stages=2)
    assert schedule_info("interleaved-1f1b").options == ("num_virtual_stages",)


@pytest.mark.parametrize("ranks, microbatches", [(0, 4), (2, 0), (-1, 1)])
def test_bad_counts_are_refused_by_name(ranks, microbatches):
    for builder in (naive, gpipe, one_f_one_b):
        with pytest.raises(ValueError, match="num_ranks|num_microbatches"):
            builder(ranks, microbatches)


@pytest.mark.parametrize("microbatches, valid", [(9, "8, 10"), (11, "10, 12"), (13, "12, 15")])
def test_interleaved_needs_a_multiple_of_its_rounds(microbatches, valid):
    """torch's rule: rounds = max(1, m // p), and m a multiple of them (4 x 9: 2 rounds of 4.5)."""
    with pytest.raises(ValueError) as error:
        interleaved_1f1b(4, microbatches, num_virtual_stages=2)
    message = str(error.value)
    assert "multiple of its number of rounds" in message
    assert valid in message  # valid values near it
    for m in (1, 2, 3, 5, 6, 7, 10, 12, 15):  # fewer than p, and whole rounds: built
        assert interleaved_1f1b(4, m, num_virtual_stages=2).num_microbatches == m


@pytest.mark.parametrize("chunks", [1, 0])
def test_interleaved_needs_two_chunks(chunks):
    with pytest.raises(ValueError, match="num_virtual_stages >= 2"):
        interleaved_1f1b(2, 4, num_virtual_stages=chunks)


def test_builders_are_pure():
    assert one_f_one_b(3, 5) == one_f_one_b(3, 5)
    assert interleaved_1f1b(2, 4, 3) == interleaved_1f1b(2, 4, 3)


def _each_action_once(schedule):
    counts = {}
    for row in schedule.actions:
        for action in row:
            counts[action] = counts.get(action, 0) + 1
    return counts


@settings(max_examples=60, deadline=None)
@given(ranks=st.integers(1, 6), microbatches=st.integers(1, 12))
def test_basic_builders_cover_every_stage_and_microbatch(ranks, microbatches):
    for builder in (naive, gpipe, one_f_one_b):
        schedule = builder(ranks, microbatches)
        counts = _each_action_once(schedule)
        assert set(counts.values()) == {1}
        expected = {(s, k, m) for s in range(ranks) for k in (F, B) for m in range(microbatches)}
        assert set(counts) == expected
        assert schedule.stage_to_rank == tuple(range(ranks))


@settings(max_examples=60, deadline=None)
@given(ranks=st.integers(1, 6), groups=st.integers(1, 4), chunks=st.integers(2, 4))
def test_interleaved_places_chunk_c_of_rank_r_at_stage_c_p_plus_r(ranks, groups, chunks):
    schedule = interleaved_1f1b(ranks, ranks * groups, num_virtual_stages=chunks)
    assert schedule.num_stages == ranks * chunks
    for rank, row in enumerate(schedule.actions):
        assert {a.stage for a in row} == {c * ranks + rank for c in range(chunks)}
        assert len(row) == 2 * chunks * ranks * groups


@settings(max_examples=40, deadline=None)
@given(ranks=st.integers(1, 5), microbatches=st.integers(1, 10), chunks=st.integers(2, 3))
def test_every_registered_schedule_is_valid_and_deadlock_free(ranks, microbatches, chunks):
    for schedule in registered_at(ranks, microbatches, chunks):
        validate(schedule)
        assert find_deadlock(schedule) is None, schedule.describe()


@pytest.mark.parametrize("ranks, microbatches", [(2, 4), (4, 8), (4, 12), (3, 3)])
def test_interleaved_order_matches_torch_pipelining(ranks, microbatches):
    """Cross-check with torch's ScheduleInterleaved1F1B (skipped where torch is not installed)."""
    torch_schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    from types import SimpleNamespace

    def compute_text(order):
        return [str(a) for a in order if a is not None and str(a)[-1].isdigit() and a.computation_type.value in "FB"]

    # (Not Schedule1F1B._get_pipeline_order: in torch 2.13 its last rank starts at microbatch 1.)
    for chunks in (2, 3):
        shape = SimpleNamespace(
            n_local_stages=chunks,
            microbatches_per_round=ranks,
            pp_group_size=ranks,
            _n_microbatches=microbatches,
            number_of_rounds=microbatches // ranks,
        )
        theirs = [
            compute_text(torch_schedules.ScheduleInterleaved1F1B._calculate_single_rank_operations(shape, r))
            for r in range(ranks)
        ]
        assert theirs == interleaved_1f1b(ranks, microbatches, chunks).text_rows()


def test_the_size_contract_fails_when_a_builder_breaks(monkeypatch):
    """The generic property tests build through tests/helpers/sizes.py: a broken builder must fail them, not be
    skipped as 'not built for these sizes'."""
    import dataclasses

    import pipesim.schedules as registry
    from tests.helpers import sizes

    real = registry._registry()

    def broken(num_ranks: int, num_microbatches: int, **options: object):
        raise ValueError("deliberately broken")

    def patched() -> dict:
        return {**real, "zbv": dataclasses.replace(real["zbv"], builder=broken)}

    monkeypatch.setattr(registry, "_registry", patched)
    with pytest.raises(AssertionError, match="zbv must build 2 ranks x 4 microbatches"):
        list(sizes.registered_at(2, 4))
    with pytest.raises(AssertionError, match="zbv must build"):
        sizes.built_schedules("zbv")
    # and the generic property test itself fails
    with pytest.raises(AssertionError):
        test_every_registered_schedule_is_valid_and_deadlock_free()
    # a family registered without a stated size contract fails as well
    monkeypatch.setattr(registry, "_registry", lambda: {**real, "new": dataclasses.replace(real["1f1b"], name="new")})
    with pytest.raises(AssertionError, match="does not say which sizes"):
        list(sizes.registered_at(2, 4))
