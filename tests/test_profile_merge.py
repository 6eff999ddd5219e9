"""Issue 29: a profile of several launches (`executor profile --launches K`) merged into one, its drift widened by
how far the launches' levels differ; the in-situ steps at the plans' own shape; verify-plan's runs of short steps
measured for long enough."""

from __future__ import annotations

import copy
import math

import pytest

from pipesim_executor.host.profile_merge import launch_levels, launch_spread, merge_profiles
from pipesim_executor.host.unit_profile import ProfileConfig
from pipesim_executor.host.verify import steps_for, verify_plan
from pipesim_executor.rank.unit_profile import MAX_IN_SITU_MICROBATCHES, in_situ_microbatches


def launch(scale: float = 1.0, drift: float = 0.02, stages_order=(0, 1)) -> dict:
    """A cost-file document of one launch, every time x `scale`."""
    stages = [
        {"microbatch_size": 2, "start": 0, "stop": 3, "forward_ms": 1.0 * scale, "backward_ms": 2.0 * scale},
        {"microbatch_size": 2, "start": 3, "stop": 6, "forward_ms": 3.0 * scale, "backward_ms": 5.0 * scale},
    ]
    return {
        "format": "pipesim.cost",
        "version": 2,
        "microbatch_sizes": [2, 4],
        "units": [{"name": "Linear", "param_bytes": 400, "forward_ms": [0.5 * scale, 0.9 * scale]}] * 2,
        "action_ms": {"start": {"forward_ms": -0.02 * scale}},
        "core_slots": 2,
        "stages": [stages[i] for i in stages_order],
        "in_situ": {
            "plain": {
                "dispatch_ms": 0.1 * scale,
                "stages": [
                    {"microbatch_size": 2, "start": 0, "stop": 3, "factors": {"forward_ms": 1.1, "backward_ms": 1.2}},
                    {"microbatch_size": 2, "start": 3, "stop": 6, "factors": {"forward_ms": 1.0}},
                ],
            }
        },
        "spread": {"repeats": 20, "drift": drift},
        "provenance": {"measured_at": f"t{scale}", "load_1min": 1.0},
    }


def test_one_launch_is_the_profile_itself_and_none_is_refused():
    only = launch()
    assert merge_profiles([only]) is only
    with pytest.raises(ValueError, match="no profile launches"):
        merge_profiles([])


def test_two_launches_merge_to_the_geometric_mean_and_keep_counts_and_the_first_provenance():
    slow, fast = launch(1.21), launch(1.0, stages_order=(1, 0))  # the second lists its stages the other way round
    merged = merge_profiles([slow, fast])
    assert merged["stages"][0]["forward_ms"] == pytest.approx(1.1)  # sqrt(1.21 x 1.0): matched by its identity
    assert merged["stages"][1]["backward_ms"] == pytest.approx(5.5)
    assert merged["units"][1]["forward_ms"] == pytest.approx([0.55, 0.99])  # lists of numbers, position by position
    assert merged["action_ms"]["start"]["forward_ms"] == pytest.approx(-0.02 * 1.105)  # not all positive: the mean
    assert merged["core_slots"] == 2 and merged["units"][0]["param_bytes"] == 400
    assert merged["spread"]["repeats"] == 40  # a price rests on both launches' repetitions
    assert merged["in_situ"]["plain"]["stages"][0]["factors"]["backward_ms"] == pytest.approx(1.2)
    assert merged["provenance"]["measured_at"] == "t1.21" and merged["provenance"]["launches"]["count"] == 2
    assert slow["stages"][0]["forward_ms"] == pytest.approx(1.21)  # the launches' own documents are left alone


def test_a_record_only_some_launches_have_keeps_the_first_launchs_value():
    first, second = launch(1.0), launch(2.0)
    second["stages"] = second["stages"][:1]  # the second launch cut the model elsewhere
    merged = merge_profiles([first, second])
    assert merged["stages"][0]["forward_ms"] == pytest.approx(math.sqrt(2))
    assert merged["stages"][1]["forward_ms"] == 3.0


