"""`-` means standard output for every --json and --csv output of both command lines: the data
goes to stdout, the words to stderr, and no file named `-` is made."""

from __future__ import annotations

import json

import pytest

from pipesim.cli.main import main

SIZE = ["--ranks", "2", "--microbatches", "4"]
MODEL = ["--layers", "2", "--hidden", "64", "--ffn", "128", "--heads", "2", "--seq-len", "16", "--vocab", "100"]


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        (["simulate", "--schedule", "1f1b", *SIZE, "--json", "-"], "json"),
        (["simulate", "--schedule", "1f1b", *SIZE, "--csv", "-"], "csv"),
        (["compare", "--schedules", "1f1b,gpipe", *SIZE, "--json", "-"], "json"),
        (["plan", *MODEL, "--devices", "2", "--global-batch", "4", "--schedules", "1f1b", "--json", "-"], "json"),
        (["synthesize", *SIZE, "--memory-limit", "2", "--time-limit", "0.5", "--csv", "-", "--json", "s.json"], "csv"),
    ],
    ids=["simulate-json", "simulate-csv", "compare-json", "plan-json", "synthesize-csv"],
)
def test_dash_writes_to_standard_output(argv, kind, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 0
    out, err = capsys.readouterr()
    if kind == "json":
        assert isinstance(json.loads(out), dict)  # stdout is the document alone: it pipes into jq
    else:
        assert out.splitlines()[0].count(",") >= 1 and "0F0" in out
    assert err.strip()  # the summary went to stderr
    assert not (tmp_path / "-").exists()


def test_two_outputs_on_standard_output_are_refused(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--schedule", "1f1b", *SIZE, "--json", "-", "--csv", "-"]) == 2
    assert "both write to standard output" in capsys.readouterr().err
