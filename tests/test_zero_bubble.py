"""Zero-bubble and V-shape schedules: validity, the papers' closed forms, memory, torch interop.

Closed forms (zero transfer time, every stage the same F, I, W; B = I + W):
Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024), Table 2, give the
bubble of one stage (its idle time between its own first and last action):

    1F1B   (p-1)(F + I + W)      peak p microbatches
    ZB-H1  (p-1)(F + I - W)      peak p
    ZB-H2  (p-1)(F + I - 2W)     peak 2p-1

(DeepSeek's DualPipe README writes the same with B = I + W: (p-1)(F+B),
(p-1)(F+B-2W), ...). Rank r's share is (p-1-r) of those p-1 hops, and rank r
starts r*F late, so rank r ends at r*F + m(F+I+W) + (p-1-r)*hop and the
makespan is m(F+I+W) + (p-1) * max(F, hop).

The forms are exact when W <= F (a deferred W fits where it is put) and, for
ZB-H2, 2W <= F + I (the bubble cannot be negative), with m >= p (ZB-H1) or
m >= 2p-1 (ZB-H2: its warm-up needs that many forwards); the paper states
them for F = I = W, which meets all of these. Every cost triple below does.
"""

from __future__ import annotations

import csv
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.cost.model import CostModel, StageCost
from pipesim.io.formats import schedule_to_csv
from pipesim.ir import B, F, I, v_placement
from pipesim.records import Timeline
from pipesim.schedules import build_schedule, options_for, schedule_info, schedule_names
from pipesim.schedules.looped import looped_bfs
from pipesim.schedules.v_shapes import dualpipev
from pipesim.semantics.validate import validate
from pipesim.sim.metrics import compute_metrics, makespan
from pipesim.sim.simulate import simulate
from tests.helpers.sizes import must_build

FAMILY = ["zb-h1", "zb-h2", "zbv", "dualpipev", "looped-bfs"]
# (F, I, W) triples with W <= F and 2W <= F + I, some with W < F, some with I > 2W.
PAPER_COSTS = [(1, 1, 1), (2, 3, 1), (3, 4, 2), (5, 2, 2), (4, 4, 3)]
# hop: what each of the p-1 pipeline hops adds to a stage's bubble; the paper's Table 2.
HOP = {
    "1f1b": lambda f, i, w: f + i + w,
    "zb-h1": lambda f, i, w: f + i - w,
    "zb-h2": lambda f, i, w: f + i - 2 * w,
}
MIN_MICROBATCHES = {"1f1b": lambda p: 1, "zb-h1": lambda p: p, "zb-h2": lambda p: 2 * p - 1}


def _cost(f: float, i: float, w: float, comm: float = 0.0) -> CostModel:
    return CostModel.uniform(forward_ms=f, backward_ms=i + w, weight_ms=w, comm_ms=comm)


def _own_span_idle(tl: Timeline) -> list[float]:
    """Per rank, idle time between its own first start and last end (the paper's per-stage bubble)."""
    result = []
    for rank in range(tl.num_ranks):
        spans = [s for s in tl.spans if s.rank == rank]
        busy = sum(s.end - s.start for s in spans)
        result.append(max(s.end for s in spans) - min(s.start for s in spans) - busy)
    return result


def _options(name: str) -> dict:
    return options_for(name, num_virtual_stages=2)


# --- registry ----------------------------------------------------------------------


def test_family_is_registered_with_its_flags():
    names = schedule_names()
    for name in FAMILY:
        assert name in names
    for name in ("zb-h1", "zb-h2", "zbv", "dualpipev"):
        assert schedule_info(name).split_backward
        assert schedule_info(name).options == ()
    assert not schedule_info("looped-bfs").split_backward
    assert schedule_info("looped-bfs").options == ("num_virtual_stages",)
    assert schedule_info("ZB-H1").name == "zb-h1"  # case-insensitive


def test_split_backward_flag_matches_the_actions():
    for name in FAMILY:
        schedule = build_schedule(name, 3, 6, **_options(name))
        assert schedule.uses_split_backward == schedule_info(name).split_backward, name


# --- every builder: valid and deadlock-free ---------------------------------------

