"""A message's in-run hop: from the end of the action that produced it to the start of the action that consumed it,
where the consumer was already waiting in its receive.

A ping-pong between two ranks prices the wire (a tiny tensor through gloo: about 0.05 ms on this project's
machine), but a real step pays more between two actions on different ranks: the producer's send after its span,
the waiting receiver's wake-up, the hand-over to the runner. The simulation charges a rank's dispatch gap before
it waits for its inputs (`pipesim.sim.simulate`), so whatever follows a receive the consumer was blocked in is
the hop's. A receive posted after its message arrived says nothing of the hop and is left out.

One rule, over plain records, for everything that measures it: sleep mode's calibration
(`pipesim_executor.rank.sleep_calibrate`), the unit profile's in-situ steps (`pipesim_executor.rank.unit_fit`)
and the decomposition of a measured step (`pipesim.analysis.decompose`). Needs one clock for every rank (one
machine).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from typing import Any

from pipesim.ir import Action
from pipesim.records import Timeline
from pipesim.semantics.lower import consumer_kinds, crossing_stage, produced_message


def hop_samples(per_rank_steps: Sequence[Sequence[Mapping[str, Any]]]) -> dict[int, list[float]]:
    """Per stage boundary (b: between stages b and b + 1), every in-run hop. `per_rank_steps[p]` is rank p's steps in
    order, each {"spans": [[action text, start, end], ...], "comm": [[kind, peer, producer's action text, start,
    end], ...]} on the one clock; step i of every rank is the same step."""
    ends: dict[tuple[int, str], float] = {}
    for steps in per_rank_steps:
        for step, record in enumerate(steps):
            for text, _start, end in record["spans"]:
                ends[(step, text)] = end
    samples: dict[int, list[float]] = {}
    for steps in per_rank_steps:
        for step, record in enumerate(steps):
            starts = sorted(start for _text, start, _end in record["spans"])
            for kind, _peer, producer, start, end in record["comm"]:
                produced = ends.get((step, producer))
                if kind != "recv" or produced is None or start > produced:
                    continue
                consumer = bisect.bisect_left(starts, end)  # the first action to start after the receive
                if consumer == len(starts):
                    continue
                boundary = _boundary(Action.parse(producer))
                if boundary is not None:
                    samples.setdefault(boundary, []).append(max(starts[consumer] - produced, 0.0))
    return samples


def _boundary(producer: Action) -> int | None:
    """The stage boundary the message of `producer` crosses (None: it hands nothing on), read off the lowering:
    its consumer's `crossing_stage`. A message goes at most one stage on, so stage + 2 stages hold its consumer."""
    message = produced_message(producer, producer.stage + 2)
    if message is None:
        return None
    return crossing_stage(Action(message.stage, consumer_kinds(message)[0], message.microbatch))


def timeline_steps(timeline: Timeline) -> list[list[dict[str, Any]]]:
    """A measured Timeline as `hop_samples` reads it: per rank, its steps in order (every step of the timeline)."""
    steps = sorted({span.step for span in timeline.spans})
    index = {step: i for i, step in enumerate(steps)}
    out: list[list[dict[str, Any]]] = [[{"spans": [], "comm": []} for _ in steps] for _ in range(timeline.num_ranks)]
    for span in timeline.spans:
        out[span.rank][index[span.step]]["spans"].append([str(span.action), span.start, span.end])
    for comm in timeline.comm:
        if comm.kind == "recv" and comm.step in index and isinstance(comm.action, Action):
            out[comm.rank][index[comm.step]]["comm"].append(["recv", comm.peer, str(comm.action), comm.start, comm.end])
    return out
