"""Importing torch.profiler (Kineto) traces: PP: labels -> schedule and imported timeline; hostile traces refused.

The traces here are written the way Kineto writes them (complete events in microseconds, `distributedInfo`,
`baseTimeNanoseconds`, torch ops nested under the labels, communication labels); the torchrun test in
test_torch_profile.py imports traces that torch itself recorded.
"""

from __future__ import annotations

import json

import pytest

from pipesim.cli import main as cli
from pipesim.cost.model import CostModel
from pipesim.io import kineto, trace_labels
from pipesim.io.formats import load_schedule
from pipesim.io.kineto import import_traces
from pipesim.schedules import build_schedule, options_for
from pipesim.semantics.lower import comm_plan
from pipesim.sim.metrics import makespan
from pipesim.sim.simulate import simulate
from tests.helpers.kineto_traces import kineto_files


@pytest.mark.parametrize("name", ["1f1b", "interleaved-1f1b", "zb-h1", "zbv"])
@pytest.mark.parametrize("merged", [False, True])
def test_import_recovers_the_schedule_and_the_label_times(tmp_path, name, merged):
    schedule = build_schedule(name, 2, 4, **options_for(name, num_virtual_stages=2))
    paths, expected = kineto_files(tmp_path, schedule, merged=merged)
    run = import_traces(paths[::-1] if not merged else paths, name=name)  # file order does not matter: ranks say
    assert run.schedule.actions == schedule.actions and run.schedule.stage_to_rank == schedule.stage_to_rank
    assert run.timeline.source == "imported" and len(run.step_times_ms) == 2
    got = sorted((s.rank, str(s.action), s.step, s.start, s.end) for s in run.timeline.spans)
    assert len(got) == len(expected)
    for real, want in zip(got, sorted(expected), strict=True):
        assert real[:3] == want[:3] and real[3:] == pytest.approx(want[3:], abs=1e-6)
    sends = [c for c in run.timeline.comm if c.kind == "send"]
    assert len(sends) == 2 * sum(len(keys) for keys in comm_plan(schedule).links.values())
    assert all(c.peer != c.rank for c in sends)


