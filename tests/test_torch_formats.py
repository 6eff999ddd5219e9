"""torch's schedule files both ways, over every schedule class torch 2.13 registers and a grid of sizes.

torch's own orders come from `get_schedule_ops` (torch's schedule visualiser: real schedule classes built on
mocked stages, no process group), `with_comms=True` giving the order its runtime executes. Each must load in
pipesim, simulate, and write back cell for cell; pipesim's own lowering of the compute order must equal
torch's; and what pipesim writes must run in torch's dry-run simulator.
"""

from __future__ import annotations

import csv
import io
import logging
import re
from dataclasses import replace

import pytest

from pipesim.cost.model import CostModel, DataParallelGroup, LinkCost
from pipesim.io.torch_csv import CsvError, schedule_from_csv, schedule_to_csv
from pipesim.semantics.dag import DeadlockError
from pipesim.semantics.validate import ScheduleError, find_problems, validate
from pipesim.sim.metrics import makespan
from pipesim.sim.simulate import simulate

torch_schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
visualizer = pytest.importorskip("torch.distributed.pipelining._schedule_visualizer")

BASE_CLASSES = {"PipelineScheduleSingle", "PipelineScheduleMulti"}  # registered, but they build no order
GRID = [(p, m) for p in (2, 3, 4) for m in (1, 2, 3, 4, 5, 6, 8)]


def registered_names() -> list[str]:
    """Every name torch's get_schedule_class knows, read from its own refusal (so a new class is not missed)."""
    with pytest.raises(ValueError) as info:
        torch_schedules.get_schedule_class("no such schedule")
    return [
        name for name in re.findall(r"'([^']+)'", str(info.value).split("options are")[1]) if name not in BASE_CLASSES
    ]


def _text(rows) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    for row in rows:
        writer.writerow(row)
    return buffer.getvalue()


def torch_orders(name: str):
    """(p, m, chunks, compute_only text, compute_comms text or None) for every grid size torch builds."""
    single = issubclass(torch_schedules.get_schedule_class(name), torch_schedules.PipelineScheduleSingle)
    logging.disable(logging.WARNING)  # torch logs each class it builds
    try:
        for p, m in GRID:
            for chunks in (1,) if single else (2, 3):
                try:
                    compute = visualizer.get_schedule_ops(name, p, m, chunks)
                except ValueError:  # a size torch refuses ("requires ..."): nothing to compare
                    continue
                # torch cannot lower its own single-stage orders (their REDUCE_GRAD is refused by the lowering)
                comms = None if single else visualizer.get_schedule_ops(name, p, m, chunks, with_comms=True)
                yield p, m, chunks, _text(compute), None if comms is None else _text(comms)
    finally:
        logging.disable(logging.NOTSET)


def test_the_test_knows_every_registered_class():
    assert set(registered_names()) >= {
        "GPipe",
        "1F1B",
        "Interleaved1F1B",
        "LoopedBFS",
        "InterleavedZeroBubble",
        "ZBVZeroBubble",
        "DualPipeV",
    }


@pytest.mark.parametrize("name", registered_names())
def test_torchs_orders_round_trip_and_simulate(name):
    cost = CostModel.uniform(1.0, 2.0, weight_ms=1.0, comm_ms=0.25)
    built = 0
    for p, m, chunks, compute, comms in torch_orders(name):
        where = f"{name} p={p} m={m} chunks={chunks}"
        schedule = schedule_from_csv(compute)
        assert schedule_to_csv(schedule) == compute, where
        assert schedule.num_ranks == p and schedule.num_stages == p * chunks, where
        if name == "1F1B" and p > 1:
            # torch 2.13's 1F1B IR starts its last rank at microbatch 1 (`forward_mb += 1` before the first F);
            # its runtime (`Schedule1F1B._step_microbatches`) runs microbatches 0..m-1. The IR is read and
            # written back as it is, and the validator names what is wrong with it.
            assert any("missing forward" in str(problem) for problem in find_problems(schedule)), where
            built += 1
            continue
        validate(schedule)
        plain = makespan(simulate(schedule, cost))
        if comms is not None:
            with_transfers = schedule_from_csv(comms)
            validate(with_transfers)
            assert with_transfers.has_transfers and schedule_to_csv(with_transfers, "compute_comms") == comms, where
            assert with_transfers.actions == schedule.actions, where  # the same compute, in the same order
            # torch's lowering sends right after each producer: stating it changes no time
            assert makespan(simulate(with_transfers, cost)) == pytest.approx(plain), where
            assert schedule_to_csv(schedule, "compute_comms") == comms, where  # pipesim lowers as torch does
        built += 1
    assert built >= 6, f"{name}: too few sizes built ({built})"


