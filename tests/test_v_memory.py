"""V-Half and V-Min hold the memory and the bubble their paper states (pipesim.synth.published_v), measured by
pipesim's own simulator and memory metrics, at every size they build."""

from __future__ import annotations

import json

import pytest

from pipesim.cli.commands import main
from pipesim.cost.links import LinkCost
from pipesim.cost.model import CostModel
from pipesim.cost.stage import StageCost
from pipesim.schedules import build_schedule, schedule_info, v_memory
from pipesim.schedules.v_memory import PERIOD, SHAPES, _actions, _build_in_full, _steady_from, block_offsets
from pipesim.semantics.validate import validate
from pipesim.sim.metrics import compute_metrics
from pipesim.sim.simulate import simulate
from pipesim.synth.problem import longest_rank_span
from pipesim.synth.published_v import FAMILIES, PLAYGROUND_TABLE, activation_memory, bubble_rate

RANKS = range(2, 9)

# F = I = W = 1 ms. Each stage stashes 1 byte per microbatch and all of it stays until W (weight_grad_bytes = the
# whole stash): the paper counts a microbatch's activations as held from F until W frees them.
EQUAL = CostModel(
    stages=(
        StageCost(forward_ms=1, backward_ms=2, weight_ms=1, activation_bytes=1, weight_grad_bytes=1, input_bytes=1),
    ),
    links=(LinkCost(latency_ms=0),),
)


def _paper_memory(name: str, p: int, m: int) -> float:
    """The fullest rank's peak in the paper's unit: microbatches of one 1F1B stage's activations.

    compute_metrics gives bytes per rank, 1 per stage and microbatch under EQUAL. A 1F1B rank holds one stage; a
    V rank holds two chunks, each half of a 1F1B stage's layers (the same model over 2p stages instead of p), so
    two chunk stashes make one microbatch of the paper's unit: divide by the stages per rank.
    """
    schedule = build_schedule(name, p, m)
    peak = max(r.peak_activation_bytes for r in compute_metrics(simulate(schedule, EQUAL), EQUAL).ranks)
    return peak / schedule.stages_per_rank


def _bubble_rate(name: str, p: int, m: int) -> float:
    """1 - (F+B+W) m / longest stage time, the paper's bubble rate: a rank runs 3 passes per stage it holds."""
    schedule = build_schedule(name, p, m)
    return 1 - 3 * m * schedule.stages_per_rank / longest_rank_span(simulate(schedule, EQUAL))


# The orders the authors' code prints (zbv_greedy.py of sail-sg/zero-bubble-pipeline-parallelism:
# PipelineGraph(p, m, shape, 1, 1, 1, 0).schedule_from_pattern(stable_pattern_v_<shape>(p), m, [1] * 6)), chunk 0 of
# rank r written as stage r and chunk 1 as stage 2p-1-r, with its 'B' as pipesim's I.
REFERENCE = {
    ("v-min", 3, 6): [
        "0F0 0F1 0F2 5F0 5I0 5W0 5F1 0I0 5I1 5W1 0W0 5F2 0F3 0I1 5I2 5W2 0W1 5F3 0F4 0I2 5I3 5W3 0W2 5F4 0F5 0I3 5I4 "
        "5W4 0W3 5F5 5I5 0I4 5W5 0W4 0I5 0W5",
        "1F0 1F1 4F0 4F1 4I0 4W0 1I0 1F2 1W0 4I1 4F2 4W1 1I1 1F3 1W1 4I2 4F3 4W2 1I2 1F4 1W2 4I3 4F4 4W3 1I3 1F5 1W3 "
        "4I4 4F5 4W4 1I4 4I5 4W5 1W4 1I5 1W5",
        "2F0 3F0 2F1 3F1 3I0 2I0 3W0 2W0 2F2 3F2 3I1 2I1 3W1 2W1 2F3 3F3 3I2 2I2 3W2 2W2 2F4 3F4 3I3 2I3 3W3 2W3 2F5 "
        "3F5 3I4 2I4 3W4 2W4 3I5 2I5 3W5 2W5",
    ],
    ("v-half", 4, 8): [
        "0F0 0F1 0F2 0F3 0F4 7F0 7I0 7W0 7F1 7I1 7W1 7F2 0I0 7I2 7W2 7F3 0W0 0F5 0I1 7I3 7W3 7F4 0W1 0F6 0I2 7I4 7W4 "
        "7F5 0W2 0F7 0I3 7I5 7W5 7F6 7I6 7W6 0I4 0W3 0W4 7F7 7I7 0I5 7W7 0I6 0W5 0W6 0I7 0W7",
        "1F0 1F1 1F2 1F3 6F0 6F1 6I0 6W0 6F2 6I1 6W1 1I0 1W0 1F4 6F3 6I2 6W2 1I1 1W1 1F5 6F4 6I3 6W3 1I2 1W2 1F6 6F5 "
        "6I4 6W4 1I3 1F7 1W3 6F6 6I5 6W5 1I4 6I6 6W6 6F7 1W4 1I5 6I7 1I6 6W7 1W5 1W6 1I7 1W7",
        "2F0 2F1 2F2 5F0 5F1 5F2 5I0 5W0 2F3 5I1 2I0 5W1 2W0 5F3 2F4 2I1 5I2 5W2 5F4 2W1 2F5 2I2 5I3 5W3 5F5 2W2 2F6 "
        "2I3 5I4 5W4 5F6 2W3 2F7 2I4 5I5 5W5 5F7 5I6 2I5 5W6 2I6 5I7 5W7 2W4 2I7 2W5 2W6 2W7",
        "3F0 4F0 3F1 4F1 3F2 4F2 4I0 4W0 3I0 3W0 3F3 4F3 4I1 4W1 3I1 3W1 3F4 4F4 4I2 4W2 3I2 3W2 3F5 4F5 4I3 4W3 3I3 "
        "3F6 3W3 4F6 4I4 3I4 4W4 3F7 3W4 4F7 4I5 3I5 4I6 3I6 4W5 4W6 4I7 3I7 4W7 3W5 3W6 3W7",
    ],
}


