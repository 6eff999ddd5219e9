"""Kineto-like trace files written from a simulated timeline: what torch.profiler writes for PP: labels."""

from __future__ import annotations

import json

from pipesim.cost.model import CostModel
from pipesim.semantics.lower import comm_plan
from pipesim.sim.simulate import simulate

BASES = (1_790_000_000_000_000_000, 1_790_000_000_250_000_000)  # rank 1's file starts its clock 250 ms later


def kineto_files(tmp_path, schedule, steps=2, merged=False, base_ms=1000.0, cost=None):
    """One Kineto-like file per rank (or one merged) of `steps` simulated steps of `schedule` (under `cost`, by
    default F 1 ms, B 2 ms, transfers 0.2 ms), with sends; and the spans an import must give: (rank, action text,
    step, start, end), times from each step's start."""
    timeline = simulate(schedule, cost or CostModel.uniform(forward_ms=1.0, backward_ms=2.0, comm_ms=0.2))
    step_ms = max(s.end for s in timeline.spans) + 5.0
    first = min(s.start for s in timeline.spans)
    plan = comm_plan(schedule)
    first_send = {}  # (rank, producer) -> the first message it sends, looked up once per span (linear in size)
    for (src, _), keys in plan.links.items():
        for m in keys:
            first_send.setdefault((src, plan.producer[m]), m)
    per_rank = {rank: [] for rank in range(schedule.num_ranks)}
    expected = []
    for step in range(steps):
        for span in timeline.spans:
            start = base_ms + step * step_ms + span.start
            base = 0.0 if merged else (BASES[span.rank % 2] - BASES[0]) / 1e6  # ms the file's clock is ahead
            ts = (start - base) * 1000.0
            per_rank[span.rank] += [
                {
                    "ph": "X",
                    "cat": "user_annotation",
                    "name": f"PP:{span.action}",
                    "pid": 100 + span.rank,
                    "tid": 1,
                    "ts": ts,
                    "dur": span.duration * 1000.0,
                },
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": "aten::mm",
                    "pid": 100 + span.rank,
                    "tid": 1,
                    "ts": ts + 1.0,
                    "dur": span.duration * 500.0,
                },
            ]
            # imported times run from each step's start (its earliest label), as measured timelines do
            expected.append((span.rank, str(span.action), step, span.start - first, span.end - first))
            message = first_send.get((span.rank, span.action))
            if message is not None:
                kind = "SEND_F" if message.what == "act" else "SEND_B"
                per_rank[span.rank].append(
                    {
                        "ph": "X",
                        "cat": "user_annotation",
                        "pid": 100 + span.rank,
                        "tid": 1,
                        "name": f"PP:{span.action.stage}{kind}{span.action.microbatch}",
                        "ts": ts + span.duration * 1000.0 + 1.0,
                        "dur": 5.0,
                    }
                )
    paths = []
    if merged:
        events = [e for rank in per_rank for e in per_rank[rank]]
        events += [{"ph": "M", "name": "process_name", "pid": 100 + r, "args": {"name": f"rank {r}"}} for r in per_rank]
        paths.append(tmp_path / "merged.json")
        paths[0].write_text(json.dumps({"traceEvents": events}))
    else:
        for rank, events in per_rank.items():
            path = tmp_path / f"rank{rank}.json"
            path.write_text(
                json.dumps(
                    {
                        "schemaVersion": 1,
                        "distributedInfo": {"rank": rank, "world_size": 2},
                        "baseTimeNanoseconds": BASES[rank % 2],
                        "traceEvents": events,
                    }
                )
            )
            paths.append(path)
    return paths, expected