@pytest.mark.parametrize("name", ["GPipe", "Interleaved1F1B", "ZBVZeroBubble"])  # (it cannot run OVERLAP_F_B)
def test_torchs_dry_run_simulator_runs_what_pipesim_writes(name):
    """torch's `_simulate_comms_compute` raises on a missing or misordered transfer; it accepts ours."""
    for *_, compute, _ in list(torch_orders(name))[-3:]:
        schedule = schedule_from_csv(compute)
        rows = [
            [torch_schedules._Action.from_str(cell) for cell in row]
            for row in csv.reader(io.StringIO(schedule_to_csv(schedule, "compute_comms")))
        ]
        order = {
            rank: [
                a
                for a in row
                if a.computation_type
                not in (torch_schedules.UNSHARD, torch_schedules.RESHARD, torch_schedules.REDUCE_GRAD)
            ]
            for rank, row in enumerate(rows)
        }
        torch_schedules._simulate_comms_compute(order, schedule.stage_to_rank.__getitem__, schedule.num_stages)


# --- what the extra actions mean ----------------------------------------------------------------------------

TWO_RANKS = "0F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n"


def test_a_late_send_deadlocks_and_the_cycle_is_named():
    """rank 0 sends 0F0's output only after 0B0, which needs rank 1's gradient, which needs that output."""
    bad = "0F0,0RECV_B0,0B0,0SEND_F0\n1RECV_F0,1F0,1B0,1SEND_B0\n"
    schedule = schedule_from_csv(bad)
    validate(schedule)  # structurally fine: the order is the problem
    with pytest.raises(DeadlockError) as info:
        simulate(schedule, CostModel.uniform())
    assert "rank 1 waits at 1F0 for 0SEND_F0 (placed after 0B0)" in str(info.value)
    # the same compute order with the send where torch puts it runs
    assert makespan(simulate(schedule_from_csv(TWO_RANKS), CostModel.uniform(comm_ms=0.5))) == pytest.approx(7.0)


def test_a_send_placed_later_delays_its_receiver():
    early = "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n"
    late = early.replace("0F0,0SEND_F0,0F1,0SEND_F1", "0F0,0F1,0SEND_F0,0SEND_F1")
    cost = CostModel.uniform(1.0, 2.0)
    first = {str(s.action): s.start for s in simulate(schedule_from_csv(early), cost).spans}
    second = {str(s.action): s.start for s in simulate(schedule_from_csv(late), cost).spans}
    assert first["1F0"] == pytest.approx(1.0) and second["1F0"] == pytest.approx(2.0)


@pytest.mark.parametrize(
    "text, rule",
    [
        ("0F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", "missing SEND_F"),
        ("0SEND_F0,0F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", "SEND_F too early"),
        ("0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1RECV_F0,1B0,1SEND_B0\n", "RECV_F too late"),
        ("0F0,0SEND_F0,0RECV_B0,0B0,0REDUCE_GRAD,0REDUCE_GRAD\n1RECV_F0,1F0,1B0,1SEND_B0\n", "duplicate REDUCE_GRAD"),
        ("0F0,0REDUCE_GRAD,0B0\n1F0,1B0\n", "REDUCE_GRAD too early"),
        ("0F0,0SEND_F0,0SEND_B0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", "needless SEND_B"),
    ],
)
def test_misplaced_transfers_and_collectives_are_named(text, rule):
    problems = find_problems(schedule_from_csv(text))
    assert any(rule in str(problem) for problem in problems), [str(p) for p in problems]


