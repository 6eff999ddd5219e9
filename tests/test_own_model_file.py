"""Your own model as an installed user has it: `--model mymodel.py:build` (a file by its path) or `mymodel:build`
(a module in the folder you run from); refusals in one line naming both forms; and the README's path, profile ->
plan -> verify-plan, run from an empty folder."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pipesim_executor import processes
from pipesim_executor.config import SPEC_HELP, ModelConfig, absolute_spec, parse_spec
from pipesim_executor.custom_model import load_factory
from pipesim_executor.host import cli, phase

MODEL_FILE = """
import torch
from torch import nn


def build():
    layers = [nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)]

    def make_batch(batch_size, step, seed):
        g = torch.Generator().manual_seed(seed * 1000 + step)
        return torch.randn(batch_size, 16, generator=g), torch.randint(0, 4, (batch_size,), generator=g)

    return layers, make_batch, nn.functional.cross_entropy
"""


def test_a_spec_names_a_module_or_a_py_file():
    assert parse_spec("pipesim_examples.gpt_small:build") == ("pipesim_examples.gpt_small", "build")
    assert parse_spec("mymodel.py:build") == ("mymodel.py", "build")
    assert parse_spec("/a/b c/my-model.py:make") == ("/a/b c/my-model.py", "make")
    assert parse_spec("sub/model.py:build") == ("sub/model.py", "build")


@pytest.mark.parametrize("spec", ["sub/model.txt:build", "./mymodel:build", "model.py:1x", "model.py:", "nocolon"])
def test_a_bad_spec_is_refused_naming_both_forms(spec):
    with pytest.raises(ValueError) as raised:
        parse_spec(spec)
    assert "package.module:factory" in str(raised.value) and "path/to/file.py:factory" in str(raised.value)


def test_a_file_spec_is_made_absolute_and_checked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mymodel.py").write_text("def build():\n    return 1\n")
    assert absolute_spec("mymodel.py:build") == f"{tmp_path / 'mymodel.py'}:build"
    assert absolute_spec("pkg.mod:build") == "pkg.mod:build"  # a module: imported from here, as it is
    ModelConfig(kind="custom", spec=absolute_spec("mymodel.py:build"))  # what the ranks read back


def _refusal(spec: str) -> str:
    with pytest.raises(ValueError) as raised:
        absolute_spec(spec)
    message = str(raised.value)
    assert "\n" not in message and SPEC_HELP in message
    return message


def test_a_missing_file_a_folder_a_fifo_and_a_non_py_file_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder.py").mkdir()
    os.mkfifo(tmp_path / "fifo.py")  # opening it to read would block: refused on its stat, unread
    (tmp_path / "model.txt").write_text("def build(): pass\n")
    assert "no such file" in _refusal("nothere.py:build")
    assert "is a folder" in _refusal("folder.py:build")
    assert "not a regular file" in _refusal("fifo.py:build")
    assert "not a .py file" in _refusal("model.txt:build")


def test_two_files_of_one_name_load_apart(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.py").write_text(f"def build():\n    return {name!r}\n")
    first = load_factory(f"{tmp_path / 'a' / 'model.py'}:build")
    second = load_factory(f"{tmp_path / 'b' / 'model.py'}:build")
    assert (first(), second()) == ("a", "b")


def test_a_file_that_raises_on_import_is_one_line(tmp_path):
    (tmp_path / "broken.py").write_text("raise RuntimeError('no GPU here')\n")
    with pytest.raises(ValueError, match="importing .*broken.py.* failed: RuntimeError: no GPU here"):
        load_factory(f"{tmp_path / 'broken.py'}:build")


def test_the_cli_refuses_a_missing_model_file_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    started = []
    monkeypatch.setattr(phase.subprocess, "Popen", lambda *a, **k: started.append(a))
    assert cli.main(["profile", "--model", "nothere.py:build", "--out", "out/p"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--model" in err and "no such file" in err and "path/to/file.py:factory" in err
    assert started == [] and list(tmp_path.iterdir()) == []


def _program(bin_dir: Path, script: str, module: str) -> list[str]:
    """The console script where this environment has it (an installed user's command), else `python -m`."""
    installed = bin_dir / script
    return [str(installed)] if installed.is_file() else [sys.executable, "-m", module]


README = (processes.REPO_ROOT / "README.md").read_text()
OWN_MODEL_MARK = "from the folder that holds your `mymodel.py`"
# Appended to the README's commands (argparse: the last value wins): the same path at a test's sizes.
SMALL = {
    "profile": ["--microbatch-sizes", "1,2", "--launches", "1", "--global-batch", "4", "--repeats", "3",
                "--in-situ-steps", "8"],
    "plan": ["--global-batch", "4", "--microbatch-sizes", "1,2", "--chunks", "1"],
    "verify-plan": ["--top", "1", "--rounds", "1", "--steps", "3", "--min-seconds", "0"],
}  # fmt: skip


def readme_own_model_commands() -> list[list[str]]:
    """The README's own-model commands, as written (a continued line joined), each split into words."""
    block = README[README.index(OWN_MODEL_MARK) :]
    block = block[block.index("```bash\n") + len("```bash\n") :]
    block = block[: block.index("\n```")]
    return [shlex.split(line) for line in block.replace("\\\n", " ").splitlines() if line.strip()]


def test_the_readme_own_model_commands_are_the_installed_ones():
    commands = readme_own_model_commands()
    assert [c[:2] for c in commands] == [
        ["pipesim-run", "profile"],
        ["pipesim", "plan"],
        ["pipesim-run", "verify-plan"],
    ]
    assert commands[0][commands[0].index("--model") + 1] == "mymodel.py:build"


@pytest.mark.torchrun
def test_the_readme_path_from_an_empty_folder(tmp_path):
    """The README's own-model commands, at small sizes, from a folder holding only the user's model file."""
    (tmp_path / "mymodel.py").write_text(MODEL_FILE)
    bin_dir = Path(sys.executable).parent
    programs = {
        "pipesim-run": _program(bin_dir, "pipesim-run", "pipesim_executor"),
        "pipesim": _program(bin_dir, "pipesim", "pipesim"),
    }
    paths = (str(processes.REPO_ROOT), os.environ.get("PYTHONPATH"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
    env.setdefault("OMP_NUM_THREADS", "1")
    outputs = []
    for program, command, *rest in readme_own_model_commands():
        argv = [*programs[program], command, *rest, *SMALL[command]]
        done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
        if command == "plan" and done.returncode and "is disturbed" in done.stderr:
            # a busy machine disturbed the profile, and the plan said so and how to go on: as a user would
            argv.append("--accept-disturbed-profile")
            done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
        # verify-plan's 3: the machine's speed moved during it (not comparable), a verdict about the machine
        accepted = (0, 3) if command == "verify-plan" else (0,)
        assert done.returncode in accepted, f"{' '.join(argv)}: {done.stderr[-2000:]}"
        outputs.append(done.stdout)
    cost = next((tmp_path / "out").glob("*/cost.json")).read_text()
    assert f"{tmp_path / 'mymodel.py'}:build" in cost  # the ranks loaded the file by its absolute path
    assert "measured median" in outputs[-1]
    assert list((tmp_path / "out").glob("*-verify.json"))  # the verification, from runs of the user's own file
