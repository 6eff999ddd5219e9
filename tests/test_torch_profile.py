"""--torch-profile: Kineto traces of the measured steps with torch's PP:<action> labels, ours and torch's;
and `import-trace` on the traces torch itself recorded.

One torchrun launch records both: the reference run side by side (PIPESIM_REFERENCE_SIDE_BY_SIDE=1) runs our
executor and torch's ScheduleInterleaved1F1B in the same two processes, each side's measured steps under its own
profiler session.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from pipesim.cli import main as cli
from pipesim.io.formats import schedule_to_dict, write_json
from pipesim.io.kineto import import_traces
from pipesim.schedules import build_schedule
from pipesim_executor import processes
from pipesim_executor.config import ModelConfig, run_config
from pipesim_executor.rank.reference import SIDE_BY_SIDE_ENV
from pipesim_executor.rank.torch_profile import action_label, trace_path

TINY = ModelConfig.of_transformer(num_layers=2, hidden_size=16, num_heads=2, ffn_size=32, seq_len=8, vocab_size=32)


def test_torch_profile_is_a_checked_training_option():
    assert run_config(torch_profile=True).training.torch_profile is True
    with pytest.raises(ValueError, match="torch_profile must be true or false"):
        run_config(torch_profile="yes")
    from pipesim_executor.host.cli import build_parser
    from pipesim_executor.host.cli_run import config_from_args

    args = build_parser().parse_args(
        ["run", "--torch-profile", "--ranks", "2", "--microbatches", "2", "--batch-size", "4"]
    )
    assert config_from_args(args).training.torch_profile is True
    args = build_parser().parse_args(["run", "--ranks", "2", "--microbatches", "2", "--batch-size", "4"])
    assert config_from_args(args).training.torch_profile is False


def test_labels_are_torchs():
    from torch.distributed.pipelining.schedules import _Action, _ComputationType, _get_profiler_function_name

    from pipesim.ir import Action, I

    ours = Action(2, I, 3)
    theirs = _Action(2, _ComputationType.BACKWARD_INPUT, 3)
    assert action_label(ours) == _get_profiler_function_name(theirs) == "PP:2I3"


@pytest.mark.parametrize("labelled", [False, True])
def test_the_runtime_labels_actions_only_when_asked(monkeypatch, labelled):
    """One rank, two stages, no transfers: the action loop calls record_function per action with the flag,
    never without it (the unprofiled path stays as it was)."""
    import contextlib

    import torch

    from pipesim.ir import Action, make_schedule
    from pipesim_executor.rank import runtime as runtime_module
    from pipesim_executor.rank.model import make_batch
    from pipesim_executor.rank.runtime import PipelineRuntime, build_rank_model, microbatches
    from pipesim_executor.rank.timing import HostClock

    order = ("0F0", "1F0", "0F1", "1F1", "1B0", "0B0", "1B1", "0B1")
    schedule = make_schedule("local", 1, 2, [0, 0], [[Action.parse(text) for text in order]])
    calls: list[str] = []

    def record(name):
        calls.append(name)
        return contextlib.nullcontext()

    monkeypatch.setattr(runtime_module, "record_function", record)
    cpu = torch.device("cpu")
    model = build_rank_model(schedule, TINY, seed=0, microbatch_size=2, rank=0, device=cpu)
    rt = PipelineRuntime(schedule, 0, model.runners, model.shapes, None, HostClock(), label_actions=labelled)
    inputs, targets = make_batch(TINY, 4, 0, step=0)
    rt.run_step(microbatches(inputs, 2, cpu), microbatches(targets, 2, cpu))
    assert calls == ([f"PP:{a}" for a in schedule.actions[0]] if labelled else [])


def pp_events(path):
    events = json.loads(path.read_text())["traceEvents"]
    return [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("PP:")], events


@pytest.mark.torchrun
def test_one_launch_records_both_traces_and_import_gives_torchs_order(tmp_path, capsys):
    schedule = build_schedule("interleaved-1f1b", 2, 4, num_virtual_stages=2)
    config = run_config(schedule="interleaved-1f1b", num_ranks=2, num_microbatches=4, num_virtual_stages=2,
                        batch_size=8, device="cpu", backend="gloo", model=TINY, steps=2, warmup_steps=1,
                        torch_profile=True, timeout_s=240)  # fmt: skip
    write_json(config.to_dict(), tmp_path / "config.json")
    write_json(schedule_to_dict(schedule), tmp_path / "schedule.json")
    (tmp_path / "logs").mkdir()
    command = processes.torchrun_command(config, tmp_path, module=processes.REFERENCE_MODULE)
    env = {**processes.run_environment(config), SIDE_BY_SIDE_ENV: "1"}
    done = subprocess.run(command, env=env, cwd=processes.REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    reference = json.loads((tmp_path / "reference.json").read_text())
    steps = config.training.steps

    for rank in range(2):
        # ours: every action labelled as torch labels it, once per measured step (not the warm-up), kernels inside
        labels, events = pp_events(trace_path(tmp_path, rank))
        assert sorted(e["name"] for e in labels) == sorted(
            action_label(a) for a in schedule.actions[rank] for _ in range(steps)
        )
        ops = [e for e in events if e.get("cat") == "cpu_op" and e["name"].startswith("aten::")]
        assert any(
            label["ts"] <= op["ts"] <= label["ts"] + label["dur"] and label["tid"] == op["tid"]
            for op in ops
            for label in labels
        )

    # torch's traces, imported: the actions are the order torch ran, the times are the trace's slices
    torch_files = [trace_path(tmp_path, rank, "torch") for rank in range(2)]
    run = import_traces(torch_files, name="interleaved-1f1b")
    order = reference["torch_order"]
    for rank in range(2):
        assert [str(a) for a in run.schedule.actions[rank]] == [text for text in order[str(rank)] if text]
    assert len(run.step_times_ms) == steps
    for rank, path in enumerate(torch_files):
        labels, _ = pp_events(path)
        compute = sorted(
            (e for e in labels if e["name"][3:] in {str(a) for a in schedule.actions[rank]}), key=lambda e: e["ts"]
        )
        # each step is timed from its own start (as measured timelines are): within a step, the trace's offsets
        spans = sorted((s for s in run.timeline.spans if s.rank == rank), key=lambda s: (s.step, s.start))
        assert [f"PP:{s.action}" for s in spans] == [e["name"] for e in compute]
        per_step = len(compute) // steps
        for k, (span, event) in enumerate(zip(spans, compute, strict=True)):
            first_span, first_event = spans[k - k % per_step], compute[k - k % per_step]
            assert span.step == k // per_step and span.duration == pytest.approx(event["dur"] / 1000, abs=1e-6)
            assert span.start - first_span.start == pytest.approx((event["ts"] - first_event["ts"]) / 1000, abs=1e-6)
    # and the command line overlays it on the simulation of the recovered schedule
    assert cli.main(["import-trace", *map(str, torch_files), "--json", str(tmp_path / "imported.json")]) == 0
    assert "2 steps recorded" in capsys.readouterr().out
    # our own traces import to our schedule
    ours = import_traces([trace_path(tmp_path, rank) for rank in range(2)])
    assert ours.schedule.actions == schedule.actions and len(ours.step_times_ms) == steps
