"""torch's lowering of a compute order to its compute_comms order, ported so pipesim writes what torch runs.

torch.distributed.pipelining turns a compute-only order into the one its runtime executes with three passes
(torch 2.13, `schedules.py`): `_add_unshard_reshard` (FSDP all-gathers before a stage computes, frees after,
three stages prefetched), `_add_reduce_grad` (one gradient reduction per stage after its last backward) and
`_add_send_recv` (each send right after its producer, and the receive placed on the receiving rank at the same
moment, ranks advanced round by round in rank order). `with_comms` runs the same passes on a pipesim
schedule, so that `--csv-format compute_comms` gives the file torch itself would run, cell for cell (a test
compares every torch schedule class over a grid), and `torch_lowered` gives the schedule torch would run, which
is how a sharded (FSDP) data-parallel step is simulated (`pipesim.sim.data_parallel` decides when). The
passes are written for bounded work: the prefetch look-ahead is computed backwards once per rank, and the
send/receive rounds stop at a work limit.
"""

from __future__ import annotations

import dataclasses

from pipesim.ir import B, CommAction, CommKind, Entry, Overlap, Schedule, W, entry_actions, schedule_from_order
from pipesim.limits import MAX_ACTIONS
from pipesim.semantics.lower import needed_message, produced_message, producers_of, transfers_of

MAX_ACTIVE_STAGES = 3  # torch's `max_active_stages` default: stages prefetched (unsharded) at once
_MAX_ROUND_WORK = 10 * MAX_ACTIONS  # rank visits before giving up (a sound schedule: about ranks x longest row)


def with_comms(schedule: Schedule) -> list[list[Entry]]:
    """Per rank, torch's compute_comms order for the schedule's compute order (idle slots and any collectives
    already written are dropped first: torch's lowering starts from compute actions only)."""
    rows = [[e for e in row if isinstance(e, Overlap) or entry_actions(e)] for row in schedule.order_rows()]
    lowered = [_add_reduce_grad(_add_unshard_reshard(row), schedule.num_microbatches) for row in rows]
    return _add_send_recv(lowered, schedule.stage_to_rank, schedule.num_stages, schedule.pipeline_stages)


def torch_lowered(schedule: Schedule) -> Schedule:
    """The schedule as torch runs it: its compute order with torch's UNSHARD, RESHARD and REDUCE_GRAD, and its
    sends right after their producers (which changes no time)."""
    lowered = schedule_from_order(
        schedule.name,
        schedule.num_ranks,
        schedule.num_microbatches,
        schedule.stage_to_rank,
        with_comms(schedule),
        **schedule.params,
    )
    # what the order's cells do not say: the chains of stages (DualPipe) and the sequence chunks
    return dataclasses.replace(
        lowered, pipelines=schedule.pipelines, seq_chunks=schedule.seq_chunks, seq_cut=schedule.seq_cut
    )


def _stages(entry: Entry) -> list[int]:
    return [a.stage for a in entry_actions(entry)]


def _lookahead(row: list[Entry], count: int) -> list[list[int]]:
    """For each position i, torch's `next_stage_indices(count, row[i:])`: the first distinct stages from i on,
    cut after the entry that brings the count to `count` (an overlapped entry adds all its stages first).

    Computed from the end: the distinct stages from i on are row[i]'s, then those from i+1 on; keeping the first
    `count + 4` of them (each with the position that introduced it) is enough to cut at any entry boundary.
    """
    keep = count + 4
    result: list[list[int]] = [[] for _ in row]
    suffix: list[tuple[int, int]] = []  # (stage, introducing position)
    for i in range(len(row) - 1, -1, -1):
        own = list(dict.fromkeys(_stages(row[i])))
        suffix = [(s, i) for s in own] + [(s, j) for s, j in suffix if s not in own]
        del suffix[keep:]
        chosen: list[int] = []
        for position, (stage, introduced_by) in enumerate(suffix):
            chosen.append(stage)
            last_of_entry = position + 1 == len(suffix) or suffix[position + 1][1] != introduced_by
            overlapped = isinstance(row[introduced_by], Overlap)
            if (len(chosen) == count and not overlapped) or (overlapped and last_of_entry and len(chosen) >= count):
                break
        result[i] = chosen
    return result


