"""`python -m executor profile`: refusals before anything starts, and one real profile of a tiny model
that `pipesim plan --cost` plans from."""

from __future__ import annotations

import json

import pytest

from pipesim.cli.main import main as pipesim_main
from pipesim.cost.profile import TIME_KINDS, UnitProfile
from pipesim.io.cost_file import load_cost_file
from pipesim_executor.allocator import ALLOCATOR_ENV
from pipesim_executor.host.cli import main as executor_main

TINY = ["--model", "examples.gpt_small:build_tiny"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--microbatch-sizes", "2"], "give 2 to 16 different whole numbers"),
        (["--microbatch-sizes", "1,1"], "give 2 to 16 different whole numbers"),
        (["--microbatch-sizes", "1,99999"], "from 1 to 4096"),
        (["--optimizers", "lion"], "unknown optimizer 'lion'"),
        (["--ranks", "0"], "ranks must be a whole number from 1 to 16"),
        (["--repeats", "1"], "repeats must be a whole number from 3"),
        (["--layers", "2"], "--layers size the built-in transformer model"),
        (["--model", "examples.gpt_small:nothing"], "has no attribute 'nothing'"),
    ],
)
def test_bad_input_is_one_line_and_starts_nothing(tmp_path, capsys, argv, message):
    out = tmp_path / "prof"
    assert executor_main(["profile", *TINY, "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not out.exists()


def test_an_existing_folder_is_never_overwritten(tmp_path, capsys):
    out = tmp_path / "prof"
    out.mkdir()
    (out / "cost.json").write_text("{}")
    assert executor_main(["profile", *TINY, "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err and (out / "cost.json").read_text() == "{}"


@pytest.mark.torchrun
@pytest.mark.timeout(600)
def test_a_real_profile_of_a_custom_model_is_planned_from(tmp_path, capsys, monkeypatch):
    for name in ALLOCATOR_ENV:
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "prof"
    argv = [
        "profile",
        *TINY,
        "--microbatch-sizes",
        "1,2",
        "--repeats",
        "3",
        "--in-situ-steps",
        "16",
        "--launches",
        "2",
        "--global-batch",
        "4",
        "--device",
        "cpu",
        "--out",
        str(out),
    ]
    assert executor_main(argv) == 0, capsys.readouterr().out
    printed = capsys.readouterr().out
    assert "units    4 (Embeddings, Block, Block, Head)" in printed
    profile = load_cost_file(out / "cost.json")
    assert isinstance(profile, UnitProfile) and profile.microbatch_sizes == (1, 2)
    assert set(profile.optimizers) == {"sgd", "sgd-momentum", "adam"} and profile.dispatch_ms > 0
    assert profile.model["spec"] == "examples.gpt_small:build_tiny" and profile.link.latency_ms > 0
    assert all(u.cost_at(2, False).forward_ms > 0 for u in profile.units[1:])
    assert (
        profile.units[1].curves["activation_bytes"].values[1]
        == 2 * profile.units[1].curves["activation_bytes"].values[0]
    )
    assert profile.in_situ["plain"].factor("backward_ms", 2) > 0 and profile.provenance["in_situ"]["ratios"]
    assert set(profile.in_situ) == {"plain", "split", "plain-chunked", "split-chunked"}
    assert profile.stages and all(size in (1, 2) for size, _, _ in profile.stages)  # the planner's cuts, timed whole
    assert (
        set(profile.spread) == set(TIME_KINDS) and profile.spread_repeats == 6
    )  # issue 29: the spread kept (3 repeats x 2 launches)
    assert "in-situ  plain: 8 factors x" in printed and "95% CI up to +-" in printed  # each class's CIs ...
    assert "every in-situ factor within +-3%" in printed or "in-situ factors not within +-3%" in printed  # ... said
    for row in profile.provenance["in_situ"]["ci"]:
        # CI reached, or 16 steps run (the first of each round of 8 dropped: 14 kept)
        assert row["ci"] is None or row["ci"] <= 0.03 or row["steps"] >= 14, row
    assert all(0 < curve.at(2) < 5 for curve in profile.spread.values())
    for terms in profile.in_situ.values():  # issue 29: each in-situ stage's own factor, for the cut it ran
        assert terms.stages and all(
            terms.factor(kind, *key) == factor for key, kinds in terms.stages.items() for kind, factor in kinds.items()
        )
    assert 0 <= profile.spread_drift < 1  # the machine's drift, in and between the launches
    launches = profile.provenance["launches"]  # two launches, each its own cost file, merged into one
    assert launches["count"] == 2 and len(launches["levels"]) == 2 and launches["spread"] >= 0
    assert (out / "launch1-cost.json").exists() and (out / "launch2-cost.json").exists()
    assert "launches 2 merged" in printed and "drift    the machine's speed moved" not in printed
    assert profile.provenance["allocator"] == ALLOCATOR_ENV  # the ranks ran with the allocator pinned
    measured = profile.provenance["in_situ"]["measured_steps"]  # every in-situ step as a run times it ...
    assert measured and all(len(row["step_ms"]) >= 14 and min(row["step_ms"]) > 0 for row in measured)
    check = profile.provenance["check"]  # ... predicted from the profile itself
    assert check["configurations"] >= 4 and 0 <= check["median_error"] <= check["largest_error"]
    assert "check    the profile predicts its own" in printed
    counts = profile.provenance["in_situ"]["microbatches"]  # the in-situ steps at the plans' shape: 4 / size
    assert 4 in counts["1"] and 2 in counts["2"], counts
    # issue 46: the machine's load while it ran, and the check's verdict (a busy machine may disturb it)
    assert profile.provenance["machine_load"]["available"] is True
    verdict = check["disturbance"]
    assert ("DISTURBED disturbed:" in printed) is verdict["disturbed"] and ("machine  other processes used" in printed
                                                                         or verdict["disturbed"])  # fmt: skip
    accept = ["--accept-disturbed-profile"] if verdict["disturbed"] else []  # plan refuses it otherwise
    plan = tmp_path / "plan.json"
    assert pipesim_main(["plan", "--cost", str(out / "cost.json"), "--devices", "2", "--global-batch", "8",
                         "--optimizer", "sgd-momentum", "--json", str(plan), *accept]) == 0  # fmt: skip
    assert json.loads(plan.read_text())["calibration"]["disturbance"]["disturbed"] is verdict["disturbed"]
    assert json.loads(plan.read_text())["inputs"]["executor_model"]["spec"] == "examples.gpt_small:build_tiny"
    best = json.loads(plan.read_text())["best"]
    assert best["step_ms_p05"] <= best["step_ms"] <= best["step_ms_p95"] and best["extrapolated"] is False
