"""CSV (torch compute_only), Chrome trace and path-based JSON files."""

from __future__ import annotations

import csv
import io
import json

import pytest

from pipesim.cost.model import CostModel
from pipesim.io.chrome_trace import save_chrome_trace, timeline_to_chrome_trace
from pipesim.io.formats import (
    CsvError,
    load_schedule,
    read_json,
    save_schedule,
    save_timeline,
    schedule_from_csv,
    schedule_to_csv,
    timeline_from_dict,
)
from pipesim.ir import Action, B, F, I, W
from pipesim.records import CommSpan, Span, Timeline
from pipesim.schedules import build_schedule, options_for, schedule_names
from pipesim.sim.simulate import simulate


def _small(name: str):
    options = options_for(name, num_virtual_stages=2)
    return build_schedule(name, 2, 4, **options)


def _same_schedule(a, b) -> None:
    assert a.actions == b.actions
    assert a.stage_to_rank == b.stage_to_rank
    assert (a.num_ranks, a.num_stages, a.num_microbatches) == (b.num_ranks, b.num_stages, b.num_microbatches)


# --- CSV ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", schedule_names())
def test_csv_round_trip_for_every_registered_schedule(name):
    schedule = _small(name)
    back = schedule_from_csv(schedule_to_csv(schedule), name=name)
    _same_schedule(back, schedule)
    assert back.name == name


def test_csv_rows_are_ranks_and_cells_are_action_text():
    schedule = build_schedule("zb-h1", 3, 3)
    rows = list(csv.reader(io.StringIO(schedule_to_csv(schedule))))
    assert len(rows) == schedule.num_ranks
    for rank, row in enumerate(rows):
        assert row == [str(a) for a in schedule.actions[rank]]
    assert any("I" in cell for cell in rows[0])
    assert any("W" in cell for cell in rows[0])


def test_reading_infers_v_placement_from_where_stages_appear():
    text = "0F0,3F0,3I0,3W0,0I0,0W0\n1F0,2F0,2I0,2W0,1I0,1W0\n"
    schedule = schedule_from_csv(text)
    assert schedule.stage_to_rank == (0, 1, 1, 0)
    assert schedule.num_stages == 4 and schedule.num_ranks == 2 and schedule.num_microbatches == 1
    assert schedule.actions[0][4] == Action(0, I, 0) and schedule.actions[1][3] == Action(2, W, 0)


def test_empty_cells_are_idle_and_microbatches_come_from_the_highest_index():
    text = "0F0,,0F2,,0B0,0B2\r\n,1F0,1B0,,1F2,1B2\r\n"
    schedule = schedule_from_csv(text)
    assert schedule.actions[0] == (Action(0, F, 0), Action(0, F, 2), Action(0, B, 0), Action(0, B, 2))
    assert schedule.num_microbatches == 3


def test_unparseable_cell_names_rank_cell_and_valid_forms():
    with pytest.raises(CsvError) as info:
        schedule_from_csv("0F0,0B0\n1F0,1X0,1B0\n")
    error = info.value
    assert isinstance(error, ValueError)
    assert (error.row, error.column) == (1, 1)
    message = str(error)
    assert "1X0" in message and "rank 1" in message and "cell 2" in message
    assert "2F0" in message and "F, B, I or W" in message


def test_communication_actions_are_refused_when_compute_only_is_asked_for():
    text = "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n"
    with pytest.raises(CsvError) as info:
        schedule_from_csv(text, csv_format="compute_only")
    assert (info.value.row, info.value.column) == (0, 1)
    assert "communication" in str(info.value) and "compute_comms" in str(info.value)
    schedule = schedule_from_csv(text)  # detected
    assert schedule.has_transfers and schedule_to_csv(schedule, "compute_comms") == text.replace("\n", "\r\n")
    with pytest.raises(CsvError, match="OVERLAP_F_B group needs at least two"):
        schedule_from_csv("0F0,(0F1)OVERLAP_F_B,0B1\n")


def test_a_stage_on_two_ranks_names_both():
    with pytest.raises(CsvError) as info:
        schedule_from_csv("0F0,1F0\n1B0,0B0\n")
    error = info.value
    assert (error.row, error.column) == (1, 0)
    assert "stage 1" in str(error) and "rank 0" in str(error) and "rank 1" in str(error)


def test_gaps_in_stage_numbers_and_empty_files_are_errors():
    with pytest.raises(CsvError, match="stage\\(s\\) 1 never appear"):
        schedule_from_csv("0F0,0B0\n2F0,2B0\n")
    with pytest.raises(CsvError, match="empty"):
        schedule_from_csv("")
    with pytest.raises(CsvError, match="no actions|the CSV is empty"):
        schedule_from_csv(",,\n,\n")