def _add_unshard_reshard(row: list[Entry]) -> list[Entry]:
    """torch's `_add_unshard_reshard`: before each entry, reshard stages not needed soon and unshard the next ones.

    `active` is a set as in torch, so that evictions come out in torch's order.
    """
    active: set[int] = set()
    out: list[Entry] = []
    for entry, next_n in zip(row, _lookahead(row, MAX_ACTIVE_STAGES), strict=True):
        fetch = [s for s in next_n if s not in active]
        evict = [s for s in active if s not in next_n]
        for stage in evict:
            active.remove(stage)
            out.append(CommAction(stage, CommKind.RESHARD))
        for stage in fetch:
            active.add(stage)
            out.append(CommAction(stage, CommKind.UNSHARD))
        out.append(entry)
    out.extend(CommAction(stage, CommKind.RESHARD) for stage in list(active))
    return out


def _add_reduce_grad(row: list[Entry], num_microbatches: int) -> list[Entry]:
    """torch's `_add_reduce_grad`: a stage's REDUCE_GRAD right after its last B or W of the step."""
    done: dict[int, int] = {}
    out: list[Entry] = []
    for entry in row:
        out.append(entry)
        for action in entry_actions(entry):
            if action.kind is B or action.kind is W:
                done[action.stage] = done.get(action.stage, 0) + 1
                if done[action.stage] == num_microbatches:
                    out.append(CommAction(action.stage, CommKind.REDUCE_GRAD))
    return out


def _add_send_recv(
    rows: list[list[Entry]], placement: tuple[int, ...], num_stages: int, pipeline_stages: int | None = None
) -> list[list[Entry]]:
    """torch's `_add_send_recv`: ranks take turns in rank order; an entry goes in once its inputs were sent to
    (or produced on) its rank, its sends right after it and the matching receives on the receiving ranks."""

    def ready(action, seen: set) -> bool:
        """Its input was received on this rank, or produced here (the message's producer ran on this rank)."""
        message = needed_message(action, num_stages, pipeline_stages)
        if message is None:
            return True
        producer = producers_of(action, num_stages, pipeline_stages=pipeline_stages)[
            -1
        ]  # the alternatives that produce the message
        return transfers_of(message)[1] in seen or any(p in seen for p in producer)

    out: list[list[Entry]] = [[] for _ in rows]
    seen: list[set] = [set() for _ in rows]
    heads = [0] * len(rows)
    pending = [rank for rank, row in enumerate(rows) if row]
    work = 0
    while pending:
        progress = False
        for rank in pending:
            work += 1
            entry = rows[rank][heads[rank]]
            actions = entry_actions(entry)
            if not all(ready(a, seen[rank]) for a in actions):
                continue
            out[rank].append(entry)
            seen[rank].add(entry)
            for action in actions:
                seen[rank].add(action)
                message = produced_message(action, num_stages, pipeline_stages)
                if message is not None and placement[message.stage] != rank:  # it crosses to another rank
                    send, recv = transfers_of(message)
                    out[rank].append(send)
                    seen[rank].add(send)
                    out[placement[recv.stage]].append(recv)
                    seen[placement[recv.stage]].add(recv)
            heads[rank] += 1
            progress = True
        pending = [rank for rank in pending if heads[rank] < len(rows[rank])]
        if not progress:
            stuck = "; ".join(f"rank {r} at {rows[r][heads[r]]}" for r in pending[:4])
            raise ValueError(
                f"cannot place sends and receives: no rank can go on ({stuck}); the compute order "
                "deadlocks (see the DAG)"
            )
        if work > _MAX_ROUND_WORK:
            raise ValueError("the schedule is too large to lower to torch's compute_comms form")
    return out
