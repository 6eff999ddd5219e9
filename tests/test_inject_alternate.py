"""Issue 30, step-level pairing (`--inject-steps alternate`): which steps carry the injection, the switch the
stretched runners and the delayed link obey, the run's files keeping both halves (measured.json's injected_steps,
result.json's paired figures, the prediction and analysis of the injected steps only), the bench's pairing of
steps, and one 4-rank sleep-mode run under torchrun (loose ratios only)."""

from __future__ import annotations

import statistics
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from pipesim.cost.model import CostModel
from pipesim.io.formats import read_json, save_schedule, timeline_to_dict, write_json
from pipesim.records import Timeline
from pipesim.schedules import build_schedule
from pipesim.sim.steps import simulate_step
from pipesim_executor.config import RunConfig, run_config

SLEEP = dict(schedule="1f1b", num_ranks=4, num_microbatches=4, compute="sleep", sleep_f=(3.0,), sleep_b=(6.0,))
ALTERNATE = dict(SLEEP, inject=("slow-rank=2:1.5",), inject_steps="alternate")


def test_alternate_steps_are_uniform_then_injected_and_round_trip():
    config = run_config(**ALTERNATE, steps=6, warmup_steps=1)
    assert RunConfig.from_dict(config.to_dict()) == config
    assert [config.inject.injected_at(i) for i in range(-1, 6)] == [True, False, True, False, True, False, True]
    every = run_config(**SLEEP, inject=("slow-rank=2:1.5",)).inject
    assert not every.alternates and all(every.injected_at(i) for i in range(-1, 4))
    assert not run_config(**SLEEP).inject.injected_at(1)  # nothing injected: never on


