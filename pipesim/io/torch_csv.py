"""torch.distributed.pipelining's schedule CSV, both of its formats, both ways.

One row per rank, one cell per action in that rank's order; an empty cell is an idle slot (torch writes its
`None` steps so). This is what `_PipelineScheduleRuntime._dump_csv` writes (csv.writer over the order) and what
`_load_csv` reads back:

* ``compute_only``: compute actions (``2F0``, ``1B3``, ``0I2``, ``0W2``), overlapped groups
  (``(0F3;3B1)OVERLAP_F_B``) and, in torch's single-stage orders (GPipe, 1F1B), ``0REDUCE_GRAD``;
* ``compute_comms``: the same after torch's lowering, with every transfer (``0SEND_F1``, ``1RECV_F1``,
  ``1SEND_B0``, ``0RECV_B0``) and the FSDP and data-parallel collectives (``0UNSHARD``, ``0RESHARD``,
  ``0REDUCE_GRAD``) in place.

torch's older dialect (its own test artifacts, e.g. ``zb1p_2rank_2stagep_compute.csv``, still use it) wrote the
input half of a split backward as ``B`` and the full backward as ``BW``: ``2B0`` followed (anywhere later) by
``2W0`` is I then W, and ``2BW0`` is B (torch's ``_merge_bw`` joins the adjacent pairs). A file in that dialect
(a ``BW`` cell, or a B and a W of one stage and microbatch with no I anywhere: never valid in the current one) is
read as such, says so in `dialect_note`, and is written back in the current dialect.

Reading keeps the file's full order (`Schedule.order`) so that writing it back gives the same cells; what the
actions mean (the explicit transfer order, the collectives, overlapped groups) is `pipesim.semantics.lower`'s and the
simulator's. Writing ``compute_comms`` from a schedule that has no transfers runs torch's own lowering
(`pipesim.semantics.torch_order.with_comms`).
"""

from __future__ import annotations

import csv
import io
import re
from typing import Literal

from pipesim.ir import (
    MEMORY_MOVES,
    TRANSFER_KINDS,
    CommAction,
    Entry,
    Schedule,
    entry_actions,
    parse_entry,
    schedule_from_order,
)
from pipesim.limits import MAX_MICROBATCHES, MAX_STAGES, check_sizes
from pipesim.semantics.lower import has_memory_moves
from pipesim.semantics.torch_order import with_comms

CsvFormat = Literal["auto", "compute_only", "compute_comms"]
CSV_FORMATS = ("auto", "compute_only", "compute_comms")


class CsvError(ValueError):
    """A CSV schedule that cannot be read: `row` is the rank (0-based), `column` the cell index.

    Either may be None when the problem is not tied to one cell (no actions at all, a
    stage number that never appears).
    """

    def __init__(self, message: str, row: int | None = None, column: int | None = None) -> None:
        where = ""
        if row is not None:
            where = f"row {row + 1} (rank {row})" + ("" if column is None else f", cell {column + 1}") + ": "
        super().__init__(where + message)
        self.row = row
        self.column = column


def _check_format(csv_format: str) -> None:
    if csv_format not in CSV_FORMATS:
        raise ValueError(f"unknown CSV format {csv_format!r}: choose one of {', '.join(CSV_FORMATS)}")


def _is_transfer(entry: Entry | None) -> bool:
    return isinstance(entry, CommAction) and entry.kind in TRANSFER_KINDS


def schedule_to_csv(schedule: Schedule, csv_format: CsvFormat = "compute_only") -> str:
    """The schedule as torch's CSV (rows end in CRLF like csv.writer's).

    ``compute_only``: the schedule's own cells without transfers; a schedule read from a compute_comms file
    also loses its collectives, which torch's lowering adds back (torch's `_load_csv(format="compute_only")`
    refuses them); its OFFLOADs and RELOADs stay. ``compute_comms``: the schedule's cells when it states its
    transfers, else torch's lowering of its compute order (refused for a schedule with memory moves, which that
    lowering would drop). ``auto`` writes the form the schedule has.
    """
    _check_format(csv_format)
    if csv_format == "auto":
        csv_format = "compute_comms" if schedule.has_transfers else "compute_only"
    if csv_format == "compute_comms":
        if schedule.has_transfers:
            rows = schedule.order_rows()
        elif has_memory_moves(schedule):  # torch's lowering places transfers around compute actions only
            raise ValueError(
                f"{schedule.name}: torch's lowering of a compute order adds its transfers but has no OFFLOAD or "
                "RELOAD, so the schedule's memory moves would be lost: write compute_only (it keeps them) or "
                "pipesim's schedule JSON"
            )
        else:
            rows = with_comms(schedule)
    elif schedule.has_transfers:  # the transfers and collectives go; the memory moves are the schedule's own
        rows = [
            [e for e in row if not isinstance(e, CommAction) or e.kind in MEMORY_MOVES] for row in schedule.order_rows()
        ]
    else:
        rows = schedule.order_rows()
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    for row in rows:
        writer.writerow(["" if e is None else str(e) for e in row])
    return buffer.getvalue()


_COMPUTE_CELL = re.compile(r"^\s*(\d{1,9})\s*(BW|[BIW])\s*(\d{1,9})\s*$", re.ASCII)
OLDER_DIALECT = "torch's older dialect (B then W = I then W, BW = B)"