def test_overlapped_pair_runs_as_one_span_priced_by_the_overlap_factor():
    text = "0F0,(0F1;0B0)OVERLAP_F_B,0B1\r\n"
    assert schedule_to_csv(schedule_from_csv(text, csv_format="compute_only")) == text
    dualpipe = next(c for p, m, k, c, _ in torch_orders("DualPipeV") if (p, m) == (2, 4))
    schedule = schedule_from_csv(dualpipe)
    full = simulate(schedule, CostModel.uniform(1.0, 2.0))
    half = simulate(schedule, CostModel(stages=CostModel.uniform(1.0, 2.0).stages, overlap_factor=0.5))
    assert full.meta["overlap_groups"] and half.meta["overlap_factor"] == 0.5
    spans = {str(s.action): s for s in half.spans}
    for forward, backward in half.meta["overlap_groups"]:
        f, b = spans[forward], spans[backward]
        assert b.start == pytest.approx(f.end)  # back to back: one pair
        assert b.end - f.start == pytest.approx(0.5 * (1.0 + 2.0))
    assert makespan(half) < makespan(full)
    with pytest.raises(ValueError, match="overlap_factor"):
        CostModel(stages=full and CostModel.uniform().stages, overlap_factor=0.0)


def test_a_pair_waits_for_both_members_inputs():
    # 1F1 can start at 1.0 on its own, but 1B0 in its pair waits for 1F0 (ends 2.0) and 1B0's own input.
    text = (
        "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
        "1RECV_F0,1F0,1RECV_F1,(1F1;1B0)OVERLAP_F_B,1SEND_B0,1B1,1SEND_B1\n"
    )
    timeline = simulate(schedule_from_csv(text), CostModel.uniform(1.0, 2.0))
    spans = {str(s.action): s for s in timeline.spans}
    assert spans["1F1"].start == pytest.approx(spans["1F0"].end)
    assert spans["1B0"].start == pytest.approx(spans["1F1"].end)


def test_collectives_cost_nothing_alone_and_all_reduce_time_with_data_parallelism():
    from pipesim.cost.collectives import bucket_sizes
    from pipesim.cost.model import StageCost
    from pipesim.ir import CommKind

    text = TWO_RANKS.replace("0B0\n", "0B0,0REDUCE_GRAD\n").replace("1SEND_B0\n", "1SEND_B0,1REDUCE_GRAD\n")
    schedule = schedule_from_csv(text)
    stage = StageCost(forward_ms=1.0, backward_ms=2.0, param_bytes=1e9)
    alone = simulate(schedule, CostModel(stages=(stage,)))
    assert makespan(alone) == pytest.approx(6.0)
    ring = DataParallelGroup(4, LinkCost(latency_ms=0.5, bandwidth_gbps=100.0))
    reduced = simulate(schedule, CostModel(stages=(stage,), dp_group=ring))
    # per bucket 2(d-1) steps of latency; 2(d-1)/d of all the bytes over the bandwidth
    all_reduce = len(bucket_sizes(1e9)) * 2 * 3 * 0.5 + 2 * 3 / 4 * 1e9 / 100e9 * 1e3
    assert ring.collective_ms(CommKind.REDUCE_GRAD, 1e9) == pytest.approx(all_reduce)
    assert makespan(reduced) == pytest.approx(6.0 + all_reduce)
    assert {c.kind for c in reduced.comm} == {"reduce_grad"}
    sharded = DataParallelGroup(4, LinkCost(bandwidth_gbps=100.0), sharded=True)
    assert sharded.collective_ms(CommKind.UNSHARD, 1e9) == pytest.approx(3 / 4 * 10.0)
    assert sharded.collective_ms(CommKind.REDUCE_GRAD, 1e9) == pytest.approx(3 / 4 * 10.0)  # a reduce-scatter
    assert sharded.collective_ms(CommKind.RESHARD, 1e9) == 0.0 and ring.collective_ms(CommKind.UNSHARD, 1e9) == 0.0
    with pytest.raises(ValueError, match="data_parallel"):
        DataParallelGroup(0)


