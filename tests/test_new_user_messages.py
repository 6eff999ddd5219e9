"""Messages a new user meets: a config's refusal names the flag given; an unknown flag points to the subcommand's
help and the closest flag; help names the programs as installed; profile folders are listed as profiles; a plan
says what its units count for the model it plans."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest

from pipesim.cli.main import main as pipesim_main
from pipesim.flags import Parser, add_flags, from_flags
from pipesim.io.cost_file import save_profile
from pipesim_executor.host import cli, phase
from tests.test_unit_profile import SIZES, profile


@pytest.fixture
def nothing_starts(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    started = []
    monkeypatch.setattr(phase.subprocess, "Popen", lambda *a, **k: started.append(a))
    yield
    assert started == []


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["run", "--microbatches", "-2"], "--microbatches: num_microbatches must be a positive integer, got -2"),
        (["run", "--ranks", "0"], "--ranks: "),
        (["profile", "--in-situ-steps", "5", "--out", "p"], "--in-situ-steps: "),
        (["profile", "--model", "cnn", "--cnn-blocks", "0", "--out", "p"], "--cnn-blocks: "),
    ],
)
def test_a_config_refusal_names_the_flag(argv, flag, nothing_starts, capsys):
    assert cli.main(argv) == 2
    assert flag in _error(capsys)


@dataclasses.dataclass(frozen=True)
class Knobs:
    """Two knobs."""

    max_depth: int = 1
    """Depth."""
    width: int = 1
    """Width."""

    def __post_init__(self) -> None:
        if self.width < 1:
            raise ValueError(f"width must be at least 1, got {self.width}")
        if self.max_depth > self.width:
            raise ValueError(f"max depth {self.max_depth} is more than the width {self.width}")


def test_from_flags_names_the_flag_of_any_config():
    """The mechanism, not one flag: a field named in the message as written (max_depth) or in words (max depth)."""
    parser = Parser(prog="t")
    add_flags(parser, Knobs, "k")
    with pytest.raises(ValueError, match=r"^--width: width must be at least 1, got 0$"):
        from_flags(Knobs, parser.parse_args(["--width", "0"]), "k")
    with pytest.raises(ValueError, match=r"^--max-depth: max depth 3 is more"):
        from_flags(Knobs, parser.parse_args(["--max-depth", "3"]), "k")


def test_an_unknown_flag_points_to_the_subcommands_help_and_the_closest_flag(nothing_starts, capsys):
    assert cli.main(["run", "--micro-batches", "8"]) == 2
    err = _error(capsys)
    assert "did you mean --microbatches?" in err and "run --help)" in err
    assert cli.main(["run", "--bogus"]) == 2
    err = _error(capsys)
    assert "did you mean" not in err and "run --help)" in err  # nothing close: no guess
    assert pipesim_main(["simulate", "--schedule", "1f1b", "--micro-batches", "2"]) == 2
    assert "did you mean --microbatches?" in _error(capsys)


def test_split_from_help_names_the_installed_program(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["/venv/bin/pipesim-run", "run", "--help"])
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(pipesim-run profile:" in out and "(pipesim plan --json" in out and "executor profile" not in out


def test_list_shows_profile_folders_as_profiles(tmp_path, capsys):
    done = tmp_path / "out" / "mine"
    done.mkdir(parents=True)
    (done / "profile_request.json").write_text(json.dumps({"microbatch_sizes": [1, 2]}))
    save_profile(profile(), done / "cost.json")
    failed = tmp_path / "out" / "failed"
    failed.mkdir()
    (failed / "profile_request.json").write_text("{}")
    assert cli.main(["list", "--runs-root", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "damaged" not in out
    assert f"{done}: a unit profile (" in out and f"plan --cost {done / 'cost.json'}" in out
    assert f"{failed}: a unit profile without cost.json" in out


@pytest.mark.parametrize(
    ("model", "says"),
    [
        ({"kind": "custom", "spec": "/home/me/mymodel.py:build"}, "units are the layers of /home/me/mymodel.py:build"),
        ({"kind": "transformer"}, "units count the embedding and the head"),
    ],
)
def test_a_plan_says_what_its_units_count(model, says, tmp_path, capsys):
    path = tmp_path / "cost.json"
    save_profile(profile(model=model), path)
    sizes = ",".join(map(str, SIZES[:2]))
    argv = ["plan", "--cost", str(path), "--devices", "2", "--global-batch", "8", "--microbatch-sizes", sizes]
    pipesim_main([*argv, "--optimizer", "sgd"])
    best = [line for line in capsys.readouterr().out.splitlines() if line.startswith("best:")]
    assert best and says in best[0]
    if model["kind"] == "custom":
        assert "embedding" not in best[0]