def _from_older_dialect(rows: list[list[str]]) -> bool:
    """Rewrite, in place, cells of torch's older dialect into the current one; whether the file was in it.

    The older dialect is recognised only where the current one cannot hold: a ``BW`` cell, or a ``B`` and a
    ``W`` of the same stage and microbatch in a file with no ``I``. A file mixing both is refused."""
    cells: list[tuple[int, int, str, tuple[int, int]]] = []  # (row, column, kind, (stage, microbatch))
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            match = _COMPUTE_CELL.match(cell) if "B" in cell or "W" in cell or "I" in cell else None
            if match is not None:
                cells.append((r, c, match.group(2), (int(match.group(1)), int(match.group(3)))))
    kinds = {kind for _, _, kind, _ in cells}
    weights = {key for _, _, kind, key in cells if kind == "W"}
    paired = any(kind == "B" and key in weights for _, _, kind, key in cells)
    if "BW" not in kinds and not (paired and "I" not in kinds):
        return False
    if "I" in kinds:
        r, c = next((r, c) for r, c, kind, _ in cells if kind == "I")
        raise CsvError(
            f"{rows[r][c].strip()!r} is the current dialect's input backward, but the file also has BW cells of "
            "torch's older dialect (B = input half, BW = full backward): write it in one dialect",
            r,
            c,
        )
    for r, c, kind, (stage, microbatch) in cells:
        if kind == "BW":
            rows[r][c] = f"{stage}B{microbatch}"
        elif kind == "B" and (stage, microbatch) in weights:
            rows[r][c] = f"{stage}I{microbatch}"
    return True


def dialect_note(schedule: Schedule) -> str | None:
    """One line saying the schedule was read from torch's older dialect, None when it was not."""
    if schedule.params.get("dialect") != "torch-older":
        return None
    return f"read {schedule.name} as {OLDER_DIALECT}; it is written back in the current one (I, W, B)"


def _parse_cell(text: str, row: int, column: int, csv_format: str) -> Entry | None:
    try:
        entry = parse_entry(text)
    except ValueError as error:
        raise CsvError(str(error), row, column) from None
    if csv_format == "compute_only" and _is_transfer(entry):
        raise CsvError(
            f"{text.strip()!r} is a communication action; the compute_only format holds none (read the file "
            "as compute_comms, or let the format be detected)",
            row,
            column,
        )
    for stage, microbatch in _numbers(entry):
        if stage >= MAX_STAGES or (microbatch or 0) >= MAX_MICROBATCHES:
            raise CsvError(
                f"{text.strip()}: stages are limited to {MAX_STAGES:,} and microbatches to "
                f"{MAX_MICROBATCHES:,} (pipesim/limits.py)",
                row,
                column,
            )
    return entry


def _numbers(entry: Entry | None) -> list[tuple[int, int | None]]:
    if isinstance(entry, CommAction):
        return [(entry.stage, entry.microbatch)]
    return [(a.stage, a.microbatch) for a in entry_actions(entry)]


def schedule_from_csv(text: str, name: str = "custom", csv_format: CsvFormat = "auto") -> Schedule:
    """Read torch's CSV; placement is inferred from where each stage's actions appear.

    The number of ranks is the number of rows, the number of stages the highest stage number plus one and the
    number of microbatches the highest microbatch plus one. ``auto`` accepts both formats (a file with sends
    or receives is compute_comms); ``compute_only`` refuses transfers. Structural checks (every F has its
    backward, every transfer its partner, ...) are left to `pipesim.semantics.validate`.
    """
    _check_format(csv_format)
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as error:  # e.g. a cell beyond the csv module's field limit (131,072 characters)
        raise CsvError(f"not a readable CSV: {error}") from None
    while rows and not any(cell.strip() for cell in rows[-1]):
        rows.pop()  # trailing blank lines are not ranks (an interior blank row is an idle rank, as in torch's files)
    if not rows:
        raise CsvError("the CSV is empty: expected one row of actions per rank")
    check_sizes(num_ranks=len(rows), num_actions=sum(len(cells) for cells in rows))
    older = _from_older_dialect(rows)
    order: list[list[Entry | None]] = []
    placement: dict[int, tuple[int, int]] = {}  # stage -> (rank, cell) where first seen
    last_microbatch = -1
    for rank, cells in enumerate(rows):
        rank_order: list[Entry | None] = []
        for column, cell in enumerate(cells):
            entry = _parse_cell(cell, rank, column, csv_format)
            for stage, microbatch in _numbers(entry):
                first = placement.setdefault(stage, (rank, column))
                if first[0] != rank:
                    raise CsvError(
                        f"stage {stage} ({cell.strip()}) appears on rank {rank}, but also on rank {first[0]} "
                        f"(cell {first[1] + 1}): a stage lives on exactly one rank",
                        rank,
                        column,
                    )
                if microbatch is not None and microbatch > last_microbatch:
                    last_microbatch = microbatch
            rank_order.append(entry)
        order.append(rank_order)
    if not any(entry_actions(e) for row in order for e in row):
        raise CsvError("the CSV holds no actions: expected cells such as 0F0")
    num_stages = max(placement) + 1
    missing = [stage for stage in range(num_stages) if stage not in placement]
    if missing:
        shown = ", ".join(map(str, missing[:5])) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise CsvError(
            f"stage(s) {shown} never appear, yet stage {num_stages - 1} does: "
            f"stages must be numbered 0..{num_stages - 1} without gaps"
        )
    stage_to_rank = [placement[stage][0] for stage in range(num_stages)]
    dialect = {"dialect": "torch-older"} if older else {}
    return schedule_from_order(name, len(rows), last_microbatch + 1, stage_to_rank, order, source="csv", **dialect)
