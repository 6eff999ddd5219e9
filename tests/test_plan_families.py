"""The planner's new candidates: activation offload as a plan dimension, V-Half and V-Min under a memory cap, what
each recommendation trades, and sequence-chunked candidates bounded so that pruning can drop them."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from pipesim.cli.main import main
from pipesim.cost.description import ModelDescription
from pipesim.cost.links import LinkCost
from pipesim.plan.candidates import shape_key
from pipesim.plan.report import best_candidate, pareto_front, ranked, summary_lines, trades
from pipesim.plan.search import Evaluator, PlanInputs, PlanSpace, candidate_grid, evaluate_all
from pipesim.sim.steps import simulate_step

# activations dominate (a long sequence, a narrow model): the families differ in memory by their stash counts
MODEL = ModelDescription(
    num_layers=16, hidden_size=256, ffn_size=1024, num_heads=4, seq_len=1024, vocab_size=1000, device_tflops=10.0
)
SPACE = PlanSpace(microbatch_sizes=(1,), recompute=(False,), ranks=(8,), chunks=(1, 2))
MODEL_FLAGS = ["--layers", "16", "--hidden", "256", "--ffn", "1024", "--heads", "4", "--seq-len", "1024"]
MODEL_FLAGS += ["--vocab", "1000", "--tflops", "10"]


def _numbers(c):
    return (c.label, c.step_ms, c.peak_memory_bytes, c.rank_memory, c.fits, c.bubble_fraction, c.peak_host_bytes)


def _capped() -> tuple[PlanInputs, float]:
    """The model on 8 devices and a cap V-Half just fits; every other family's plain candidate is over it."""
    free = PlanInputs.from_description(MODEL, devices=8, global_batch=16)
    uncapped = {c.schedule: c for c in evaluate_all(free, SPACE, prune=False) if c.built}
    cap = uncapped["v-half"].peak_memory_bytes * 1.001
    over = [name for name, c in uncapped.items() if c.peak_memory_bytes > cap]
    assert set(over) >= {"gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv"}, over  # the case is what it claims
    assert uncapped["v-min"].peak_memory_bytes <= cap
    return replace(free, memory_cap_bytes=cap), cap


@pytest.mark.parametrize("prune", [False, True])
def test_a_cap_only_offload_or_a_v_shape_meets_is_met_by_what_the_host_link_allows(prune: bool) -> None:
    """A fast host link hides the copies: the best is a faster family offloaded, at its own step and well under
    its memory; a slow one makes every copy dearer than the V-shapes' bubble, and V-Half is recommended."""
    inputs, cap = _capped()
    fast = evaluate_all(replace(inputs, host_link=LinkCost(0.0, 1000.0)), SPACE, prune=prune)
    best = best_candidate(fast)
    assert best is not None and best.offload != "none" and best.fits
    base = next(c for c in fast if c.offload == "none" and shape_key(c) == shape_key(best))
    assert not base.fits and best.step_ms == pytest.approx(base.step_ms, rel=1e-9)
    assert best.peak_memory_bytes <= cap < base.peak_memory_bytes and best.peak_host_bytes > 0
    v_shapes = [c for c in fast if c.schedule in ("v-half", "v-min") and c.built]
    assert v_shapes and all(best.step_ms < c.step_ms for c in v_shapes)
    one_f_one_b = [c for c in fast if c.schedule == "1f1b" and c.offload == "full"]
    if not prune:  # the exhaustive plan prices 1F1B offloaded: at its step, at most half its memory
        plain = next(c for c in fast if c.schedule == "1f1b" and c.offload == "none")
        (offloaded,) = one_f_one_b
        assert offloaded.step_ms == pytest.approx(plain.step_ms, rel=1e-9)
        assert offloaded.peak_memory_bytes < plain.peak_memory_bytes / 2 and offloaded.fits

    slow = evaluate_all(replace(inputs, host_link=LinkCost(0.0, 0.5)), SPACE, prune=prune)
    best = best_candidate(slow)
    assert best is not None and best.schedule == "v-half" and best.offload == "none"
    assert all(c.step_ms > best.step_ms or not c.fits for c in slow if c.built and c.offload != "none")