def _torch_runtime(schedule):
    """A torch schedule object with just the fields its CSV reader and writer use (no process group)."""
    torch_schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    runtime = object.__new__(torch_schedules._PipelineScheduleRuntime)
    runtime.pipeline_order = {}
    runtime.pp_group_size = schedule.num_ranks
    runtime._num_stages = schedule.num_stages
    runtime._n_microbatches = schedule.num_microbatches
    runtime._stages = []
    return torch_schedules, runtime


@pytest.mark.parametrize("name", ["interleaved-1f1b", "zbv"])
def test_torch_reads_our_csv(tmp_path, name):
    schedule = _small(name)
    path = tmp_path / "schedule.csv"
    save_schedule(schedule, path)
    torch_schedules, runtime = _torch_runtime(schedule)
    torch_schedules.PipelineScheduleMulti._load_csv(runtime, str(path))
    assert {rank: [str(a) for a in row] for rank, row in runtime.pipeline_order.items()} == dict(
        enumerate(schedule.text_rows())
    )
    assert runtime.stage_index_to_group_rank == dict(enumerate(schedule.stage_to_rank))


def test_we_read_what_torch_writes_including_idle_slots(tmp_path):
    schedule = build_schedule("zb-h1", 2, 3)
    torch_schedules, runtime = _torch_runtime(schedule)
    parse = torch_schedules._Action.from_str
    # torch's own pipeline_order marks idle time steps with None
    runtime.pipeline_order = {r: [None] * r + [parse(str(a)) for a in row] for r, row in enumerate(schedule.actions)}
    path = tmp_path / "torch.csv"
    torch_schedules.PipelineScheduleMulti._dump_csv(runtime, str(path))
    back = load_schedule(path)
    _same_schedule(back, schedule)
    assert back.name == "torch"


# --- JSON files -------------------------------------------------------------------------


def test_schedule_and_timeline_files_round_trip(tmp_path):
    schedule = build_schedule("interleaved-1f1b", 2, 4, num_virtual_stages=2)
    for suffix in (".json", ".csv"):
        save_schedule(schedule, tmp_path / f"s{suffix}")
        _same_schedule(load_schedule(tmp_path / f"s{suffix}"), schedule)
    timeline = simulate(schedule, CostModel.uniform(1.0, 2.0, comm_ms=0.5))
    save_timeline(timeline, tmp_path / "t.json", summary={"makespan": 1.5})
    assert timeline_from_dict(read_json(tmp_path / "t.json")).spans == timeline.spans
    assert json.loads((tmp_path / "t.json").read_text())["makespan"] == 1.5
    assert not list(tmp_path.glob("*.tmp"))


# --- Chrome trace -----------------------------------------------------------------------


def _measured_timeline() -> Timeline:
    spans = (
        Span(0, Action(0, F, 0), 0.0, 1.5),
        Span(1, Action(1, F, 0), 2.0, 3.0),
        Span(1, Action(1, B, 0), 3.0, 5.25),
        Span(0, Action(0, B, 0), 6.0, 8.0),
    )
    comm = (CommSpan(0, "send", 1, Action(0, F, 0), 1.5, 2.0), CommSpan(1, "recv", 0, Action(0, F, 0), 1.0, 2.0))
    return Timeline(num_ranks=2, spans=spans, source="measured", schedule_name="hand", comm=comm)


def test_chrome_trace_has_one_complete_event_per_span_in_microseconds():
    timeline = _measured_timeline()
    trace = json.loads(json.dumps(timeline_to_chrome_trace(timeline)))  # plain JSON
    events = trace["traceEvents"]
    compute = [e for e in events if e["ph"] == "X" and e["tid"] == 0]
    assert len(compute) == len(timeline.spans)
    for event, span in zip(compute, timeline.spans, strict=True):
        assert event["name"] == str(span.action)
        assert event["pid"] == span.rank
        assert event["ts"] == pytest.approx(span.start * 1000)
        assert event["dur"] == pytest.approx((span.end - span.start) * 1000)
        assert event["args"] == {
            "stage": span.action.stage,
            "microbatch": span.action.microbatch,
            "kind": span.action.kind.value,
            "step": 0,
        }
    names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}
    transfers = [e for e in events if e["ph"] == "X" and e["tid"] == 1]
    assert len(transfers) == 2 and transfers[0]["dur"] == pytest.approx(500.0)


def test_chrome_trace_file(tmp_path):
    timeline = simulate(build_schedule("1f1b", 2, 2), CostModel.uniform())
    save_chrome_trace(timeline, tmp_path / "trace.json")
    data = json.loads((tmp_path / "trace.json").read_text())
    assert sum(e["ph"] == "X" for e in data["traceEvents"]) == len(timeline.spans)
    assert data["displayTimeUnit"] == "ms"
