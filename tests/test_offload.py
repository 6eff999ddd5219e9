"""Activation offload: OFFLOAD and RELOAD on a rank's copy engine, beside its compute (pipesim.sim.offload).

Closed forms and a hand-computed timeline; the memory the copies free; the order as data (text, CSV, validation).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from pipesim.cost.convert import cost_from_times
from pipesim.cost.links import LinkCost
from pipesim.io.torch_csv import schedule_from_csv, schedule_to_csv
from pipesim.ir import Action, CommAction, CommKind, F, Resource, parse_entry, resource_of
from pipesim.schedules import build_schedule
from pipesim.semantics.lower import memory_moves
from pipesim.semantics.validate import ScheduleError, validate
from pipesim.sim.metrics import compute_metrics
from pipesim.sim.offload import with_offload
from pipesim.sim.simulate import simulate

GB = 1e9


def _cost(copy_latency_ms: float = 0.0, host_gbps: float = float("inf"), stash: float = GB):
    cost = cost_from_times([1.0], [2.0], activation_bytes=[stash])
    return dataclasses.replace(cost, host_link=LinkCost(copy_latency_ms, host_gbps))


def test_the_text_form_and_resource_of_a_memory_move() -> None:
    assert parse_entry("2OFFLOAD5") == CommAction(2, CommKind.OFFLOAD, 5)
    assert str(CommAction(1, CommKind.RELOAD, 3)) == "1RELOAD3"
    assert resource_of(CommAction(0, CommKind.OFFLOAD, 0)) is Resource.COPY
    assert resource_of(CommAction(0, CommKind.SEND_F, 0)) is Resource.LINK
    assert resource_of(Action(0, F, 0)) is Resource.COMPUTE


def test_a_hand_computed_timeline_on_one_rank() -> None:
    """GPipe on one rank, F=1, B=2, each copy 3 ms: the copy engine, not compute, sets the step.

    Order: F0 OFF0 F1 OFF1 F2 OFF2 RELOAD0 F3 OFF3 RELOAD1 B0 RELOAD2 B1 RELOAD3 B2 B3. The copy engine runs in
    issue order: OFF0 1-4 (issued at F0's end), OFF1 4-7, OFF2 7-10, RELOAD0 10-13 (issued at F2's end, 3),
    OFF3 13-16, RELOAD1 16-19, RELOAD2 19-22 (issued at B0's end, 15), RELOAD3 22-25 (issued at B1's end, 21).
    Each backward waits for its RELOAD: B0 13-15, B1 19-21, B2 22-24, B3 25-27."""
    schedule = with_offload(build_schedule("gpipe", 1, 4), "full")
    assert [str(e) for e in schedule.order[0]] == (
        "0F0 0OFFLOAD0 0F1 0OFFLOAD1 0F2 0OFFLOAD2 0RELOAD0 0F3 0OFFLOAD3 0RELOAD1 0B0 0RELOAD2 0B1 0RELOAD3 0B2 0B3"
    ).split()
    cost = _cost(copy_latency_ms=3.0, stash=0.0)
    timeline = simulate(schedule, cost)
    ends = {str(s.action): s.end for s in timeline.spans}
    assert ends == {"0F0": 1, "0F1": 2, "0F2": 3, "0F3": 4, "0B0": 15, "0B1": 21, "0B2": 24, "0B3": 27}
    copies = {str(c.action): (c.start, c.end) for c in timeline.comm}
    assert copies == {
        "0OFFLOAD0": (1, 4),
        "0OFFLOAD1": (4, 7),
        "0OFFLOAD2": (7, 10),
        "0RELOAD0": (10, 13),
        "0OFFLOAD3": (13, 16),
        "0RELOAD1": (16, 19),
        "0RELOAD2": (19, 22),
        "0RELOAD3": (22, 25),
    }
    metrics = compute_metrics(timeline, cost)
    assert metrics.makespan == 27.0
    assert metrics.ranks[0].copy_busy_ms == 24.0


@pytest.mark.parametrize("name", ["1f1b", "interleaved-1f1b", "gpipe"])
def test_full_offload_hidden_by_a_fast_host_link_keeps_the_step_and_halves_device_memory(name: str) -> None:
    """Each copy (0.5 ms) shorter than any action: the step does not move by 1%, the fullest rank's device peak
    halves at least, and what left the device is on the host."""
    schedule = build_schedule(name, 8, 16)
    cost = _cost(host_gbps=2000.0)  # 1 GB in 0.5 ms
    base, offloaded = simulate(schedule, cost), simulate(with_offload(schedule, "full"), cost)
    before, after = compute_metrics(base, cost), compute_metrics(offloaded, cost)
    assert after.makespan <= before.makespan * 1.01
    assert max(r.peak_activation_bytes for r in after.ranks) <= 0.5 * max(r.peak_activation_bytes for r in before.ranks)
    assert after.ranks[0].peak_host_bytes > 0
    assert after.ranks[0].copy_busy_ms == pytest.approx(0.5 * len([c for c in offloaded.comm if c.rank == 0]))


def test_zero_bubble_keeps_what_only_w_needs_on_the_device() -> None:
    """The RELOAD brings the whole stash back before I; the part only W needs then stays until W, so a split
    backward's later ranks, where W waits longest, keep their peak (ZB-H1's rank 6: 5 microbatches' worth)."""
    schedule = build_schedule("zb-h1", 8, 16)
    cost = _cost(host_gbps=2000.0)
    before = compute_metrics(simulate(schedule, cost), cost).ranks
    after = compute_metrics(simulate(with_offload(schedule, "full"), cost), cost).ranks
    assert after[0].peak_activation_bytes <= 0.25 * before[0].peak_activation_bytes
    assert after[6].peak_activation_bytes == before[6].peak_activation_bytes == 5 * GB


