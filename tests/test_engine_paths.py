"""The engine's quick paths give the numbers and the documents of the plain ones (issue 31's third speed pass).

* the one-producer sweep (`Dependencies.blocking`), with gaps and without, against the general loop, on every
  registered family;
* `replay` of a sweep's runs under other costs against a fresh sweep under those costs;
* the spans' JSON (`pipesim.io.span_text`: from the spans, or from a simulation's columns; its actions formatted
  or read off the schedule's texts) against json's own text of the span dicts, and a whole `simulate --json`
  document against `timeline_to_dict`, for interleaved, zero-bubble and V-shaped schedules;
* the metrics read off a simulation's columns against the walk over its spans.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import replace
from pathlib import Path

import pytest

from pipesim.cli.common import span_texts
from pipesim.cli.main import main as pipesim_main
from pipesim.cost.links import LinkCost
from pipesim.cost.model import CostModel
from pipesim.io.cost_file import cost_to_dict
from pipesim.io.formats import json_text, schedule_to_dict, timeline_to_dict
from pipesim.io.span_text import columns_text, spans_text
from pipesim.ir import Action, B, F, make_schedule
from pipesim.plan.paths import critical_path
from pipesim.records import Span, SpanColumns, Timeline, remake, spans_built
from pipesim.schedules import build_schedule, options_for, schedule_names
from pipesim.semantics.dag import DeadlockError, Dependencies, dependencies
from pipesim.semantics.lower import crossing_stages
from pipesim.sim.data_parallel import reduction_charge
from pipesim.sim.metrics import _column_summaries, compute_metrics, link_busy_ms, with_link_busy
from pipesim.sim.offload import with_offload
from pipesim.sim.replay import duration_slots, replay, slot_durations
from pipesim.sim.simulate import _sweep_blocking, action_durations, engine_inputs, simulate, sweep
from pipesim.sim.steps import simulate_step, simulate_steps, step_tails
from pipesim.sim.sweep_gapless import sweep_blocking_without_gaps


def _family_schedules() -> list:
    """Every registered family at a few shapes (two chunks per rank where the family takes them)."""
    made = []
    for name in schedule_names():
        for ranks, microbatches in ((2, 3), (4, 8), (3, 7)):
            try:
                made.append(build_schedule(name, ranks, microbatches, **options_for(name, num_virtual_stages=2)))
            except ValueError:
                continue
    return made


FAMILIES = _family_schedules()
COSTS = (
    CostModel.uniform(1.0, 2.0),
    CostModel.uniform(forward_ms=1.1, backward_ms=2.3, comm_ms=0.13),
)


def _general(deps: Dependencies) -> Dependencies:
    """The same dependencies with the one-producer loop switched off."""
    plain = Dependencies(deps.actions, deps.ranks, deps.offsets, deps.deps, deps.joined, deps.sends)
    plain.__dict__["blocking"] = None  # the cached property, answered before it is asked
    return plain


@pytest.mark.parametrize("schedule", FAMILIES, ids=lambda s: f"{s.name}-{s.num_ranks}x{s.num_microbatches}")
def test_one_producer_sweep_is_the_general_sweep(schedule) -> None:
    deps = dependencies(schedule)
    assert deps.blocking is not None, "every family has at most one producer that can keep an action waiting"
    for base in COSTS:
        cost = base.for_pipeline(schedule.num_stages, schedule.num_ranks)
        inputs = engine_inputs(schedule, cost, deps)
        quick = sweep(deps, inputs.durations, inputs.hops, inputs.gaps)  # no gap: `sweep_blocking_without_gaps`
        plain = sweep(_general(deps), inputs.durations, inputs.hops, inputs.gaps)
        assert quick == plain and not quick[2]
        assert _blocking_loops(deps, inputs.durations, inputs.hops)  # its twin with the gaps, all 0
        varying = [0.01 * (i % 3) for i in range(len(deps.actions))]  # a dispatch gap that varies: `_sweep_blocking`
        quick = sweep(deps, inputs.durations, inputs.hops, varying)
        assert quick == sweep(_general(deps), inputs.durations, inputs.hops, varying) and not quick[2]


def _blocking_loops(deps: Dependencies, durations: list[float], hops: list[float]) -> bool:
    """Whether the one-producer loop without gaps and the one with gaps (all 0) give the same times and runs."""
    results = []
    for loop in (sweep_blocking_without_gaps, _sweep_blocking):
        n, runs = len(deps.actions), []
        starts, ends, pointer, clock = [0.0] * n, [-1.0] * n, deps.offsets[:-1], [0.0] * deps.num_ranks
        ready = list(range(deps.num_ranks - 1, -1, -1))
        times = (durations, hops) if loop is sweep_blocking_without_gaps else (durations, hops, [0.0] * n)
        loop(deps.blocking, deps.offsets, *times, starts, ends, pointer, clock, [None] * n, ready, runs)
        results.append((starts, ends, pointer, clock, runs))
    return results[0] == results[1]


@pytest.mark.parametrize("schedule", FAMILIES, ids=lambda s: f"{s.name}-{s.num_ranks}x{s.num_microbatches}")
def test_replay_gives_a_fresh_sweeps_numbers_under_other_costs(schedule) -> None:
    deps = dependencies(schedule)
    if deps.joined:
        pytest.skip("overlapped groups take the general loop, which records no runs")
    first, second = (c.for_pipeline(schedule.num_stages, schedule.num_ranks) for c in COSTS)
    runs: list[tuple[int, int, int]] = []
    inputs = engine_inputs(schedule, first, deps)
    sweep(deps, inputs.durations, inputs.hops, inputs.gaps, runs=runs)
    assert sum(stop - start for _, start, stop in runs) == len(deps.actions)
    other = engine_inputs(schedule, second, deps)
    other_gaps = [g + 0.01 * (i % 3) for i, g in enumerate(other.gaps)]  # a dispatch gap that varies
    durations = slot_durations(duration_slots(deps, schedule.num_stages), second, schedule.num_stages)
    assert durations == action_durations(deps, second, schedule.num_stages)
    starts, ends, stuck = sweep(deps, durations, other.hops, other_gaps)
    assert not stuck
    assert replay(deps, runs, durations, other.hops, other_gaps) == (starts, ends)
    no_gaps = [0.0] * len(durations)  # the planner's usual case, a loop of its own
    starts, ends, _ = sweep(deps, durations, other.hops, no_gaps)
    assert replay(deps, runs, durations, other.hops, no_gaps) == (starts, ends)


def test_one_producer_sweep_still_finds_a_deadlock_within_a_rank() -> None:
    """A backward before its own forward on one rank: the producer later in the rank's list keeps it waiting."""
    rows = [[Action(0, F, 0), Action(0, B, 0)], [Action(1, B, 0), Action(1, F, 0)]]
    schedule = make_schedule("late forward", 2, 1, [0, 1], rows)
    assert dependencies(schedule).blocking is not None
    with pytest.raises(DeadlockError):
        simulate(schedule, CostModel.uniform().for_pipeline(2, 2))