def test_bad_cells_name_the_forms_and_stay_bounded():
    with pytest.raises(CsvError, match="SEND_F0, 2RECV_B3, 0REDUCE_GRAD or 0OFFLOAD3"):
        schedule_from_csv("0F0,0SEND_X0\n")
    with pytest.raises(CsvError, match="too long"):
        schedule_from_csv("(" + "0F0;" * 10_000 + ")OVERLAP_F_B\n")
    with pytest.raises(CsvError, match="limited"):
        schedule_from_csv("0F0,0SEND_F99999999\n")
    with pytest.raises(ValueError, match="choose one of"):
        schedule_from_csv("0F0\n", csv_format="json")


def test_schedule_error_on_missing_send_when_simulated_without_validation():
    schedule = schedule_from_csv("0F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n")
    with pytest.raises(ScheduleError, match="no SEND"):
        simulate(schedule, CostModel.uniform())


def test_cli_reads_torchs_dumps_and_writes_either_format(tmp_path, capsys):
    from pipesim.cli.main import main

    _, _, _, compute, comms = next(o for o in torch_orders("DualPipeV") if o[:2] == (2, 4))
    (tmp_path / "only.csv").write_text(compute, newline="")
    (tmp_path / "comms.csv").write_text(comms, newline="")
    out = tmp_path / "out.csv"
    assert (
        main(
            [
                "simulate",
                "--csv-in",
                str(tmp_path / "comms.csv"),
                "--csv",
                str(out),
                "--overlap-factor",
                "0.8",
                "--data-parallel",
                "4",
                "--dp-bandwidth",
                "10",
            ]
        )
        == 0
    )
    assert out.read_bytes() == comms.encode()  # written back in the form it was read
    assert (
        main(["simulate", "--csv-in", str(tmp_path / "only.csv"), "--csv", str(out), "--csv-format", "compute_comms"])
        == 0
    )
    assert out.read_bytes() == comms.encode()  # lowered as torch lowers it
    assert main(["simulate", "--csv-in", str(tmp_path / "comms.csv"), "--csv-in-format", "compute_only"]) == 2
    assert main(["simulate", "--csv-in", str(tmp_path / "only.csv"), "--overlap-factor", "1.5"]) == 2
    assert "--overlap-factor" in capsys.readouterr().err


def test_the_full_order_survives_pipesims_json_and_a_mismatch_is_refused():
    from pipesim.io.formats import schedule_from_dict, schedule_to_dict

    _, _, _, _, comms = next(o for o in torch_orders("DualPipeV") if o[:2] == (2, 4))
    schedule = schedule_from_csv(comms)
    back = schedule_from_dict(schedule_to_dict(schedule))
    assert back == schedule and schedule_to_csv(back, "compute_comms") == comms
    data = schedule_to_dict(schedule)
    data["order"][0] = [cell for cell in data["order"][0] if cell != "0F0"]  # the order loses a compute action
    with pytest.raises(ValueError, match="order"):
        schedule_from_dict(data)


def test_collective_spans_survive_the_timeline_file(tmp_path):
    from pipesim.cost.model import StageCost
    from pipesim.io.formats import read_json, save_timeline, timeline_from_dict

    schedule = schedule_from_csv(
        "0UNSHARD,0F0,0SEND_F0,0RECV_B0,0B0,0REDUCE_GRAD,0RESHARD\n"
        "1UNSHARD,1RECV_F0,1F0,1B0,1SEND_B0,1REDUCE_GRAD,1RESHARD\n"
    )
    timeline = simulate(
        schedule,
        CostModel(
            stages=(StageCost(1.0, 2.0, param_bytes=8.0),),
            dp_group=DataParallelGroup(2, LinkCost(latency_ms=1.0), sharded=True),
        ),
    )
    assert {c.kind for c in timeline.comm} == {"unshard", "reduce_grad", "reshard"}
    unshard = next(c for c in timeline.comm if c.kind == "unshard" and c.rank == 0)
    first = next(s for s in timeline.spans if str(s.action) == "0F0")
    assert (unshard.start, unshard.end) == (0.0, 1.0) and first.start == pytest.approx(1.0)  # F waits for it
    save_timeline(timeline, tmp_path / "t.json")
    back = timeline_from_dict(read_json(tmp_path / "t.json"))
    assert back.comm == timeline.comm and makespan(back) == pytest.approx(makespan(timeline))


