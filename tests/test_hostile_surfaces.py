"""Issue 35: the surfaces added since issue 9 (profile, plan --cost, verify-plan, synthesize, run sizes), probed as
the report probed them. Each case must end in exit 2 (1 for an output that cannot be written), one line on stderr,
nothing started and nothing written, and a file that was there kept whole.

The app's URLs are tests/test_app_url.py; the generated values at every flag tests/test_hostile_flags.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pipesim.cli.main import main as pipesim_main
from pipesim.io import atomic
from pipesim.io.cost_file import COST_UNITS, load_cost_file
from pipesim.io.formats import CsvError, schedule_from_csv
from pipesim.io.profile_file import profile_from_dict
from pipesim.ir import parse_entry
from pipesim.limits import MAX_PLAN_CANDIDATES, MAX_PROFILE_UNITS
from pipesim.numbers import read_float, read_int, read_list
from pipesim_executor.host import cli as executor_cli


class Started(Exception):
    """A process or run was about to start: every case here must be refused before."""


@pytest.fixture
def quiet_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary working folder, with every way a run or profile starts replaced by a failure."""

    def refuse(*args, **kwargs):
        raise Started("a run was started")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("pipesim_executor.host.launch.start_handle", refuse)
    monkeypatch.setattr("pipesim_executor.host.unit_profile.start_handle", refuse)
    monkeypatch.setattr("subprocess.Popen", refuse)
    return tmp_path


def refused(capsys, main, argv: list[str], status: int = 2) -> str:
    """Run a command in this process; its one line on stderr, after checking the exit status."""
    code = main(argv)
    err = capsys.readouterr().err
    assert code == status, (argv, code, err)
    assert err.count("\n") == 1 and "Traceback" not in err and len(err) < 600, err
    return err


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


# --- group 1: a file that was there is kept ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["synthesize", "--ranks", "2", "--microbatches", "4", "--memory-limit", "2", "--time-limit", "1"],
        ["simulate", "--schedule", "1f1b", "--ranks", "2", "--microbatches", "4"],
    ],
)
def test_the_old_json_is_kept_when_the_csv_cannot_be_written(quiet_dir, capsys, monkeypatch, argv):
    out = quiet_dir / "out"
    out.mkdir()
    old = out / "s.json"
    old.write_text('{"kept": true}')
    locked = quiet_dir / "locked"
    locked.mkdir()
    real = atomic.tempfile.mkstemp

    def read_only(*args, dir=None, **kwargs):  # a read-only folder, also for root (who ignores the mode bits)
        if Path(dir) == locked:
            raise PermissionError(13, "Permission denied")
        return real(*args, dir=dir, **kwargs)

    monkeypatch.setattr(atomic.tempfile, "mkstemp", read_only)
    err = refused(capsys, pipesim_main, [*argv, "--json", str(old), "--csv", str(locked / "s.csv")], status=1)
    assert "s.csv" in err and "Permission denied" in err
    assert old.read_text() == '{"kept": true}' and os.listdir(out) == ["s.json"] and not os.listdir(locked)


def test_write_files_writes_all_or_none(tmp_path, monkeypatch):
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("old a")
    calls = []
    real = atomic.os.replace

    def second_rename_fails(source, target):
        calls.append(target)
        if Path(target) == second:
            raise OSError(28, "No space left on device")
        return real(source, target)

    monkeypatch.setattr(atomic.os, "replace", second_rename_fails)
    with pytest.raises(atomic.UnwritableOutput, match="b.txt"):
        atomic.write_files({second: "new b", first: "new a"})  # the failing one first: nothing replaced
    assert first.read_text() == "old a" and not second.exists()
    assert sorted(os.listdir(tmp_path)) == ["a.txt"]  # no temporary file left


# --- group 2: model sizes bounded by memory before anything starts --------------------------------------------


@pytest.mark.parametrize("command", ["run", "profile"])
@pytest.mark.parametrize(
    "sizes",
    [
        ["--hidden", "10000000"],
        ["--vocab", "100000000000"],
        ["--seq-len", "1000000000"],
        ["--model", "cnn", "--cnn-channels", "100000000"],
    ],
)
def test_model_sizes_past_the_machine_are_refused_before_anything_starts(quiet_dir, capsys, command, sizes):
    argv = [command, *sizes] + (["--out", "prof"] if command == "profile" else [])
    err = refused(capsys, executor_cli.main, argv)
    assert "needs at least" in err and "more than this machine's" in err and sizes[-1] in err
    assert tree(quiet_dir) == []  # no run folder, no runs/ folder


