"""Chrome trace (Trace Event Format; opens in https://ui.perfetto.dev and chrome://tracing).

Two views:

* `timeline_to_chrome_trace`: one timeline, one process per rank, compute on thread 0 and the measured
  transfers on thread 1 (what `pipesim simulate --trace` and the app's trace downloads write); given the
  schedule, every message between ranks is a flow arrow from its producer to its consumer (`run_trace`'s
  messages: `transfers`).
* `run_trace`: one step of a run seen several ways (simulated and measured) in one file, so a user opens one
  file and compares. Each view is a process ("simulated", "measured"); each rank has one thread per kind
  (compute, send, recv), and every message between ranks is a flow arrow (`ph: s` / `ph: f`, bound to the
  enclosing slices) from its send slice to its receive slice. The messages are `pipesim.semantics.lower.comm_plan`'s,
  so the arrows are exactly the transfers the executor makes.

Times: the format's unit is the microsecond; pipesim's timelines are in ms.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from pipesim.io.formats import write_json
from pipesim.ir import Action, Schedule
from pipesim.records import CommSpan, Span, Timeline, replica_lanes, replicas, select_replica
from pipesim.semantics.lower import ACT, CommPlan, Message, comm_plan, consumer_kinds

US_PER_MS = 1000.0
_COMPUTE_TID = 0
_COMM_TID = 1

# --- one timeline ----------------------------------------------------------------------------------------------


def _metadata_events(num_ranks: int, with_comm: bool, labels: list[str]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for rank in range(num_ranks):
        events.append(_meta("process_name", rank, _COMPUTE_TID, name=labels[rank]))
        events.append(_meta("process_sort_index", rank, _COMPUTE_TID, sort_index=rank))
        events.append(_meta("thread_name", rank, _COMPUTE_TID, name="compute"))
        if with_comm:
            events.append(_meta("thread_name", rank, _COMM_TID, name="comm"))
    return events


def _meta(event: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {"name": event, "ph": "M", "pid": pid, "tid": tid, "args": args}


def _span_event(span: Span, pid: int, tid: int) -> dict[str, Any]:
    action = span.action
    return {
        "name": str(action),
        "cat": action.kind.value,
        "ph": "X",
        "ts": span.start * US_PER_MS,
        "dur": span.duration * US_PER_MS,
        "pid": pid,
        "tid": tid,
        "args": {"stage": action.stage, "microbatch": action.microbatch, "kind": action.kind.value, "step": span.step}
        | ({"replica": span.replica} if span.replica else {}),
    }


def _comm_event(comm: CommSpan) -> dict[str, Any]:
    return {
        "name": f"{comm.kind} {comm.action} {'to' if comm.kind == 'send' else 'from'} rank {comm.peer}",
        "cat": comm.kind,
        "ph": "X",
        "ts": comm.start * US_PER_MS,
        "dur": (comm.end - comm.start) * US_PER_MS,
        "pid": comm.rank,
        "tid": _COMM_TID,
        "args": {"peer": comm.peer, "action": str(comm.action), "step": comm.step},
    }


def timeline_to_chrome_trace(timeline: Timeline, schedule: Schedule | None = None) -> dict[str, Any]:
    """Trace Event Format: one process per rank, compute on thread 0 and transfers on thread 1 (with several
    data-parallel replicas, one process per replica's rank, named "replica d · rank r"). With `schedule` (one
    replica), each message between ranks is a flow arrow from the slice that produced it to the one that used it."""
    flows = _flow_events(schedule, timeline) if schedule is not None and replicas(timeline) == 1 else []
    timeline, labels = replica_lanes(timeline)
    events = _metadata_events(timeline.num_ranks, bool(timeline.comm), labels)
    events.extend(_span_event(span, span.rank, _COMPUTE_TID) for span in timeline.spans)
    events.extend(_comm_event(comm) for comm in timeline.comm)
    events.extend(flows)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"schedule": timeline.schedule_name, "source": timeline.source},
    }


def save_chrome_trace(timeline: Timeline, path: str | Path, schedule: Schedule | None = None) -> None:
    write_json(timeline_to_chrome_trace(timeline, schedule), path)


def _flow_events(schedule: Schedule, timeline: Timeline) -> list[dict[str, Any]]:
    """A flow arrow (`ph: s` in the producer's slice, `ph: f` in the consumer's) per cross-rank message of the
    one-step `timeline`: the messages `transfers` finds, the executor's own (`comm_plan`)."""
    spans = {(span.rank, span.action): span for span in timeline.spans}
    events = []
    for number, t in enumerate(transfers(comm_plan(schedule), timeline), start=1):
        made, used = spans[(t.src, t.producer)], _consumer(t.message, spans, t.dst)
        assert used is not None  # transfers keeps only messages whose consumer ran
        what = "activation" if t.message.what == ACT else "gradient"
        flow = {"name": f"{what} {t.message.stage}:{t.message.microbatch}", "cat": "message", "id": number}
        events += [
            {**flow, "ph": "s", "pid": t.src, "tid": _COMPUTE_TID, "ts": (made.start + made.end) / 2 * US_PER_MS},
            {
                **flow,
                "ph": "f",
                "bp": "e",
                "pid": t.dst,
                "tid": _COMPUTE_TID,
                "ts": (used.start + used.end) / 2 * US_PER_MS,
            },
        ]
    return events


