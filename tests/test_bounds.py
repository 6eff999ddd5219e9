"""Sizes no input can exceed: the documented limits, the one bounded reader every file goes
through, run listings that survive damaged folders, balancing that scales, and replicas that keep prices finite.

Each probe of the issue is here with its input: it must end in a one-line error naming the user's file (exit 2)
or a correct result, at once, whatever the file holds. Large files are sparse (`truncate`): no disk is used.
"""

from __future__ import annotations

import os
import random
import time

import pytest

from pipesim.cli import main as cli
from pipesim.cost.balance import balance, stage_costs
from pipesim.cost.collectives import bucketed_allreduce_ms
from pipesim.cost.description import ModelDescription
from pipesim.cost.links import LinkCost
from pipesim.io.bounded import read_bytes, read_tail, read_text
from pipesim.io.formats import read_json
from pipesim.limits import MAX_LAYERS, MAX_REPLICAS, MAX_RESULT_BYTES, MAX_SCHEDULE_BYTES
from pipesim_executor.host import cli as executor_cli
from pipesim_executor.host.run_folder import list_runs, load_run
from tests.helpers.balance_reference import exhaustive_balance
from tests.test_app_run import write_run


def _sparse(path, size: int):
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


def _one_line_error(capsys, *names: str) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for name in names:
        assert name in err, err
    return err


# --- the bounded reader ------------------------------------------------------------------------------------------


def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path):
    """Catches an open without O_NONBLOCK (it waits for a writer forever) or a type check after reading."""
    fifo = tmp_path / "result.json"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"result.json: it is a FIFO \(named pipe\)"):
        read_bytes(fifo, 100)
    with pytest.raises(ValueError, match="FIFO"):
        read_tail(fifo, 100)
    assert time.monotonic() - started < 60  # a hang would never return at all; this only bounds a slow machine


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda d: d, "it is a folder"),
        (lambda d: "/dev/zero", "it is a device"),
        (lambda d: d / "missing.json", "No such file"),
    ],
)
def test_anything_but_a_regular_file_is_refused(tmp_path, make, message):
    with pytest.raises(ValueError, match=message):
        read_bytes(make(tmp_path), 100)