costs = st.tuples(st.integers(1, 5), st.integers(1, 5), st.integers(0, 4), st.sampled_from([0.0, 0.5, 3.0]))


def _check_runs(name: str, p: int, m: int, cost_args: tuple, **options) -> None:
    schedule = build_schedule(name, p, m, **options)
    validate(schedule)
    f, i, w, comm = cost_args
    tl = simulate(schedule, _cost(f, i, w, comm))  # raises DeadlockError on a cycle
    assert len(tl.spans) == schedule.num_actions
    if schedule_info(name).split_backward:
        assert schedule.uses_split_backward


@pytest.mark.parametrize("name", ["zb-h1", "zb-h2", "zbv"])
@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 8), m=st.integers(1, 24), cost_args=costs)
def test_any_size_is_valid_and_deadlock_free(name, p, m, cost_args):
    _check_runs(name, p, m, cost_args)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 8), extra=st.integers(0, 16), cost_args=costs)
def test_dualpipev_is_valid_from_its_minimum(p, extra, cost_args):
    _check_runs("dualpipev", p, 2 * p - 1 + extra, cost_args)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 8), m=st.integers(1, 16), v=st.integers(1, 4), cost_args=costs)
def test_looped_bfs_is_valid_and_deadlock_free(p, m, v, cost_args):
    _check_runs("looped-bfs", p, m, cost_args, num_virtual_stages=v)


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8])
def test_dualpipev_refuses_too_few_microbatches(p):
    minimum = 2 * p - 1
    validate(dualpipev(p, minimum))
    if minimum > 1:
        with pytest.raises(ValueError, match=r"num_microbatches >= 2\*num_ranks - 1"):
            dualpipev(p, minimum - 1)


def test_looped_bfs_refuses_zero_chunks():
    with pytest.raises(ValueError, match="num_virtual_stages >= 1"):
        looped_bfs(2, 4, num_virtual_stages=0)


@pytest.mark.parametrize("name", FAMILY)
def test_bad_counts_are_refused(name):
    with pytest.raises(ValueError, match="num_ranks"):
        build_schedule(name, 0, 4)


# --- placement and shape ------------------------------------------------------------


@pytest.mark.parametrize("name", ["zbv", "dualpipev"])
def test_v_shapes_put_stage_s_and_2p_minus_1_minus_s_on_one_rank(name):
    schedule = build_schedule(name, 4, 8)
    assert schedule.stage_to_rank == v_placement(4)
    assert schedule.stages_of_rank(1) == (1, 6)


def test_looped_bfs_runs_each_chunk_breadth_first():
    p, m, v = 3, 4, 3
    schedule = looped_bfs(p, m, v)
    assert schedule.stage_to_rank == tuple(s % p for s in range(p * v))
    row = schedule.actions[1]
    forwards = [a for a in row if a.kind is F]
    assert [a.stage for a in forwards] == [1] * m + [4] * m + [7] * m  # chunk by chunk
    backwards = [a for a in row if a.kind is B]
    assert [a.stage for a in backwards] == [7] * m + [4] * m + [1] * m  # chunks reversed
    assert row.index(backwards[0]) == len(forwards)  # every forward before any backward


def test_zb_h1_warms_up_like_1f1b_and_zb_h2_twice_as_long():
    p, m = 4, 12
    for name, factor in (("zb-h1", 1), ("zb-h2", 2)):
        for rank, row in enumerate(build_schedule(name, p, m).actions):
            first_backward = next(k for k, a in enumerate(row) if a.kind is I)
            assert first_backward == factor * (p - 1 - rank) + 1, (name, rank)


# --- the papers' closed forms ------------------------------------------------------------


@pytest.mark.parametrize("name", ["1f1b", "zb-h1", "zb-h2"])
@pytest.mark.parametrize("fiw", PAPER_COSTS)
@pytest.mark.parametrize("p", [1, 2, 3, 4, 6])
def test_bubble_and_makespan_hit_the_papers_closed_forms(name, fiw, p):
    f, i, w = fiw
    hop = HOP[name](f, i, w)
    lowest = MIN_MICROBATCHES[name](p)
    for m in (lowest, lowest + 1, 3 * p + 2):
        tl = simulate(build_schedule(name, p, m), _cost(f, i, w))
        idle = _own_span_idle(tl)
        assert idle[0] == pytest.approx((p - 1) * hop), (m, idle)  # the paper's number
        assert idle == pytest.approx([(p - 1 - r) * hop for r in range(p)])
        assert makespan(tl) == pytest.approx(m * (f + i + w) + (p - 1) * max(f, hop)), m


