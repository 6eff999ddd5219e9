"""pipesim_executor.rank.calibrate.summarise on records built by hand: durations, dispatch gaps net of receive waits,
tails."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from pipesim_executor.rank.calibrate import summarise  # noqa: E402
from pipesim_executor.rank.profile import in_situ  # noqa: E402


def record(offset: float) -> dict:
    # step starts at 0; 0F0 after a 0.1 ms gap; 0F1 after 0.2 ms of which 0.15 ms blocked in a receive;
    # 0B1 after 0.1 ms; then 1.5 ms of sends, loss and optimizer until the step's end.
    return {
        "start": offset,
        "end": offset + 7.5,
        "spans": [
            ["0F0", offset + 0.1, offset + 1.1],
            ["0F1", offset + 1.3, offset + 2.3],
            ["0B1", offset + 2.4, offset + 6.0],
        ],
        "comm": [["recv", 1, "1B1", offset + 1.15, offset + 1.3], ["send", 1, "0F1", offset + 6.0, offset + 6.4]],
    }


def test_summarise_takes_medians_and_nets_out_receive_waits():
    """The dispatch gap is each kind's median weighted by its count: catches the median over every action, which a
    split backward's W (a 15 us gap) sets for the F and I gaps too."""
    summary = summarise([record(0.0), record(100.0), record(200.0)])
    assert summary["durations_ms"]["0"]["F"] == pytest.approx(1.0)
    assert summary["durations_ms"]["0"]["B"] == pytest.approx(3.6)
    # gaps: F 0.1 and 0.2 - 0.15 = 0.05 (median 0.075 over the steps), B 0.1; weighted by count: (2 x 0.075 + 0.1) / 3
    assert summary["dispatch_by_kind_ms"] == {"F": pytest.approx(0.075), "B": pytest.approx(0.1)}
    assert summary["dispatch_ms"] == pytest.approx((2 * 0.075 + 0.1) / 3)
    assert summary["tail_ms"] == pytest.approx(1.5)
    assert summary["steps"] == 3


def test_in_situ_replaces_the_kinds_the_steps_ran():
    isolated = {"f": 1.0, "b": 2.0, "f_split": 1.1, "i": 1.2, "w": 0.9}
    assert in_situ(isolated, {"F": 1.5, "B": 2.5}, split=False) == {**isolated, "f": 1.5, "b": 2.5}
    assert in_situ(isolated, {"F": 1.5, "I": 1.4, "W": 1.0}, split=True) == {
        **isolated,
        "f_split": 1.5,
        "i": 1.4,
        "w": 1.0,
    }
    assert in_situ(isolated, None, split=True) == isolated


def test_full_speed_durations_take_out_the_sharing():
    from pipesim_executor.rank.calibrate import full_speed_durations

    # two ranks on one core: 0F0 alone [0, 1]; 0F1 and 1F0 together [1, 3]: each did 1 ms of work
    spans = [[["0F0", 0.0, 1.0], ["0F1", 1.0, 3.0]], [["1F0", 1.0, 3.0]]]
    assert full_speed_durations(spans, slots=1) == {"0": {"F": pytest.approx(1.0)}, "1": {"F": pytest.approx(1.0)}}
    assert full_speed_durations(spans, slots=2) == {"0": {"F": pytest.approx(1.5)}, "1": {"F": pytest.approx(2.0)}}


def _skewed(offset: float, slow: float) -> dict:
    """One step of two forwards, the second `slow` ms (a late wake-up), with nothing between them."""
    return {
        "start": offset,
        "end": offset + 1.0 + slow,
        "spans": [["0F0", offset, offset + 1.0], ["0F1", offset + 1.0, offset + 1.0 + slow]],
        "comm": [],
    }


