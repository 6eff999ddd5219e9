"""Issue 30, finding the straggler: seeded synthetic runs (no processes) with a slow rank, a slow link, or none;
the CLI on a run folder and on imported torch.profiler traces."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from pipesim.analysis.stragglers import find_stragglers
from pipesim.cli.main import main
from pipesim.cost.model import CostModel
from pipesim.cost.perturb import Perturbation
from pipesim.records import Timeline
from pipesim.schedules import build_schedule
from pipesim.sim.steps import simulate_step


def synthetic_run(name, perturbation, steps=4, seed=1, noise=0.03, **options):
    """`steps` simulated steps, each with its own noisy per-stage costs (a shared machine), the perturbation applied:
    a measured timeline whose truth is known."""
    rng = random.Random(seed)
    schedule = build_schedule(name, 4, 8, **options)
    n = schedule.num_stages
    spans = []
    for step in range(steps):
        jitter = [[1 + rng.gauss(0, noise) for _ in range(3)] for _ in range(n)]
        cost = CostModel.per_stage(
            [1.0 * j[0] for j in jitter], [2.0 * j[1] for j in jitter], [1.0 * j[2] for j in jitter], 0.2
        )
        timeline = simulate_step(schedule, perturbation.apply(cost, schedule.stage_to_rank)).timeline
        spans += [span._replace(step=step) for span in timeline.spans]
    measured = Timeline(num_ranks=4, spans=tuple(spans), source="measured", schedule_name=schedule.name)
    return schedule, measured


@pytest.mark.parametrize("name,options", [("1f1b", {}), ("zb-h1", {}), ("interleaved-1f1b", {"num_virtual_stages": 2})])
def test_a_slow_rank_is_found_with_its_factor(name, options):
    schedule, measured = synthetic_run(name, Perturbation(((2, 1.3),)), **options)
    report = find_stragglers(schedule, measured)
    [straggler] = report.stragglers
    assert straggler.rank == 2 and abs(straggler.factor - 1.3) < 0.05
    assert straggler.factor_low <= straggler.factor <= straggler.factor_high
    assert straggler.cost_ms > 0 and report.slow_links == []


def test_a_slow_link_is_found_with_its_delay():
    schedule, measured = synthetic_run("1f1b", Perturbation((), ((1, 2, 2.0),)))
    report = find_stragglers(schedule, measured)
    assert report.stragglers == []
    [link] = report.slow_links
    assert (link.src, link.dst) == (1, 2) and abs(link.delay_ms - 2.0) < 0.3 and link.cost_ms > 0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_no_straggler_is_reported_when_there_is_none(seed):
    schedule, measured = synthetic_run("zb-h1", Perturbation(), seed=seed)
    assert find_stragglers(schedule, measured).to_dict() == {"stragglers": [], "links": []}


def test_the_cost_model_prices_uneven_stages():
    """Stages of unequal cost are not stragglers when the run's cost model says so."""
    schedule = build_schedule("1f1b", 4, 8)
    cost = CostModel.per_stage([1.0, 1.0, 1.0, 2.0], [2.0, 2.0, 2.0, 4.0], None, 0.1)
    measured = replace(simulate_step(schedule, cost).timeline, source="measured")
    assert [r.rank for r in find_stragglers(schedule, measured).stragglers] == [3]  # equal stages assumed
    assert find_stragglers(schedule, measured, cost).stragglers == []


def test_the_cli_writes_exactly_the_documented_json(capsys, tmp_path):
    from pipesim.io.cost_file import save_cost
    from pipesim.io.formats import save_schedule, timeline_to_dict, write_json

    schedule, measured = synthetic_run("1f1b", Perturbation(((1, 1.4),), ((2, 3, 3.0),)))
    run = tmp_path / "run"
    run.mkdir()
    write_json({"pipeline": {"schedule": "1f1b"}}, run / "config.json")
    save_schedule(schedule, run / "schedule.json")
    write_json(timeline_to_dict(measured, {"step_times_ms": [1.0] * 4}), run / "measured.json")
    save_cost(CostModel.uniform(1.0, 2.0, 1.0, comm_ms=0.2), run / "cost.json")
    out = tmp_path / "s.json"
    assert main(["stragglers", str(run), "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert set(doc) == {"stragglers", "links"}
    [rank] = doc["stragglers"]
    assert set(rank) == {"rank", "factor", "factor_low", "factor_high", "cost_ms"} and rank["rank"] == 1
    [link] = doc["links"]
    assert set(link) == {"src", "dst", "delay_ms", "delay_low_ms", "delay_high_ms", "cost_ms"}
    assert (link["src"], link["dst"]) == (2, 3)
    assert "straggler: rank 1" in capsys.readouterr().out


def test_the_cli_reads_imported_traces_and_finds_none_in_a_clean_run(capsys, tmp_path):
    from tests.helpers.kineto_traces import kineto_files

    files, _ = kineto_files(tmp_path, build_schedule("1f1b", 2, 4), steps=3)
    assert main(["stragglers", *map(str, files)]) == 0
    assert "no straggler" in capsys.readouterr().out


def test_the_cli_refuses_a_folder_among_traces(capsys, tmp_path):
    assert main(["stragglers", str(tmp_path), str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a folder" in err
