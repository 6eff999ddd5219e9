"""Input that once took the machine down or wrote garbage (issue 9, items 2, 3, 5 and 7, pipesim's side).

Each test holds the exact input of the report: it must be refused at once with a short, clear message,
bounded by the size of the input rather than by the numbers written in it.
"""

from __future__ import annotations

import json
import os
import stat

import pytest

from pipesim.cli import main as cli
from pipesim.io.formats import CsvError, schedule_from_csv, schedule_from_dict, schedule_to_dict, write_file, write_json
from pipesim.ir import Action, F, make_schedule
from pipesim.limits import MAX_ACTIONS, MAX_MICROBATCHES, MAX_RANKS
from pipesim.schedules import build_schedule
from pipesim.semantics.validate import describe_problems, find_problems, validate


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# --- item 2: a tiny CSV must not exhaust memory --------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "0F0,0B0\r\n1F0,1B0,999999999999F0\r\n",  # a stage number of 10^12
        "0F0,0B0,0F99999999,0B99999999",  # 32 bytes naming microbatch 10^8
        "0F0,0B0\n1F0,1B0,10000000F0\n",  # stage 10^7 once produced an 89 MB error message
        "0F0,0SEND_F99999999,0B0\n",  # the same through torch's other action kinds
        "0F0,99999999REDUCE_GRAD,0B0\n",
        "0F0,(0F1;99999999B0)OVERLAP_F_B\n",
        "0F0,(" + "0F1;" * 100_000 + ")OVERLAP_F_B\n",  # a 400 kB cell
    ],
)
def test_numbers_in_a_csv_do_not_size_the_work(text):
    with pytest.raises(CsvError) as caught:
        schedule_from_csv(text)
    assert len(str(caught.value)) < 400


def test_cli_refuses_the_reported_csv_in_one_line(capsys, tmp_path):
    path = tmp_path / "x.csv"
    path.write_bytes(b"0F0,0B0\r\n1F0,1B0,999999999999F0\r\n")
    code, _, err = run(capsys, "simulate", "--csv-in", str(path))
    assert code == 2 and len(err.strip().splitlines()) == 1 and len(err) < 400


def test_validation_stops_at_its_limit():
    # 8,192 stages x 65,536 microbatches with one action: 10^9 missing actions, of which only the first is wanted
    schedule = make_schedule("sparse", 1, MAX_MICROBATCHES, [0] * 8192, [[Action(0, F, 0)]])
    problems = find_problems(schedule, limit=1)
    assert len(problems) == 1 and "missing" in str(problems[0])
    with pytest.raises(ValueError, match="missing"):
        validate(schedule)


def test_problem_lists_are_capped():
    schedule = make_schedule("holes", 1, 20, [0], [[]])
    text = describe_problems(find_problems(schedule))
    assert text.count("\n") == 5 and text.endswith("and 35 more")  # 20 F + 20 backward missing, 5 shown


# --- item 3: sizes and costs have upper bounds ----------------------------------------------------------------


def test_huge_sizes_are_refused_before_anything_is_built(capsys):
    with pytest.raises(ValueError, match=f"at most {MAX_RANKS:,} ranks"):
        build_schedule("1f1b", 1_000_000, 8)
    with pytest.raises(ValueError, match=f"at most {MAX_ACTIONS:,} actions"):
        build_schedule("interleaved-1f1b", 512, 4096, num_virtual_stages=4)
    code, _, err = run(capsys, "simulate", "--schedule", "1f1b", "--ranks", "1000000", "--microbatches", "8")
    assert code == 2 and "at most" in err


def test_costs_that_overflow_are_refused(capsys, tmp_path):
    out = tmp_path / "out.json"
    code, stdout, err = run(
        capsys,
        "simulate",
        "--schedule",
        "1f1b",
        "--ranks",
        "4",
        "--microbatches",
        "8",
        "--f",
        "1e308",
        "--b",
        "1e308",
        "--json",
        str(out),
    )
    assert code == 2 and "<= 1e+12" in err  # past pipesim.limits.MAX_TIME_MS: refused as the flag is read
    assert "inf" not in stdout and "nan" not in stdout and not out.exists()
    with pytest.raises(ValueError, match="non-finite"):
        write_json({"makespan": float("inf")}, tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()


# --- item 5: output paths ----------------------------------------------------------------------------------------


def test_a_symlink_is_written_through_to_its_target(tmp_path):
    target, link = tmp_path / "real.json", tmp_path / "link.json"
    target.write_text("old")
    link.symlink_to(target)
    write_json({"a": 1}, link)
    assert link.is_symlink() and json.loads(target.read_text()) == {"a": 1}


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_paths_that_are_not_regular_files_are_refused(tmp_path, kind):
    path = tmp_path / "special"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    with pytest.raises(ValueError, match=f"cannot write {path}"):
        write_file("text", path)
    assert stat.S_ISFIFO(path.stat().st_mode) if kind == "fifo" else path.is_dir()  # left as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == ["special"]  # no temporary file left behind


def test_a_failed_write_names_the_users_path_and_leaves_nothing(tmp_path, capsys):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        if os.access(folder, os.W_OK):  # root ignores permissions: use a path under a file instead
            target = tmp_path / "file.txt"
            target.write_text("x")
            path = target / "out.json"
        else:
            path = folder / "out.json"
        code, _, err = run(
            capsys, "simulate", "--schedule", "1f1b", "--ranks", "2", "--microbatches", "2", "--json", str(path)
        )
        assert code == 1 and str(path) in err and ".tmp" not in err  # an unwritable output: exit 1
    finally:
        folder.chmod(0o700)
    assert not list(folder.iterdir())


# --- item 7: schedule files with the wrong types ---------------------------------------------------------------


@pytest.mark.parametrize(
    "change, message",
    [
        ({"actions": 5}, "actions must be a list"),
        ({"actions": None}, "actions must be a list"),
        ({"stage_to_rank": "01"}, "stage_to_rank must be a list"),
        ({"params": [1]}, "params must be an object"),
        ({"num_ranks": "2"}, "num_ranks must be an integer"),
        ({"actions": [[1, 2], []]}, "actions of rank 0 must be texts"),
    ],
)
def test_schedule_files_with_wrong_types_are_clear_errors(change, message):
    data = {**schedule_to_dict(build_schedule("1f1b", 2, 2)), **change}
    with pytest.raises(ValueError, match=message):
        schedule_from_dict(data)


def test_trailing_blank_lines_are_not_ranks():
    schedule = schedule_from_csv("0F0,0B0\r\n1F0,1B0\r\n\r\n\r\n")
    assert schedule.num_ranks == 2
    interior = schedule_from_csv("0F0,0B0\r\n\r\n1F0,1B0\r\n")  # an interior blank row is an idle rank (torch's files)
    assert interior.num_ranks == 3 and interior.actions[1] == ()