def test_summarise_keeps_the_mean_a_step_pays_beside_the_median():
    """Issue 29, third pass: a step sums its actions, so a right-skewed action costs it its mean. Catches a profile
    that prices actions at their medians: here the steps take 3.0 ms on average, their medians say 2.0."""
    from pipesim_executor.rank.calibrate import mean_ci, step_cis

    records = [_skewed(0.0, 1.0), _skewed(10.0, 1.0), _skewed(20.0, 1.0), _skewed(30.0, 5.0)]
    summary = summarise(records)
    assert summary["durations_ms"]["0"]["F"] == pytest.approx(1.0)
    assert summary["means_ms"]["0"]["F"] == pytest.approx(1.5)
    assert sum(r["end"] - r["start"] for r in records) / len(records) == pytest.approx(
        2 * summary["means_ms"]["0"]["F"]
    )
    # the CI is the mean's over the steps' own means (1, 1, 1, 3): a slow step widens it, as it moves the mean
    assert step_cis(records)["0"]["F"] == pytest.approx(mean_ci([1.0, 1.0, 1.0, 3.0]))
    assert mean_ci([1.0, 1.0, 1.0, 3.0]) > mean_ci([1.0, 1.0, 1.0, 1.1]) > 0.0
    assert mean_ci([1.0, 2.0]) == float("inf")


def test_the_in_situ_factor_is_the_actions_mean_over_the_profiles_price():
    from types import SimpleNamespace

    from pipesim_executor.rank.unit_fit import in_situ_scales
    from tests.test_unit_profile import profile

    p = profile()
    key = (2, "1f1b", 1, False, False)
    priced = p.stage_kinds(2, 0, 3)["forward_ms"], p.stage_kinds(2, 3, len(p.units))["forward_ms"]
    everyone = [
        {"calibration": {key: {"split_points": [3], "durations_ms": {"0": {"F": priced[0]}},
                               "means_ms": {"0": {"F": 1.2 * priced[0]}}}}},
        {"calibration": {key: {"split_points": [3], "durations_ms": {"1": {"F": priced[1]}},
                               "means_ms": {"1": {"F": 1.2 * priced[1]}}}}},
    ]  # fmt: skip
    scales, _ = in_situ_scales(p, everyone, SimpleNamespace(world_size=2, num_ranks=2), slots=2)
    assert scales["plain"]["forward_ms"].at(2) == pytest.approx(1.2)
    for e in everyone:  # a profile's steps from before the mean was kept: their medians, as before
        del e["calibration"][key]["means_ms"]
    scales, _ = in_situ_scales(p, everyone, SimpleNamespace(world_size=2, num_ranks=2), slots=2)
    assert scales["plain"]["forward_ms"].at(2) == pytest.approx(1.0)


def test_summarise_measures_the_lead_before_a_first_action_that_waits_for_nothing():
    """Issue 29, fourth pass: the time from the step's start to the first action, which the old tail (after the last
    action) and the dispatch gap (a median over every action's gap) both missed."""
    summary = summarise([record(0.0), record(100.0), record(200.0)])
    assert summary["lead_ms"] == pytest.approx(0.1)
    waiting = record(0.0)
    waiting["comm"].append(["recv", 1, "1F0", 0.02, 0.09])  # the first action waited for a receive: no lead
    assert summarise([waiting])["lead_ms"] == 0.0


def test_priced_tails_add_the_steps_lead_beyond_the_dispatch_gap_to_every_rank():
    from pipesim_executor.rank.calibrate import priced_tails

    first = {"tail_ms": 0.5, "dispatch_ms": 0.05, "lead_ms": 0.3}  # starts the pipeline
    waiting = {"tail_ms": 0.7, "dispatch_ms": 0.05, "lead_ms": 0.0}  # waits for the first's output
    assert priced_tails([first, waiting]) == [pytest.approx(0.75), pytest.approx(0.95)]
    # a summary from before the lead was measured prices none; a lead inside the dispatch gap adds nothing
    assert priced_tails([{"tail_ms": 0.5, "dispatch_ms": 0.05}]) == [0.5]
    assert priced_tails([{**first, "lead_ms": 0.04}]) == [0.5]