@pytest.mark.parametrize("schedule", FAMILIES, ids=lambda s: f"{s.name}-{s.num_ranks}x{s.num_microbatches}")
def test_spans_text_is_jsons_own_text_of_the_span_dicts(schedule) -> None:
    cost = COSTS[1].for_pipeline(schedule.num_stages, schedule.num_ranks)
    for timeline in (simulate_step(schedule, cost).timeline, simulate_steps(schedule, cost, 2)):  # steps 0, then 0-1
        spans = timeline_to_dict(timeline)["spans"]
        assert spans_text(timeline.spans, "x.json") == json.dumps(spans, separators=(",", ":"))[1:-1]
    # with the actions' texts read off the schedule's rows, as `simulate --json` writes them; none for two steps
    one, two = simulate_step(schedule, cost).timeline, simulate_steps(schedule, cost, 2)
    texts = span_texts(one, schedule, schedule.text_rows())
    assert texts is not None and span_texts(two, schedule, schedule.text_rows()) is None
    assert one.columns is not None and two.columns is None  # a simulated step keeps the engine's columns
    expected = json.dumps(timeline_to_dict(one)["spans"], separators=(",", ":"))[1:-1]
    assert spans_text(one.spans, "x.json", span_texts(one, schedule, schedule.text_rows())) == expected
    assert columns_text(one.columns, "x.json", texts) == expected
    assert columns_text(one.columns, "x.json", None) == expected


