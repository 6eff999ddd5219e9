"""Issue 29, third pass: a measured step less its prediction, split into actions per kind, gaps and tail
(`pipesim.analysis.decompose`), and a message's in-run hop (`pipesim.analysis.hops`), which the unit profile now
prices into its link (`pipesim_executor.rank.unit_fit.in_run_link`). Pure: no process is started."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.analysis.decompose import decompose
from pipesim.analysis.hops import hop_samples, timeline_steps
from pipesim.cost.links import LinkCost
from pipesim.cost.model import CostModel, RankRuntime
from pipesim.ir import Action
from pipesim.records import CommSpan, Span, Timeline
from pipesim.schedules import build_schedule
from pipesim.sim.steps import simulate_step
from pipesim_executor.rank.unit_fit import in_run_link
from tests.test_unit_profile import profile

# rank 0 runs 0F0 (0-10) and 0B0 (30.3-31); rank 1 waits for 0F0 from 9.0 and starts 1F0 at 10.2, then 1B0
STEPS = [
    [{"spans": [["0F0", 0.0, 10.0], ["0B0", 30.3, 31.0]], "comm": [["recv", 1, "1B0", 25.0, 30.2]]}],
    [{"spans": [["1F0", 10.2, 20.0], ["1B0", 20.1, 30.0]], "comm": [["recv", 0, "0F0", 9.0, 10.1]]}],
]


def test_a_hop_runs_from_the_producers_end_to_the_waiting_consumers_start():
    assert sorted(hop_samples(STEPS)[0]) == [pytest.approx(0.2), pytest.approx(0.3)]
    late = [STEPS[0], [{"spans": STEPS[1][0]["spans"], "comm": [["recv", 0, "0F0", 10.05, 10.1]]}]]
    assert hop_samples(late) == {0: [pytest.approx(0.3)]}  # posted after 0F0 ended: says nothing of the hop


def test_a_measured_timeline_gives_the_same_hops_as_its_records():
    spans = tuple(
        Span(rank, Action.parse(text), start, end)
        for rank, steps in enumerate(STEPS)
        for text, start, end in steps[0]["spans"]
    )
    comm = tuple(
        CommSpan(rank, kind, peer, Action.parse(text), start, end)
        for rank, steps in enumerate(STEPS)
        for kind, peer, text, start, end in steps[0]["comm"]
    )
    timeline = Timeline(2, spans, "measured", "1f1b", comm)
    assert hop_samples(timeline_steps(timeline)) == hop_samples(STEPS)


def _in_situ(hop: float, size: int = 2, steps: int = 1, late: float = 0.0) -> list[dict]:
    """Two ranks' in-situ measurements of `steps` steps cut after unit 3, whose messages each took `hop` ms (the
    forward's of the last step `late` ms more: a late wake-up)."""
    key = (size, "1f1b", 1, False, False)
    timing: list[list[dict]] = [[], []]
    for step in range(steps):
        f = hop + (late if step == steps - 1 else 0.0)
        timing[0].append({"spans": [["0F0", 0.0, 1.0], ["0B0", 3.0 + hop, 4.0]],
                          "comm": [["recv", 1, "1B0", 2.5, 3.0 + hop]]})  # fmt: skip
        timing[1].append({"spans": [["1F0", 1.0 + f, 2.0 + f], ["1B0", 2.0 + f, 3.0]],
                          "comm": [["recv", 0, "0F0", 0.5, 1.0 + f]]})  # fmt: skip
    return [{"calibration": {key: {"split_points": [3], "timing": timing[rank]}}} for rank in range(2)]


def test_the_profiles_link_carries_the_in_run_hop_beyond_its_ping_pong_price():
    p = profile()  # its link: 0.05 ms + bytes / 2 GB/s; unit 2's output at size 2: 512 bytes
    price = p.link.transfer_ms(p.units[2].curves["output_bytes"].at(2))
    link, figures = in_run_link(p, _in_situ(price + 0.2))
    assert link.latency_ms == pytest.approx(0.25) and link.bandwidth_gbps == p.link.bandwidth_gbps
    assert figures["samples"] == 2 and figures["excess_ms"] == pytest.approx(0.2)
    # one late wake-up in three steps moves the mean by almost a millisecond, the price (the median) not at all
    late_link, late = in_run_link(p, _in_situ(price + 0.2, steps=3, late=5.0))
    assert late["samples"] == 6 and late["mean_excess_ms"] == pytest.approx(0.2 + 5.0 / 6)
    assert late["excess_ms"] == pytest.approx(0.2) and late_link.latency_ms == pytest.approx(link.latency_ms)
    faster, _ = in_run_link(p, _in_situ(0.01))  # a hop below the ping-pong's price never lowers it
    assert faster == p.link
    bare = [{"calibration": {k: {"split_points": [3]} for k in e["calibration"]}} for e in _in_situ(0.5)]
    assert in_run_link(p, bare)[0] == p.link  # a profile whose steps kept no timing: the ping-pong alone


