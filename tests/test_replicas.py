"""Every data-parallel replica in a measured timeline: spans carry their replica through every copy, every
file and every view, and the comparisons with the per-replica simulation read replica 0."""

from __future__ import annotations

import json
from dataclasses import fields

from pipesim.analysis.overlay import action_errors, align
from pipesim.charts.gantt import gantt_figure
from pipesim.cost.model import CostModel
from pipesim.io.chrome_trace import run_trace, timeline_to_chrome_trace
from pipesim.io.formats import timeline_from_dict, timeline_to_dict
from pipesim.ir import Action
from pipesim.records import CommSpan, Span, Timeline, replica_lanes, replicas, select_replica, select_step
from pipesim.schedules import build_schedule
from pipesim.sim.simulate import simulate
from pipesim_executor.rank.timing import assemble_measured


def process_steps(num_ranks: int, replicas_: int, slow_replica: int | None = None) -> list[list[dict]]:
    """One measured step of 1F1B on `num_ranks` ranks x 1 microbatch per process; `slow_replica` runs 3 ms late and
    its forwards take 3 ms longer."""
    steps = []
    for process in range(num_ranks * replicas_):
        rank, replica = process % num_ranks, process // num_ranks
        late = 3.0 if replica == slow_replica else 0.0
        forward = (100.0 + late + rank, 101.0 + 2 * late + rank)
        backward = (110.0 + late - rank, 112.0 + late - rank)
        spans = [[f"{rank}F0", *forward], [f"{rank}B0", *backward]]
        comm = [["allreduce", replicas_, f"{rank}B0", backward[1], backward[1] + 0.5]]
        if rank:
            comm.append(["recv", rank - 1, f"{rank - 1}F0", 100.0 + late, forward[0]])
        steps.append([{"start": 100.0, "end": 113.0 + late, "spans": spans, "comm": comm}])
    return steps


def test_assembling_every_process_tags_each_span_with_its_replica():
    """Catches the executor keeping replica 0 alone (before issue 18) or tagging processes wrongly."""
    timeline, step_times = assemble_measured(2, "1f1b", process_steps(2, 2, slow_replica=1), [0.0] * 4)
    assert timeline.num_ranks == 2 and replicas(timeline) == 2
    assert {(s.replica, s.rank) for s in timeline.spans} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert {(c.replica, c.rank) for c in timeline.comm if c.kind == "allreduce"} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert step_times == [16.0]  # from the earliest start to the straggling replica's end
    late = [s for s in timeline.spans if s.replica == 1 and s.action == Action.parse("0F0")]
    assert late[0].start == 3.0  # the straggler is visible


def test_a_re_made_span_keeps_every_field():
    span = Span(1, Action.parse("2F3"), 1.0, 2.0, step=4, replica=5)
    comm = CommSpan(1, "recv", 0, Action.parse("1F3"), 0.5, 1.0, step=4, replica=5)
    assert span._replace(start=0.0).replica == 5 and comm._replace(end=2.0).replica == 5
    timeline = Timeline(2, (span,), "measured", "x", (comm,), {})
    assert select_step(timeline, 4).spans[0].replica == 5 and select_step(timeline, 4).comm[0].replica == 5
    assert len(Span._fields) == 6 and Span._fields[-1] == "replica"


def test_the_replica_survives_the_json_file_and_old_files_read_as_replica_0():
    timeline, _ = assemble_measured(2, "1f1b", process_steps(2, 2), [0.0] * 4)
    data = json.loads(json.dumps(timeline_to_dict(timeline)))
    assert timeline_from_dict(data).spans == timeline.spans and timeline_from_dict(data).comm == timeline.comm
    assert all("replica" not in s for s in data["spans"] if s["rank"] in (0, 1) and s.get("replica", 0) == 0)
    one, _ = assemble_measured(2, "1f1b", process_steps(2, 1), [0.0] * 2)
    assert "replica" not in json.dumps(timeline_to_dict(one)["spans"])  # one replica: the file as before


def test_the_traces_and_the_gantt_show_every_replica_and_comparisons_read_replica_0():
    schedule = build_schedule("1f1b", 2, 1)
    timeline, _ = assemble_measured(2, "1f1b", process_steps(2, 2, slow_replica=1), [0.0] * 4)
    trace = run_trace(schedule, {"measured": timeline})
    threads = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert {"replica 0 · rank 0 compute", "replica 1 · rank 1 compute"} <= threads
    flows = [e for e in trace["traceEvents"] if e.get("ph") == "s"]
    assert len(flows) == 4  # each replica's two messages (activation, gradient)
    simple = timeline_to_chrome_trace(timeline)
    names = {e["args"]["name"] for e in simple["traceEvents"] if e.get("name") == "process_name"}
    assert names == {"replica 0 · rank 0", "replica 0 · rank 1", "replica 1 · rank 0", "replica 1 · rank 1"}
    lanes, labels = replica_lanes(timeline)
    assert lanes.num_ranks == 4 and labels[3] == "replica 1 · rank 1"
    figure = gantt_figure(timeline)
    assert list(figure.layout.yaxis.ticktext)[3].startswith("replica 1 · rank 1")
    simulated = simulate(schedule, CostModel.uniform(1.0, 2.0))
    forwards = [row for row in action_errors(simulated, timeline) if "F" in row["action"]]
    assert [row["measured_ms"] for row in forwards] == [1.0, 1.0]  # replica 0's, not the straggler's 4 ms
    assert {d.measured_ms for d in align(simulated, timeline) if d.action.kind.value == "F"} == {1.0}
    assert select_replica(timeline, 1).spans[0].replica == 1
    assert [f.name for f in fields(Timeline)][:2] == ["num_ranks", "spans"]
