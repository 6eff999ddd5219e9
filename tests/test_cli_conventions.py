"""Both command lines' conventions (issue 19 items 7 and 8, issue 20 items 3 and 5): flags and help generated from
the configs, one usage-error path with documented exit statuses, and outputs that are whole, readable and written
only once every argument is good."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import stat
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from pipesim.cli.main import build_parser as pipesim_parser
from pipesim.cli.main import main as pipesim_main
from pipesim.cost.shape import TransformerShape
from pipesim.flags import BROKEN_PIPE, field_docs
from pipesim.io.formats import write_file
from pipesim.schedules import build_schedule
from pipesim_executor.config import CNNConfig, ModelConfig, RunConfig
from pipesim_executor.host import cli as executor_cli
from pipesim_executor.host import cli_run, launch

REPO = Path(__file__).resolve().parents[1]
TINY = ["--layers", "2", "--d-model", "16", "--heads", "2", "--ffn", "32", "--seq-len", "8", "--vocab", "32"]


def _actions(parser: argparse.ArgumentParser, prefix: str = ""):
    """(command, action) for every argument of a parser and its subcommands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, f"{prefix} {name}".strip())
        elif not isinstance(action, argparse._HelpAction):
            yield prefix, action


@pytest.mark.parametrize("parser", [pipesim_parser, executor_cli.build_parser], ids=["pipesim", "executor"])
def test_every_argument_has_help(parser):
    """Breakage caught: a flag added (or generated from a field) without help text."""
    bare = [
        f"{command} {action.option_strings or action.dest}" for command, action in _actions(parser()) if not action.help
    ]
    assert not bare, f"arguments without help: {bare}"


@pytest.mark.parametrize("parser", [pipesim_parser, executor_cli.build_parser], ids=["pipesim", "executor"])
def test_every_flag_with_a_default_shows_it_and_every_command_its_exit_statuses(parser):
    """Catches a flag whose default the help leaves out (plan --optimizer, doctor --timeout), a flag
    generated from a config field with a default that its help does not show, and a command without the
    exit-status epilogue or a description (synthesize, list)."""
    built = parser()
    missing = []
    for command, action in _actions(built):
        subparser = _subparser(built, command)
        text = subparser.formatter_class(subparser.prog)._get_help_string(action) or ""
        has_default = action.default not in (None, False, argparse.SUPPRESS) and action.option_strings
        if has_default and "default" not in text:
            missing.append(f"{command} {action.option_strings[0]}")
    assert not missing, f"flags whose help does not show their default: {missing}"
    for command, subparser in _subparsers(built):
        assert "Exit status: 0" in (subparser.epilog or ""), f"{command}: no exit statuses"
        assert subparser.description, f"{command}: no description"


def _subparsers(parser: argparse.ArgumentParser):
    (choices,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(choices.choices.items())


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    return dict(_subparsers(parser))[command] if command else parser


def test_generated_flags_show_their_configs_defaults():
    """A generated flag defaults to nothing (the config's default applies): its help carries that default, or
    says what happens without it (RunConfig's --virtual-stages: the schedule's own)."""
    helps = {
        action.option_strings[0]: action.help
        for _, action in _actions(executor_cli.build_parser())
        if action.option_strings and action.default is argparse.SUPPRESS
    }
    shown = {flag: text for flag, text in helps.items() if "default" in text}
    assert "--virtual-stages" in shown and "--steps" in shown and "--timeout" in shown
    switches = {"--profile", "--reference", "--recompute", "--torch-profile"}  # off unless given
    assert set(helps) - set(shown) <= switches | {"--rdzv-endpoint"}, set(helps) - set(shown) - switches


def _config_fields(cls: type, section: str = "run"):
    hints = typing.get_type_hints(cls)
    for field in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[field.name]):
            yield from _config_fields(hints[field.name], f"{section}.{field.name}")
        elif field.metadata.get("cli", True):
            yield cls, f"{section}.{field.name}", field


def test_run_flags_and_their_help_are_the_config_fields():
    """Every RunConfig field is a flag whose help is the field's docstring: a field added to a config gets its flag
    and help with nothing written by hand. Breakage caught: a field without a docstring, a hand-written flag table
    that forgets a field, a help text that drifts from the field's."""
    by_dest = {action.dest: action for command, action in _actions(executor_cli.build_parser()) if command == "run"}
    for cls, dest, field in _config_fields(RunConfig):
        doc = field_docs(cls).get(field.name)
        assert doc, f"{cls.__name__}.{field.name} has no docstring"
        assert dest in by_dest, f"no flag for {dest}"
        assert by_dest[dest].help.replace("%%", "%").startswith(doc.rstrip(".")), dest


