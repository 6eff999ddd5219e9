"""A CSV schedule as an editable table, and its problems located in the table's cells.

The Custom page edits torch.distributed.pipelining's compute_only CSV as a ranks x
cells table; validation errors (pipesim.semantics.validate) and deadlock cycles (pipesim.semantics.dag)
name a rank and a position in that rank's action list, which this module turns into
the cell to highlight (empty cells are idle slots and count as cells, not actions).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from app_pages.parts.cached import HASH_FUNCS
from pipesim.ir import Action, Schedule, entry_actions, parse_entry
from pipesim.semantics import find_problems
from pipesim.sim import find_deadlock


@dataclass(frozen=True)
class Problem:
    """A schedule problem as plain data (exceptions with custom __init__ do not pickle back)."""

    message: str
    rank: int | None = None
    column: int | None = None  # cell index in the CSV row (empty cells count)
    kind: str = "error"  # "error" (structural, parse) or "deadlock"


@st.cache_data(max_entries=32, show_spinner=False, hash_funcs=HASH_FUNCS)
def schedule_problems(schedule: Schedule, csv_text: str | None = None) -> list[Problem]:
    """Structural problems, then (for a sound schedule) a deadlock cycle, located in CSV cells."""
    columns = _cell_columns(csv_text, schedule) if csv_text is not None else None
    located = []
    for error in find_problems(schedule):
        index = error.index if error.index is not None else _partner_index(schedule, error.rank, error.action)
        column = index
        if error.action is None and error.index is not None:
            pass  # a problem of torch's full order (a transfer, a collective): its index is already the cell
        elif columns is not None and error.rank is not None and index is not None:
            column = columns[error.rank][index]
        where = f"cell {column + 1}: " if column is not None else ""
        located.append(Problem(where + str(error), error.rank, column))
    if located:
        return located
    cycle = find_deadlock(schedule)
    if cycle is None:
        return []
    position = {a: (r, i) for r, row in enumerate(schedule.actions) for i, a in enumerate(row)}
    out = []
    for action in cycle:
        rank, index = position[action]
        column = columns[rank][index] if columns is not None else index
        out.append(Problem(f"cell {column + 1}: {action} is in the dependency cycle", rank, column, "deadlock"))
    return out


MAX_CELL_PROBLEMS = 50  # unreadable cells reported at most; each one costs a parse of the table


def all_problems(text: str) -> tuple[Schedule | None, list[Problem]]:
    """Every problem of a CSV schedule, not only the first: each unreadable cell (the reader stops at the first,
    so each is blanked in turn and the table read again), then what the readable rest says (a forward without
    its backward...). The schedule is None unless the table has no problem the reader found. ValueError: too
    large for the app (the page's limits)."""
    from app_pages.parts.cached import csv_schedule
    from pipesim.io import CsvError

    problems: list[Problem] = []
    grid = csv_grid(text)
    cleaned = text
    for _ in range(MAX_CELL_PROBLEMS):
        try:
            schedule = csv_schedule(cleaned)
        except CsvError as error:
            problems.append(Problem(str(error), error.row, error.column))
            if error.row is None or error.column is None or error.row >= len(grid):
                return None, problems  # not tied to a cell: nothing to blank and read again
            grid.iat[error.row, error.column] = ""
            cleaned = grid_csv(grid)
            continue
        rest = schedule_problems(schedule, cleaned)
        if problems:  # the readable rest's structure, but no deadlock search on a table that is not the user's
            rest = [p for p in rest if p.kind == "error"]
            return None, problems + rest
        return schedule, rest
    return None, problems


def _partner_index(schedule: Schedule, rank: int | None, action: Action | None) -> int | None:
    """For an action that never runs (a missing F or backward), the cell of its partner that does."""
    if rank is None or action is None or not 0 <= rank < schedule.num_ranks:
        return None
    for index, other in enumerate(schedule.actions[rank]):
        if (other.stage, other.microbatch) == (action.stage, action.microbatch):
            return index
    return None


def _cell_columns(csv_text: str, schedule: Schedule) -> list[list[int]]:
    """Per rank, the CSV cell index of each compute action (empty cells are idle slots, transfer and collective
    cells hold none, an overlapped pair's cell holds two)."""
    grid = csv_grid(csv_text)
    out = []
    for rank in range(schedule.num_ranks):
        cells = list(grid.iloc[rank]) if rank < len(grid) else []
        out.append(
            [
                c
                for c, cell in enumerate(cells)
                if isinstance(cell, str) and cell.strip()
                for _ in entry_actions(parse_entry(cell))
            ]
        )
    return out


def csv_grid(text: str, spare: int = 0, spare_rows: int = 0) -> pd.DataFrame:
    """The CSV as a ranks x cells table of strings ("" for an empty cell: None would show as "None"), for
    st.data_editor. Columns are "cell 1", "cell 2", ...: counted from 1, as the problem messages count.

    `spare` empty columns leave room to append actions (an editor cannot add columns), `spare_rows` empty rows
    to add ranks (trailing empty rows are no ranks: `grid_csv` drops them).
    """
    rows = [row for row in csv.reader(io.StringIO(text or ""))]
    rows += [[] for _ in range(spare_rows)]
    width = max((len(row) for row in rows), default=1) + spare
    data = [[cell.strip() for cell in row] + [""] * (width - len(row)) for row in rows]
    frame = pd.DataFrame(data, columns=[f"cell {c + 1}" for c in range(width)], dtype="object")
    frame.index = [f"rank {r}" for r in range(len(rows))]
    return frame


CELL_MARK = "⚠ "  # written before a cell's text where a problem points (Streamlit styles no editable cell)


def _cell_text(value: object) -> str:
    """A cell's CSV text: stripped, and without the problem mark the table showed on it."""
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return ""
    return str(value).strip().removeprefix(CELL_MARK.strip()).strip()


def grid_csv(grid: pd.DataFrame) -> str:
    """Back from the table to CSV text: trailing empty cells dropped, rows kept in order, problem marks dropped."""
    lines = []
    for _, row in grid.iterrows():
        cells = [_cell_text(value) for value in row]
        while cells and not cells[-1]:
            cells.pop()
        lines.append(",".join(cells))
    while lines and not lines[-1]:
        lines.pop()
    return "\r\n".join(lines) + ("\r\n" if lines else "")


SPARE_COLUMNS = 2  # empty columns after the longest row: room to append actions (an editor adds no columns)
SPARE_ROWS = 2  # empty rows: room to add ranks


def editor_grid(base: str) -> pd.DataFrame:
    """The table the Custom page edits: `base`'s cells and the spare columns and rows."""
    return csv_grid(base, spare=SPARE_COLUMNS, spare_rows=SPARE_ROWS)


def committed_text(base: str, edits: dict | None) -> str:
    """The CSV text of `base` with a table editor's edits applied (marks dropped): what an edit commits."""
    return grid_csv(apply_edits(editor_grid(base), edits))


def apply_edits(grid: pd.DataFrame, edits: dict | None) -> pd.DataFrame:
    """The grid with a fixed-rows data editor's pending edits ({"edited_rows": {row: {column: value}}}) applied:
    the page validates what the user sees before drawing the editor, so the problems sit on that table."""
    out = grid.copy()
    for row, changes in ((edits or {}).get("edited_rows") or {}).items():
        for column, value in changes.items():
            if column in out.columns and 0 <= int(row) < len(out):
                out.iat[int(row), out.columns.get_loc(column)] = "" if value is None else str(value)
    return out


PROBLEM_MARK = " ⚠"


def editor_table(grid: pd.DataFrame, problems: Sequence[Problem]):
    """The editable table itself, marked: the offending cell's own text starts with `CELL_MARK` (Streamlit colours
    only read-only columns of an editor), a read-only "problem" column (first, so it is on screen however wide
    the table is) says what is wrong in each row, and the rows' names and the offending columns' headers carry a
    mark; returns (styled table, column labels with a mark on the offending columns).
    """
    notes: dict[int, list[str]] = {}
    bad_columns: set[int] = set()
    shown = grid.copy()
    for problem in problems:
        if problem.rank is not None and problem.rank < len(grid):
            notes.setdefault(problem.rank, []).append(problem.message)
            if problem.column is not None and problem.column < grid.shape[1]:
                bad_columns.add(problem.column)
                text = _cell_text(shown.iat[problem.rank, problem.column])
                shown.iat[problem.rank, problem.column] = CELL_MARK + text if text else CELL_MARK.strip()
    shown.index = [f"{name}{PROBLEM_MARK if r in notes else ''}" for r, name in enumerate(grid.index)]
    shown.insert(0, "problem", ["; ".join(dict.fromkeys(notes.get(r, []))) for r in range(len(grid))])
    labels = {name: f"{name}{PROBLEM_MARK}" for c, name in enumerate(grid.columns) if c in bad_columns}
    kind = {p.rank: p.kind for p in problems}
    colour = {"error": "background-color: #ffb3b3; color: #7a0000", "deadlock": "background-color: #ffe08a"}

    def style(frame: pd.DataFrame) -> pd.DataFrame:
        styles = pd.DataFrame("", index=frame.index, columns=frame.columns)
        styles["problem"] = [colour[kind.get(r, "error")] if text else "" for r, text in enumerate(frame["problem"])]
        return styles

    return shown.style.apply(style, axis=None), labels