def test_a_slow_host_link_costs_what_the_copy_engine_shows() -> None:
    """Copies longer than compute: the step grows, and it is at least the copy engine's busy time on the
    busiest rank plus the forward before its first copy; selective offload then keeps only what it can hide."""
    schedule = build_schedule("1f1b", 4, 8)
    cost = _cost(host_gbps=200.0)  # 1 GB in 5 ms, F takes 1 ms
    base = compute_metrics(simulate(schedule, cost), cost)
    full = compute_metrics(simulate(with_offload(schedule, "full"), cost), cost)
    busiest = max(r.copy_busy_ms for r in full.ranks)
    assert full.makespan >= busiest + 1.0 > base.makespan
    selective = compute_metrics(simulate(with_offload(schedule, "selective", cost), cost), cost)
    assert selective.makespan <= base.makespan * 1.01


def test_selective_offloads_the_long_waits_when_the_link_allows() -> None:
    schedule = build_schedule("1f1b", 8, 16)
    cost = _cost(host_gbps=2000.0)
    selective = with_offload(schedule, "selective", cost)
    moved = {c.entry for row in memory_moves(selective) for c in row}
    assert CommAction(0, CommKind.OFFLOAD, 0) in moved  # rank 0 waits longest
    assert not any(c.entry.stage == 7 for row in memory_moves(selective) for c in row)  # the last stage never waits
    with pytest.raises(ValueError, match="needs a cost model"):
        with_offload(schedule, "selective")
    with pytest.raises(ValueError, match="valid: none, selective, full"):
        with_offload(schedule, "half")


def test_the_order_is_data_it_round_trips_through_torchs_csv() -> None:
    schedule = with_offload(build_schedule("1f1b", 4, 8), "full")
    back = schedule_from_csv(schedule_to_csv(schedule, "auto"))
    assert back.order == schedule.order
    cost = _cost(copy_latency_ms=0.4)
    assert simulate(back, cost).comm == simulate(schedule, cost).comm


def test_torchs_csv_keeps_the_memory_moves_or_refuses_to_drop_them() -> None:
    plain = with_offload(build_schedule("1f1b", 4, 8), "full")
    with pytest.raises(ValueError, match="would be lost: write compute_only"):
        schedule_to_csv(plain, "compute_comms")  # torch's lowering knows transfers, not OFFLOAD or RELOAD
    stated = schedule_from_csv(schedule_to_csv(build_schedule("1f1b", 4, 8), "compute_comms"))
    moved = with_offload(stated, "full")  # transfers stated, memory moves placed among them
    compute = schedule_from_csv(schedule_to_csv(moved, "compute_only"))
    assert compute.order == plain.order  # the transfers went, the moves stayed where they were
    assert schedule_from_csv(schedule_to_csv(moved, "compute_comms")).order == moved.order