@pytest.mark.parametrize(
    ("name", "ranks", "microbatches", "flags"),
    [
        ("interleaved-1f1b", 32, 128, ["--virtual-stages", "2"]),  # the torch comparison's case, compact JSON
        ("zb-h2", 8, 400, ["--w", "0.7", "--comm", "0.1"]),
        ("zbv", 8, 320, ["--f", "1.1", "--b", "2.3"]),
        ("interleaved-1f1b", 4, 8, ["--virtual-stages", "2", "--comm", "0.05"]),  # small: the indented path
    ],
)
def test_simulate_json_is_the_timeline_document(
    tmp_path: Path, name: str, ranks: int, microbatches: int, flags: list[str]
) -> None:
    """`simulate --json` writes the document `timeline_to_dict` describes, key for key and value for value."""
    out = tmp_path / "out.json"
    argv = ["simulate", "--schedule", name, "--ranks", str(ranks), "--microbatches", str(microbatches), *flags]
    assert pipesim_main([*argv, "--json", str(out)]) == 0
    values = dict(zip(flags[::2], flags[1::2], strict=True))
    chunks = {"num_virtual_stages": int(values["--virtual-stages"])} if "--virtual-stages" in values else {}
    schedule = build_schedule(name, ranks, microbatches, **chunks)
    cost = CostModel.uniform(
        forward_ms=float(values.get("--f", 1.0)),
        backward_ms=float(values.get("--b", 2.0)),
        weight_ms=float(values["--w"]) if "--w" in values else None,
        comm_ms=float(values.get("--comm", 0.0)),
    ).for_pipeline(schedule.num_stages, schedule.num_ranks)
    step = simulate_step(schedule, cost)
    summary = {
        **with_link_busy(compute_metrics(step.timeline, cost), link_busy_ms(schedule, cost)).to_dict(),
        "step_ms": step.step_ms,
        "schedule": schedule_to_dict(schedule),
        "cost": cost_to_dict(cost),
    }
    written = out.read_text()
    expected = json_text(timeline_to_dict(step.timeline, summary), out)
    assert json.loads(written) == json.loads(expected)
    assert written == expected


@pytest.mark.parametrize("schedule", FAMILIES, ids=lambda s: f"{s.name}-{s.num_ranks}x{s.num_microbatches}")
def test_critical_path_reading_one_producer_is_the_general_walk(schedule) -> None:
    """The planner's critical path (its bound for a shape's other cost models) takes the same edges either way."""
    deps = dependencies(schedule)
    if deps.joined:
        pytest.skip("overlapped groups take the general walk")
    if schedule.seq_chunks > 1:
        pytest.skip("the planner's path prices whole microbatches; sequence chunks are not planned")
    crossing = crossing_stages(deps.actions)
    for base in COSTS:
        cost = base.for_pipeline(schedule.num_stages, schedule.num_ranks)
        inputs = engine_inputs(schedule, cost, deps)
        starts, ends, _ = sweep(deps, inputs.durations, inputs.hops, inputs.gaps)
        finish = [ends[deps.offsets[r + 1] - 1] for r in range(schedule.num_ranks)]
        tails, windows = step_tails(finish, ends, None, cost, reduction_charge(schedule, cost))
        walked = [
            critical_path(
                d, crossing, (starts, ends), (inputs.durations, inputs.hops, inputs.gaps), (finish, tails, windows),
                schedule.num_stages,
            )
            for d in (deps, _general(deps))
        ]  # fmt: skip
        assert walked[0] == walked[1]
        assert walked[0].length_ms(cost) == pytest.approx(max(f + t for f, t in zip(finish, tails, strict=True)))