# --- one run, several views, with flows -----------------------------------------------------------------------
#
# Threads of a view's process: rank r's compute is tid r*1000, its sends r*1000 + 100 + lane, its receives
# r*1000 + 200 + lane. Slices on one thread must nest, yet messages in flight overlap: each overlapping message
# takes the next lane (a second "send" thread), so nothing is dropped or misdrawn.

SEND_BASE, RECV_BASE, RANK_STRIDE = 100, 200, 1000
# A message used the moment it was made has a zero-length slice, and a flow cannot bind inside one reliably:
# comm slices are drawn at least this long (1 us).
MIN_SLICE_MS = 0.001


class Transfer(NamedTuple):
    """One message of one view: sent at the producer's end on `src`, received on `dst` (ms)."""

    message: Message
    src: int
    dst: int
    producer: Action
    send_start: float
    send_end: float
    recv_start: float
    recv_end: float


def _consumer(message: Message, spans: dict[tuple[int, Action], Span], dst: int) -> Span | None:
    """The span on `dst` that uses `message`: F of the stage for an activation, its first backward for a grad
    (`lower.consumer_kinds`)."""
    for kind in consumer_kinds(message):
        span = spans.get((dst, Action(message.stage, kind, message.microbatch)))
        if span is not None:
            return span
    return None


def transfers(plan: CommPlan, timeline: Timeline) -> list[Transfer]:
    """Every cross-rank message of a one-step timeline, with its send and receive slices.

    The message leaves when its producer ends. Measured timelines say when the receiver had it: its recv wait
    (`CommSpan`, blocked time) is the receive slice and its end closes the send slice. Simulated timelines have
    no waits: the message is in flight or waiting until its consumer starts. Messages whose producer or
    consumer is not in the timeline are left out.
    """
    spans = {(span.rank, span.action): span for span in timeline.spans}
    waits = {(c.rank, c.peer, c.action): c for c in timeline.comm if c.kind == "recv"}
    out = []
    for (src, dst), messages in plan.links.items():
        for message in messages:
            producer = plan.producer[message]
            made = spans.get((src, producer))
            used = _consumer(message, spans, dst)
            if made is None or used is None:
                continue
            wait = waits.get((dst, src, producer))
            if wait is not None:
                recv_start, recv_end = wait.start, wait.end
            else:
                recv_start, recv_end = made.end, max(made.end, used.start)
            out.append(Transfer(message, src, dst, producer, made.end, max(made.end, recv_end), recv_start, recv_end))
    out.sort(key=lambda t: (t.send_start, t.src, t.dst))
    return out


def _lanes(intervals: list[tuple[float, float]]) -> list[int]:
    """A lane per interval (in the given order, sorted by start) so that no two in one lane overlap."""
    ends: list[float] = []
    lanes = []
    for start, end in intervals:
        lane = next((k for k, last in enumerate(ends) if last <= start), len(ends))
        if lane == len(ends):
            ends.append(end)
        else:
            ends[lane] = end
        lanes.append(lane)
    return lanes


def _slice(name: str, cat: str, pid: int, tid: int, start: float, end: float, **args: Any) -> dict[str, Any]:
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "ts": start * US_PER_MS,
        "dur": max(0.0, end - start) * US_PER_MS,
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _drawn(start: float, end: float) -> tuple[float, float]:
    return start, max(end, start + MIN_SLICE_MS)


def _mid(event: dict[str, Any]) -> float:
    return event["ts"] + event["dur"] / 2