def _order_with(row0: list[str]):
    base = build_schedule("gpipe", 1, 2)
    return dataclasses.replace(base, order=(tuple(parse_entry(t) for t in row0),))


@pytest.mark.parametrize(
    ("row", "rule"),
    [
        ("0OFFLOAD0 0F0 0F1 0RELOAD0 0B0 0B1", "OFFLOAD too early"),
        ("0F0 0F1 0RELOAD0 0B0 0B1", "RELOAD without OFFLOAD"),
        ("0F0 0OFFLOAD0 0F1 0B0 0B1 0RELOAD0", "RELOAD too late"),
        ("0F0 0OFFLOAD0 0F1 0B0 0B1", "OFFLOAD without RELOAD"),
    ],
)
def test_a_misplaced_memory_move_is_refused_by_name(row: str, rule: str) -> None:
    with pytest.raises(ScheduleError, match=rule):
        validate(_order_with(row.split()))


@pytest.mark.parametrize(
    ("row", "rule"),
    [
        ("0OFFLOAD0 0F0 0F1 0RELOAD0 0B0 0B1", "memory move too early"),
        ("0F0 0OFFLOAD0 0F1 0RELOAD0 0B0 0B1", None),
    ],
)
def test_the_lowering_names_a_memory_move_it_cannot_place(row: str, rule: str | None) -> None:
    from pipesim.semantics.dag import dependencies

    order = _order_with(row.split())
    if rule is None:  # a sound order: each copy issued by the compute action before it, RELOAD before its backward
        copies = dependencies(order).copies
        assert copies.issued == [(4,), (5,), None, None] and copies.needs == {4: 0, 5: 4}
        assert dependencies(order).deps[2][-1] == 5  # 0B0 waits for its RELOAD
        return
    with pytest.raises(ScheduleError, match=rule):
        dependencies(order)


def test_memory_moves_beside_collectives_lower_as_moves_alone_do() -> None:
    """An order whose CommActions are not all memory moves takes the lowering's full path (an UNSHARD before the
    first forward, a REDUCE_GRAD after the last backward): its copies are those of the same moves alone."""
    from pipesim.semantics.dag import dependencies

    alone = _order_with("0F0 0OFFLOAD0 0F1 0RELOAD0 0B0 0B1".split())
    beside = _order_with("0UNSHARD 0F0 0OFFLOAD0 0F1 0RELOAD0 0B0 0B1 0REDUCE_GRAD".split())
    lowered, plain = dependencies(beside), dependencies(alone)
    assert lowered.collectives != plain.collectives and any(lowered.collectives[1])
    assert (lowered.copies, lowered.deps) == (plain.copies, plain.deps)


def test_simulate_json_gives_the_per_rank_resource_fields(tmp_path) -> None:
    out = tmp_path / "t.json"
    command = [sys.executable, "-m", "pipesim", "simulate", "--schedule", "1f1b", "--ranks", "4"]
    command += ["--microbatches", "8", "--offload", "full", "--host-latency", "0.5", "--comm", "0.1"]
    subprocess.run([*command, "--json", str(out)], check=True, capture_output=True, timeout=120)
    ranks = json.loads(out.read_text())["ranks"]
    assert set(ranks[0]["busy_ms_by_resource"]) == {"compute", "link", "copy"}
    assert ranks[0]["busy_ms_by_resource"]["copy"] == pytest.approx(8.0)  # 16 copies of 0.5 ms
    assert ranks[0]["busy_ms_by_resource"]["link"] == pytest.approx(0.8)  # 8 activations on, no gradient back
    assert ranks[1]["busy_ms_by_resource"]["link"] == pytest.approx(1.6)  # 8 activations on, 8 gradients back
    assert "peak_host_bytes" in ranks[0]


