"""Issue 30, injection: the configs' bookkeeping, the prediction priced like the injection, the stretched runner
and the delayed link without processes, and one sleep-mode run on 4 ranks under torchrun (loose ratios only)."""

from __future__ import annotations

import statistics
import time

import pytest

from pipesim.cost.model import CostModel
from pipesim.cost.perturb import Perturbation
from pipesim.io.formats import read_json, save_schedule, timeline_to_dict, write_json
from pipesim.schedules import build_schedule
from pipesim.sim.steps import simulate_step
from pipesim_executor.config import RunConfig, run_config

SLEEP = dict(schedule="1f1b", num_ranks=4, num_microbatches=4, compute="sleep", sleep_f=(3.0,), sleep_b=(6.0,))


def test_the_injection_round_trips_through_config_json():
    config = run_config(**SLEEP, inject=("slow-rank=1:2", "link-delay=3-2:1.5", "slow-rank=0:1.2:W"))
    back = RunConfig.from_dict(config.to_dict())
    assert back == config
    assert back.inject.perturbation() == Perturbation(((1, 2.0),), ((2, 3, 1.5),), ((0, "W", 1.2),))
    assert run_config(schedule="1f1b").inject.perturbation() == Perturbation()


@pytest.mark.parametrize(
    "extra,needle",
    [
        ({"inject": ("slow-rank=4:2",)}, "rank 4 is not in a pipeline of 4"),
        ({"inject": ("slow=1:2",)}, "slow-rank=R:FACTOR"),
        ({"inject": ("slow-rank=1:0.5",)}, ">= 1"),
        ({"inject": ("link-delay=1-2:nan",)}, "finite"),
        ({"profile": True}, "drop --profile"),
        ({"compute": "model"}, "add --compute sleep"),
    ],
)
def test_bad_injections_are_refused_before_anything_starts(extra, needle):
    with pytest.raises(ValueError, match=None) as info:
        run_config(**{**SLEEP, **extra})
    assert needle in str(info.value)


def test_sleep_mode_is_checked_against_its_costs_not_the_model():
    from pipesim_executor.host.checks import check_run

    config = run_config(**{**SLEEP, "num_microbatches": 8, "schedule": "zbv"}, device="cpu")  # 8 stages, 6 layers
    assert check_run(config)[1].num_stages == 8
    assert check_run(run_config(**{**SLEEP, "num_ranks": 8, "num_microbatches": 8}, device="cpu"))  # 8 on 2 cores
    with pytest.raises(ValueError, match="2 stages"):
        check_run(run_config(**{**SLEEP, "sleep_f": (1.0, 2.0)}, device="cpu"))