def test_text_rows_are_each_actions_own_text() -> None:
    """`Schedule.text_rows` joins texts made once per (stage, kind) and microbatch: the same as `str(action)`, also
    for actions outside the schedule's counts (which take the per-action path)."""
    for schedule in FAMILIES:
        assert schedule.text_rows() == [[str(action) for action in row] for row in schedule.actions]
    outside = make_schedule("hand-made", 2, 2, [0, 1], [[Action(0, F, 0), Action(0, F, 5)], [Action(-1, B, 0)]])
    assert outside.text_rows() == [["0F0", "0F5"], ["-1B0"]]


@pytest.mark.parametrize("schedule", FAMILIES, ids=lambda s: f"{s.name}-{s.num_ranks}x{s.num_microbatches}")
def test_metrics_off_the_columns_are_the_walks_over_the_spans(schedule) -> None:
    """The walk over each rank's run of the columns gives the walk over the sorted spans, on uneven stages too."""
    stages = range(schedule.num_stages)  # and stages that differ: their stashes looked up by (stage, kind)
    uneven = CostModel.per_stage(
        [1 + 0.1 * s for s in stages],
        [2.3 - 0.1 * s for s in stages],
        comm_ms=0.07,
        activation_bytes=[1e6 * (1 + s % 3) for s in stages],
    )
    for base in (*COSTS, uneven):
        cost = base.for_pipeline(schedule.num_stages, schedule.num_ranks)
        timeline = simulate_step(schedule, cost).timeline
        assert _column_summaries(timeline, timeline.columns, cost) is not None, "a simulation's columns are read"
        walked = replace(timeline)  # the same spans, no columns: the walk
        assert walked.columns is None
        assert compute_metrics(timeline, cost).to_dict() == compute_metrics(walked, cost).to_dict()


def test_columns_that_the_walk_would_sort_or_find_overlapping_fall_back_to_it() -> None:
    schedule = build_schedule("1f1b", 2, 3)
    cost = COSTS[0].for_pipeline(2, 2)
    ranks, actions, starts, ends = simulate(schedule, cost).columns
    overlapping = SpanColumns(ranks, actions, starts, [end + 0.5 for end in ends])
    unsorted = SpanColumns(ranks, actions, [*starts[:2][::-1], *starts[2:]], [*ends[:2][::-1], *ends[2:]])
    ending_early = SpanColumns(ranks, actions, starts, [*ends[:1], starts[1] - 0.5, *ends[2:]])
    for columns in (overlapping, unsorted, ending_early):
        timeline = Timeline.from_columns(2, columns)
        assert _column_summaries(timeline, columns, cost) is None
        assert compute_metrics(timeline, cost) == compute_metrics(replace(timeline), cost)


def test_a_columnar_timeline_builds_its_spans_when_read_and_keeps_them() -> None:
    schedule = build_schedule("zbv", 2, 4)
    cost = COSTS[1].for_pipeline(schedule.num_stages, schedule.num_ranks)
    timeline = simulate_step(schedule, cost).timeline
    assert not spans_built(timeline)
    again = remake(timeline, meta={"x": 1})  # columns kept, spans still unbuilt
    assert again.columns is timeline.columns and not spans_built(again) and again.meta == {"x": 1}
    ranks, actions, starts, ends = timeline.columns
    expected = tuple(Span(*row) for row in zip(ranks, actions, starts, ends, strict=True))
    assert timeline.spans == expected and spans_built(timeline) and timeline.spans is timeline.spans
    assert remake(timeline).spans is timeline.spans  # built ones carried over
    copied = pickle.loads(pickle.dumps(again))
    assert copied == timeline and copied.columns == timeline.columns and copied.meta == {"x": 1}
    with pytest.raises(AttributeError):
        _ = timeline.no_such_field