def test_flags_reach_every_section_of_the_config():
    args = executor_cli.build_parser().parse_args(
        ["run", "--ranks", "3", "--microbatches", "6", "--d-model", "32", "--heads", "2", "--seq-len", "9",
         "--steps", "7", "--lr", "0.5", "--backend", "gloo", "--node-rank", "0", "--timeout", "12", "--profile"]
    )  # fmt: skip
    config = cli_run.config_from_args(args)
    assert (config.pipeline.num_ranks, config.pipeline.num_microbatches) == (3, 6)
    assert (config.model.transformer.hidden_size, config.model.transformer.seq_len) == (32, 9)
    assert config.model.transformer.num_layers == ModelConfig().transformer.num_layers  # the config's default
    assert (config.training.steps, config.training.lr, config.training.batch_size) == (7, 0.5, 18)
    assert (config.devices.backend, config.timeout_s, config.profile) == ("gloo", 12.0, True)
    cnn = cli_run.config_from_args(
        executor_cli.build_parser().parse_args(["run", "--model", "cnn", "--cnn-blocks", "6"])
    )
    assert cnn.model.cnn == CNNConfig(blocks=6) and cnn.model.num_units == 9


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--model", "cnn", "--layers", "3"], "--layers size the built-in transformer model; the cnn does not"),
        (["--cnn-blocks", "3"], "--cnn-blocks size the built-in cnn model"),
        (["--model", "examples.gpt_small:build", "--heads", "2"], "examples.gpt_small:build does not take them"),
    ],
)
def test_size_flags_of_another_model_are_a_usage_error(argv, needle, capsys):
    assert executor_cli.main(["run", "--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_one_transformer_shape_everywhere():
    """The Transformer's sizes are declared once: the planner's description, the executor's model and the example
    GPT all hold a TransformerShape, and a plan's model maps onto the executor's field for field."""
    from examples.gpt_small import SMALL
    from pipesim.cost.description import ModelDescription

    assert isinstance(ModelDescription(), TransformerShape) and isinstance(SMALL, TransformerShape)
    assert isinstance(ModelConfig().transformer, TransformerShape)
    old = {"kind": "transformer", "d_model": 32, "num_heads": 2, "num_layers": 3, "cnn_blocks": 5, "split_points": [2]}
    model = ModelConfig.from_dict(old)  # a run folder written before the split still reads
    assert (model.transformer.hidden_size, model.transformer.num_layers, model.cnn.blocks) == (32, 3, 5)
    assert model.split_points == (2,) and ModelConfig.from_dict(dataclasses.asdict(model)) == model


@pytest.mark.parametrize(
    "command", [*[[name] for name in executor_cli.COMMANDS], ["simulate"], ["compare"], ["plan"], []]
)
def test_exit_statuses_are_in_the_help(command):
    parser = executor_cli.build_parser() if command and command[0] in executor_cli.COMMANDS else pipesim_parser()
    sub = parser
    for name in command:
        sub = next(a for a in sub._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    text = sub.format_help()
    if sub is parser and not command:
        text = pipesim_parser().format_help() + executor_cli.build_parser().format_help()
    text = " ".join(text.split())  # argparse wraps the epilog
    assert "Exit status: 0" in text and "2 a usage error" in text


def test_a_deadlock_exits_1_and_a_bad_flag_2(tmp_path, capsys):
    """Usage errors are 2, good inputs that cannot run are 1 (issue 19 item 8; a deadlock exited 2 before)."""
    csv = tmp_path / "dead.csv"
    csv.write_text("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n")
    assert pipesim_main(["simulate", "--csv-in", str(csv)]) == 1
    assert "deadlock" in capsys.readouterr().err.lower()
    assert pipesim_main(["simulate", "--schedule", "1f1b", "--ranks", "x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m pipesim: error: ") and "see: python -m pipesim simulate --help" in err


def test_a_partial_run_exits_0(tmp_path, monkeypatch, capsys):
    """Issue 20 item 5: partial (the run went well, its torch reference did not) is not a failed run."""

    def command(config, run_dir, module=None, **_):
        return [
            sys.executable,
            "-c",
            "import sys; sys.exit(3 if %r else 0)" % (module == "pipesim_executor.rank.reference"),
        ]

    monkeypatch.setattr(launch, "torchrun_command", command)
    argv = ["run", "--device", "cpu", "--reference", *TINY, "--out", str(tmp_path / "r")]
    assert executor_cli.main(argv) == 0
    assert "status   partial" in capsys.readouterr().out


@pytest.mark.parametrize("command", ["show", "cancel"])
def test_a_run_that_does_not_exist_is_no_such_run(command, tmp_path, capsys):
    assert executor_cli.main([command, str(tmp_path / "doesnotexist")]) == 2
    assert "no such run" in capsys.readouterr().err


def test_the_finished_event_is_its_own_line_before_the_summary(tmp_path, monkeypatch, capsys):
    """Issue 20 item 3: the finished event was written after wait() returned, so the summary could be glued to it.
    Breakage caught: `_finished.set()` before the event (the slow callback below then ends up after the summary)."""
    monkeypatch.setattr(launch, "torchrun_command", lambda config, run_dir, **_: [sys.executable, "-c", "pass"])
    printed = cli_run.print_event

    def slow(event: dict) -> None:
        if event.get("event") == "finished":
            import time

            time.sleep(0.3)
        printed(event)

    monkeypatch.setattr(cli_run, "print_event", slow)
    assert executor_cli.main(["run", "--device", "cpu", *TINY, "--out", str(tmp_path / "r")]) == 0
    lines = capsys.readouterr().out.splitlines()
    events = [json.loads(line) for line in lines if line.startswith("{")]  # every event line is whole JSON
    assert events[-1]["event"] == "finished"
    assert lines.index(next(x for x in lines if x.startswith("run "))) > lines.index(json.dumps(events[-1]))


# --- outputs ------------------------------------------------------------------------------------------------


@pytest.fixture
def umask():
    """Set the process umask for a test, and put it back."""
    previous = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077, 0o002])
def test_a_new_file_honours_the_umask(mask, umask, tmp_path):
    """Issue 20 item 3: every file was -rw------- whatever the umask (mkstemp's mode)."""
    umask(mask)
    write_file("x", tmp_path / "new.txt")
    assert _mode(tmp_path / "new.txt") == 0o666 & ~mask


def test_a_replaced_file_and_a_symlinks_target_keep_their_mode(umask, tmp_path):
    umask(0o077)
    kept = tmp_path / "kept.txt"
    kept.write_text("old")
    kept.chmod(0o644)
    write_file("new", kept)
    assert _mode(kept) == 0o644 and kept.read_text() == "new"
    target, link = tmp_path / "target.json", tmp_path / "link.json"
    target.write_text("{}")
    target.chmod(0o640)
    link.symlink_to(target)
    write_file("[]", link)
    assert link.is_symlink() and _mode(target) == 0o640 and target.read_text() == "[]"


def test_cli_outputs_honour_the_umask(umask, tmp_path, capsys):
    umask(0o022)
    assert pipesim_main(["simulate", "--schedule", "1f1b", "--ranks", "2", "--microbatches", "2",
                         "--json", str(tmp_path / "t.json"), "--csv", str(tmp_path / "s.csv")]) == 0  # fmt: skip
    assert _mode(tmp_path / "t.json") == _mode(tmp_path / "s.csv") == 0o644


@pytest.mark.parametrize(
    "refused",
    [
        ["--steps", "1000000000"],  # the probe: three files written, then the steps refused
        ["--trace", "/nonexistent-folder/t.json"],  # the last output cannot be written
        ["--overhead", "1,2,3"],  # 3 values for 2 ranks
    ],
)
def test_nothing_is_written_unless_every_argument_is_good(refused, tmp_path, capsys):
    outputs = ["--json", str(tmp_path / "a.json"), "--csv", str(tmp_path / "b.csv"), "--html", str(tmp_path / "c.html")]
    code = pipesim_main(["simulate", "--schedule", "1f1b", "--ranks", "2", "--microbatches", "2", *outputs, *refused])
    err = capsys.readouterr().err
    assert code in (1, 2) and err.count("\n") == 1 and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_the_same_output_twice_is_refused(tmp_path, capsys):
    path = str(tmp_path / "x.json")
    assert pipesim_main(["simulate", "--schedule", "1f1b", "--ranks", "2", "--microbatches", "2",
                         "--json", path, "--trace", path]) == 2  # fmt: skip
    assert "name the same file" in capsys.readouterr().err and not Path(path).exists()


def test_a_browser_that_fails_to_start_is_one_line(tmp_path, monkeypatch, capsys):
    """Issue 20 item 3's probe: BROWSER_PATH=/bin/false printed a 70-line traceback after the JSON was written."""
    monkeypatch.setenv("BROWSER_PATH", "/bin/false")
    outputs = ["--json", str(tmp_path / "a.json"), "--html", str(tmp_path / "c.html"), "--png", str(tmp_path / "d.png")]
    code = pipesim_main(["simulate", "--schedule", "1f1b", "--ranks", "2", "--microbatches", "2", *outputs])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "Traceback" not in err, err
    assert "/bin/false" in err and "HTML export still works" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "c.html"]


def test_undecodable_and_oversized_numbers_name_the_users_file(tmp_path, capsys):
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"0F0,\xff\xfe0B0\n")
    assert pipesim_main(["simulate", "--csv-in", str(binary)]) == 2
    err = capsys.readouterr().err
    assert str(binary) in err and "UTF-8" in err and err.count("\n") == 1
    huge = tmp_path / "cost.json"
    huge.write_text('{"format": "pipesim.cost", "version": 1, "stages": [{"forward_ms": ' + "9" * 5000 + "}]}")
    assert (
        pipesim_main(["simulate", "--schedule", "1f1b", "--ranks", "2", "--microbatches", "2", "--cost", str(huge)])
        == 2
    )
    err = capsys.readouterr().err
    assert str(huge) in err and "at most 40 digits" in err and err.count("\n") == 1  # pipesim.numbers