@pytest.mark.parametrize("gbps", [50.0, 0.5])
def test_an_offloaded_candidate_is_what_simulate_says_of_its_schedule(gbps: float) -> None:
    """Its step is one simulated step of `with_offload`'s schedule under the host link (`materialise`); its memory
    is lower than its base's where the copies hide; the copy engine's work, which pruning bounds it by, is below
    its step, and on a slow link most of it."""
    inputs, _ = _capped()
    inputs = replace(inputs, host_link=LinkCost(0.001, gbps))
    space = replace(SPACE, schedules=("1f1b", "zb-h1"), offload="full")
    candidates = evaluate_all(inputs, space, prune=False)
    moved = [c for c in candidates if c.offload == "full"]
    assert len(moved) == 2
    evaluator = Evaluator(inputs)
    for c in moved:
        schedule, cost = evaluator.materialise(c)
        assert schedule.params.get("offload") == "full" and cost.host_link == inputs.host_link
        assert simulate_step(schedule, cost).step_ms == pytest.approx(c.step_ms, rel=1e-12)
        base = next(b for b in candidates if b.offload == "none" and shape_key(b) == shape_key(c))
        assert c.step_ms >= base.step_ms * (1 - 1e-12)
        floor = evaluator.offload_step_floor(c)
        assert 0 < floor <= c.step_ms * (1 + 1e-12)
        if gbps > 1:
            assert c.peak_memory_bytes < base.peak_memory_bytes
        else:
            assert floor > 0.5 * c.step_ms > base.step_ms