def test_closed_forms_order_the_three_schedules():
    f, i, w, p, m = 2, 3, 1, 4, 12  # I >= 2W: rank 0 finishes last, makespan = work + paper's bubble
    spans = {name: makespan(simulate(build_schedule(name, p, m), _cost(f, i, w))) for name in HOP}
    work = m * (f + i + w)
    assert spans["1f1b"] - work == (p - 1) * (f + i + w)
    assert spans["zb-h1"] - work == (p - 1) * (f + i - w)
    assert spans["zb-h2"] - work == (p - 1) * (f + i - 2 * w)
    assert spans["1f1b"] - spans["zb-h1"] == 2 * (p - 1) * w  # what deferring W buys
    assert spans["zb-h1"] - spans["zb-h2"] == (p - 1) * w  # what ZB-H2's extra warm-up buys


def test_zb_h1_form_needs_w_no_longer_than_f():
    """Outside W <= F the deferred W passes no longer fit and the closed form is optimistic."""
    f, i, w, p, m = 1, 2, 2, 4, 12
    tl = simulate(build_schedule("zb-h1", p, m), _cost(f, i, w))
    assert _own_span_idle(tl)[0] > (p - 1) * HOP["zb-h1"](f, i, w)


@pytest.mark.parametrize("name", ["zb-h2", "zbv"])
@pytest.mark.parametrize("p", [1, 2, 3, 5])
def test_equal_f_i_w_leave_no_gap_on_any_rank(name, p):
    """ZB-H2 and ZB-V are bubble-free at F = I = W: each rank works without a gap from its
    first action to its last; only the forward ramp (rank r starts r*F late) remains."""
    t = 2.0
    for m in (2 * p - 1, 2 * p + 3):
        schedule = build_schedule(name, p, m)
        tl = simulate(schedule, _cost(t, t, t))
        assert _own_span_idle(tl) == pytest.approx([0.0] * p)
        work = 3 * t * m * schedule.stages_per_rank
        assert makespan(tl) == pytest.approx(work + (p - 1) * t)


# --- activation memory -----------------------------------------------------------------


def _peaks(name: str, p: int, m: int) -> tuple[list[int], float, float]:
    """Peak stashed counts per rank, and the peak in full-model units (counts and bytes)."""
    schedule = build_schedule(name, p, m)
    per_stage = 1.0 / schedule.num_stages  # a stage's share of the model's per-microbatch activations
    cost = CostModel(stages=(StageCost(forward_ms=1, backward_ms=2, weight_ms=1, activation_bytes=per_stage),))
    metrics = compute_metrics(simulate(schedule, cost), cost)
    counts = [r.peak_activations for r in metrics.ranks]
    return counts, max(counts) * per_stage, max(r.peak_activation_bytes for r in metrics.ranks)


@pytest.mark.parametrize("p", [2, 3, 4, 6])
def test_peak_memory_matches_the_papers_tables(p):
    m = 3 * p
    counts, _, _ = _peaks("1f1b", p, m)
    assert counts == [p - r for r in range(p)]
    counts, model_units, model_bytes = _peaks("zb-h1", p, m)
    assert counts == [p - r for r in range(p)]  # ZB-H1: p M_B, like 1F1B
    assert model_units == pytest.approx(1.0) and model_bytes == pytest.approx(1.0)
    counts, model_units, model_bytes = _peaks("zb-h2", p, m)
    assert counts == [2 * (p - r) - 1 for r in range(p)]  # ZB-H2: (2p-1) M_B
    assert model_units == pytest.approx((2 * p - 1) / p) and model_bytes == pytest.approx((2 * p - 1) / p)
    counts, model_units, model_bytes = _peaks("zbv", p, m)
    assert counts == [2 * p] * p  # 2p half-size chunks on every rank ...
    assert model_units == pytest.approx(1.0) and model_bytes == pytest.approx(1.0)  # ... = 1F1B's rank 0
    counts, _, _ = _peaks("dualpipev", p, m)
    assert counts == [2 * p + 1] * p  # DualPipe README: PP+1 chunks per device, PP = 2p stages