def test_a_closed_stdout_loses_no_file(tmp_path):
    """Issue 20 item 3's probe `pipesim plan ... | head -2`: Broken pipe, and the --json file never written. Here the
    reader is gone before the first line, so every write to stdout fails."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    plan = tmp_path / "plan.json"
    argv = ["plan", "--layers", "4", "--hidden", "128", "--ffn", "512", "--heads", "4", "--seq-len", "64",
            "--devices", "2", "--global-batch", "8", "--json", str(plan)]  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "pipesim", *argv], cwd=REPO, stdout=write_end,
                          stderr=subprocess.PIPE, text=True, timeout=120)  # fmt: skip
    os.close(write_end)
    assert done.returncode == BROKEN_PIPE and done.stderr == ""
    assert json.loads(plan.read_text())["best"] is not None


# --- what the numbers are in ---------------------------------------------------------------------------------


def test_split_points_say_their_units(capsys):
    """Issue 20 item 5: `plan --layers 24` printed split points up to 25 without saying they count the embedding."""
    assert pipesim_main(["plan", "--layers", "24", "--devices", "8", "--global-batch", "64"]) == 0
    best = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("best:"))
    assert "units count the embedding and the head" in best and "--split-points" in best


def test_memory_without_sizes_is_in_stashed_microbatches(tmp_path, capsys):
    """Issue 20 item 5: typed times carry no sizes, so compare printed "8 B"; with a cost file, binary bytes."""
    argv = ["compare", "--schedules", "1f1b,gpipe", "--ranks", "4", "--microbatches", "8"]
    assert pipesim_main(argv) == 0
    table = capsys.readouterr().out
    assert "8 microbatches" in table and " B\n" not in table and " B " not in table
    from pipesim.cost.model import CostModel
    from pipesim.io.cost_file import save_cost

    save_cost(CostModel.uniform(1.0, 2.0, activation_bytes=3 * 2**20), tmp_path / "cost.json")
    assert pipesim_main([*argv, "--cost", str(tmp_path / "cost.json")]) == 0
    assert "24.00 MiB" in capsys.readouterr().out


def test_torch_213s_off_by_one_1f1b_dump_names_the_wrong_row(tmp_path):
    """Issue 20 item 5: torch 2.13's 1F1B dump runs 3F1 .. 3F8 on its last rank (no 3F0); the message blamed rank
    0's missing 0F8. Breakage caught: reporting the ranks that lack microbatch 8 before the row that invents it."""
    from pipesim.io.formats import schedule_from_csv
    from pipesim.semantics.validate import ScheduleError, validate

    rows = [[str(a) for a in row] for row in build_schedule("1f1b", 4, 8).actions]
    rows[3] = [
        "3F1",
        "3B0",
        "3F2",
        "3B1",
        "3F3",
        "3B2",
        "3F4",
        "3B3",
        "3F5",
        "3B4",
        "3F6",
        "3B5",
        "3F7",
        "3B6",
        "3F8",
        "3B7",
    ]
    schedule = schedule_from_csv("\n".join(",".join(row) for row in rows) + "\n")
    with pytest.raises(ScheduleError) as refused:
        validate(schedule)
    assert refused.value.rank == 3 and "3F0 never runs" in str(refused.value) and "off by one" in str(refused.value)