def test_the_launches_levels_and_the_drift_they_add():
    docs = [launch(1.1), launch(1.0), launch(1.0)]
    levels = launch_levels(docs)
    mean = math.log(1.1) / 3
    assert levels == pytest.approx([math.log(1.1) - mean, -mean, -mean])
    between = launch_spread(levels)
    third = math.log(1.1) / 3  # the sample SD of (2/3, -1/3, -1/3) x log 1.1
    assert between == pytest.approx(math.sqrt((4 * third**2 + 2 * third**2) / 2))
    merged = merge_profiles(docs)
    assert merged["spread"]["drift"] == pytest.approx(math.sqrt(0.02**2 + between**2 * (1 + 1 / 3)))
    assert merged["provenance"]["launches"]["spread"] == pytest.approx(between)
    same = merge_profiles([launch(), launch(drift=0.04)])  # launches at one level: the drift inside them only
    assert same["spread"]["drift"] == pytest.approx(0.03)


def test_a_merged_price_is_known_sqrt_k_times_better():
    docs = [launch(1.0), launch(1.2), launch(1.1)]
    for doc in docs:
        doc["spread"]["round_se"] = {"forward_ms": [0.03, 0.06]}
        doc["in_situ"]["plain"]["ci"] = {"forward_ms": [0.04, 0.05]}
    merged = merge_profiles(docs)
    assert merged["spread"]["round_se"]["forward_ms"] == pytest.approx([0.03 / math.sqrt(3), 0.06 / math.sqrt(3)])
    assert merged["in_situ"]["plain"]["ci"]["forward_ms"] == pytest.approx([0.04 / math.sqrt(3), 0.05 / math.sqrt(3)])
    assert merged["spread"]["repeats"] == 60


def test_levels_follow_the_in_situ_times_not_the_isolated_ones():
    """A launch whose isolated timings ran slow but whose factors read lower implies the same in-situ times."""
    slow_isolated = launch(1.5)
    for record in slow_isolated["in_situ"]["plain"]["stages"]:
        record["factors"] = {k: v / 1.5 for k, v in record["factors"].items()}
    assert launch_levels([slow_isolated, launch(1.0)]) == pytest.approx([0.0, 0.0])


def test_a_launch_count_out_of_range_or_of_the_wrong_type_is_refused():
    for bad in (0, 11, True, 2.5):
        with pytest.raises(ValueError, match="launches must be a whole number from 1 to 10"):
            ProfileConfig(launches=bad)
    for bad in (0, -4, 2.5):
        with pytest.raises(ValueError, match="global batch"):
            ProfileConfig(global_batch=bad)
    assert ProfileConfig(launches=3, global_batch=16).launches == 3


def test_the_in_situ_steps_run_the_plans_own_microbatches():
    assert in_situ_microbatches(None, 4) is None  # no global batch: the profile run's own count
    assert in_situ_microbatches(16, 4) == 4 and in_situ_microbatches(16, 2) == 8 and in_situ_microbatches(16, 16) == 1
    assert in_situ_microbatches(2, 4) is None  # a size beyond the batch: no plan runs it
    assert in_situ_microbatches(4096, 1) == MAX_IN_SITU_MICROBATCHES  # bounded: a step of 4,096 takes minutes


def test_a_run_of_short_steps_measures_for_at_least_min_seconds():
    assert steps_for(10, 1.0, 7.0) == 143  # ceil(1000 / 7)
    assert steps_for(30, 1.0, 100.0) == 30  # long steps: --steps already fills the second
    assert steps_for(10, 0.0, 7.0) == 10
    assert steps_for(10, 1.0, float("nan")) == 10 and steps_for(10, 1.0, 0.0) == 10  # no prediction to go by
    assert steps_for(10, 600.0, 1e-6) == 200  # a prediction for another device: at most 20 x --steps
    assert steps_for(1000, 600.0, 1e-6) == 10_000  # ... and what a round's bootstrap takes


@pytest.mark.parametrize("bad", [-1.0, float("nan"), 601.0])
def test_a_bad_min_seconds_is_refused_before_anything_runs(tmp_path, bad):
    plan = tmp_path / "plan.json"
    plan.write_text("{}")
    with pytest.raises(ValueError, match="min-seconds"):
        verify_plan(plan, 1, runs_root=tmp_path / "runs", min_seconds=bad)
    assert not (tmp_path / "runs").exists()


def test_merging_leaves_a_document_a_cost_file_reader_would_see_unchanged_in_shape():
    docs = [launch(1.0), launch(1.3)]
    merged = merge_profiles(copy.deepcopy(docs))
    assert set(merged) == set(docs[0])
    assert [s["start"] for s in merged["stages"]] == [0, 3]