@pytest.mark.parametrize("key", REFERENCE)
def test_the_order_is_the_authors(key):
    """Repetition, the warm-up's and the cool-down's reordering and W's placement give the authors' order."""
    name, p, m = key
    assert [" ".join(row) for row in build_schedule(name, p, m).text_rows()] == REFERENCE[key]


@pytest.mark.parametrize("shape", SHAPES)
def test_repeated_blocks_never_collide(shape):
    """The four passes of a block fall on distinct slots mod PERIOD on every rank, so microbatch j's block shifted
    by PERIOD * j never lands on another's, and the 2 slots left per period are W's."""
    for p in range(1, 65):
        for rank in range(p):
            offsets = block_offsets(shape, p, rank)
            assert len({t % PERIOD for t in offsets}) == 4, (shape, p, rank, offsets)


@pytest.mark.parametrize("name", ["v-half", "v-min"])
def test_valid_and_deadlock_free_at_every_size(name):
    """Every size from 1 microbatch to 3p, p = 2..8: valid, simulated to the end, F, I and W of every microbatch on
    both stages of every rank."""
    for p in RANKS:
        for m in range(1, 3 * p + 1):
            schedule = build_schedule(name, p, m)
            validate(schedule)
            timeline = simulate(schedule, EQUAL)
            assert len(timeline.spans) == 3 * 2 * p * m


@pytest.mark.parametrize("name,column", [("v-min", "V-Min"), ("v-half", "V-Half"), ("1f1b", "1F1B"), ("zbv", "V-ZB")])
def test_peak_activation_memory_is_the_papers(name, column):
    """PLAYGROUND_TABLE's memory exactly once the steady phase runs (m >= 2p), never more below it; 1F1B and
    V-ZB (zbv) at p check the unit."""
    assert FAMILIES[column] == name
    for p in RANKS:
        assert _paper_memory(name, p, 2 * p) == _paper_memory(name, p, 3 * p) == activation_memory(column, p)
        for m in range(1, 2 * p):
            assert _paper_memory(name, p, m) <= activation_memory(column, p)


def test_the_memory_formulas_are_the_tables():
    """activation_memory is the printed table, read at p = 6 (where every formula differs)."""
    row = PLAYGROUND_TABLE["Activation Memory <br> (by #micro-batch)"]
    assert row == ("p", "(p+4)//3", "(p+2)//2", "p")
    assert [activation_memory(c, 6) for c in ("1F1B", "V-Min", "V-Half", "V-ZB")] == [6, 3, 4, 6]


@pytest.mark.parametrize("p", RANKS)
def test_bubble_ordering_at_equal_times(p):
    """1F1B > V-Min >= V-Half > ZBV at T_F = T_B = T_W for m >= 2p, each within 1/(2m) of the README's rate
    (B, 2B/3, B/2, 0). At p = 3 V-Min and V-Half tie: the authors' code gives both the same bubble there."""
    for m in (2 * p, 3 * p):
        rates = {name: _bubble_rate(name, p, m) for name in ("1f1b", "v-min", "v-half", "zbv")}
        assert rates["1f1b"] > rates["v-min"] >= rates["v-half"] > rates["zbv"] == 0, rates
        assert (rates["v-min"] == rates["v-half"]) == (p == 3), rates
        for name, column in (("1f1b", "1F1B"), ("v-min", "V-Min"), ("v-half", "V-Half")):
            assert abs(rates[name] - bubble_rate(column, p, m)) <= 1 / (2 * m), (name, p, m, rates[name])


