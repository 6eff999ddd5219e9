"""The one-file Perfetto view of a run: simulated and measured side by side, compute and comm tracks, flows."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from pipesim.cost.model import CostModel
from pipesim.io.chrome_trace import run_trace, save_run_trace, transfers
from pipesim.records import CommSpan, Timeline
from pipesim.schedules import build_schedule, options_for
from pipesim.semantics.lower import comm_plan
from pipesim.sim.simulate import simulate


def measured_like(schedule, cost) -> Timeline:
    """A timeline as the executor records it: spans, and a recv wait just before each consumer (comm_plan's)."""
    base = simulate(schedule, cost)
    plan = comm_plan(schedule)
    waits = [
        CommSpan(t.dst, "recv", t.src, t.producer, max(t.send_start, t.recv_end - 0.25), t.recv_end)
        for t in transfers(plan, base)
    ]
    return Timeline(base.num_ranks, base.spans, "measured", schedule.name, tuple(waits))


def slices_by_thread(events):
    threads = defaultdict(list)
    for event in events:
        if event["ph"] == "X":
            threads[(event["pid"], event["tid"])].append(event)
    return threads


def inside(ts, event):
    return event["ts"] <= ts <= event["ts"] + event["dur"]


@pytest.mark.parametrize("name,ranks", [("1f1b", 3), ("interleaved-1f1b", 2), ("zbv", 2)])
def test_run_trace_has_both_views_tracks_and_a_flow_per_message(name, ranks):
    schedule = build_schedule(name, ranks, 4, **options_for(name, num_virtual_stages=2))
    simulated = simulate(schedule, CostModel.uniform(comm_ms=0.3))
    measured = measured_like(schedule, CostModel.uniform(forward_ms=1.2, backward_ms=2.5, comm_ms=0.5))
    trace = json.loads(json.dumps(run_trace(schedule, {"simulated": simulated, "measured": measured})))
    events = trace["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert sorted(processes.values()) == ["measured", "simulated"]
    thread_names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["name"] == "thread_name"}
    messages = sum(len(keys) for keys in comm_plan(schedule).links.values())
    assert messages > 0
    for pid in processes:
        names = {name for (p, _), name in thread_names.items() if p == pid}
        for rank in range(ranks):
            assert {f"rank {rank} compute", f"rank {rank} send", f"rank {rank} recv"} <= names
    # compute slices: one per span, in microseconds
    for pid, timeline in zip(sorted(processes), (simulated, measured), strict=True):
        compute = [e for e in events if e["ph"] == "X" and e["pid"] == pid and e["tid"] % 1000 == 0]
        assert len(compute) == len(timeline.spans)
        by_key = {(s.rank, str(s.action)): s for s in timeline.spans}
        for event in compute:
            span = by_key[(event["tid"] // 1000, event["name"])]
            assert event["ts"] == pytest.approx(span.start * 1000)
            assert event["dur"] == pytest.approx(span.duration * 1000)
    # flows: each id once as start and once as finish, start inside its send slice, finish inside its recv slice
    threads = slices_by_thread(events)
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    assert Counter(e["id"] for e in events if e["ph"] == "s").most_common(1)[0][1] == 1
    assert set(starts) == set(finishes) and len(starts) == 2 * messages
    for flow_id, start in starts.items():
        finish = finishes[flow_id]
        assert finish["bp"] == "e" and start["pid"] == finish["pid"]
        send = [e for e in threads[(start["pid"], start["tid"])] if e["cat"] == "send" and e["args"]["flow"] == flow_id]
        recv = [
            e for e in threads[(finish["pid"], finish["tid"])] if e["cat"] == "recv" and e["args"]["flow"] == flow_id
        ]
        assert len(send) == 1 and len(recv) == 1
        assert inside(start["ts"], send[0]) and inside(finish["ts"], recv[0])
        assert send[0]["args"]["action"] == recv[0]["args"]["action"]
        assert "send" in thread_names[(start["pid"], start["tid"])]
        assert "recv" in thread_names[(finish["pid"], finish["tid"])]
        assert send[0]["args"]["peer"] == finish["tid"] // 1000 and recv[0]["args"]["peer"] == start["tid"] // 1000
    # slices on one thread never overlap (Perfetto drops slices that do not nest)
    for slices in threads.values():
        ordered = sorted(slices, key=lambda e: e["ts"])
        for before, after in zip(ordered, ordered[1:], strict=False):
            assert before["ts"] + before["dur"] <= after["ts"] + 1e-6


def test_measured_receive_slices_are_the_recorded_waits():
    schedule = build_schedule("1f1b", 2, 2)
    measured = measured_like(schedule, CostModel.uniform(comm_ms=1.0))
    trace = run_trace(schedule, {"measured": measured})
    recvs = sorted((e["ts"], e["dur"]) for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "recv")
    assert recvs == sorted((c.start * 1e3, pytest.approx((c.end - c.start) * 1e3)) for c in measured.comm)


def test_run_trace_refuses_a_mismatched_timeline(tmp_path):
    schedule = build_schedule("1f1b", 2, 2)
    other = simulate(build_schedule("1f1b", 3, 3), CostModel.uniform())
    with pytest.raises(ValueError, match="3 ranks"):
        run_trace(schedule, {"simulated": other})
    with pytest.raises(ValueError, match="at least one"):
        run_trace(schedule, {})
    save_run_trace(schedule, {"simulated": simulate(schedule, CostModel.uniform())}, tmp_path / "t.json")
    assert json.loads((tmp_path / "t.json").read_text())["otherData"]["views"] == ["simulated"]


def test_simulate_trace_draws_every_message_between_ranks_as_a_flow(tmp_path, capsys):
    """`simulate --trace` carries the flow arrows a run's trace has: one per comm_plan message, starting in the
    producer's slice on its rank and ending in the consumer's."""
    from pipesim.cli.main import main

    path = tmp_path / "trace.json"
    argv = ["simulate", "--schedule", "interleaved-1f1b", "--ranks", "3", "--microbatches", "6"]
    argv += ["--virtual-stages", "2"]
    assert main([*argv, "--trace", str(path)]) == 0
    events = json.loads(path.read_text())["traceEvents"]
    schedule = build_schedule("interleaved-1f1b", 3, 6, num_virtual_stages=2)
    starts = [e for e in events if e["ph"] == "s"]
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert len(starts) == len(ends) == sum(len(keys) for keys in comm_plan(schedule).links.values())
    slices = [e for e in events if e["ph"] == "X" and e["tid"] == 0]
    for start in starts:
        end = ends[start["id"]]
        assert start["pid"] != end["pid"]  # between ranks
        for flow in (start, end):  # inside a compute slice of its rank
            assert any(s["pid"] == flow["pid"] and s["ts"] <= flow["ts"] <= s["ts"] + s["dur"] for s in slices)