def test_the_memory_price_is_the_planners_and_counts_the_cnn_as_torch_does():
    torch = pytest.importorskip("torch")
    from pipesim.cost.description import ModelDescription
    from pipesim.sim.memory import training_bytes
    from pipesim_executor.config import CNNConfig, ModelConfig
    from pipesim_executor.host.model_memory import cnn_counts, model_bytes
    from pipesim_executor.rank.model import build_model

    del torch
    for cnn in (CNNConfig(), CNNConfig(channels=8, blocks=7, fc_size=33), CNNConfig(blocks=1)):
        model = ModelConfig("cnn", cnn=cnn)
        built = sum(p.numel() for layer in build_model(model, 0) for p in layer.parameters())
        assert cnn_counts(cnn)[0] == built
    model = ModelConfig.of_transformer(num_layers=2, hidden_size=64, ffn_size=128, num_heads=2, vocab_size=100)
    shape = model.transformer
    description = ModelDescription(**{k: getattr(shape, k) for k in vars(shape)}, microbatch_size=3, dtype="fp32")
    units = description.unit_costs()
    expected = training_bytes(
        sum(u.param_bytes for u in units), sum(u.activation_bytes for u in units), "adam"
    )  # the planner's bytes, fp32 master weights
    training, parameters = model_bytes(model, 3, "adam", "fp32")
    assert training == pytest.approx(expected) and parameters == sum(u.param_bytes for u in units)


def test_on_gpus_the_host_holds_the_parameters_each_rank_builds():
    from pipesim_executor.config import ModelConfig
    from pipesim_executor.host.model_memory import check_model_memory, model_bytes

    model = ModelConfig.of_transformer(num_layers=2, hidden_size=64, ffn_size=128, num_heads=2, vocab_size=100)
    training, parameters = model_bytes(model, 4, "adam", "fp32")
    between = (training + parameters) / 2
    check_model_memory(model, 4, "adam", "fp32", device="cuda", memory_bytes=between)  # trains on the GPUs
    with pytest.raises(ValueError, match="needs at least"):
        check_model_memory(model, 4, "adam", "fp32", device="cpu", memory_bytes=between)
    with pytest.raises(ValueError, match="2 replicas of"):
        check_model_memory(model, 4, "adam", "fp32", replicas=2, memory_bytes=training * 1.5)
    with pytest.raises(ValueError, match="fp32 parameters, which every rank builds"):
        check_model_memory(model, 4, "adam", "fp32", device="cuda", memory_bytes=parameters / 2)


# --- group 3: numbers that pass the parser but mean nothing -------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["verify-plan", "plan.json", "--timeout", "-1"], "'-1'"),
        (["verify-plan", "plan.json", "--timeout", "nan"], "'nan'"),
        (["verify-plan", "plan.json", "--warmup-steps", "-1"], "'-1'"),
        (["cancel", "runs/x", "--timeout", "-5"], "'-5'"),
        (["run", "--seed", "-1"], "seed"),
        (["run", "--seed", "100000000000000000000000"], "seed"),
        (["run", "--runs-root", "/dev/null"], "not a folder"),
        (["list", "--runs-root", "/dev/null"], "not a folder"),
        (["verify-plan", "plan.json", "--runs-root", "/dev/null"], "not a folder"),
    ],
)
def test_executor_numbers_mean_something(quiet_dir, capsys, argv, shown):
    assert shown in refused(capsys, executor_cli.main, argv)
    assert tree(quiet_dir) == []