@pytest.mark.parametrize("name", ["v-half", "v-min"])
def test_the_stashed_bound_holds_and_is_near(name):
    """ScheduleInfo.stashed (the planner prunes by it before building) never exceeds the forwards a rank holds
    at once until their I, and from m = 2p on comes within two of it on every rank."""
    stashed = schedule_info(name).stashed
    for p in range(1, 17):
        for m in (1, p, 2 * p, 2 * p + 1, 3 * p) if p <= 10 else (2 * p,):
            schedule = build_schedule(name, p, m)
            held = [r.peak_activations for r in compute_metrics(simulate(schedule, EQUAL)).ranks]
            bound = stashed(p, m, 2)
            assert all(b <= h for b, h in zip(bound, held, strict=True)), (p, m, bound, held)
            if m >= 2 * p:
                assert all(h - b <= 2 for b, h in zip(bound, held, strict=True)), (p, m, bound, held)


def test_registry_facts():
    for name in ("v-half", "v-min"):
        info = schedule_info(name)
        assert (info.placement, info.split_backward, info.torch_class, info.in_situ) == ("v", True, None, False)
        assert build_schedule(name, 3, 4).stage_to_rank == (0, 1, 2, 2, 1, 0)


def test_the_cli_simulates_it(capsys):
    """`python -m pipesim simulate --schedule v-half ... --json -`: the timeline document on standard output."""
    assert main(["simulate", "--schedule", "v-half", "--ranks", "4", "--microbatches", "8", "--json", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schedule_name"] == "v-half" and data["num_ranks"] == 4
    assert len(data["spans"]) == 3 * 2 * 4 * 8 and data["makespan"] > 0


@pytest.mark.parametrize("shape", SHAPES)
def test_extending_the_steady_phase_is_the_reordering_over_every_microbatch(shape):
    """The builder reorders a few periods past the warm-up and repeats the steady phase for the rest; the
    reordering run over every microbatch gives the same order (for p <= 64 every m up to 2p+2 was compared)."""
    for p in (1, 2, 3, 4, 5, 6, 7, 9, 12, 16):
        start = _steady_from(shape, p)
        for m in (start - 1, start, start + 1, start + 2, start + 5, 2 * p + 2, 4 * p + 3):
            built = [
                [(a.stage, a.kind, a.microbatch) for a in row] for row in build_schedule(f"v-{shape}", p, m).actions
            ]
            rows = _build_in_full(shape, p, m)
            full = [_actions(p, r, [k for _, k, _ in row], [mb for _, _, mb in row]) for r, row in enumerate(rows)]
            assert built == [[tuple(a) for a in row] for row in full], (p, m)


@pytest.mark.parametrize("shape", SHAPES)
def test_the_levels_as_a_list_give_the_orders_as_bytes_do(shape, monkeypatch):
    """The reordering keeps its levels as bytes where the cap fits (p up to about 250 ranks) and as a list above;
    the list path, forced here, gives the same orders."""
    sizes = [(p, m) for p in (2, 3, 4, 6, 8) for m in (1, p, 2 * p + 3)]
    as_bytes = [build_schedule(f"v-{shape}", p, m).actions for p, m in sizes]
    monkeypatch.setattr(v_memory, "_BYTE_LEVELS", 0)
    assert [build_schedule(f"v-{shape}", p, m).actions for p, m in sizes] == as_bytes


@pytest.mark.parametrize("shape", SHAPES)
def test_the_squeeze_gives_the_same_orders_whichever_way_it_takes_the_passes(shape, monkeypatch):
    """The squeeze takes the passes that move from a heap and, past a budget of moves, every pass in turn: forced
    to take all from the heap, or to hand over at the first move, it gives the orders it gives by default."""
    sizes = [(p, m) for p in (2, 3, 4, 6, 8, 12) for m in (1, p, 2 * p + 3, 3 * p + 5)]
    default = [build_schedule(f"v-{shape}", p, m).actions for p, m in sizes]
    for share in (1, 10**9):  # a budget of every pass; of one move
        monkeypatch.setattr(v_memory, "_HEAP_SHARE", share)
        assert [build_schedule(f"v-{shape}", p, m).actions for p, m in sizes] == default, share