def test_the_memory_chart_draws_device_and_host() -> None:
    from pipesim.charts.memory import memory_figure
    from pipesim.sim.metrics import host_memory_over_time

    cost = _cost(host_gbps=2000.0)
    timeline = simulate(with_offload(build_schedule("1f1b", 4, 8), "full"), cost)
    fig = memory_figure(timeline, cost)
    host = [trace for trace in fig.data if trace.name.endswith("(host)")]
    assert len(host) == 4 and all(trace.line.dash == "dash" for trace in host)
    peaks = [max(v for _, v in points) for points in host_memory_over_time(timeline, cost)]
    assert peaks == [r.peak_host_bytes for r in compute_metrics(timeline, cost).ranks]
    assert "host dashed" in fig.layout.yaxis.title.text
    plain = memory_figure(simulate(build_schedule("1f1b", 4, 8), cost), cost)
    assert not [trace for trace in plain.data if trace.name.endswith("(host)")]


def test_the_dag_draws_each_copy_with_its_memory_edges() -> None:
    from pipesim.charts.dag import dag_figure
    from pipesim.semantics.dag import build_dag, dag_positions

    schedule = with_offload(build_schedule("1f1b", 3, 5), "full")
    cost = _cost(copy_latency_ms=0.3)
    graph = build_dag(schedule, cost)
    offload, reload = CommAction(0, CommKind.OFFLOAD, 0), CommAction(0, CommKind.RELOAD, 0)
    assert graph.edges[Action(0, F, 0), offload]["kind"] == "memory"
    assert graph.edges[offload, reload]["kind"] == "memory"
    assert graph.edges[reload, Action(0, "B", 0)]["kind"] == "memory"
    assert graph.nodes[offload]["duration"] == 0.3
    for timeline in (None, simulate(schedule, cost)):
        positions = dag_positions(schedule, graph, timeline)
        assert positions.xy[offload][1] > positions.xy[Action(0, F, 0)][1]  # below its rank's lane
        names = {trace.name for trace in dag_figure(graph, positions).data}
        assert {"memory move", "offload / reload"} <= names


@pytest.mark.parametrize("name", ["1f1b", "zb-h1", "interleaved-1f1b", "zbv", "dualpipev", "v-half", "seq1f1b"])
@pytest.mark.parametrize("mode", ["full", "selective"])
def test_every_placement_is_sound_checked_afresh(name: str, mode: str) -> None:
    """`with_offload` marks its result sound when its input was: every family's, copied so that the mark is gone,
    passes the validator's full check of where each OFFLOAD and RELOAD stands."""
    schedule = build_schedule(name, 4, 8)
    validate(schedule)
    moved = with_offload(schedule, mode, _cost(host_gbps=2000.0))
    assert any(memory_moves(moved))
    validate(dataclasses.replace(moved))  # a new instance: no mark


def test_sampled_steps_run_the_copies_as_the_engine_does() -> None:
    """Draw 0 of the sampled steps is the deterministic step, copies included (27 ms in the hand-computed case);
    the draws move compute only."""
    from pipesim.sim.jitter import sampled_steps
    from pipesim.sim.spread import Spread

    schedule = with_offload(build_schedule("gpipe", 1, 4), "full")
    cost = _cost(copy_latency_ms=3.0, stash=0.0)
    steps, deterministic = sampled_steps(schedule, cost, Spread.uniform(0.2), samples=50, seed=1)
    assert deterministic == 27.0 and steps[0] == 27.0
    assert steps.min() >= 24.0 - 1e-9  # the copy engine's 8 x 3 ms are never drawn shorter


def test_an_order_whose_compute_actions_differ_from_the_list_is_refused() -> None:
    """The order's compute actions are read at list speed where it holds no overlapped pair: a move, a dropped
    action or one added in the order is still refused, with or without pairs."""
    from pipesim.ir import Overlap

    moved = with_offload(build_schedule("1f1b", 3, 5), "full")
    paired = build_schedule("1f1b-overlap", 3, 5)
    for schedule in (moved, paired):
        order = [list(row) for row in schedule.order]
        rank = 1
        computes = [k for k, e in enumerate(order[rank]) if isinstance(e, (Action, Overlap))]
        for change in ("swap", "drop", "add"):
            row = list(order[rank])
            a, b = computes[0], computes[1]
            if change == "swap":
                row[a], row[b] = row[b], row[a]
            elif change == "drop":
                del row[a]
            else:
                row.append(Action(rank, F, 0))
            rows = [*order[:rank], row, *order[rank + 1 :]]
            with pytest.raises(ValueError, match="compute actions differ"):
                dataclasses.replace(schedule, order=tuple(map(tuple, rows)))
        assert dataclasses.replace(schedule, order=schedule.order).actions == schedule.actions