def test_columns_text_with_ranks_in_any_order_is_jsons_text() -> None:
    """One run per rank in rank order writes each rank once per run; any other order writes it per span."""
    schedule = build_schedule("zbv", 3, 6)
    cost = COSTS[1].for_pipeline(schedule.num_stages, schedule.num_ranks)
    ranks, actions, starts, ends = simulate(schedule, cost).columns
    order = sorted(range(len(ranks)), key=lambda i: (-ranks[i], i))  # the last rank's run first
    shuffled = SpanColumns(*([column[i] for i in order] for column in (ranks, actions, starts, ends)))
    sparse = SpanColumns([2 * r for r in ranks], actions, starts, ends)  # ranks 1 and 3 hold no span
    for columns in (shuffled, sparse):
        expected = timeline_to_dict(Timeline.from_columns(2 * schedule.num_ranks, columns))["spans"]
        assert columns_text(columns, "x.json", None) == json.dumps(expected, separators=(",", ":"))[1:-1]
    with pytest.raises(ValueError, match="action texts"):
        columns_text(shuffled, "x.json", ["0F0"])


@pytest.mark.parametrize("schedule", FAMILIES[::3], ids=lambda s: f"{s.name}-{s.num_ranks}x{s.num_microbatches}")
def test_action_durations_by_kind_are_the_per_stage_prices(schedule) -> None:
    """Stages priced alike are looked up by kind alone; either way each action costs its (stage, kind) price."""
    stages = range(schedule.num_stages)
    uneven = CostModel.per_stage([1 + 0.1 * s for s in stages], [2.3 - 0.1 * s for s in stages])
    for base in (*COSTS, uneven):
        cost = base.for_pipeline(schedule.num_stages, schedule.num_ranks)
        deps = dependencies(schedule)
        priced = [cost.duration_ms(stage, kind) for stage, kind, _ in deps.actions]
        for first, others in (deps.joined or {}).items():
            for member in (first, *others):
                priced[member] *= cost.overlap_factor
        assert action_durations(deps, cost, schedule.num_stages) == priced


def _moves_and_groups() -> list:
    """Schedules with overlapped groups, with memory moves, and with both, at a few shapes."""
    made = []
    for name, ranks, microbatches in (("1f1b-overlap", 4, 8), ("dualpipe", 4, 8), ("dualpipev", 3, 7)):
        made.append(build_schedule(name, ranks, microbatches))
    for name, ranks, microbatches in (("1f1b", 4, 9), ("zbv", 3, 7), ("v-half", 4, 8), ("1f1b-overlap", 3, 7)):
        for mode in ("full", "selective"):
            made.append(with_offload(build_schedule(name, ranks, microbatches), mode, GROUPED_COSTS[1]))
    made.append(with_offload(build_schedule("seq1f1b", 3, 5, seq_chunks=3), "full"))
    return made


GROUPED_COSTS = (
    replace(CostModel.uniform(1.1, 2.3, comm_ms=0.13), host_link=LinkCost(0.4, 1.0)),
    replace(
        CostModel.uniform(1.0, 2.0, comm_ms=0.05),
        stages=(replace(CostModel.uniform().stages[0], a2a_ms=0.7, moe_layers=2, activation_bytes=3e6),),
        host_link=LinkCost(0.05, 2.0),
    ),
)