@pytest.mark.parametrize(
    "extra,needle",
    [
        ({"inject_steps": "sometimes"}, "valid: all, alternate"),
        ({"inject": ()}, "add --inject"),
        ({"steps": 1}, "--steps >= 2"),
    ],
)
def test_a_bad_alternation_is_refused_in_one_line(extra, needle):
    with pytest.raises(ValueError) as info:
        run_config(**{**ALTERNATE, **extra})
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_the_executor_cli_takes_inject_steps_and_refuses_a_bad_one(capsys, tmp_path):
    from pipesim_executor.host.cli import main

    code = main(["run", "--ranks", "2", "--inject", "slow-rank=1:1.5", "--inject-steps", "often", "--out",
                 str(tmp_path / "r")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "alternate" in err, err
    assert not (tmp_path / "r").exists()


def test_the_switch_turns_the_stretch_and_the_delay_on_and_off(monkeypatch):
    import torch

    from pipesim_executor.rank import inject

    config = run_config(**ALTERNATE, warmup_steps=1).inject
    switch = inject.StepSwitch(config, warmup_steps=1)
    assert [switch.set_step(step) for step in range(5)] == [True, False, True, False, True]  # warm-up first

    slept: list[float] = []
    clock = [0.0]

    class Runner:
        def forward(self, x):
            clock[0] += 0.004
            return x

    monkeypatch.setattr(inject.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(inject, "precise_sleep", slept.append)
    runner = inject.StretchedRunner(Runner(), {"forward": 1.5}, torch.device("cpu"), switch)
    switch.set_step(1)  # measured step 0: uniform
    runner.forward(1)
    assert slept == []
    switch.set_step(2)  # measured step 1: injected
    runner.forward(1)
    assert slept == [pytest.approx(0.002)]
    monkeypatch.undo()  # the delayed link's thread sleeps for real

    sent: list[int] = []

    class Transport:
        def isend(self, tensor, dst, tag):
            sent.append(tag)
            return "handle"

    delayed = inject.DelayedTransport(Transport(), {1: 60_000.0}, switch)  # a minute: never posted in this test
    switch.set_step(1)
    assert delayed.isend(torch.zeros(1), 1, 7) == "handle" and sent == [7]  # uniform step: sent at once
    switch.set_step(2)
    late = delayed.isend(torch.zeros(1), 1, 8)
    assert not late.is_completed() and sent == [7]  # injected step: held back


def _alternating_run(tmp_path: Path, config: RunConfig, steps: int) -> tuple[float, float]:
    """A fake run folder whose measured steps alternate the uniform step and the injected one (each simulated
    exactly), flagged in measured.json as the ranks write it; the uniform and injected step times."""
    schedule = build_schedule("1f1b", 4, 4)
    cost = CostModel.uniform(3.0, 6.0)
    uniform = simulate_step(schedule, cost)
    slowed = simulate_step(schedule, config.inject.perturbation().apply(cost, schedule.stage_to_rank))
    flags = [config.inject.injected_at(i) for i in range(steps)]
    spans, comm = [], []
    for step, on in enumerate(flags):
        source = slowed if on else uniform
        spans += [s._replace(step=step) for s in source.timeline.spans]
        comm += [c._replace(step=step) for c in source.timeline.comm]
    measured = Timeline(4, tuple(spans), "measured", "1f1b", tuple(comm))
    times = [(slowed if on else uniform).step_ms for on in flags]
    write_json(
        timeline_to_dict(measured, {"step_times_ms": times, "injected_steps": flags}), tmp_path / "measured.json"
    )
    save_schedule(schedule, tmp_path / "schedule.json")
    return uniform.step_ms, slowed.step_ms


def test_an_alternating_run_predicts_its_injected_steps_and_keeps_its_uniform_twin(tmp_path):
    from pipesim_executor.host.predict import analyse_run

    config = run_config(**ALTERNATE, steps=6)
    uniform_ms, slowed_ms = _alternating_run(tmp_path, config, 6)
    assert slowed_ms > 1.05 * uniform_ms
    out = analyse_run(tmp_path, build_schedule("1f1b", 4, 4), config)
    assert out["measured_step_ms"] == pytest.approx(slowed_ms)  # the injected steps only
    assert out["prediction_error"] == pytest.approx(0.0, abs=1e-9)
    paired = out["paired"]
    assert paired["pairs"] == 3
    assert paired["uniform_step_ms"] == pytest.approx(uniform_ms)
    assert paired["predicted_uniform_step_ms"] == pytest.approx(uniform_ms)
    assert paired["measured_growth"] == pytest.approx(slowed_ms / uniform_ms - 1)
    assert paired["predicted_growth"] == pytest.approx(paired["measured_growth"])
    found = read_json(tmp_path / "analysis.json")["stragglers"]["stragglers"]
    assert [s["rank"] for s in found] == [2] and found[0]["factor"] == pytest.approx(1.5, abs=0.01)


def test_flags_that_do_not_alternate_are_refused(tmp_path):
    from pipesim_executor.host.predict import split_alternate

    timeline = Timeline(4, (), "measured")
    for flags in ([True, True], [False, False], [True], None):
        with pytest.raises(ValueError, match="injected_steps"):
            split_alternate(flags, [1.0, 2.0], timeline)


def test_the_bench_pairs_each_injected_step_with_the_uniform_one_before_it():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    import stragglers_stats as stats

    run = {"steps_ms": [10.0, 12.0, 10.5, 12.5, 11.0], "injected": [False, True, False, True, False],
           "predicted_ms": 12.1, "predicted_uniform_ms": 10.1}  # fmt: skip
    second = {**run, "steps_ms": [20.0, 24.0, 20.0, 24.0, 20.0], "predicted_ms": 24.2, "predicted_uniform_ms": 20.2}
    a, b = stats.step_pairs([run, second])
    assert [r["steps_ms"] for r in a] == [[10.0], [10.5], [20.0], [20.0]]
    assert [r["steps_ms"] for r in b] == [[12.0], [12.5], [24.0], [24.0]]
    row = stats.case_row(a, b)
    assert row["pairs"] == 4 and row["measured_growth"] > 0.15
    low, high = row["measured_growth_ci"]
    assert low <= row["measured_growth"] <= high
    with pytest.raises(ValueError, match="did not alternate"):
        stats.step_pairs([{**run, "injected": [True] * 5}])


@pytest.mark.torchrun
def test_a_4_rank_sleep_run_alternates_uniform_and_injected_steps(tmp_path):
    from pipesim_executor.host import launch

    config = run_config(**ALTERNATE, steps=4, timeout_s=400)
    result = launch.run(config, runs_root=tmp_path, name="alt")
    assert result.status == "ok", result.message
    measured = read_json(result.run_dir / "measured.json")
    assert measured["injected_steps"] == [False, True, False, True]
    assert measured["meta"]["inject_steps"] == "alternate"
    assert measured["meta"]["injection"]["slow_ranks"] == [{"rank": 2, "factor": 1.5}]
    paired = read_json(result.run_dir / "result.json")["paired"]
    assert paired["pairs"] == 2 and paired["predicted_growth"] > 0
    forward = {False: [], True: []}
    for span in result.measured.spans:
        if span.rank == 2 and span.action.kind.value == "F":
            forward[measured["injected_steps"][span.step]].append(span.end - span.start)
    assert min(forward[False]) >= 3.0 * 0.9 and min(forward[True]) >= 1.5 * 3.0 * 0.9  # a sleep is never short
    # an injected forward sleeps 1.5 ms more than its uniform twin (half its 3 ms cost); a busy machine's late
    # wake-ups add to both alike, so the difference is the test, not the ratio
    assert statistics.median(forward[True]) - statistics.median(forward[False]) > 0.5 * (1.5 - 1) * 3.0
    injected_times = [t for t, on in zip(result.step_times_ms, measured["injected_steps"], strict=True) if on]
    assert result.measured_step_ms == pytest.approx(statistics.median(injected_times))  # the injected steps'
    from pipesim_executor.host.cli_runs import summary_lines

    assert any("over the 2 injected of 4 steps" in line for line in summary_lines(result))


def test_a_slow_rank_in_sleep_mode_sleeps_once_factor_times_its_cost(monkeypatch):
    import torch

    from pipesim.ir import ActionKind
    from pipesim_executor.rank import inject

    slept: list[float] = []
    monkeypatch.setattr(inject, "precise_sleep", slept.append)
    costs = {ActionKind.FORWARD: 4.0, ActionKind.BACKWARD: 8.0, ActionKind.BACKWARD_INPUT: 4.0}
    runner = inject.SleepRunner(1, False, False, {**costs, ActionKind.BACKWARD_WEIGHT: 4.0})
    switch = inject.StepSwitch(run_config(**ALTERNATE, warmup_steps=0).inject, warmup_steps=0)
    runner.stretch({"forward": 1.5, "backward": 1.2, "backward_input": 1.0, "backward_weight": 1.0}, switch)
    for step in range(2):  # uniform, then injected
        switch.set_step(step)
        _, stash = runner.forward(torch.zeros(2, 3))
        runner.backward(stash, None)
    assert slept == pytest.approx([0.004, 0.008, 0.006, 0.0096])  # one sleep per action, never a second


def test_a_run_folder_keeps_its_injected_steps_for_the_stragglers_analysis(tmp_path):
    from pipesim.analysis.stragglers import find_stragglers
    from pipesim.io.run_record import read_outputs
    from pipesim.records import injected_only

    config = run_config(**ALTERNATE, steps=6)
    _alternating_run(tmp_path, config, 6)
    measured = read_outputs(tmp_path).measured
    assert measured.meta["injected_steps"] == [False, True] * 3
    kept = injected_only(measured)
    assert sorted({s.step for s in kept.spans}) == [0, 1, 2] and kept.meta["kept_steps"] == [1, 3, 5]
    assert len(kept.spans) == len(measured.spans) // 2
    found = find_stragglers(build_schedule("1f1b", 4, 4), kept, CostModel.uniform(3.0, 6.0)).to_dict()
    assert [s["rank"] for s in found["stragglers"]] == [2]
    plain = replace(measured, meta={})
    assert injected_only(plain) is plain  # a run that did not alternate: as it is
    doc = read_json(tmp_path / "measured.json")
    write_json({**doc, "injected_steps": [True, "yes"]}, tmp_path / "measured.json")
    with pytest.raises(ValueError, match="injected_steps"):
        read_outputs(tmp_path)