def _measured(schedule, cost: CostModel, steps: int = 3) -> tuple[Timeline, list[float]]:
    """`cost`'s simulated step as if measured, `steps` times."""
    step = simulate_step(schedule, cost)
    spans = tuple(s._replace(step=i) for i in range(steps) for s in step.timeline.spans)
    return Timeline(schedule.num_ranks, spans, "measured", schedule.name), [step.step_ms] * steps


def test_a_step_that_ran_as_predicted_decomposes_into_nothing():
    schedule = build_schedule("1f1b", 2, 4)
    cost = replace(CostModel.uniform(1.0, 2.0, comm_ms=0.1), runtime=RankRuntime((0.3,), (0.05,)))
    measured, times = _measured(schedule, cost)
    parts = decompose(schedule, cost, measured, times)
    assert parts["difference_ms"] == pytest.approx(0.0, abs=1e-9)
    assert all(v == pytest.approx(0.0, abs=1e-9) for v in parts["actions_ms"].values())
    assert parts["gaps_ms"] == pytest.approx(0.0, abs=1e-9) and parts["tail_ms"] == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize(
    "change, share",
    [
        (lambda c: CostModel.uniform(1.5, 2.0, comm_ms=0.1), "F"),
        (lambda c: CostModel.uniform(1.0, 3.0, comm_ms=0.1), "B"),
        (lambda c: replace(c, links=(LinkCost(0.6),)), "gaps"),
        (lambda c: replace(c, runtime=RankRuntime((1.3,), (0.05,))), "tail"),
    ],
)
def test_each_thing_the_run_paid_beyond_its_price_lands_in_its_own_share(change, share):
    schedule = build_schedule("1f1b", 2, 4)
    runtime = RankRuntime((0.3,), (0.05,))
    cost = replace(CostModel.uniform(1.0, 2.0, comm_ms=0.1), runtime=runtime)
    truth = change(cost)
    truth = replace(truth, runtime=truth.runtime if share == "tail" else runtime)
    measured, times = _measured(schedule, truth)
    parts = decompose(schedule, cost, measured, times)
    shares = {**parts["actions_ms"], "gaps": parts["gaps_ms"], "tail": parts["tail_ms"]}
    assert parts["difference_ms"] > 0.5
    assert shares[share] == pytest.approx(parts["difference_ms"])
    assert all(v == pytest.approx(0.0, abs=1e-9) for k, v in shares.items() if k != share)


def test_a_split_backward_is_decomposed_per_kind():
    schedule = build_schedule("zb-h1", 2, 4)
    cost = replace(CostModel.uniform(1.0, 2.0, 1.0, comm_ms=0.1), runtime=RankRuntime((0.3,), (0.05,)))
    measured_cost = replace(CostModel.uniform(1.0, 2.5, 1.5, comm_ms=0.1), runtime=cost.runtime)
    measured, times = _measured(schedule, measured_cost)
    parts = decompose(schedule, cost, measured, times)
    assert parts["actions_ms"]["I"] == pytest.approx(0.0, abs=1e-9)  # I = B - W stayed 1.0
    assert parts["actions_ms"]["W"] == pytest.approx(parts["difference_ms"]) and parts["difference_ms"] > 0


def test_no_measured_step_is_refused_in_one_line():
    schedule = build_schedule("1f1b", 2, 2)
    with pytest.raises(ValueError, match="measured step"):
        decompose(schedule, CostModel.uniform(), Timeline(2, (), "measured"), [])


def test_the_profiles_summary_says_what_the_hop_added_to_the_link():
    from pipesim_executor.host.unit_profile import _hop_note

    assert _hop_note(profile()) == ""  # a profile from before the hop was measured
    p = profile(provenance={"in_run_hop": {"excess_ms": 0.042, "samples": 30, "ping_pong_latency_ms": 0.05}})
    assert "+0.042 ms" in _hop_note(p) and "hop" in _hop_note(p)


def test_a_step_of_skewed_actions_pays_their_mean_which_the_replay_of_means_gives():
    """One rank, four forwards and backwards per step, one forward in four 3 ms where the others take 1 ms: every step
    is the same, so its own replay is the step; the stages' medians miss the slow forward, their means do not."""
    schedule = build_schedule("gpipe", 1, 4)
    cost = CostModel.uniform(1.0, 2.0)
    spans, t = [], 0.0
    for step in range(3):
        t = 0.0
        for action in schedule.actions[0]:
            length = (
                3.0
                if (action.kind.value == "F" and action.microbatch == 0)
                else (1.0 if action.kind.value == "F" else 2.0)
            )
            spans.append(Span(0, action, t, t + length, step))
            t += length
    measured = Timeline(1, tuple(spans), "measured", "gpipe")
    parts = decompose(schedule, cost, measured, [t] * 3)
    replays = parts["replay_makespan_ms"]
    assert replays["own"] == pytest.approx(t) == pytest.approx(14.0)
    assert replays["means"] == pytest.approx(t) and replays["medians"] == pytest.approx(12.0)
    assert parts["measured_jitter_ms"] == pytest.approx(2.0)  # what pricing at the medians leaves out
