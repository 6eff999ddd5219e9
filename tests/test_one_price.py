"""One price for each thing: `simulate` and `compare` give the same step for the same inputs.

Both are run through the command line's own code paths (`pipesim.cli.main.main`, reading the JSON each writes),
so a difference in how either reads the costs, cuts them per chunk, or charges the data-parallel reduction shows.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from pipesim.cli.main import main
from pipesim.cost.model import CostModel, DataParallelGroup, LinkCost, RankRuntime, StageCost
from pipesim.io.cost_file import save_cost
from pipesim.schedules import schedule_info, schedule_names

RANKS, MICROBATCHES, CHUNKS = 4, 8, 2
PER_RANK = ["--f", "1,1.5,1,2", "--b", "2,3,2,4", "--w", "1,1.5,1,2", "--comm", "0.1"]
DATA_PARALLEL = ["--data-parallel", "4", "--dp-latency", "0.05", "--dp-bandwidth", "2"]


def _cost_file(path: Path) -> list[str]:
    """A profile-like cost file: per-rank stages with gradients over a bucket, overhead, dispatch, the group."""
    stages = tuple(
        StageCost(f, 2 * f, f, activation_bytes=1e6, input_bytes=1e5, output_bytes=1e5, param_bytes=4e7)
        for f in (1.0, 1.5, 1.0, 2.0)
    )
    cost = CostModel(
        stages=stages,
        links=(LinkCost(latency_ms=0.02, bandwidth_gbps=10.0),),
        runtime=RankRuntime(step_overhead_ms=(0.3, 0.3, 0.3, 1.2), dispatch_ms=(0.01,)),
        dp_group=DataParallelGroup(4, LinkCost(latency_ms=0.05, bandwidth_gbps=2.0)),
    )
    save_cost(cost, path)
    return ["--cost", str(path)]


VARIANTS = {
    "replicated": lambda tmp: [*PER_RANK, *DATA_PARALLEL, "--grad-bytes", "3e7,4e7,3e7,5e7"],
    "sharded": lambda tmp: [*PER_RANK, *DATA_PARALLEL, "--grad-bytes", "3e7", "--sharded"],
    "cost-file": lambda tmp: _cost_file(tmp / "cost.json"),
}


def _run(capsys: pytest.CaptureFixture, *argv: str) -> None:
    code = main(list(argv))
    captured = capsys.readouterr()
    assert code == 0, captured.err


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("name", schedule_names())
def test_simulate_equals_compare_with_data_parallelism(name: str, variant: str, tmp_path, capsys) -> None:
    """Catches `simulate` and `compare` charging the gradient reduction in different places (they once gave 337.8
    and 333.3 ms for one cost model), pricing it differently, or reading per-rank costs differently."""
    costs = VARIANTS[variant](tmp_path)
    size = ["--ranks", str(RANKS), "--microbatches", str(MICROBATCHES)]
    chunks = ["--virtual-stages", str(CHUNKS)] if schedule_info(name).takes_chunks else []
    simulated, compared = tmp_path / "simulate.json", tmp_path / "compare.json"
    _run(capsys, "simulate", "--schedule", name, *size, *chunks, *costs, "--json", str(simulated))
    _run(
        capsys, "compare", "--schedules", name, *size, "--virtual-stages", str(CHUNKS), *costs, "--json", str(compared)
    )
    one = json.loads(simulated.read_text())
    [row] = json.loads(compared.read_text())["rows"]
    assert row["error"] is None
    assert row["step_ms"] == pytest.approx(one["step_ms"], rel=1e-12)
    assert row["makespan"] == pytest.approx(one["makespan"], rel=1e-12)
    assert row["bubble_fraction"] == pytest.approx(one["bubble_fraction"], rel=1e-12)
    kinds = {c["kind"] for c in one["comm"]}
    if variant == "sharded":  # torch's lowering: the reduce-scatter on the rank, after each stage's last backward
        assert "reduce_grad" in kinds and "allreduce" not in kinds
    else:  # the executor's way: bucketed all-reduces after each stage's last backward, hidden where they can be
        assert "allreduce" in kinds and "reduce_grad" not in kinds
    assert one["step_ms"] > one["makespan"]  # the reduction (and the cost file's overhead) costs something


def test_uniform_times_are_per_rank_cut_per_chunk_in_simulate_and_compare(tmp_path, capsys) -> None:
    """interleaved-1f1b, 4 ranks x 8 microbatches, 2 chunks, --f 1 --b 2: one step from both commands.

    Catches `simulate` taking the times per chunk (57.0 ms) where `compare` cut them per rank (28.5 ms)."""
    size = ["--ranks", "4", "--microbatches", "8", "--virtual-stages", "2", "--f", "1", "--b", "2"]
    _run(capsys, "simulate", "--schedule", "interleaved-1f1b", *size, "--json", str(tmp_path / "s.json"))
    _run(capsys, "compare", "--schedules", "interleaved-1f1b", *size, "--json", str(tmp_path / "c.json"))
    one = json.loads((tmp_path / "s.json").read_text())
    [row] = json.loads((tmp_path / "c.json").read_text())["rows"]
    closed_form = (2 * 8 + 4 - 1) * (1 + 2) / 2  # (v m + p - 1) chunk slots of (F + B) / v
    assert one["makespan"] == pytest.approx(closed_form) and row["makespan"] == pytest.approx(closed_form)
    assert one["step_ms"] == pytest.approx(row["step_ms"]) == pytest.approx(closed_form)


@pytest.mark.parametrize("command", ["simulate", "compare"])
def test_both_commands_state_the_meaning_of_uniform_times_in_their_help(command: str, capsys) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "One value, or one per rank, describes the model cut into one stage per rank" in text
    assert "--f 1 is 0.5 ms per chunk" in text


def test_the_planner_prices_the_all_reduce_with_the_cost_files_link_and_bucket(tmp_path, capsys) -> None:
    """One source for the all-reduce's inputs: given a cost file, the planner reads its `dp_link` and
    `dp_bucket_bytes` as `simulate --cost` does. Catches the planner feeding the formula the pipeline's link or
    the default bucket (the same cost file priced the same all-reduce two ways)."""
    from pipesim.io.cost_file import load_cost_file
    from pipesim.plan.inputs import PlanInputs
    from pipesim.plan.search import PlanSpace, evaluate_all

    path = tmp_path / "cost.json"
    stage = StageCost(1.0, 2.0, activation_bytes=1e6, param_bytes=2e8)
    dp_link = LinkCost(latency_ms=0.5, bandwidth_gbps=1.0)  # far slower than the pipeline's link
    cost = CostModel(
        stages=(stage,),
        links=(LinkCost(latency_ms=0.01, bandwidth_gbps=100.0),),
        dp_group=DataParallelGroup(2, dp_link, bucket_bytes=1e6),  # 200 buckets: 200 latencies
    )
    save_cost(cost, path)
    simulated = tmp_path / "simulate.json"
    _run(capsys, "simulate", "--schedule", "1f1b", "--ranks", "1", "--microbatches", "4", "--cost", str(path),
         "--json", str(simulated))  # fmt: skip
    expected = json.loads(simulated.read_text())["step_ms"]
    inputs = PlanInputs.from_cost(load_cost_file(path), devices=2, global_batch=8)
    space = PlanSpace(schedules=("1f1b",), microbatch_sizes=(1,), chunks=(1,), recompute=(False,), ranks=(1,))
    [candidate] = evaluate_all(inputs, space)
    assert candidate.error is None and candidate.data_parallel == 2 and candidate.microbatches == 4
    assert candidate.step_ms == pytest.approx(expected, rel=1e-9)
    # the inputs matter here: the pipeline's link, or the default bucket, give another step
    for group in (DataParallelGroup(2, cost.links[0], bucket_bytes=1e6), DataParallelGroup(2, dp_link)):
        assert evaluate_all(replace(inputs, dp_group=group), space)[0].step_ms != pytest.approx(expected, rel=1e-6)