def test_auto_offload_needs_a_cap_and_a_priced_host_link(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    """Without a priced host link a capped plan tries no offload and says so; with one it does; --offload none
    never does; the JSON carries each candidate's offload and the trades."""
    argv = ["plan", *MODEL_FLAGS, "--devices", "8", "--global-batch", "16", "--microbatch-sizes", "1"]
    argv += ["--recompute", "off", "--ranks", "8", "--exhaustive"]
    _, cap = _capped()
    capped = [*argv, "--memory-cap", f"{cap:.0f}"]
    out_path = tmp_path / "plan.json"
    main([*capped, "--json", str(out_path)])
    out = capsys.readouterr().out
    assert "offload not tried: no host link priced" in out
    assert {c["offload"] for c in json.loads(out_path.read_text())["candidates"]} == {"none"}

    main([*argv, "--memory-cap", "1e15"])  # every candidate fits: offload could change nothing, nothing is said
    assert "offload not tried" not in capsys.readouterr().out

    main([*capped, "--host-gbps", "1000", "--json", str(out_path)])
    out = capsys.readouterr().out
    document = json.loads(out_path.read_text())
    assert "offload not tried" not in out and "what each recommendation trades" in out
    assert document["best"]["offload"] in ("selective", "full") and document["best"]["peak_host_bytes"] > 0
    first = document["trades"][0]
    assert first["candidate"].endswith(f"offload {document['best']['offload']}")
    assert first["memory_change"] < -0.3 and abs(first["step_change"]) < 1e-9
    assert f"{first['memory_change']:+.0%} peak memory for" in out
    best_line = next(line for line in out.splitlines() if line.startswith("best: "))
    assert "offload" in best_line and "in host memory" in best_line

    main([*capped, "--host-gbps", "1000", "--offload", "none", "--json", str(out_path)])
    capsys.readouterr()
    assert {c["offload"] for c in json.loads(out_path.read_text())["candidates"]} == {"none"}
    assert main([*argv, "--offload", "sideways"]) != 0  # one line naming the choices, no traceback
    error = capsys.readouterr().err
    assert "invalid choice: 'sideways'" in error and "'selective', 'full'" in error and "Traceback" not in error


def test_trades_read_memory_and_step_against_the_fastest_kept_on_the_device() -> None:
    inputs, _ = _capped()
    candidates = evaluate_all(replace(inputs, host_link=LinkCost(0.0, 0.5)), SPACE, prune=False)
    reference = min((c for c in candidates if c.built and c.offload == "none"), key=lambda c: c.step_ms)
    found = trades(candidates)
    assert found[0]["candidate"] == best_candidate(candidates).label and found[0]["against"] == reference.label
    for t in found:
        c = next(c for c in candidates if c.label == t["candidate"])
        assert t["memory_change"] == pytest.approx(c.peak_memory_bytes / reference.peak_memory_bytes - 1)
        assert t["step_change"] == pytest.approx(c.step_ms / reference.step_ms - 1)
        assert t["memory_change"] < 0 < t["step_change"]  # the cap binds: each recommendation trades
    best = best_candidate(candidates)
    leaner = [c.label for c in pareto_front(candidates) if c.fits and c.peak_memory_bytes < best.peak_memory_bytes]
    assert leaner and [t["candidate"] for t in found[1:]] == leaner[:5]  # V-Min, leaner than V-Half


def _random_case(seed: int, offload: bool) -> tuple[PlanInputs, PlanSpace]:
    rng = random.Random(seed)
    model = ModelDescription(
        num_layers=rng.choice([8, 12]),
        hidden_size=rng.choice([128, 256]),
        ffn_size=512,
        num_heads=4,
        seq_len=rng.choice([128, 512]),
        vocab_size=1000,
        device_tflops=10.0,
        link_bandwidth_gbps=rng.choice([1.0, 100.0]),
    )
    devices = rng.choice([4, 8])
    inputs = PlanInputs.from_description(model, devices=devices, global_batch=16)
    free = evaluate_all(inputs, PlanSpace(schedules=("1f1b",), microbatch_sizes=(1, 2), ranks=(devices,)))
    typical = sorted(c.peak_memory_bytes for c in free if c.built)[0]
    inputs = replace(
        inputs,
        memory_cap_bytes=typical * rng.choice([0.6, 0.9, 1.2]),
        host_link=LinkCost(0.0, rng.choice([1.0, 20.0, 1000.0])) if offload else LinkCost(),
    )
    space = PlanSpace(
        schedules=("1f1b", "seq1f1b", "zb-h1", "v-half", "interleaved-1f1b"),
        microbatch_sizes=(1, 2),
        chunks=(1, 2),
        recompute=(False, True),
        ranks=tuple(r for r in (2, 4, 8) if r <= devices),
    )
    return inputs, space


@pytest.mark.parametrize("seed", range(4))
def test_pruning_never_removes_the_optimum_with_offload_and_sequence_chunks(seed: int) -> None:
    """The pruned plan names the exhaustive plan's best, front, top six and summary, with offloaded candidates and
    sequence-chunked ones among them: a bound above its truth would drop one of them."""
    inputs, space = _random_case(seed, offload=seed % 2 == 0)
    every = evaluate_all(inputs, space, prune=False)
    pruned = evaluate_all(inputs, space, workers=1 + seed // 2)  # seeds 2, 3: in two processes
    if seed == 2:  # the exhaustive plan in processes: each offloaded candidate after its base, as in one
        assert [_numbers(c) for c in evaluate_all(inputs, space, prune=False, workers=2)] == list(map(_numbers, every))
    cap = inputs.memory_cap_bytes
    assert (best_candidate(pruned) and _numbers(best_candidate(pruned))) == (
        best_candidate(every) and _numbers(best_candidate(every))
    )
    assert [_numbers(c) for c in pareto_front(pruned)] == [_numbers(c) for c in pareto_front(every)]
    assert [c.label for c in ranked(pruned)[:6]] == [c.label for c in ranked(every)[:6]]
    assert summary_lines(pruned, cap)[1:] == summary_lines(every, cap)[1:]
    assert trades(pruned) == trades(every)
    if seed % 2 == 0:
        assert any(c.offload != "none" for c in every if c.built)


def test_a_sequence_chunked_candidates_bound_is_below_its_truth_and_prunes() -> None:
    """Seq1F1B's candidates get real bounds (a microbatch's chunks each pay a dispatch gap; the ramp and the tail
    carry one chunk), below each one's simulated step and exact memory, and a plan prunes some of them."""
    pruned_any = False
    for seed in range(3):
        inputs, space = _random_case(seed + 20, offload=False)
        space = replace(space, schedules=("seq1f1b", "1f1b"))
        evaluator = Evaluator(inputs)
        for c in candidate_grid(inputs, space):
            if c.schedule != "seq1f1b":
                continue
            bound = evaluator.bound(c)
            if bound is None:
                continue
            evaluator.simulate(c)
            assert c.built and bound.step_ms > 0 and bound.memory_bytes > 0
            assert bound.step_ms <= c.step_ms * (1 + 1e-9) and bound.memory_bytes <= c.peak_memory_bytes * (1 + 1e-9)
            evaluator.drop_shape(shape_key(c))
        pruned_any |= any(c.pruned and c.schedule == "seq1f1b" for c in evaluate_all(inputs, space))
    assert pruned_any


def test_dualpipe_is_planned_with_a_copy_of_the_weights_per_direction() -> None:
    """DualPipe's candidates: the model cut into one piece per rank, each piece on two ranks (its weights twice over
    the pipeline), built only on an even number of ranks; its step and memory are `simulate`'s."""
    inputs = PlanInputs.from_description(MODEL, devices=4, global_batch=16)
    space = PlanSpace(schedules=("dualpipe", "1f1b"), microbatch_sizes=(1, 2), recompute=(False,), ranks=(3, 4))
    inputs = replace(inputs, devices=12, global_batch=48)  # 4 replicas of 3 ranks, or 3 of 4
    candidates = evaluate_all(inputs, space, prune=False)
    odd = [c for c in candidates if c.schedule == "dualpipe" and c.ranks == 3]
    assert odd and all("even number of ranks" in c.error for c in odd)
    pairs = {}
    for c in candidates:
        if c.built and c.ranks == 4:
            pairs.setdefault(c.microbatch_size, {})[c.schedule] = c
    assert len(pairs) == 2
    evaluator = Evaluator(inputs)
    for same in pairs.values():
        dual, plain = same["dualpipe"], same["1f1b"]
        assert len(dual.split) == len(plain.split) == 3  # four pieces, one per rank, in each direction
        schedule, cost = evaluator.materialise(dual)
        assert schedule.pipelines == 2 and len(cost.stages) == 8
        params = [0.0] * 4
        for stage, rank in enumerate(schedule.stage_to_rank):
            params[rank] += cost.stages[stage].param_bytes
        _, plain_cost = evaluator.materialise(plain)
        assert sum(params) == pytest.approx(2 * sum(s.param_bytes for s in plain_cost.stages), rel=1e-12)
        assert simulate_step(schedule, cost).step_ms == pytest.approx(dual.step_ms, rel=1e-12)


@pytest.mark.parametrize("bandwidth", [0.05, 100.0])
def test_dualpipes_bounds_hold_each_chain_to_its_own_ramp(bandwidth: float) -> None:
    """Its two directions start at opposite ends: one chain's ramp counted from the other's start would put the
    bound above the truth (a slow link makes the ramp most of it), and pruning would then lose the optimum."""
    model = replace(MODEL, seq_len=256, link_bandwidth_gbps=bandwidth)
    inputs = PlanInputs.from_description(model, devices=4, global_batch=32, memory_cap_bytes=2**40)
    space = PlanSpace(
        schedules=("dualpipe", "1f1b", "zbv"), microbatch_sizes=(1, 2, 4), recompute=(False, True), ranks=(2, 4)
    )
    evaluator = Evaluator(inputs)
    checked = 0
    for c in candidate_grid(inputs, space):
        bound = evaluator.bound(c)
        if bound is None or c.schedule != "dualpipe":
            continue
        evaluator.simulate(c)
        assert bound.step_ms <= c.step_ms * (1 + 1e-9) and bound.memory_bytes <= c.peak_memory_bytes * (1 + 1e-9)
        checked += 1
        evaluator.drop_shape(shape_key(c))
    assert checked >= 6
    every, pruned = evaluate_all(inputs, space, prune=False), evaluate_all(inputs, space)
    assert [_numbers(c) for c in pareto_front(pruned)] == [_numbers(c) for c in pareto_front(every)]
    assert _numbers(best_candidate(pruned)) == _numbers(best_candidate(every))


def test_verify_plan_runs_a_fully_offloaded_candidate_and_refuses_a_selective_one_in_one_line() -> None:
    """verify-plan runs a candidate by its family's name: a fully offloaded one runs with the executor's
    `--offload full` (the placement the planner priced: every microbatch whose backward waits), under its own
    label; a selective placement rests on the plan's priced copies, which a model run does not know."""
    from pipesim_executor.host.verify_config import candidate_config, label

    plan = {"inputs": {"model": {"num_layers": 4, "hidden_size": 32, "num_heads": 2, "ffn_size": 64, "seq_len": 16,
                                 "vocab_size": 100}, "optimizer": "sgd"}}  # fmt: skip
    base = {"schedule": "1f1b", "ranks": 2, "microbatches": 4, "microbatch_size": 2, "split": [2],
            "recompute": False, "virtual_stages": 1}  # fmt: skip
    full = {**base, "offload": "full"}
    config = candidate_config(plan, full, steps=1, warmup_steps=0, device="cpu", timeout_s=60.0)
    assert config.pipeline.offload == "full" and config.pipeline.schedule == "1f1b"
    plain = candidate_config(plan, base, steps=1, warmup_steps=0, device="cpu", timeout_s=60.0)
    assert plain.pipeline.offload == "none"
    assert label(full) == "1f1b P2 m4x2 offload full" and label(base) == "1f1b P2 m4x2"
    refused = "^offload 'selective': verify-plan runs a candidate with full offload or none"
    with pytest.raises(ValueError, match=refused):
        candidate_config(plan, {**base, "offload": "selective"}, steps=1, warmup_steps=0, device="cpu", timeout_s=1.0)