def test_a_symlink_loop_and_a_file_over_its_limit_are_refused(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(ValueError, match="symbolic link loop"):
        read_bytes(tmp_path / "a", 100)
    big = _sparse(tmp_path / "big.json", 101)
    with pytest.raises(ValueError, match=r"big.json is 101 bytes; pipesim reads a trace of at most 100 bytes"):
        read_bytes(big, 100, "trace")
    assert read_bytes(big, 101) == b"\0" * 101
    binary = tmp_path / "bin.csv"
    binary.write_bytes(b"0F0,\xff\xfe")
    with pytest.raises(ValueError, match=r"bin.csv: not a UTF-8 text file \(byte 4"):
        read_text(binary, 100)


def test_a_log_tail_reads_only_the_end(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text("".join(f"line {k}\n" for k in range(100_000)))
    tail = read_tail(log, 100)
    assert len(tail) == 100 and tail.endswith("line 99999\n")


def test_json_numbers_that_are_not_numbers_name_the_file(tmp_path):
    path = tmp_path / "cost.json"
    for text in ('{"a": NaN}', '{"a": -Infinity}', '{"a": 1' + "0" * 5000 + "}"):
        path.write_text(text)
        with pytest.raises(ValueError, match=r"cost.json: not valid JSON"):
            read_json(path)


# --- the reported probes, from the command lines -----------------------------------------------------------------


def test_a_500_mb_csv_in_is_refused_before_it_is_read(tmp_path, capsys):
    path = _sparse(tmp_path / "huge.csv", 500 * 1024**2)
    assert cli.main(["simulate", "--csv-in", str(path)]) == 2
    _one_line_error(capsys, str(path), f"at most {MAX_SCHEDULE_BYTES // 1024**2}.0 MiB")


def test_a_4_gb_schedule_file_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
    path = _sparse(tmp_path / "huge.json", 3900 * 1024**2)
    monkeypatch.chdir(tmp_path)
    assert executor_cli.main(["run", "--schedule-file", str(path), "--device", "cpu"]) == 2
    _one_line_error(capsys, str(path), "3.8 GiB")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["huge.json"]  # no run folder made


def test_replicas_and_latencies_past_the_limits_are_refused(capsys):
    """The issue's probe printed a step time of inf and exited 0."""
    probe = ["simulate", "--schedule", "1f1b", "--ranks", "2", "--microbatches", "4"]
    assert cli.main([*probe, "--data-parallel", "1000000000", "--dp-latency", "1e3"]) == 2
    _one_line_error(capsys, f"at most {MAX_REPLICAS:,} data-parallel replicas")
    assert cli.main([*probe, "--data-parallel", "8", "--dp-latency", "1e300"]) == 2
    _one_line_error(capsys, "--dp-latency: expected a number >= 0 and <= 1e+12")  # read as the flag is
    assert cli.main([*probe, "--data-parallel", "8", "--dp-bandwidth", "1e-300"]) == 2
    _one_line_error(capsys, "--dp-bandwidth: expected a number >= 1e-09")


def test_the_largest_accepted_data_parallel_group_prices_finitely(capsys):
    probe = ["simulate", "--schedule", "1f1b", "--ranks", "2", "--microbatches", "4", "--data-parallel"]
    assert (
        cli.main([*probe, str(MAX_REPLICAS), "--dp-latency", "1e12", "--dp-bandwidth", "1e-9", "--grad-bytes", "1e18"])
        == 0
    )
    out = capsys.readouterr().out
    assert "inf" not in out and "nan" not in out and "step time" in out
    # a huge gradient is counted in buckets, not listed: constant time and memory
    assert bucketed_allreduce_ms(1e18, 8, LinkCost(1.0, 1.0)) == pytest.approx(
        (1e18 // (25 * 1024**2)) * 14 + 14 + (7 / 8 * 2 * 1e18 / 1e9 * 1e3), rel=1e-9
    )


# --- run listings -------------------------------------------------------------------------------------------------


def test_listing_shows_every_damaged_folder_with_its_reason_and_the_good_runs(tmp_path, capsys):
    """A FIFO as result.json once hung `list` and `show`, a 3.9 GB measured.json raised MemoryError (hiding the
    good runs), a symbolic link loop as a run folder gave a RuntimeError traceback in `show`."""
    write_run(tmp_path, "good")
    os.mkfifo(write_run(tmp_path, "fifo") / "result.json.fifo")
    os.replace(tmp_path / "fifo" / "result.json.fifo", tmp_path / "fifo" / "result.json")
    _sparse(write_run(tmp_path, "huge") / "measured.json", 3900 * 1024**2)
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    (tmp_path / "README").write_text("not a run")
    runs = {r.run_dir.name: r for r in list_runs(tmp_path)}
    assert sorted(runs) == ["fifo", "good", "huge", "loop1", "loop2"]
    assert runs["good"].status == "ok"
    assert "result.json" in runs["fifo"].message and "FIFO" in runs["fifo"].message
    assert (
        "measured.json" in runs["huge"].message
        and f"at most {MAX_RESULT_BYTES // 1024**2}.0 MiB" in runs["huge"].message
    )
    assert "symbolic link loop" in runs["loop1"].message
    assert all(runs[name].status == "damaged" for name in ("fifo", "huge", "loop1", "loop2"))
    assert executor_cli.main(["list", "--runs-root", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "FIFO" in printed and "symbolic link loop" in printed and "3.8 GiB" in printed
    for name, reason in (("fifo", "FIFO"), ("huge", "3.8 GiB"), ("loop1", "symbolic link loop")):
        assert executor_cli.main(["show", str(tmp_path / name)]) == 2
        _one_line_error(capsys, reason)
    assert load_run(tmp_path / "good").status == "ok"


def test_show_names_a_missing_run():
    with pytest.raises(ValueError, match="no such run folder: runs/doesnotexist"):
        load_run("runs/doesnotexist")


# --- balancing: linear, and equal to the exhaustive search ---------------------------------------------------------


@pytest.mark.parametrize("seed", range(40))
def test_balance_equals_the_exhaustive_search_on_random_inputs(seed):
    """The old algorithm (every contiguous sum as a candidate: layers^2 work) on random larger inputs: the same
    split points and stage costs, bit for bit. Catches a search over the doubles that lands on a value that is
    not a sum, or a bisection that compares other than by the sums' own subtraction."""
    rng = random.Random(seed)
    count = rng.randint(1, 300)
    shape = seed % 4
    costs = [
        rng.random() * 10
        if shape == 0
        else rng.randint(0, 3)
        if shape == 1
        else rng.choice([0.1, 0.2, 0.3, 1e-9, 1e9])
        if shape == 2
        else rng.lognormvariate(0, 3)
        for _ in range(count)
    ]
    stages = rng.randint(1, count)
    expected = exhaustive_balance(costs, stages)
    got = balance(costs, stages)
    assert (got.split_points, got.stage_costs) == expected
    assert got.stage_costs == stage_costs(costs, got.split_points)


def test_balance_refuses_past_its_limits_before_reading_the_costs():
    class Huge:
        def __len__(self) -> int:
            return MAX_LAYERS + 1

        def __iter__(self):
            raise AssertionError("the costs were read before the limit was checked")

    with pytest.raises(ValueError, match=f"at most {MAX_LAYERS:,} layers"):
        balance(Huge(), 4)
    with pytest.raises(ValueError, match="at most 999,998 \\(with the embedding and the head, 1,000,000 units"):
        ModelDescription(num_layers=MAX_LAYERS - 1)
    assert ModelDescription(num_layers=MAX_LAYERS - 2).num_units() == MAX_LAYERS
    with pytest.raises(ValueError, match="add up past the largest number a float holds"):
        balance([1e308, 1e308], 1)


def test_balance_cli_on_ten_thousand_layers_is_quick(capsys):
    """`pipesim balance --layers 10000 --stages 4` once ran past 60 s in 1.1 GB (layers^2 candidates). Speed is
    the benchmark's (bench/bench_traces.py); here only that the answer is the model's."""
    assert cli.main(["balance", "--layers", "10000", "--stages", "4"]) == 0
    assert "--split-points" in capsys.readouterr().out
    assert cli.main(["balance", "--layers", "10000000", "--stages", "4"]) == 2
    _one_line_error(capsys, "num_layers 10000000 is more than pipesim handles")