def _message_lanes(moved: list[Transfer], num_ranks: int) -> tuple[list[int], list[int]]:
    """Per transfer (by position), its lane on the sender's send thread and on the receiver's recv thread."""
    send_lanes, recv_lanes = [0] * len(moved), [0] * len(moved)
    for rank in range(num_ranks):
        sent = [i for i, t in enumerate(moved) if t.src == rank]  # `moved` is sorted by send start
        got = sorted((i for i, t in enumerate(moved) if t.dst == rank), key=lambda i: moved[i].recv_start)
        for i, lane in zip(sent, _lanes([_drawn(moved[i].send_start, moved[i].send_end) for i in sent]), strict=True):
            send_lanes[i] = lane
        for i, lane in zip(got, _lanes([_drawn(moved[i].recv_start, moved[i].recv_end) for i in got]), strict=True):
            recv_lanes[i] = lane
    return send_lanes, recv_lanes


def _view_events(
    pid: int, timeline: Timeline, plan: CommPlan, first_flow: int, lane_base: int = 0, prefix: str = ""
) -> list[dict[str, Any]]:
    """One replica's spans and messages as threads of process `pid`: rank r's threads start at tid
    (lane_base + r) x RANK_STRIDE and are named with `prefix` ("replica d · " when a run kept several)."""
    events = []
    threads: dict[int, str] = {}
    for span in timeline.spans:
        tid = (lane_base + span.rank) * RANK_STRIDE
        threads[tid] = f"{prefix}rank {span.rank} compute"
        events.append(_span_event(span, pid, tid))
    moved = transfers(plan, timeline)
    send_lanes, recv_lanes = _message_lanes(moved, timeline.num_ranks)
    for number, (t, send_lane, recv_lane) in enumerate(
        zip(moved, send_lanes, recv_lanes, strict=True), start=first_flow
    ):
        what = "activation" if t.message.what == ACT else "gradient"
        text = f"{what} {t.message.stage}:{t.message.microbatch} of {t.producer}"
        send_tid = (lane_base + t.src) * RANK_STRIDE + SEND_BASE + send_lane
        recv_tid = (lane_base + t.dst) * RANK_STRIDE + RECV_BASE + recv_lane
        threads[send_tid] = f"{prefix}rank {t.src} send" + (f" #{send_lane + 1}" if send_lane else "")
        threads[recv_tid] = f"{prefix}rank {t.dst} recv" + (f" #{recv_lane + 1}" if recv_lane else "")
        send = _slice(
            f"send {text} to rank {t.dst}",
            "send",
            pid,
            send_tid,
            *_drawn(t.send_start, t.send_end),
            peer=t.dst,
            action=str(t.producer),
            flow=number,
        )
        recv = _slice(
            f"recv {text} from rank {t.src}",
            "recv",
            pid,
            recv_tid,
            *_drawn(t.recv_start, t.recv_end),
            peer=t.src,
            action=str(t.producer),
            flow=number,
        )
        flow = {"name": text, "cat": "message", "id": number}
        events += [
            send,
            recv,
            {**flow, "ph": "s", "pid": pid, "tid": send_tid, "ts": _mid(send)},
            {**flow, "ph": "f", "bp": "e", "pid": pid, "tid": recv_tid, "ts": _mid(recv)},
        ]
    for tid, name in threads.items():
        events += [_meta("thread_name", pid, tid, name=name), _meta("thread_sort_index", pid, tid, sort_index=tid)]
    return events


def run_trace(schedule: Schedule, views: dict[str, Timeline]) -> dict[str, Any]:
    """One file with every view of one step (e.g. {"simulated": ..., "measured": ...}), each a process.

    Each timeline must hold one step starting at 0 (`pipesim.analysis.overlay.pick_step` cuts a measured one), so the
    views line up at 0 and read side by side. A measured run that kept every data-parallel replica shows each
    replica's ranks as threads of their own ("replica d · rank r"), so a straggling replica stands out.
    """
    if not views:
        raise ValueError("a run trace needs at least one timeline (simulated or measured)")
    plan = comm_plan(schedule)
    events: list[dict[str, Any]] = []
    flows = 1
    for pid, (label, timeline) in enumerate(views.items(), start=1):
        if timeline.num_ranks != schedule.num_ranks:
            raise ValueError(f"the {label} timeline has {timeline.num_ranks} ranks, the schedule {schedule.num_ranks}")
        events += [_meta("process_name", pid, 0, name=label), _meta("process_sort_index", pid, 0, sort_index=pid)]
        count = replicas(timeline)
        for replica in range(count):
            view = _view_events(
                pid,
                select_replica(timeline, replica),
                plan,
                flows,
                lane_base=replica * schedule.num_ranks,
                prefix=f"replica {replica} · " if count > 1 else "",
            )
            flows += sum(1 for event in view if event["ph"] == "s")
            events += view
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {"schedule": schedule.name, "views": list(views), "units": "us"},
    }


def save_run_trace(schedule: Schedule, views: dict[str, Timeline], path: str | Path) -> None:
    write_json(run_trace(schedule, views), path)