def test_lowering_a_deadlocked_order_is_a_plain_error():
    schedule = schedule_from_csv("0B0,0F0\n1F0,1B0\n")  # rank 0 wants the gradient before sending the input
    with pytest.raises(ValueError, match="no rank can go on.*rank 0 at 0B0"):
        schedule_to_csv(schedule, "compute_comms")


def test_the_gantt_chart_draws_collectives_on_their_rank():
    from pipesim.charts.gantt import gantt_figure
    from pipesim.cost.model import StageCost

    schedule = schedule_from_csv(TWO_RANKS.replace("0B0\n", "0B0,0REDUCE_GRAD\n"))
    figure = gantt_figure(
        simulate(
            schedule,
            CostModel(
                stages=(StageCost(1.0, 2.0, param_bytes=1.0),), dp_group=DataParallelGroup(2, LinkCost(latency_ms=1.0))
            ),
        )
    )
    [bar] = [trace for trace in figure.data if trace.name == "collective"]
    assert list(bar.y) == [0] and bar.customdata[0][0] == "0REDUCE_GRAD" and list(bar.x) == [2.0]
    assert not [trace for trace in figure.data if trace.name == "blocked on transfer"]


def test_sharded_data_parallelism_gets_torchs_collectives_where_torchs_lowering_puts_them():
    """simulate and compare alike (`simulate_step`): FSDP's UNSHARD / REDUCE_GRAD placed by torch's own lowering;
    replicated parameters reduce after each stage's last backward, as the executor does; stated ones stand."""
    from pipesim.analysis.compare import compare_one
    from pipesim.schedules import build_schedule
    from pipesim.semantics.torch_order import torch_lowered
    from pipesim.sim.data_parallel import AFTER_BACKWARD, NOTHING, STATED, TORCH_LOWERING, reduction_charge
    from pipesim.sim.steps import simulate_step

    schedule = build_schedule("1f1b", 2, 2)
    plain = CostModel.uniform(1.0, 2.0)
    stages = (replace(plain.stages[0], param_bytes=1.0),)  # one byte of gradients: one bucket, latency only
    group = DataParallelGroup(2, LinkCost(latency_ms=1.0))
    replicated = CostModel(stages=stages, dp_group=group)
    sharded = CostModel(stages=stages, dp_group=replace(group, sharded=True))
    lowered = torch_lowered(schedule)
    assert lowered.actions == schedule.actions and schedule_to_csv(lowered, "compute_comms") == schedule_to_csv(
        schedule, "compute_comms"
    )  # exactly torch's lowering
    assert reduction_charge(schedule, plain) == NOTHING
    assert reduction_charge(schedule, replicated) == AFTER_BACKWARD
    assert reduction_charge(schedule, sharded) == TORCH_LOWERING
    assert reduction_charge(lowered, replicated) == reduction_charge(lowered, sharded) == STATED
    step = simulate_step(schedule, sharded)
    # the all-gather (d-1) x 1 ms before the first forward (the makespan starts after it, the step before it),
    # the reduce-scatter as long after each stage's last backward, blocking its rank as torch's order does
    assert makespan(step.timeline) == pytest.approx(makespan(simulate(schedule, plain)) + 1.0)
    assert sorted(c.rank for c in step.timeline.comm if c.kind == "reduce_grad") == [0, 1]
    assert step.step_ms == pytest.approx(makespan(step.timeline) + 1.0)
    assert compare_one("1f1b", 2, 2, sharded).step_ms == pytest.approx(step.step_ms)
    after = simulate_step(schedule, replicated)  # the all-reduce, 2(d-1) x 1 ms, after the last backward
    assert after.step_ms == pytest.approx(makespan(simulate(schedule, plain)) + 2.0)
    assert {c.kind for c in after.timeline.comm} == {"allreduce"}
    assert compare_one("1f1b", 2, 2, replicated).step_ms == pytest.approx(after.step_ms)