def test_the_executor_cli_refuses_a_bad_injection_in_one_line(capsys, tmp_path):
    from pipesim_executor.host.cli import main

    code = main(["run", "--ranks", "2", "--inject", "slow-rank=2:1.5", "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "rank 2" in err, err
    assert not (tmp_path / "r").exists()


def test_the_prediction_prices_the_injection_and_sleep_costs(tmp_path):
    from pipesim_executor.host.predict import analyse_run

    config = run_config(**SLEEP, inject=("slow-rank=2:1.5", "link-delay=0-1:2"))
    schedule = build_schedule("1f1b", 4, 4)
    cost = CostModel.uniform(3.0, 6.0)
    slowed = simulate_step(schedule, config.inject.perturbation().apply(cost, schedule.stage_to_rank))
    from dataclasses import replace

    measured = replace(slowed.timeline, source="measured")
    write_json(timeline_to_dict(measured, {"step_times_ms": [slowed.step_ms] * 3}), tmp_path / "measured.json")
    save_schedule(schedule, tmp_path / "schedule.json")
    out = analyse_run(tmp_path, schedule, config)
    assert out["predicted_step_ms"] == pytest.approx(slowed.step_ms)
    assert out["prediction_error"] == pytest.approx(0.0, abs=1e-9)
    simulated = read_json(tmp_path / "simulated.json")
    assert simulated["injection"]["slow_ranks"] == [{"rank": 2, "factor": 1.5}]
    assert (tmp_path / "cost.json").exists()  # the slept costs, as the run's cost model
    plain = analyse_run(tmp_path, schedule, run_config(**SLEEP))
    assert plain["predicted_step_ms"] < slowed.step_ms


def test_sleep_costs_are_cut_per_chunk_once(tmp_path):
    """Per-rank sleep costs cut for an interleaved schedule, saved as cost.json and read back, keep their cut."""
    from pipesim.io.cost_file import load_cost, save_cost

    config = run_config(**{**SLEEP, "schedule": "interleaved-1f1b", "num_microbatches": 8}, num_virtual_stages=2)
    schedule = build_schedule("interleaved-1f1b", 4, 8, num_virtual_stages=2)
    cost = config.compute.cost_model(schedule)
    save_cost(cost, tmp_path / "cost.json")
    again = load_cost(tmp_path / "cost.json").for_pipeline(schedule.num_stages, schedule.num_ranks)
    assert [s.forward_ms for s in again.stages] == [1.5] * 8  # 3 ms per rank, two chunks


def test_a_stretched_runner_sleeps_factor_minus_one_times_its_own_duration(monkeypatch):
    import torch

    from pipesim_executor.rank import inject

    clock = [0.0]
    slept: list[float] = []

    class Runner:
        is_last = False

        def forward(self, x, target=None, split=False):
            clock[0] += 0.004  # the call takes 4 ms on the fake clock
            return x, None

    monkeypatch.setattr(inject.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(inject, "precise_sleep", slept.append)
    runner = inject.StretchedRunner(Runner(), {"forward": 1.5}, torch.device("cpu"))
    runner.forward(1)
    assert slept == [pytest.approx(0.002)] and runner.is_last is False
    factors = inject.call_factors(Perturbation.parse(["1:1.4:W", "1:1.2"]), 1)
    assert factors == pytest.approx({"forward": 1.2, "backward": 1.44, "backward_input": 1.2, "backward_weight": 1.68})


def test_a_delayed_link_posts_its_sends_late_and_in_order():
    import torch

    from pipesim_executor.rank.inject import DelayedTransport

    posted: list[tuple[int, int, float]] = []

    class Done:
        def is_completed(self):
            return True

        def wait(self):
            pass

    class Transport:
        def isend(self, tensor, dst, tag):
            posted.append((dst, tag, time.perf_counter()))
            return Done()

    delayed = DelayedTransport(Transport(), {1: 30.0})
    start = time.perf_counter()
    handles = [delayed.isend(torch.zeros(1), 1, tag) for tag in range(3)]
    delayed.isend(torch.zeros(1), 2, 9).wait()  # another peer: at once
    assert posted[0][:2] == (2, 9)
    for handle in handles:
        handle.wait()
    assert [p[:2] for p in posted[1:]] == [(1, 0), (1, 1), (1, 2)]
    assert all(p[2] - start >= 0.030 for p in posted[1:])  # never early (late is the machine's load)


@pytest.mark.torchrun
def test_sleep_mode_runs_4_ranks_with_a_slow_rank(tmp_path):
    from pipesim_executor.host import launch

    config = run_config(**SLEEP, steps=3, inject=("slow-rank=1:2",), timeout_s=400)
    result = launch.run(config, runs_root=tmp_path, name="slow")
    assert result.status == "ok", result.message
    measured = read_json(result.run_dir / "measured.json")
    assert measured["meta"]["injection"]["slow_ranks"] == [{"rank": 1, "factor": 2.0}]
    assert measured["meta"]["compute"] == "sleep"
    assert read_json(result.run_dir / "simulated.json")["injection"]["slow_ranks"][0]["rank"] == 1
    durations: dict[tuple[int, str], list[float]] = {}
    for span in result.measured.spans:
        durations.setdefault((span.rank, span.action.kind.value), []).append(span.end - span.start)
    forward = {rank: statistics.median(durations[(rank, "F")]) for rank in range(4)}
    assert forward[0] >= 3.0 * 0.9 and forward[1] >= 2 * 3.0 * 0.9  # a sleep is never short
    assert forward[1] / max(forward[0], forward[2], forward[3]) > 1.3  # loose: the machine is shared
    assert result.prediction_error is not None and result.predicted_step_ms > 0