def test_cli_imports_overlays_and_writes(tmp_path, capsys):
    schedule = build_schedule("interleaved-1f1b", 2, 4, num_virtual_stages=2)
    paths, _ = kineto_files(tmp_path, schedule, steps=3)
    out = tmp_path / "out"
    out.mkdir()
    code = cli.main(
        [
            "import-trace",
            *map(str, paths),
            "--schedule-out",
            str(out / "s.json"),
            "--json",
            str(out / "t.json"),
            "--trace",
            str(out / "both.json"),
            "--html",
            str(out / "o.html"),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "3 steps recorded" in printed and "rank 1: compute" in printed
    assert load_schedule(out / "s.json").actions == schedule.actions
    doc = json.loads((out / "t.json").read_text())
    assert doc["source"] == "imported" and len(doc["step_times_ms"]) == 3 and doc["analysis"]["ranks"]
    # The traces hold the simulation of F 1 ms, B 2 ms, transfers 0.2 ms: each imported step lasts exactly that
    # step, and the replay with the traces' own times (F 1, B 2, transfers free) is exactly the schedule's
    # makespan without transfers (up to the microsecond rounding of the trace's numbers).
    recorded = makespan(simulate(schedule, CostModel.uniform(forward_ms=1.0, backward_ms=2.0, comm_ms=0.2)))
    assert doc["step_times_ms"] == pytest.approx([recorded] * 3, abs=1e-9)
    assert doc["simulated_step_ms"] == pytest.approx(makespan(simulate(schedule, CostModel.uniform())), abs=1e-9)
    assert doc["simulated_step_ms"] < recorded
    views = json.loads((out / "both.json").read_text())["otherData"]["views"]
    assert views == ["simulated", "imported"] and (out / "o.html").stat().st_size > 1000


@pytest.mark.parametrize(
    "content,message",
    [
        ("{not json", "not valid JSON"),
        ('{"events": []}', "not a Chrome trace"),
        ('{"traceEvents": [{"ph": "X", "name": "aten::mm", "ts": 1, "dur": 1}]}', "no PP: labels"),
        ('{"traceEvents": [{"ph": "X", "name": "PP:0F0", "ts": "x", "dur": 1}]}', "no valid ts/dur"),
        ('{"traceEvents": [{"ph": "X", "name": "PP:0Q0", "ts": 1, "dur": 1}]}', "cannot read label"),
        ("[" * 100000 + "]" * 100000, "nested too deeply"),
    ],
)
def test_hostile_traces_get_one_line_errors(tmp_path, capsys, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert cli.main(["import-trace", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_traces_that_are_not_one_schedule_are_refused(tmp_path, monkeypatch):
    schedule = build_schedule("1f1b", 2, 2)
    paths, _ = kineto_files(tmp_path, schedule)
    rank1 = json.loads(paths[1].read_text())
    last = max(i for i, e in enumerate(rank1["traceEvents"]) if e["name"].startswith("PP:") and "SEND" not in e["name"])
    del rank1["traceEvents"][last]  # the last step's last action is missing
    paths[1].write_text(json.dumps(rank1))
    with pytest.raises(ValueError, match="partial step"):
        import_traces(paths)
    with pytest.raises(ValueError, match="no trace for rank 0"):
        import_traces(paths[1:])
    with pytest.raises(ValueError, match="given each rank|also in"):
        import_traces([paths[0], paths[0]])
    monkeypatch.setattr(trace_labels, "MAX_TRACE_BYTES", 10)
    with pytest.raises(ValueError, match="at most"):
        import_traces(paths)


def test_steps_in_different_orders_are_refused(tmp_path):
    schedule = build_schedule("1f1b", 2, 2)
    paths, _ = kineto_files(tmp_path, schedule)
    data = json.loads(paths[0].read_text())
    labels = [e for e in data["traceEvents"] if e["name"].startswith("PP:") and "SEND" not in e["name"]]
    second = labels[len(labels) // 2 :]  # step 1: swap the first two actions' times
    second[0]["ts"], second[1]["ts"] = second[1]["ts"], second[0]["ts"]
    paths[0].write_text(json.dumps(data))
    with pytest.raises(ValueError, match="step 1 runs"):
        import_traces(paths)


def test_an_overlapped_pair_is_split_between_its_sub_actions(tmp_path):
    events = [
        {"ph": "X", "name": name, "pid": 1, "tid": 1, "ts": start * 1000.0, "dur": (end - start) * 1000.0}
        for name, start, end in (
            ("PP:0F0", 0, 1),
            ("PP:(0F1;0B0)OVERLAP_F_B", 1, 4),
            ("PP:0B1", 4, 6),
            ("PP:0REDUCE_GRAD", 6, 6.5),
        )
    ]
    path = tmp_path / "one.json"
    path.write_text(json.dumps({"traceEvents": events}))
    run = import_traces([path])
    assert [str(a) for a in run.schedule.actions[0]] == ["0F0", "0F1", "0B0", "0B1"]
    assert [(str(s.action), s.start, s.end) for s in run.timeline.spans] == [
        ("0F0", 0.0, 1.0),
        ("0F1", 1.0, 2.5),
        ("0B0", 2.5, 4.0),
        ("0B1", 4.0, 6.0),
    ]


def test_torch_gpipe_labels_are_read_where_there_are_no_pp_labels(tmp_path):
    schedule = build_schedule("gpipe", 2, 3)
    paths, expected = kineto_files(tmp_path, schedule)
    for path in paths:  # ScheduleGPipe's labels: "Forward i", "Backward i"; the stage is the rank's own
        data = json.loads(path.read_text())
        for event in data["traceEvents"]:
            if event["name"].startswith("PP:") and "SEND" not in event["name"]:
                action = event["name"][3:]
                event["name"] = ("Forward " if "F" in action else "Backward ") + action.split(
                    "F" if "F" in action else "B"
                )[1]
        data["traceEvents"] = [e for e in data["traceEvents"] if not e["name"].startswith("PP:")]
        path.write_text(json.dumps(data))
    run = import_traces(paths)
    assert run.schedule.actions == schedule.actions and len(run.timeline.spans) == len(expected)


def test_every_imported_step_is_attributed_from_its_own_start(tmp_path, capsys):
    """Issue 20 item 4. Catches spans of a multi-step trace timed from the trace's start rather than their own
    step's: step k's parts then add up to k steps too many (the overhead grew by one step per step), and only
    a median step 0 looked right."""
    from pipesim.analysis.attribution import attribute_run

    schedule = build_schedule("1f1b", 2, 4)
    paths, _ = kineto_files(tmp_path, schedule, steps=3)
    run = import_traces(paths)
    assert sorted({s.step for s in run.timeline.spans}) == [0, 1, 2]
    for step in range(3):  # every step starts at 0, as the executor's measured steps do
        assert min(s.start for s in run.timeline.spans if s.step == step) == 0.0
        assert min(c.start for c in run.timeline.comm if c.step == step) > 0.0
    analysis = attribute_run(run.schedule, run.timeline, run.step_times_ms)
    shares = [[r for r in step["ranks"]] for step in analysis["steps"]]
    for step, ranks in zip(analysis["steps"], shares, strict=True):
        for row in ranks:
            parts = row["compute_ms"] + row["schedule_idle_ms"] + row["comm_wait_ms"] + row["overhead_ms"]
            assert parts == pytest.approx(step["step_ms"], abs=1e-9)
    # three identical steps: identical splits (the overhead does not grow with the step's number)
    for later in shares[1:]:
        for a, b in zip(shares[0], later, strict=True):
            assert a["overhead_ms"] == pytest.approx(b["overhead_ms"], abs=1e-9)
            assert a["schedule_idle_ms"] == pytest.approx(b["schedule_idle_ms"], abs=1e-9)
    # and the printed summary adds up to the printed step
    assert cli.main(["import-trace", *map(str, paths)]) == 0
    printed = capsys.readouterr().out
    step_ms = float(printed.split("imported step ")[1].split(" ms")[0])
    for line in (line for line in printed.splitlines() if line.strip().startswith("rank ")):
        numbers = [float(word) for word in line.replace("+", " ").split() if word.replace(".", "").isdigit()]
        assert sum(numbers) == pytest.approx(step_ms, abs=0.01)


def _one_label_trace(tmp_path, events, **top):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events, **top}))
    return path


@pytest.mark.parametrize(
    "text,message",
    [
        ('{"traceEvents": [{"ph": "X", "name": "PP:0F0", "ts": NaN, "dur": 1}]}', "NaN is not a number JSON allows"),
        ('{"traceEvents": [{"ph": "X", "name": "PP:0F0", "ts": 1, "dur": Infinity}]}', "Infinity is not a number"),
        ('{"traceEvents": [{"ph": "X", "name": "PP:0F0", "ts": 1e308, "dur": 1e308}]}', "no valid ts/dur"),
        ('{"traceEvents": [{"ph": "X", "name": "PP:0F0", "ts": 1, "dur": true}]}', "no valid ts/dur"),
        ('{"traceEvents": [{"ph": "X", "name": "PP:0F0", "ts": 1, "dur": 1' + "0" * 5000 + "}]}", "not valid JSON"),
    ],
)
def test_timestamps_that_are_not_numbers_are_refused(tmp_path, capsys, text, message):
    """Issue 20 item 2: NaN timestamps once printed `compute nan` and exited 0."""
    path = tmp_path / "nan.json"
    path.write_text(text)
    assert cli.main(["import-trace", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and str(path) in err


@pytest.mark.parametrize("rank", [10**12, 1024])
def test_a_trace_naming_a_huge_rank_is_refused_before_anything_is_allocated(tmp_path, capsys, rank):
    """Issue 20 item 2: rank 10^12 once took 3.7 GB, then a MemoryError traceback."""
    event = {"ph": "X", "name": "PP:0F0", "pid": 1, "ts": 1, "dur": 1}
    path = _one_label_trace(tmp_path, [event], distributedInfo={"rank": rank})
    assert cli.main(["import-trace", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"rank {rank} is past pipesim's limit of 1,024 ranks" in err and err.count("\n") == 1


def test_trace_events_past_the_limit_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(trace_labels, "MAX_TRACE_EVENTS", 3)
    events = [{"ph": "i", "name": "x", "ts": k} for k in range(4)]
    with pytest.raises(ValueError, match="holds 4 events; pipesim imports at most 3"):
        import_traces([_one_label_trace(tmp_path, events)])


def test_only_label_events_are_kept_while_parsing(tmp_path):
    """The object hook drops torch's ops as they are parsed (memory: about a third of the whole document)."""
    schedule = build_schedule("1f1b", 2, 2)
    paths, _ = kineto_files(tmp_path, schedule)
    data = kineto.read_trace(paths[0])
    kept = [e for e in data["traceEvents"] if e is not None]
    assert kept and all(kineto.Slice(*e).name.startswith("PP:") for e in kept)
    assert len(data["traceEvents"]) == len(json.loads(paths[0].read_text())["traceEvents"])


def test_a_trace_that_is_a_fifo_or_a_folder_is_refused_at_once(tmp_path, capsys):
    import os

    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    assert cli.main(["import-trace", str(fifo), str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "it is a FIFO (named pipe)" in err and str(fifo) in err
