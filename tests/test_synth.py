"""Schedule synthesis (pipesim.synth, issue 22): exact against brute force, never slower than ZB-H1 / ZB-H2 at
their memory, every answer checked like any schedule, the lower bound a bound, and the command's errors."""

from __future__ import annotations

import itertools
import json
import math

import pytest

from pipesim.cli.main import main
from pipesim.cost.convert import cost_from_times
from pipesim.cost.model import CostModel, StageCost
from pipesim.io.cost_file import save_cost
from pipesim.io.formats import load_schedule
from pipesim.ir import Action, B, F, I, W, make_schedule
from pipesim.schedules import build_schedule, options_for, schedule_info, schedule_names, stage_placement
from pipesim.semantics.lower import producers_of
from pipesim.semantics.validate import validate
from pipesim.sim.memory import peak_activations_by_order
from pipesim.sim.metrics import compute_metrics, makespan
from pipesim.sim.simulate import find_deadlock, simulate
from pipesim.synth import SynthesisProblem, synthesize
from pipesim.synth.bounds import lower_bound, preemptive_bound
from pipesim.synth.problem import Instance
from tests.helpers.sizes import must_build

TOL = 1e-9


def _cost(f: float, i: float, w: float, comm: float = 0.0) -> CostModel:
    """F, I and W as the zero-bubble paper counts them (pipesim's --b is the full backward I + W)."""
    return cost_from_times([f], [i + w], [w], [comm])


# --- brute force --------------------------------------------------------------------------------------------


def _all_actions(placement: tuple[int, ...], num_microbatches: int) -> list[list[Action]]:
    rows: list[list[Action]] = [[] for _ in range(max(placement) + 1)]
    for stage, rank in enumerate(placement):
        for mb in range(num_microbatches):
            rows[rank] += [Action(stage, kind, mb) for kind in (F, I, W)]
    return rows


def _must_precede(actions: list[Action], num_stages: int) -> dict[Action, set[Action]]:
    """Per action, every action that must run before it (transitive closure of lower's producers)."""
    before: dict[Action, set[Action]] = {}

    def ancestors(action: Action) -> set[Action]:
        if action not in before:
            found: set[Action] = set()
            for alternatives in producers_of(action, num_stages):
                for producer in alternatives:
                    if producer.kind is not B:  # synthesis splits every backward
                        found |= {producer} | ancestors(producer)
            before[action] = found
        return before[action]

    for action in actions:
        ancestors(action)
    return before


def _linear_extensions(row: list[Action], before: dict[Action, set[Action]]) -> list[tuple[Action, ...]]:
    """Every order of one rank's actions that puts each after its ancestors on the same rank."""
    mine = set(row)
    result: list[tuple[Action, ...]] = []

    def extend(prefix: list[Action], left: set[Action]) -> None:
        if not left:
            result.append(tuple(prefix))
            return
        for action in sorted(left):
            if not (before[action] & mine) - set(prefix):
                extend([*prefix, action], left - {action})

    extend([], mine)
    return result


def brute_force(num_ranks: int, num_microbatches: int, placement: tuple[int, ...], cost, limit: float) -> float:
    """The least simulated step over every valid order whose peak (pipesim.sim.memory's walk) fits `limit`
    microbatches' worth on every rank."""
    rows = _all_actions(placement, num_microbatches)
    before = _must_precede([a for row in rows for a in row], len(placement))
    options = [_linear_extensions(row, before) for row in rows]
    assert math.prod(len(o) for o in options) <= 60_000, "brute force too large for a fast test"
    unit = [0.0] * num_ranks
    for stage, rank in enumerate(placement):
        unit[rank] += cost.stash_bytes(stage)
    best = math.inf
    for combo in itertools.product(*options):
        schedule = make_schedule("brute", num_ranks, num_microbatches, placement, combo)
        peaks = peak_activations_by_order(schedule, cost)
        if any(peak > limit * u * (1 + 1e-9) for peak, u in zip(peaks, unit, strict=True)):
            continue
        if find_deadlock(schedule) is not None:
            continue
        best = min(best, makespan(simulate(schedule, cost)))
    return best