# --- torch.distributed.pipelining interop -----------------------------------------------


def _torch_load_csv(schedule, tmp_path):
    """Feed our CSV to torch's own reader and lowering (_load_csv, compute_only).

    The runtime object is made without __init__ (that needs real stages and a
    process group); _load_csv reads only these attributes. It parses each cell
    with _Action.from_str, runs _validate_schedule and lowers the schedule with
    send/recv actions, which fails on any order torch cannot run.
    """
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    runtime = schedules._PipelineScheduleRuntime.__new__(schedules._PipelineScheduleRuntime)
    runtime.pp_group_size = schedule.num_ranks
    runtime._num_stages = schedule.num_stages
    runtime._n_microbatches = schedule.num_microbatches
    runtime._stages = []
    runtime._defer_pp_recv = False
    runtime.pipeline_order = {}
    path = tmp_path / f"{schedule.name}.csv"
    path.write_text(schedule_to_csv(schedule), newline="")
    runtime._load_csv(str(path), format="compute_only")
    return runtime


@pytest.mark.parametrize("size", [(2, 4), (3, 6), (4, 8)])
def test_every_schedule_csv_is_accepted_by_torchs_reader(size, tmp_path):
    pytest.importorskip("torch")
    p, m = size
    for name in schedule_names():
        if not must_build(name, p, m):
            continue
        schedule = build_schedule(name, p, m, **_options(name))
        if schedule.pipelines > 1:  # torch's order is one chain of stages: DualPipe's two directions have no CSV there
            continue
        runtime = _torch_load_csv(schedule, tmp_path)
        cells = [[str(e) for e in row] for row in schedule.order_rows()]  # dualpipev: its OVERLAP_F_B pairs
        assert {r: [str(a) for a in row] for r, row in runtime.pipeline_order.items()} == dict(enumerate(cells)), name
        assert runtime.stage_index_to_group_rank == dict(enumerate(schedule.stage_to_rank)), name
        assert len(runtime.pipeline_order_with_comms) == p
        rows = list(csv.reader(io.StringIO(schedule_to_csv(schedule))))
        assert len(rows) == p


def _torch_rows(cls_name: str, p: int, m: int, **attrs) -> list[list[str]]:
    """Per-rank orders from torch's own builder, idle slots dropped, OVERLAP_F_B expanded."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    cls = getattr(schedules, cls_name)
    builder = cls.__new__(cls)  # only the order computation, no stages or process group
    builder.pp_group_size, builder._n_microbatches = p, m
    for key, value in attrs.items():
        setattr(builder, key, value)
    rows = []
    for rank in range(p):
        row = []
        for action in builder._calculate_single_rank_operations(rank):
            if action is None:
                continue
            row.extend(str(a) for a in (action.sub_actions or (action,)))
        rows.append(row)
    return rows


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5])
def test_orders_match_torchs_builders(p):
    """An independent implementation as golden: torch's ZBV, DualPipeV, LoopedBFS and ZB1P."""
    for m in range(1, 3 * p + 2):
        assert build_schedule("zbv", p, m).text_rows() == _torch_rows("ScheduleZBVZeroBubble", p, m, num_stages=2 * p)
        for v in (1, 2, 3):
            ours = build_schedule("looped-bfs", p, m, num_virtual_stages=v).text_rows()
            assert ours == _torch_rows("ScheduleLoopedBFS", p, m, _stages=[None] * v)
        if m >= 2 * p - 1:
            assert build_schedule("dualpipev", p, m).text_rows() == _torch_rows("ScheduleDualPipeV", p, m)
        rounds = max(1, m // p)
        if m % rounds == 0:  # torch's ZB1P (ScheduleInterleavedZeroBubble, one chunk per rank)
            theirs = _torch_rows(
                "ScheduleInterleavedZeroBubble", p, m, n_local_stages=1, microbatches_per_round=m // rounds
            )
            assert build_schedule("zb-h1", p, m).text_rows() == theirs