@pytest.mark.parametrize(
    ("argv", "shown"),
    [
        (["plan", "--devices", "4", "--global-batch", "8", "--memory-cap", "1e400GiB"], "1e400"),
        (["plan", "--devices", "1000000000", "--global-batch", "8"], "1000000000"),
        (["plan", "--devices", "5000", "--global-batch", "8"], "5000 ranks"),  # all of them in one pipeline
        (["balance", "--layer-ms", "1,,2", "--stages", "2"], "no empty item"),
        (["app", "--port", " 80", "--print-command"], "' 80'"),
        (["simulate", "--schedule", "1f1b", "--ranks", "２", "--microbatches", "4"], "'２'"),
        (["simulate", "--schedule", "1f1b", "--ranks", "2", "--microbatches", "4", "--f", "1_0"], "'1_0'"),
    ],
)
def test_pipesim_numbers_mean_something(quiet_dir, capsys, argv, shown):
    assert shown in refused(capsys, pipesim_main, argv)
    assert tree(quiet_dir) == []


@pytest.mark.parametrize("text", ["０F０", "٠F٠", "0F٣", "0SEND_F٣", "１SEND_F0"])
def test_schedule_text_takes_ascii_digits_only(text, tmp_path, capsys):
    with pytest.raises(ValueError, match="cannot parse"):
        parse_entry(text)
    with pytest.raises(CsvError):
        schedule_from_csv(f"{text},0B0\r\n")
    path = tmp_path / "s.csv"
    path.write_text(f"{text},0B0\r\n", encoding="utf-8")
    refused(capsys, pipesim_main, ["simulate", "--csv-in", str(path)])


@pytest.mark.parametrize(
    "text", ["", " 8", "8 ", "+", "1_000", "０", "8.0", "1e3", "nan", "inf", "9" * 41, "0x10", "\x008"]
)
def test_the_strict_whole_number_reader(text):
    with pytest.raises(ValueError):
        read_int(text)


@pytest.mark.parametrize("text", ["", " 1", "1e400", "-1e999", "nan", "inf", "Infinity", "1_0", "１", "1e", ".", "--1"])
def test_the_strict_number_reader(text):
    with pytest.raises(ValueError):
        read_float(text)


def test_the_readers_take_what_they_should():
    assert read_int("-3") == -3 and read_int("0007", 1, 8) == 7
    assert read_float("1e9") == 1e9 and read_float(".5") == 0.5 and read_float("-2.") == -2.0
    assert read_list("1,2,4", read_int) == (1, 2, 4)
    for text in ("1,,2", "1,", ",1", "1, 2"):
        with pytest.raises(ValueError):
            read_list(text, read_int)


# --- group 4: cost and plan files ---------------------------------------------------------------------------------


def cost_file(path: Path, **changes) -> Path:
    data = {
        "format": "pipesim.cost",
        "version": 1,
        "units": COST_UNITS,
        "stages": [{"forward_ms": 1, "backward_ms": 2}],
    }
    path.write_text(json.dumps({**data, **changes}))
    return path


PLAN = ["plan", "--devices", "2", "--global-batch", "4"]
SIMULATE = ["simulate", "--schedule", "1f1b", "--ranks", "2", "--microbatches", "2"]


@pytest.mark.parametrize("command", [PLAN, SIMULATE])
@pytest.mark.parametrize("number", ["1e400", "-1e400", "1" + "0" * 400])
def test_a_time_past_any_float_is_refused(quiet_dir, capsys, command, number):
    path = quiet_dir / "cost.json"
    path.write_text(
        '{"format": "pipesim.cost", "version": 1, "units": {"time": "ms", "size": "bytes", "bandwidth": "GB/s"}, '
        f'"stages": [{{"forward_ms": {number}, "backward_ms": 2}}]}}'
    )
    err = refused(capsys, pipesim_main, [*command, "--cost", str(path)])
    assert "out of range" in err and str(path) in err


def test_a_stage_cost_file_states_its_units(quiet_dir, capsys):
    path = cost_file(quiet_dir / "cost.json")
    data = json.loads(path.read_text())
    del data["units"]
    path.write_text(json.dumps(data))
    assert "units must be" in refused(capsys, pipesim_main, [*SIMULATE, "--cost", str(path)])
    path.write_text(json.dumps({**data, "units": {"time": "s", "size": "bytes", "bandwidth": "GB/s"}}))
    assert "units must be" in refused(capsys, pipesim_main, [*PLAN, "--cost", str(path)])