BRUTE_CASES = [
    # (ranks, microbatches, placement, (F, I, W, comm), memory limit in microbatches)
    (2, 2, "linear", (1.0, 1.0, 1.0, 0.0), 1.0),
    (2, 2, "linear", (1.0, 1.0, 0.5, 0.25), 1.5),
    (2, 2, "linear", (1.0, 2.0, 1.0, 0.5), 2.0),
    (3, 2, "linear", (1.0, 1.0, 2.0, 0.0), 1.5),
    (3, 2, "linear", (2.0, 1.0, 0.5, 0.3), 2.0),
    (2, 1, "v", (1.0, 1.0, 1.0, 0.2), 1.0),
    (3, 1, "v", (1.0, 1.5, 0.5, 0.0), 1.0),
    (2, 1, "interleaved", (1.0, 1.0, 1.0, 0.1), 1.0),
]  # V and interleaved with 2 microbatches have 10^7 and more order pairs: too many for a test


@pytest.mark.parametrize("case", BRUTE_CASES, ids=[f"{c[0]}x{c[1]}-{c[2]}-{c[4]}" for c in BRUTE_CASES])
def test_exact_synthesis_equals_brute_force_over_every_valid_order(case):
    """The exact path (solver) finds the best order there is, proves it, and its bound meets it. A model that
    loses a constraint (memory, a disjunction) or a search that stops early fails here."""
    ranks, microbatches, placement, (f, i, w, comm), limit = case
    cost = _cost(f, i, w, comm)
    chunks = 3 if placement == "interleaved" else None
    problem = SynthesisProblem(
        ranks, microbatches, cost, placement=placement, num_virtual_stages=chunks, memory_limit=limit
    )
    expected = brute_force(ranks, microbatches, problem.stage_to_rank, cost, limit)
    result = synthesize(problem, time_limit_s=20, exact=True)
    assert result.makespan == pytest.approx(expected, rel=TOL, abs=TOL)
    assert result.optimal and result.gap == pytest.approx(0.0, abs=1e-9)
    assert result.lower_bound == pytest.approx(expected, rel=TOL)


# --- against the hand-made schedules --------------------------------------------------------------------------

RATIOS = {"F=I=W": (1.0, 1.0, 1.0), "W<F": (1.0, 1.0, 0.5), "W>F": (1.0, 1.0, 2.0)}


@pytest.mark.parametrize("ranks", [2, 3, 4])
@pytest.mark.parametrize("ratio", sorted(RATIOS))
@pytest.mark.parametrize("comm", [0.0, 0.3])
def test_never_slower_than_zb_h1_and_zb_h2_at_their_memory(ranks, ratio, comm):
    f, i, w = RATIOS[ratio]
    cost = _cost(f, i, w, comm)
    for microbatches in (ranks, 2 * ranks):
        for name, limit in (("zb-h1", ranks), ("zb-h2", 2 * ranks - 1)):
            named = makespan(simulate(build_schedule(name, ranks, microbatches), cost))
            result = synthesize(SynthesisProblem(ranks, microbatches, cost, memory_limit=limit), time_limit_s=0.5)
            assert result.makespan <= named * (1 + TOL), (name, microbatches, result.makespan, named)
            assert result.lower_bound <= result.makespan * (1 + TOL)


@pytest.mark.parametrize("name,ranks,microbatches", [("zb-h1", 4, 4), ("zb-h2", 4, 8), ("zb-h2", 8, 16)])
def test_strictly_faster_where_the_bound_leaves_room_and_proven_optimal(name, ranks, microbatches):
    """W < F with transfers: the named schedule leaves time above the bound, and the synthesized order meets
    the bound (a proof it is the best there is)."""
    cost = _cost(1.0, 1.0, 0.5, 0.2)
    limit = ranks if name == "zb-h1" else 2 * ranks - 1
    named = makespan(simulate(build_schedule(name, ranks, microbatches), cost))
    result = synthesize(SynthesisProblem(ranks, microbatches, cost, memory_limit=limit), time_limit_s=5)
    assert result.lower_bound < named - 1e-6  # room
    assert result.makespan < named - 1e-6
    assert result.optimal and result.makespan == pytest.approx(result.lower_bound)


# --- every answer checked like any schedule --------------------------------------------------------------------

CHECKED = [
    (4, 6, "linear", None, 2.5),
    (3, 6, "interleaved", 3, 2.0),
    (4, 8, "v", None, 3.0),
    (2, 5, "interleaved", 2, 1.0),
]


