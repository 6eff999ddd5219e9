"""Cost models: uniform, per-stage, from a model description, from a file; recomputation."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from pipesim.cost.description import ModelDescription, balance_units
from pipesim.cost.model import CostModel, LinkCost, StageCost
from pipesim.io.cost_file import cost_from_dict, cost_to_dict, load_cost, save_cost
from pipesim.ir import ActionKind
from pipesim.schedules.basic import one_f_one_b
from pipesim.sim.metrics import compute_metrics, makespan
from pipesim.sim.simulate import simulate

F, B, I, W = ActionKind.FORWARD, ActionKind.BACKWARD, ActionKind.BACKWARD_INPUT, ActionKind.BACKWARD_WEIGHT


def test_uniform_durations_and_default_split():
    cost = CostModel.uniform(forward_ms=2.0, backward_ms=6.0, comm_ms=0.5)
    assert [cost.duration_ms(7, kind) for kind in (F, B, I, W)] == [2.0, 6.0, 3.0, 3.0]
    assert cost.transfer_ms(3, 4) == 0.5 and cost.transfer_ms(4, 3) == 0.5
    measured = CostModel.uniform(forward_ms=2.0, backward_ms=6.0, weight_ms=1.0)
    assert (measured.duration_ms(0, I), measured.duration_ms(0, W)) == (5.0, 1.0)


def test_per_stage_lookup_and_fit():
    cost = CostModel.per_stage([1.0, 2.0, 3.0], [2.0, 4.0, 6.0], comm_ms=[0.1, 0.2])
    assert [cost.duration_ms(s, B) for s in range(3)] == [2.0, 4.0, 6.0]
    assert cost.transfer_ms(2, 1) == 0.2  # boundary 1 joins stages 1 and 2, either direction
    with pytest.raises(ValueError, match="give one per stage"):
        CostModel.per_stage([1.0, 2.0], [2.0])
    with pytest.raises(ValueError, match="3 stages but schedule"):
        cost.check_fits(one_f_one_b(4, 4))
    with pytest.raises(ValueError, match="links"):
        CostModel.per_stage([1.0] * 4, [2.0] * 4, comm_ms=[0.1, 0.2]).check_fits(one_f_one_b(4, 4))


@pytest.mark.parametrize("recompute", [False, True])
def test_tables_are_the_per_stage_prices(recompute):
    """The planner's bounds read `compute_table` / `transfer_table`: each entry must be `compute_ms` / `transfer_ms`
    to the bit, for one shared stage and link as for one per stage (catches a kind or recomputation mispriced)."""
    stages = [
        StageCost(forward_ms=1.1, backward_ms=2.3, weight_ms=w, activation_bytes=8.0, output_bytes=out)
        for w, out in ((None, 1e6), (0.7, 3e6), (0.0, 5e5))
    ]
    links = (LinkCost(0.01, 10.0), LinkCost(0.02, 5.0))
    for cost in (
        CostModel(stages=tuple(stages), links=links, recompute=recompute),
        CostModel(stages=(stages[1],), links=links[:1], recompute=recompute),
    ):
        for kind in (F, B, I, W):
            assert cost.compute_table(kind, 3) == [cost.compute_ms(s, kind) for s in range(3)]
        assert cost.transfer_table(3) == [cost.transfer_ms(b, b + 1) for b in range(2)]
    assert CostModel(stages=tuple(stages), recompute=recompute).compute_table(B, 3)[1] == 2.3 + 1.1 * recompute


def test_link_cost_latency_plus_bytes_over_bandwidth():
    link = LinkCost(latency_ms=0.01, bandwidth_gbps=50.0)
    assert link.transfer_ms(50e9 / 1000) == pytest.approx(1.01)  # 50 MB over 50 GB/s = 1 ms
    assert LinkCost(latency_ms=0.2).transfer_ms(1e12) == 0.2  # infinite bandwidth
    with pytest.raises(ValueError):
        LinkCost(bandwidth_gbps=0)


def test_stage_cost_refuses_bad_numbers():
    with pytest.raises(ValueError, match="forward_ms"):
        StageCost(forward_ms=-1.0, backward_ms=1.0)
    with pytest.raises(ValueError, match="weight_ms"):
        StageCost(forward_ms=1.0, backward_ms=1.0, weight_ms=2.0)


def _layer_forward_flops(d: ModelDescription) -> float:
    tokens = d.seq_len * d.microbatch_size
    h = d.hidden_size
    return 2 * tokens * (4 * h * h + 2 * h * d.ffn_size) + 4 * tokens * d.seq_len * h


def test_model_description_forward_time_is_flops_over_rate():
    desc = ModelDescription(
        num_layers=8, hidden_size=1024, ffn_size=4096, num_heads=8, seq_len=512, device_tflops=100.0
    )
    cost = desc.to_cost_model(4)
    # units: embedding, 8 blocks, head (3.8 blocks of compute here): the balanced cut gives the head a stage alone
    assert balance_units(desc.unit_costs(), 4).split_points == (4, 7, 9)
    middle = cost.stage(1)  # blocks 4, 5 and 6
    assert middle.forward_ms == pytest.approx(3 * _layer_forward_flops(desc) / (100.0 * 1e9))
    assert middle.backward_ms == pytest.approx(2 * middle.forward_ms)
    assert middle.w_ms == pytest.approx(middle.forward_ms)
    assert cost.stage(3).forward_ms > middle.forward_ms  # the output projection sits on the last stage
    assert middle.output_bytes == 512 * 1024 * 2  # one bf16 activation tensor crosses each boundary


def test_model_description_scales_as_expected():
    base = ModelDescription(num_layers=8, hidden_size=1024, ffn_size=4096, num_heads=8, seq_len=512)
    costs = base.to_cost_model(4)
    faster = ModelDescription(**{**base.__dict__, "device_tflops": base.device_tflops * 2}).to_cost_model(4)
    deeper = ModelDescription(**{**base.__dict__, "num_layers": 16}).to_cost_model(4)
    bigger = ModelDescription(**{**base.__dict__, "microbatch_size": 2}).to_cost_model(4)
    fp32 = ModelDescription(**{**base.__dict__, "dtype": "fp32"}).to_cost_model(4)
    for s in range(4):
        assert faster.stage(s).forward_ms == pytest.approx(costs.stage(s).forward_ms / 2)
        assert bigger.stage(s).forward_ms == pytest.approx(costs.stage(s).forward_ms * 2)
    for s in range(3):  # stages without the vocabulary projection
        assert bigger.stage(s).activation_bytes == pytest.approx(costs.stage(s).activation_bytes * 2)
        assert fp32.stage(s).activation_bytes == pytest.approx(costs.stage(s).activation_bytes * 2)

    head_ms = base.unit_costs()[-1].forward_ms  # the same vocabulary projection, however deep

    def blocks_ms(cost: CostModel) -> float:
        return sum(stage.forward_ms for stage in cost.stages) - head_ms

    assert blocks_ms(deeper) == pytest.approx(2 * blocks_ms(costs))


def test_model_description_refuses_bad_values():
    with pytest.raises(ValueError, match="valid: fp32"):
        ModelDescription(dtype="int3")
    with pytest.raises(ValueError, match="divisible by num_heads"):
        ModelDescription(hidden_size=100, num_heads=3)
    with pytest.raises(ValueError, match="at least 11 layers; there are 10"):  # 8 blocks, the embedding, the head
        ModelDescription(num_layers=8).to_cost_model(11)


def test_cost_file_round_trip(tmp_path):
    cost = ModelDescription(num_layers=4, hidden_size=256, ffn_size=1024, num_heads=4, seq_len=128).to_cost_model(2)
    path = tmp_path / "cost.json"
    save_cost(cost, path)
    loaded = load_cost(path)
    assert loaded == cost
    assert loaded.meta == cost.meta
    uniform = CostModel.uniform(comm_ms=0.3, recompute=True)
    again = cost_from_dict(json.loads(json.dumps(cost_to_dict(uniform))))
    assert again == uniform and math.isinf(again.links[0].bandwidth_gbps)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"format": "something"}, "not a pipesim cost file"),
        ({"version": 99}, "unsupported cost file version 99"),
        ({"stages": [{"forward_ms": 1.0, "backward_ms": 2.0, "speed": 3}]}, "unknown fields \\['speed'\\]"),
        ({"stages": [{"forward_ms": 1.0}]}, "stages\\[0\\].*backward_ms"),
        ({"stages": [{"forward_ms": -1.0, "backward_ms": 2.0}]}, "forward_ms must be"),
        # issue 9 item 7: wrong types are refused, never coerced
        ({"recompute": "false"}, "recompute must be true or false"),
        ({"version": True}, "unsupported cost file version True"),
        ({"links": [5]}, "links\\[0\\] must be an object"),
        ({"links": "abc"}, "links must be a list"),
        ({"meta": [1]}, "meta must be an object"),
        ({"stages": "x"}, "stages must be a list"),
        ({"stages": [{"forward_ms": "1", "backward_ms": 2.0}]}, "stages\\[0\\].forward_ms must be a finite number"),
        ({"step_overhead_ms": ["a"]}, "step_overhead_ms\\[0\\] must be a finite number"),
    ],
)
def test_bad_cost_files_say_what_is_wrong(change, message):
    data = {**cost_to_dict(CostModel.uniform()), **change}
    with pytest.raises(ValueError, match=message):
        cost_from_dict(data)


def test_cost_file_missing_field_and_bad_json(tmp_path):
    data = cost_to_dict(CostModel.uniform())
    del data["stages"]
    with pytest.raises(ValueError, match="missing field 'stages'"):
        cost_from_dict(data)
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_cost(path)
    path.write_text("[" * 100_000 + "]" * 100_000)  # nested too deep for the parser: an error, not a crash
    with pytest.raises(ValueError, match="nested too deeply|not valid JSON"):
        load_cost(path)


def test_overhead_and_description_are_fields_and_old_files_still_load():
    description = ModelDescription(num_layers=4, hidden_size=256, ffn_size=1024, num_heads=4, seq_len=128)
    cost = description.to_cost_model(2)
    assert cost.description == description and cost.for_stages(4, 2) == description.to_cost_model(4)
    old = cost_to_dict(cost)
    del old["description"], old["step_overhead_ms"]
    old["meta"] = {"model": old.pop("meta", {}) or {}, "step_overhead_ms": [1.5, 2.5]}
    old["meta"]["model"] = {k: v for k, v in cost_to_dict(cost)["description"].items()}
    loaded = cost_from_dict(old)
    assert loaded.description == description
    assert loaded.step_overhead_ms == (1.5, 2.5) and loaded.overhead_ms(2) == (1.5, 2.5)
    assert CostModel.uniform().overhead_ms(3) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="give 1 or 3"):
        loaded.overhead_ms(3)


def test_cost_from_times_refuses_w_above_b_and_mismatched_lists():
    from pipesim.cost.convert import cost_from_times

    assert cost_from_times([1.0], [3.0], [1.0]).duration_ms(0, I) == 2.0
    per_stage = cost_from_times([1.0, 2.0], [2.0], comm_ms=[0.5])
    assert [per_stage.duration_ms(s, B) for s in (0, 1)] == [2.0, 2.0]
    with pytest.raises(ValueError, match="weight_ms 3 exceeds backward_ms 2"):
        cost_from_times([1.0], [2.0], [3.0])
    with pytest.raises(ValueError, match="give 1 or 3"):
        cost_from_times([1.0, 2.0, 3.0], [1.0, 2.0])


def test_save_cost_is_atomic_and_refuses_non_finite(tmp_path):
    path = tmp_path / "cost.json"
    save_cost(CostModel.uniform(), path)
    before = path.read_text()
    bad = CostModel.uniform()
    object.__setattr__(bad.provenance, "meta", {"x": float("inf")})
    with pytest.raises(ValueError, match="non-finite"):
        save_cost(bad, path)
    assert path.read_text() == before and sorted(p.name for p in tmp_path.iterdir()) == ["cost.json"]


def test_recompute_adds_forward_to_backward_and_stashes_inputs_only():
    stage = StageCost(forward_ms=1.0, backward_ms=2.0, activation_bytes=100.0, input_bytes=10.0)
    plain = CostModel(stages=(stage,))
    again = plain.with_recompute(True)
    assert [again.duration_ms(0, k) for k in (F, B, I, W)] == [1.0, 3.0, 2.0, 1.0]
    assert (plain.stash_bytes(0), again.stash_bytes(0)) == (100.0, 10.0)
    p, m = 4, 6
    timeline = simulate(one_f_one_b(p, m), again)
    assert makespan(timeline) == (m + p - 1) * (1.0 + 3.0)
    metrics = compute_metrics(timeline, again)
    assert [r.peak_activation_bytes for r in metrics.ranks] == [10.0 * min(p - r, m) for r in range(p)]


def test_for_stages_cuts_each_rank_share_into_equal_chunks() -> None:
    cost = CostModel.per_stage([2.0, 4.0], [4.0, 8.0], weight_ms=[2.0, 4.0], activation_bytes=[10.0, 20.0])
    finer = cost.for_stages(4, 2)
    assert [s.forward_ms for s in finer.stages] == [1.0, 1.0, 2.0, 2.0]
    assert [s.w_ms for s in finer.stages] == [1.0, 1.0, 2.0, 2.0]
    assert [s.activation_bytes for s in finer.stages] == [5.0, 5.0, 10.0, 10.0]
    # The total work of the model is unchanged by the finer cut.
    assert sum(s.forward_ms + s.backward_ms for s in finer.stages) == 18.0
    assert cost.for_stages(2, 2) is cost


def test_for_stages_recuts_a_model_description_layer_by_layer() -> None:
    model = ModelDescription(num_layers=8, hidden_size=256, ffn_size=1024, num_heads=4, seq_len=128, vocab_size=1000)
    cut = model.to_cost_model(2).for_stages(4, 2)
    assert cut.stages == model.to_cost_model(4).stages


# A value unlike the default for every field of the cost model and of the values it holds, by dotted name. A field
# added to CostModel, RankRuntime, DataParallelGroup or Provenance without a value here fails the test below.
NON_DEFAULT = {
    "recompute": True,
    "overlap_factor": 0.7,
    "host_link": LinkCost(latency_ms=0.01, bandwidth_gbps=25.0),
    "attention_fraction": 0.3,
    "runtime.step_overhead_ms": (0.5, 1.5),
    "runtime.dispatch_ms": (0.05, 0.07),
    "runtime.shared_cores": 3,
    "dp_group.replicas": 4,
    "dp_group.link": LinkCost(latency_ms=0.2, bandwidth_gbps=12.5),
    "dp_group.sharded": True,
    "dp_group.bucket_bytes": 1e6,
    "provenance.source": "profile",
    "provenance.meta": {"where": "a test"},
}
RECUT = {"stages", "links"}  # what re-cutting is there to change
DESCRIPTION = ModelDescription(num_layers=8, hidden_size=256, ffn_size=1024, num_heads=4, seq_len=128, vocab_size=1000)


def _leaves(value: object, prefix: str = "") -> dict[str, object]:
    """Every field of a cost model, the fields of its concern values (runtime, dp_group, provenance) by dotted name."""
    out: dict[str, object] = {}
    for f in dataclasses.fields(value):
        inner = getattr(value, f.name)
        if f.name in ("runtime", "dp_group", "provenance"):
            out.update(_leaves(inner, f"{prefix}{f.name}."))
        else:
            out[prefix + f.name] = inner
    return out


def _carrying_every_field(stages: tuple[StageCost, ...], description: ModelDescription | None) -> CostModel:
    changes: dict[str, dict] = {"": {}, "runtime": {}, "dp_group": {}, "provenance": {}}
    for name, value in NON_DEFAULT.items():
        owner, _, field = name.rpartition(".")
        changes[owner][field] = value
    changes["provenance"]["description"] = description
    plain = CostModel(stages=stages)
    return dataclasses.replace(
        plain,
        **changes[""],
        runtime=dataclasses.replace(plain.runtime, **changes["runtime"]),
        dp_group=dataclasses.replace(plain.dp_group, **changes["dp_group"]),
        provenance=dataclasses.replace(plain.provenance, **changes["provenance"]),
    )


@pytest.mark.parametrize("described", [False, True])
def test_recutting_keeps_every_field_it_does_not_mean_to_change(described: bool) -> None:
    """Re-cutting a cost model (for_stages, for_pipeline) changes its stages and links, nothing else.

    Catches a re-cut that lists the fields it keeps by hand and forgets one (it once dropped `sharded` and
    `overlap_factor`), and a field added to the cost model without a value in NON_DEFAULT."""
    plain_leaves = _leaves(CostModel(stages=(StageCost(1.0, 2.0),)))
    assert set(plain_leaves) - RECUT == set(NON_DEFAULT) | {"provenance.description"}, "give new fields a value"
    stages = (StageCost(2.0, 4.0, param_bytes=8.0), StageCost(3.0, 6.0, param_bytes=8.0))
    cost = _carrying_every_field(
        DESCRIPTION.to_cost_model(2).stages if described else stages, DESCRIPTION if described else None
    )
    original = _leaves(cost)
    for name in set(original) - RECUT - {"provenance.description"}:
        assert original[name] != plain_leaves[name], f"{name} is not set to a non-default value"
    for recut in (cost.for_stages(4, 2), cost.for_pipeline(4, 2)):
        assert len(recut.stages) == 4
        leaves = _leaves(recut)
        for name, value in original.items():
            if name == "provenance.meta":
                assert value.items() <= leaves[name].items(), name  # the cut is noted, nothing is lost
            elif name not in RECUT:
                assert leaves[name] == value, f"re-cutting changed {name}: {value!r} -> {leaves[name]!r}"


def test_for_pipeline_is_the_one_meaning_of_per_rank_costs() -> None:
    """One cost, or one per rank, is per rank and cut per chunk; one per stage is used as given."""
    uniform = CostModel.uniform(2.0, 4.0)
    assert uniform.for_pipeline(4, 4) is uniform
    assert [s.forward_ms for s in uniform.for_pipeline(8, 4).stages] == [1.0]
    per_rank = CostModel.per_stage([2.0, 4.0], [4.0, 8.0])
    assert [s.forward_ms for s in per_rank.for_pipeline(4, 2).stages] == [1.0, 1.0, 2.0, 2.0]
    per_stage = CostModel.per_stage([1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 8.0])
    assert per_stage.for_pipeline(4, 2) is per_stage
    assert uniform.for_pipeline(3, 2) is uniform  # no even cut (a hand-written placement): per stage, as given
    described = DESCRIPTION.to_cost_model(2)
    assert described.for_pipeline(4, 4).stages == DESCRIPTION.to_cost_model(4).stages  # re-cut exactly


def test_for_stages_refuses_a_cut_that_does_not_divide() -> None:
    with pytest.raises(ValueError, match="multiple of 2"):
        CostModel.uniform().for_stages(3, 2)


def test_compare_runs_every_schedule_on_the_same_model() -> None:
    from pipesim.analysis.compare import compare_schedules

    rows = compare_schedules(["1f1b", "interleaved-1f1b", "zbv"], 4, 8, CostModel.uniform(1.0, 2.0))
    by_name = {row.schedule: row for row in rows}
    assert all(row.error is None for row in rows)
    # Interleaving with v=2 chunks: bubble (p-1)/(v*m+p-1) = 3/19 on the same per-rank work.
    assert by_name["interleaved-1f1b"].bubble_fraction == pytest.approx(3 / 19)
    assert by_name["interleaved-1f1b"].makespan < by_name["1f1b"].makespan
