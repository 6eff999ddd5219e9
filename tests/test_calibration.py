"""`pipesim plan --calibrate-from RUN_DIR`: the description's device rate and per-action terms fitted to
a run, checked on a run folder whose truth is known (a simulated step of a known device, written as a run)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pipesim.analysis.calibration import calibrate_from_run
from pipesim.cli.main import main
from pipesim.cost.description import ModelDescription
from pipesim.cost.runtime import RankRuntime
from pipesim.io.formats import timeline_to_dict
from pipesim.records import CommSpan
from pipesim.schedules import build_schedule
from pipesim.sim.steps import simulate_step
from pipesim_executor.config import ModelConfig, run_config

TRUE_TFLOPS, ACTION_MS, DISPATCH_MS, TAIL_MS = 0.05, 0.3, 0.1, 0.5


def write_run(folder, *, kind: str = "transformer", split: list[int] | None = (3,)) -> None:
    """A 2-rank 1F1B run of the executor's small Transformer on a device of TRUE_TFLOPS that pays ACTION_MS in every
    action, DISPATCH_MS before it and TAIL_MS after the last: config.json and measured.json as the executor writes."""
    model = ModelConfig() if kind == "transformer" else ModelConfig.of_cnn()
    config = run_config(schedule="1f1b", num_ranks=2, num_microbatches=8, batch_size=16, model=model)
    shape = config.model.transformer
    description = ModelDescription(
        **{f: getattr(shape, f) for f in shape.__dataclass_fields__}, microbatch_size=2, dtype="fp32",
        device_tflops=TRUE_TFLOPS,
    )  # fmt: skip
    cost = description.split_cost_model((3,))
    stages = tuple(
        replace(s, forward_ms=s.forward_ms + ACTION_MS, backward_ms=s.backward_ms + ACTION_MS, weight_ms=None)
        for s in cost.stages
    )
    cost = replace(cost, stages=stages, runtime=RankRuntime((TAIL_MS,), (DISPATCH_MS,)))
    step = simulate_step(build_schedule("1f1b", 2, 8), cost)
    timeline = replace(step.timeline, source="measured")
    waits, previous = [], {}
    for span in sorted(timeline.spans, key=lambda s: (s.rank, s.start)):
        ready = previous.get(span.rank, 0.0) + DISPATCH_MS
        if span.start > ready + 1e-9:  # waiting for a message: the executor records the receive's wait
            waits.append(CommSpan(span.rank, "recv", 1 - span.rank, span.action, ready, span.start))
        previous[span.rank] = span.end
    timeline = replace(timeline, comm=tuple(waits), meta={} if split is None else {"split_points": list(split)})
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config.to_dict()))
    (folder / "measured.json").write_text(json.dumps(timeline_to_dict(timeline, {"step_times_ms": [step.step_ms]})))


def test_the_fit_recovers_the_device_rate_and_the_per_action_terms(tmp_path):
    """Catches a fit that ignores the per-action constant (the rate would absorb it) or counts receive waits as
    dispatch."""
    write_run(tmp_path / "run")
    calibration = calibrate_from_run(tmp_path / "run")
    assert calibration.device_tflops == pytest.approx(TRUE_TFLOPS, rel=1e-9)
    assert calibration.action_ms == pytest.approx(ACTION_MS, rel=1e-9)
    assert calibration.dispatch_ms == pytest.approx(DISPATCH_MS, rel=1e-9)
    assert calibration.tail_ms == pytest.approx(TAIL_MS, rel=1e-9)
    assert calibration.residual == pytest.approx(0.0, abs=1e-9)


def test_plan_calibrate_from_uses_the_fit_and_says_so(tmp_path, capsys):
    write_run(tmp_path / "run")
    out = tmp_path / "plan.json"
    argv = ["plan", "--layers", "8", "--hidden", "128", "--ffn", "512", "--heads", "4", "--seq-len", "64"]
    argv += ["--vocab", "1000", "--dtype", "fp32", "--tflops", "400", "--devices", "2", "--global-batch", "16"]
    assert main([*argv, "--calibrate-from", str(tmp_path / "run"), "--json", str(out)]) == 0
    assert "uncalibrated" not in capsys.readouterr().out
    plan = json.loads(out.read_text())
    assert plan["calibration"]["calibrated"] and plan["calibration"]["source"] == "description calibrated from a run"
    assert plan["inputs"]["model"]["device_tflops"] == pytest.approx(TRUE_TFLOPS)
    assert plan["inputs"]["calibrated_from"]["dispatch_ms"] == pytest.approx(DISPATCH_MS)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"kind": "cnn"}, "calibrated from a run of the built-in Transformer"), ({"split": None}, "split points")],
)
def test_a_run_it_cannot_calibrate_from_is_refused_in_one_line(tmp_path, capsys, kwargs, message):
    write_run(tmp_path / "run", **kwargs)
    with pytest.raises(ValueError, match=message):
        calibrate_from_run(tmp_path / "run")
    argv = ["plan", "--devices", "2", "--global-batch", "16", "--calibrate-from", str(tmp_path / "run")]
    assert main(argv) == 2 and message.split()[0] in capsys.readouterr().err
    assert main(["plan", "--devices", "2", "--global-batch", "16", "--calibrate-from", str(tmp_path / "nope")]) == 2