@pytest.mark.parametrize("case", CHECKED, ids=[f"{c[0]}x{c[1]}-{c[2]}" for c in CHECKED])
def test_every_answer_validates_runs_and_fits(case, tmp_path):
    ranks, microbatches, placement, chunks, limit = case
    stages = ranks * (chunks or (2 if placement == "v" else 1))
    cost = cost_from_times([1.0 + 0.1 * s for s in range(stages)], [2.0] * stages, [0.8] * stages, [0.1])
    problem = SynthesisProblem(
        ranks, microbatches, cost, placement=placement, num_virtual_stages=chunks, memory_limit=limit
    )
    result = synthesize(problem, time_limit_s=1.0)
    schedule = result.schedule
    validate(schedule)
    assert find_deadlock(schedule) is None
    assert schedule.stage_to_rank == stage_placement(placement, ranks, chunks or 1)
    timeline = simulate(schedule, cost)
    assert makespan(timeline) == pytest.approx(result.makespan)
    for rank in compute_metrics(timeline, cost).ranks:
        unit = sum(cost.stash_bytes(s) for s in schedule.stages_of_rank(rank.rank))
        assert rank.peak_activation_bytes <= limit * unit * (1 + 1e-9)
    assert result.lower_bound <= result.makespan * (1 + TOL)
    _torch_accepts(schedule, tmp_path)


def _torch_accepts(schedule, tmp_path):
    from tests.test_zero_bubble import _torch_load_csv

    pytest.importorskip("torch")
    runtime = _torch_load_csv(schedule, tmp_path)
    assert {r: [str(a) for a in row] for r, row in runtime.pipeline_order.items()} == dict(
        enumerate(schedule.text_rows())
    )


def test_memory_limit_in_bytes_follows_the_cost_models_sizes():
    """Real sizes: F stashes activation_bytes, I keeps the weight-gradient part until W."""
    stage = StageCost(forward_ms=1.0, backward_ms=2.0, weight_ms=1.0, activation_bytes=1000.0, weight_grad_bytes=300.0)
    cost = CostModel(stages=(stage,))
    result = synthesize(SynthesisProblem(3, 6, cost, memory_limit_bytes=2500.0), time_limit_s=1.0)
    assert max(result.peak_memory) <= 2500.0
    assert max(result.peak_memory) > 1000.0  # more than one microbatch in flight: the limit was used
    with pytest.raises(ValueError, match="below one microbatch"):
        synthesize(SynthesisProblem(3, 6, cost, memory_limit_bytes=999.0), time_limit_s=1.0)


# --- the lower bound ---------------------------------------------------------------------------------------------


def test_preemptive_bound_on_known_jobs():
    """Two jobs released at 0 and 5: run back to back with the long tail first."""
    assert preemptive_bound([(0.0, 3.0, 0.0)]) == 3.0
    assert preemptive_bound([(0.0, 2.0, 1.0), (5.0, 1.0, 4.0)]) == 10.0
    assert preemptive_bound([(0.0, 4.0, 0.0), (1.0, 1.0, 10.0)]) == 12.0  # preempted at 1 for the long tail


@pytest.mark.parametrize("ranks,microbatches", [(2, 2), (3, 7), (4, 8)])
def test_lower_bound_is_below_every_registered_schedule_and_tight_at_equal_times(ranks, microbatches):
    """No named schedule beats the bound; at F = I = W without transfers ZB-H1 meets it (the paper's
    (p-1)(F+I-W) bubble is the ramp the bound counts)."""
    for comm in (0.0, 0.4):
        cost = _cost(1.0, 1.0, 1.0, comm)
        for name in schedule_names():
            placement = schedule_info(name).placement
            options = options_for(name, num_virtual_stages=2)
            try:
                schedule = build_schedule(name, ranks, microbatches, **options)
            except ValueError:
                continue
            if schedule.pipelines > 1 or schedule.seq_chunks > 1:  # another problem than synthesis states
                continue
            chunks = schedule.num_stages // ranks if placement == "interleaved" else None
            inst = Instance(SynthesisProblem(ranks, microbatches, cost, placement, chunks, memory_limit=1e9))
            assert lower_bound(inst) <= makespan(simulate(schedule, cost)) * (1 + TOL), name
    cost = _cost(1.0, 1.0, 1.0)
    inst = Instance(SynthesisProblem(ranks, microbatches, cost, memory_limit=ranks))
    assert lower_bound(inst) == pytest.approx(makespan(simulate(build_schedule("zb-h1", ranks, microbatches), cost)))


def test_registry_placement_facts_match_the_builders():
    """Synthesis takes placements from the registry: each family's stated placement is what it builds."""
    for name in schedule_names():
        info = schedule_info(name)
        schedule = build_schedule(name, 4, 8, **options_for(name, num_virtual_stages=3))
        chunks = schedule.num_stages // 4
        assert schedule.stage_to_rank == stage_placement(info.placement, 4, chunks), name