@pytest.mark.parametrize("schedule", _moves_and_groups(), ids=lambda s: f"{s.name}-{s.num_ranks}x{s.num_microbatches}")
def test_groups_and_copies_loop_is_the_general_sweep(schedule) -> None:
    """`Dependencies.waits`' loop gives the general loop's times to the bit, with gaps and without."""
    deps = dependencies(schedule)
    assert deps.joined or deps.copies is not None
    assert (deps.pair_waits is not None) == (deps.copies is None), "pairs without copies take the pairs' loop"
    general = replace(deps)  # every field, no cached property: switched to the general loop below
    general.__dict__["blocking"] = general.__dict__["waits"] = None
    waits_loop = replace(deps)  # `Dependencies.waits`' loop also where the pairs' loop would run
    waits_loop.__dict__["pair_waits"] = None
    for base in GROUPED_COSTS:
        cost = base.for_pipeline(schedule.num_stages, schedule.num_ranks)
        inputs = engine_inputs(schedule, cost, deps)
        varying = [g + 0.01 * (i % 3) for i, g in enumerate(inputs.gaps)]
        for gaps in (inputs.gaps, varying):
            quick = sweep(deps, inputs.durations, inputs.hops, gaps)
            assert quick == sweep(general, inputs.durations, inputs.hops, gaps) and not quick[2]
            assert quick == sweep(waits_loop, inputs.durations, inputs.hops, gaps)


def test_groups_and_copies_loop_still_finds_a_deadlock() -> None:
    """A pair whose second member needs a forward that its rank runs after the pair: both loops name it."""
    rows = [[Action(0, F, 0), Action(0, F, 1), Action(0, B, 1), Action(0, B, 0)], [Action(1, F, 0), Action(1, B, 0)]]
    rows[1] = [Action(1, F, 1), Action(1, B, 1), Action(1, F, 0), Action(1, B, 0)]
    schedule = make_schedule("late pair", 2, 2, [0, 1], rows)
    deps = dependencies(schedule)
    joined = {deps.index[Action(1, F, 1)]: (deps.index[Action(1, B, 0)],)}
    grouped = replace(deps, joined=joined)
    general = replace(grouped)
    general.__dict__["blocking"] = general.__dict__["waits"] = None
    n = len(deps.actions)
    quick = sweep(grouped, [1.0] * n, [0.0] * n)
    assert quick[2] and quick == sweep(general, [1.0] * n, [0.0] * n)
    assert grouped.pair_waits is None  # its members apart: the waits' loop
    # the pair's members next to each other, the forward its second member needs after them: the pairs' loop
    rows[1] = [Action(1, F, 1), Action(1, B, 0), Action(1, F, 0), Action(1, B, 1)]
    deps = dependencies(make_schedule("late pair", 2, 2, [0, 1], rows))
    grouped = replace(deps, joined={deps.index[Action(1, F, 1)]: (deps.index[Action(1, B, 0)],)})
    general = replace(grouped)
    general.__dict__["blocking"] = general.__dict__["waits"] = None
    quick = sweep(grouped, [1.0] * n, [0.0] * n)
    assert grouped.pair_waits is not None and quick[2] and quick == sweep(general, [1.0] * n, [0.0] * n)