def test_a_cost_file_is_bounded_before_it_is_parsed(quiet_dir, capsys):
    huge = quiet_dir / "huge.json"
    with open(huge, "wb") as out:  # 200 MB, sparse: refused by its size before a byte is read
        out.truncate(200 * 1024**2)
    assert "at most" in refused(capsys, pipesim_main, [*PLAN, "--cost", str(huge)])
    padded = cost_file(quiet_dir / "padded.json", meta={"pad": [0] * 2_100_000})  # 6 MB, 2.1 million values
    err = refused(capsys, pipesim_main, [*PLAN, "--cost", str(padded)])
    assert "more than 2,000,000 values" in err


def test_a_profile_of_too_many_units_is_refused_before_they_are_read():
    data = {"kind": "unit-profile", "microbatch_sizes": [1, 2], "units": [{}] * (MAX_PROFILE_UNITS + 1)}
    with pytest.raises(ValueError, match=f"1 to {MAX_PROFILE_UNITS:,} unit records"):
        profile_from_dict(data)


@pytest.fixture
def plan_file(quiet_dir, capsys) -> Path:
    model = ["--layers", "2", "--hidden", "64", "--ffn", "128", "--heads", "2", "--seq-len", "16", "--vocab", "100"]
    argv = ["plan", *model, "--devices", "2", "--global-batch", "8", "--optimizer", "sgd", "--dtype", "fp32"]
    assert pipesim_main([*argv, "--schedules", "1f1b,gpipe", "--json", "plan.json"]) == 0
    capsys.readouterr()
    return quiet_dir / "plan.json"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schedule": None}, "schedule must be a schedule name, got None"),
        ({"schedule": ["1f1b"]}, "schedule must be"),
        ({"split": [5, 1, 99]}, "split_points"),
        ({"split": [0]}, "split_points"),
        ({"split": "2"}, "split must be a list"),
        ({"ranks": 10**30}, "ranks"),
        ({"microbatches": -1}, "microbatches"),
        ({"recompute": "yes"}, "recompute must be true or false"),
    ],
)
def test_verify_plan_refuses_a_candidate_it_cannot_run_before_any_run(plan_file, capsys, change, message):
    plan = json.loads(plan_file.read_text())
    for candidate in plan["candidates"]:
        candidate.update(change)
    plan_file.write_text(json.dumps(plan))
    before = tree(plan_file.parent)
    err = refused(capsys, executor_cli.main, ["verify-plan", str(plan_file), "--top", "1"])
    assert message in err and "candidate 1" in err
    assert tree(plan_file.parent) == before


def test_a_custom_models_plan_passes_the_candidate_check_and_its_bad_split_does_not(plan_file):
    """A plan from a profile of your own model: its units are counted by running the factory, which only the run
    does (in its bounded child); the check before any run must not demand the count (it refused every such plan)."""
    from pipesim_executor.host.verify_config import check_candidate

    plan = json.loads(plan_file.read_text())
    plan["inputs"]["executor_model"] = {"kind": "custom", "spec": "pipesim_examples.gpt_small:build"}
    candidate = {**next(c for c in plan["candidates"] if c["schedule"] == "1f1b"), "split": [3]}
    check_candidate(plan, candidate, 1)
    with pytest.raises(ValueError, match="split_points"):
        check_candidate(plan, {**candidate, "split": [3, 2]}, 1)


def test_verify_plan_bounds_the_plan(plan_file, capsys):
    plan = json.loads(plan_file.read_text())
    plan["candidates"] = [{}] * (MAX_PLAN_CANDIDATES + 1)
    plan_file.write_text(json.dumps(plan))
    assert "candidates" in refused(capsys, executor_cli.main, ["verify-plan", str(plan_file), "--top", "1"])
    with open(plan_file, "wb") as out:  # a plan of 200,000 candidates is far larger: refused by its size, unread
        out.truncate(200 * 1024**2)
    assert "at most" in refused(capsys, executor_cli.main, ["verify-plan", str(plan_file), "--top", "1"])


def test_a_unit_profile_still_loads(tmp_path):
    """The bounds leave a sound file alone: the profile fixture of tests/test_unit_profile.py round-trips."""
    from pipesim.io.cost_file import save_profile
    from tests.test_unit_profile import profile

    path = tmp_path / "cost.json"
    save_profile(profile(), path)
    assert load_cost_file(path) == profile()