# --- the command ------------------------------------------------------------------------------------------------


def test_command_writes_csv_and_json_every_reader_takes(tmp_path, capsys):
    csv_out, json_out = tmp_path / "synth.csv", tmp_path / "synth.json"
    code = main(
        ["synthesize", "--ranks", "3", "--microbatches", "6", "--f", "1", "--b", "2", "--w", "1", "--comm", "0.1",
         "--memory-limit", "3", "--time-limit", "1", "--csv", str(csv_out), "--json", str(json_out)]
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "step time" in out and "lower bound" in out and "rank 2: peak memory" in out
    document = json.loads(json_out.read_text())
    for key in ("makespan", "bubble_fraction", "lower_bound", "gap", "optimal", "peak_memory"):
        assert key in document
    assert len(document["peak_memory"]) == 3
    from_json, from_csv = load_schedule(json_out), load_schedule(csv_out)
    assert from_json.actions == from_csv.actions
    cost = _cost(1.0, 1.0, 1.0, 0.1)
    assert makespan(simulate(from_csv, cost)) == pytest.approx(document["makespan"])
    assert document["lower_bound"] <= document["makespan"] + 1e-9
    zb_h1 = makespan(simulate(build_schedule("zb-h1", 3, 6), cost))
    assert document["makespan"] <= zb_h1 + 1e-9


BAD = [
    (["--memory-limit", "0.5"], "below one microbatch"),
    (["--memory-limit", "nan"], "expected a number > 0"),
    (["--memory-limit", "-1"], "expected a number > 0"),
    (["--memory-limit-bytes", "lots"], "expected a size"),
    (["--memory-limit", "2", "--memory-limit-bytes", "9"], "not allowed with"),
    (["--memory-limit", "2", "--placement", "ring"], "invalid choice"),
    (["--memory-limit", "2", "--virtual-stages", "2"], "interleaved only"),
    (["--memory-limit", "2", "--time-limit", "0"], "expected a number > 0"),
    (["--memory-limit", "2", "--time-limit", "1e9"], "<= 3600"),
    (["--memory-limit", "2", "--f", "1,2,3"], "stages"),
    (["--memory-limit", "2", "--w", "5"], "exceeds"),
    (["--memory-limit", "2", "--microbatches", "5000"], "more than synthesis takes"),
    (["--memory-limit", "2", "--microbatches", "10**9"], "whole number"),
    ([], "one of the arguments --memory-limit --memory-limit-bytes is required"),
]


@pytest.mark.parametrize("extra,message", BAD, ids=[m for _, m in BAD])
def test_bad_input_is_one_line_and_status_2_and_writes_nothing(extra, message, tmp_path, capsys):
    csv_out, json_out = tmp_path / "s.csv", tmp_path / "s.json"
    argv = ["synthesize", "--ranks", "2", "--microbatches", "4", *extra, "--csv", str(csv_out), "--json", str(json_out)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not csv_out.exists() and not json_out.exists()


def test_cost_file_with_the_wrong_stage_count_is_refused(tmp_path, capsys):
    path = tmp_path / "cost.json"
    save_cost(cost_from_times([1.0, 1.0, 1.0], [2.0] * 3), path)
    argv = ["synthesize", "--ranks", "2", "--microbatches", "4", "--cost", str(path), "--memory-limit", "2",
            "--csv", str(tmp_path / "a.csv"), "--json", str(tmp_path / "a.json")]  # fmt: skip
    assert main(argv) == 2
    assert "3 stages" in capsys.readouterr().err


@pytest.mark.parametrize("chunks", [None, 3])
def test_synthesis_places_stages_as_each_registered_family_of_its_placement(chunks):
    """Synthesis reads the registry's placement rule: for every family, a problem of the family's placement holds
    the stages per rank and the stage-to-rank map the family's own build does."""
    for name in schedule_names():
        info = schedule_info(name)
        requested = chunks if info.takes_chunks else None
        if not must_build(name, 3, 6):
            continue
        built = build_schedule(name, 3, 6, **options_for(name, num_virtual_stages=requested))
        cost = cost_from_times([1.0] * built.num_stages, [2.0] * built.num_stages, [0.5] * built.num_stages, [0.1])
        problem = SynthesisProblem(
            3, 6, cost, placement=info.placement, num_virtual_stages=requested, memory_limit=float(built.num_stages)
        )
        assert problem.chunks == info.chunks_per_rank(requested) == built.num_stages // 3, name
        assert problem.stage_to_rank == tuple(built.stage_to_rank), name
