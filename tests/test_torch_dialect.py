"""torch's older schedule dialect: `B` for the input half of a split backward, `BW` for the full
backward, as in torch's own test artifacts `zb1p_2rank_2stagep_compute.csv` and `zb1p_2rank_2stagep_comms.csv`.

The files here have the artifacts' shape, written by the tests: torch's interleaved zero bubble order for 2 ranks,
2 stages each, 8 microbatches (from torch's own visualiser where torch is installed, else pipesim's zero-bubble
builders) in the older dialect, compute only; and the same order with adjacent input and weight halves merged (as
torch's `_merge_bw` does) and its transfers, in the older dialect (`2BW0`, `0RECV_B0`, ...).
"""

from __future__ import annotations

import csv
import io
import re

import pytest

from pipesim.cli import main as cli
from pipesim.io.torch_csv import CsvError, dialect_note, schedule_from_csv, schedule_to_csv
from pipesim.ir import Action, B, I, W, schedule_from_order
from pipesim.schedules import build_schedule

_CELL = re.compile(r"^(\d+)([BI])(\d+)$")


def to_older(text: str) -> str:
    """A current-dialect CSV in torch's older dialect: I -> B (the input half), B (full) -> BW."""
    rows = list(csv.reader(io.StringIO(text)))

    def old(cell: str) -> str:
        match = _CELL.match(cell)
        if match is None:
            return cell
        stage, kind, microbatch = match.groups()
        return f"{stage}{'B' if kind == 'I' else 'BW'}{microbatch}"

    buffer = io.StringIO()
    csv.writer(buffer).writerows([[old(cell) for cell in row] for row in rows])
    return buffer.getvalue()


def merge_bw(rows):
    """torch's `_merge_bw`: an input half followed (idle slots apart) by its own weight half becomes one B."""
    merged = []
    for row in rows:
        actions = [a for a in row if a is not None]
        out, k = [], 0
        while k < len(actions):
            action = actions[k]
            after = actions[k + 1] if k + 1 < len(actions) else None
            if action.kind is I and after == Action(action.stage, W, action.microbatch):
                out.append(Action(action.stage, B, action.microbatch))
                k += 2
            else:
                out.append(action)
                k += 1
        merged.append(out)
    return merged


def zb1p_order():
    """torch's zb1p order for 2 ranks x 2 stages x 8 microbatches (current dialect), idle slots included."""
    try:
        from torch.distributed.pipelining import _schedule_visualizer as visualizer
    except ImportError:  # pipesim's own split-backward schedule of the same size stands in
        schedule = build_schedule("zb-h1", 2, 8)
        return schedule.stage_to_rank, [list(row) for row in schedule.actions]
    ops = visualizer.get_schedule_ops("InterleavedZeroBubble", 2, 8, 2)
    return (0, 1, 0, 1), [[None if a is None else Action.parse(str(a)) for a in row] for row in ops]


def current_schedules():
    placement, rows = zb1p_order()
    compute = schedule_from_order("zb1p", 2, 8, placement, rows)
    merged = schedule_from_order("zb1p", 2, 8, placement, merge_bw(rows))
    return compute, merged


def test_the_compute_artifact_shape_is_read_as_input_then_weight_halves():
    compute, _ = current_schedules()
    current = schedule_to_csv(compute, "compute_only")
    older = to_older(current)
    assert "2B0" in older and "2I0" not in older and "2W0" in older  # the artifact's own cells
    read = schedule_from_csv(older, name="zb1p_2rank_2stagep_compute")
    assert read.actions == compute.actions and read.stage_to_rank == compute.stage_to_rank
    assert dialect_note(read) == (
        "read zb1p_2rank_2stagep_compute as torch's older dialect (B then W = I then W, BW = B); it is written "
        "back in the current one (I, W, B)"
    )
    assert schedule_to_csv(read, "compute_only") == current  # written back in the current dialect, cell for cell


def test_the_comms_artifact_shape_reads_bw_as_the_full_backward():
    _, merged = current_schedules()
    current = schedule_to_csv(merged, "compute_comms")  # torch's lowering: transfers in place
    older = to_older(current)
    assert "BW" in older and "RECV_B" in older and "SEND_B" in older
    read = schedule_from_csv(older, name="zb1p_2rank_2stagep_comms")
    assert read.has_transfers and dialect_note(read) is not None
    assert read.actions == merged.actions  # BW -> B, B before its W -> I
    assert {a.kind for row in read.actions for a in row} == {Action.parse("0F0").kind, B, I, W}
    assert schedule_to_csv(read, "compute_comms") == current


def test_a_current_file_is_not_taken_for_the_older_dialect():
    schedule = build_schedule("zb-h1", 2, 4)
    read = schedule_from_csv(schedule_to_csv(schedule))
    assert read.actions == schedule.actions and dialect_note(read) is None
    plain = build_schedule("1f1b", 2, 4)  # B alone: the full backward in both dialects
    assert dialect_note(schedule_from_csv(schedule_to_csv(plain))) is None


def test_a_file_mixing_both_dialects_is_refused_naming_the_cell():
    with pytest.raises(CsvError, match=r"row 1 \(rank 0\), cell 3: '0I1' is the current dialect's"):
        schedule_from_csv("0F0,0F1,0I1,0W1,0BW0\n")


def test_the_cli_says_it_in_one_line_and_writes_the_current_dialect(tmp_path, capsys):
    compute, _ = current_schedules()
    path = tmp_path / "zb1p_2rank_2stagep_compute.csv"
    path.write_text(to_older(schedule_to_csv(compute)))
    out = tmp_path / "back.csv"
    assert cli.main(["simulate", "--csv-in", str(path), "--csv", str(out)]) == 0
    printed = capsys.readouterr().out
    assert sum("torch's older dialect" in line for line in printed.splitlines()) == 1
    assert out.read_bytes().decode() == schedule_to_csv(compute) and "1I0" in out.read_text()


def test_executor_run_says_it_once_and_keeps_the_current_dialect(tmp_path, monkeypatch, capsys):
    import json
    import sys

    from pipesim_executor.host import cli as executor_cli
    from pipesim_executor.host import launch

    schedule = build_schedule("zb-h1", 2, 4)
    path = tmp_path / "old.csv"
    path.write_text(to_older(schedule_to_csv(schedule)))
    monkeypatch.setattr(launch, "torchrun_command", lambda config, run_dir, **_: [sys.executable, "-c", "pass"])
    tiny = ["--layers", "2", "--d-model", "16", "--heads", "2", "--ffn", "32", "--seq-len", "8", "--vocab", "32"]
    out = tmp_path / "runs" / "old"
    executor_cli.main(["run", "--schedule-file", str(path), "--device", "cpu", *tiny, "--out", str(out)])
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "read old as torch's older dialect (B then W = I then W, BW = B); it is written back in " + (
        "the current one (I, W, B)"
    )
    saved = json.loads((out / "schedule.json").read_text())
    assert saved["actions"] == schedule.text_rows()  # I and W: what the ranks run