@pytest.mark.parametrize(("name", "offload"), [("1f1b", "full"), ("interleaved-1f1b", "full"), ("gpipe", "selective")])
def test_peaks_read_off_counts_are_those_of_the_byte_streams(name: str, offload: str, monkeypatch) -> None:
    """Where every event moves one whole stash of one size, the peaks are counted (no byte delta listed); the same
    timeline read through the byte streams gives the same metrics, on a slow host link (copies that queue)."""
    from pipesim.sim import metrics as m

    cost = _cost(copy_latency_ms=0.1, host_gbps=200.0, stash=1e8).for_schedule(build_schedule(name, 4, 12))
    schedule = with_offload(build_schedule(name, 4, 12), offload, cost)
    timeline = simulate(schedule, cost)
    rows, moves = m._rank_rows(timeline), m._moves_by_rank(timeline)
    table, changes = m._change_tables(rows, moves, cost)
    for (actions, starts, ends), moved in zip(rows, moves, strict=True):
        kinds = list(map(m._kind, actions))
        assert m._counted_peaks(kinds, set(kinds), {a[0] for a in actions}, starts, ends, moved, table, changes)
    counted = compute_metrics(timeline, cost)
    monkeypatch.setattr(m, "_counted_peaks", lambda *args: None)
    assert counted == compute_metrics(timeline, cost) and any(r.peak_host_bytes for r in counted.ranks)


@pytest.mark.parametrize("name", ["1f1b", "zb-h1", "interleaved-1f1b", "gpipe"])
@pytest.mark.parametrize("stash", [GB, 1234567.3])
def test_the_peaks_with_moves_are_those_of_the_sorted_events(name: str, stash: float) -> None:
    """Whole times make many events fall at one time (a free as a copy or a forward starts): the metrics' peaks,
    read without sorting event tuples where the byte sums are exact (whole bytes), are the peaks of the events
    sorted frees first; fractional bytes take the sort itself, and give its peaks too."""
    from itertools import accumulate

    from pipesim.sim import metrics as m

    schedule = with_offload(build_schedule(name, 4, 12), "full")
    base = _cost(copy_latency_ms=1.0, stash=stash)
    stages = tuple(dataclasses.replace(stage, weight_grad_bytes=stash / 4) for stage in base.stages)
    cost = dataclasses.replace(base, stages=stages).for_schedule(schedule)
    timeline = simulate(schedule, cost)
    rows, moves = m._rank_rows(timeline), m._moves_by_rank(timeline)
    table, changes = m._change_tables(rows, moves, cost)
    fast = [m._exact_peaks(*row, moved, table, changes) for row, moved in zip(rows, moves, strict=True)]
    assert (None in fast) == (stash != GB)  # whole bytes: every rank read without the sort
    metrics = compute_metrics(timeline, cost)
    device, host_events = m._memory_events(timeline, cost), m._host_events(timeline, cost)
    for r, (events, host) in enumerate(zip(device, host_events, strict=True)):
        assert len({time for time, _, _ in events}) < len(events)  # events that tie: the order at one time counts
        counts, sizes = list(accumulate(e[1] for e in events)), list(accumulate(e[2] for e in events))
        assert metrics.ranks[r].peak_activations == max([0, *counts])
        assert metrics.ranks[r].peak_activation_bytes == max([0.0, *sizes])
        assert metrics.ranks[r].peak_host_bytes == max([0.0, *accumulate(delta for _, delta in host)])


def test_a_stash_typed_as_a_whole_number_reads_the_same_peaks() -> None:
    schedule = with_offload(build_schedule("1f1b", 4, 8), "full")
    measured = _cost(host_gbps=100.0, stash=float(2**20))
    typed = dataclasses.replace(measured, stages=(dataclasses.replace(measured.stages[0], activation_bytes=2**20),))
    assert type(typed.stages[0].activation_bytes) is int
    as_int = compute_metrics(simulate(schedule, typed), typed)  # the app's knobs give ints
    assert as_int == compute_metrics(simulate(schedule, measured), measured)