def test_a_simulations_all_to_alls_are_laid_out_when_comm_is_read_and_never_by_the_metrics() -> None:
    """The link's all-to-all spans of a simulated step wait for a reader of `comm`: the metrics, a remake and the
    other kinds' readers (`comm_of`) leave them unmade; a read, a comparison or a pickle makes them, equal to
    `a2a_spans` after the rest."""
    from pipesim.records import COLLECTIVE_KINDS, LINK_KINDS, comm_of
    from pipesim.sim.simulate import a2a_spans

    schedule = build_schedule("1f1b-overlap", 3, 6)
    base = CostModel.uniform(1.0, 2.0, comm_ms=0.1).for_schedule(schedule)
    cost = replace(
        base, stages=tuple(replace(s, a2a_ms=0.4 + 0.1 * i, moe_layers=2) for i, s in enumerate(base.stages))
    )
    timeline = simulate(schedule, cost)
    unmade = lambda tl: "comm" not in tl.__dict__  # noqa: E731
    assert unmade(timeline) and timeline.comm_later is not None
    metrics = compute_metrics(timeline, cost)
    assert comm_of(timeline, COLLECTIVE_KINDS) == [] and unmade(timeline)
    again = remake(timeline, meta={"x": 1})
    assert unmade(again) and unmade(timeline)
    expected = a2a_spans(dependencies(schedule), cost, timeline.columns.starts)
    assert len(expected) == len(comm_of(again, LINK_KINDS)) > 0 and not unmade(again)  # asked for: made
    assert timeline.comm == expected and timeline.comm is timeline.comm and timeline.comm_later is None
    copied = pickle.loads(pickle.dumps(again))
    assert copied.comm == expected and copied.comm_later is None
    assert compute_metrics(timeline, cost) == metrics
    assert replace(timeline, meta={}).comm == expected  # a replace reads every field


@pytest.mark.parametrize("schedule", _moves_and_groups()[:3], ids=lambda s: s.name)
def test_pairs_read_off_their_positions_are_those_found_by_name(schedule) -> None:
    from pipesim.semantics.dag import _joined
    from pipesim.semantics.lower import overlap_groups

    deps = dependencies(schedule)
    groups = overlap_groups(schedule)
    assert deps.joined == _joined(groups, deps) and len(deps.joined) == len(groups) > 0


@pytest.mark.parametrize("schedule", _moves_and_groups()[:3], ids=lambda s: s.name)
def test_each_pair_takes_its_own_layouts_times(schedule) -> None:
    """The pairs' times, read again from the previous pair of the same kind, are each pair's own layout's."""
    from pipesim.sim.simulate import _group_durations

    deps = dependencies(schedule)
    stages = range(schedule.num_stages)
    uneven = CostModel.per_stage([1 + 0.1 * s for s in stages], [2.3 - 0.1 * s for s in stages])
    moe = replace(
        uneven, stages=tuple(replace(st, a2a_ms=0.2 + 0.05 * i, moe_layers=2) for i, st in enumerate(uneven.stages))
    )
    for base in (*GROUPED_COSTS, moe, replace(uneven, overlap_factor=0.6)):
        cost = base.for_pipeline(schedule.num_stages, schedule.num_ranks)
        expected = [cost.duration_ms(stage, kind) for stage, kind, _ in deps.actions]
        for first, (second,) in deps.joined.items():
            kinds = (deps.actions[first][:2], deps.actions[second][:2])
            alone = [expected[first], expected[second]]
            expected[first], expected[second] = _group_durations(cost.pair_ms(kinds), alone, cost)
        assert action_durations(deps, cost, schedule.num_stages) == expected


def test_a_simulations_group_texts_are_made_when_read() -> None:
    """meta["overlap_groups"] waits for a reader: it reads as the list of texts, the document holds that list, and a
    pickle the list itself."""
    from pipesim.records import LaterList, plain_meta

    schedule = build_schedule("dualpipev", 3, 6)
    deps = dependencies(schedule)
    timeline = simulate(schedule, COSTS[0].for_pipeline(schedule.num_stages, schedule.num_ranks))
    later = timeline.meta["overlap_groups"]
    assert isinstance(later, LaterList) and later._items is None
    texts = [[str(deps.actions[m]) for m in (first, *others)] for first, others in deps.joined.items()]
    assert timeline_to_dict(timeline)["meta"]["overlap_groups"] == texts
    assert type(plain_meta(timeline.meta)["overlap_groups"]) is list
    assert later == texts and texts == later and list(later) == texts
    assert len(later) == len(texts) and later[0] == texts[0]
    assert pickle.loads(pickle.dumps(timeline.meta))["overlap_groups"] == texts
    assert type(pickle.loads(pickle.dumps(later))) is list
    assert plain_meta({"a": 1}) == {"a": 1}
