"""The executor under torchrun on CPU (gloo): gradients, training, and the measured timeline.

Few launches on purpose (each costs seconds of start-up): one per world size
checks every registered schedule on both models with and without
recomputation (tests/helpers/pipeline_check.py), and one real worker run
checks measured.json, cost.json and the progress lines. GPU runs are skipped
where no CUDA device is.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pipesim.io.cost_file import load_cost
from pipesim.io.formats import read_json, schedule_to_dict, timeline_from_dict, write_json
from pipesim.schedules import build_schedule, schedule_names
from pipesim.semantics.lower import comm_plan, needed_message
from pipesim_executor.config import ModelConfig, RunConfig, run_config
from pipesim_executor.progress import PROGRESS_PREFIX

pytestmark = pytest.mark.torchrun

ROOT = Path(__file__).resolve().parents[1]
CHECK_SCRIPT = ROOT / "tests" / "helpers" / "pipeline_check.py"
TOLERANCE = 1e-5  # max abs gradient difference (fp32)
# All ranks read one CLOCK_MONOTONIC, and a span ends before its send is posted and starts after its
# receive completed, so a consumer can never start before its producer ended; allow clock-read jitter only.
CLOCK_TOLERANCE_MS = 0.01
REQUIRED = ["naive", "gpipe", "1f1b", "interleaved-1f1b"]
ZERO_BUBBLE = ["zb-h1", "zb-h2", "zbv", "dualpipev", "looped-bfs"]


def torchrun(nproc: int, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run torchrun in its own session; on timeout the whole process group is killed (nothing left behind)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc), *args]
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"torchrun timed out after {timeout}s\n{out[-3000:]}\n{err[-3000:]}")
    return subprocess.CompletedProcess(command, process.returncode, out, err)


@pytest.fixture(scope="module", params=[2, 4], ids=["2ranks", "4ranks"])
def check(request, tmp_path_factory):
    world = request.param
    out = tmp_path_factory.mktemp(f"check{world}")
    result = torchrun(world, [str(CHECK_SCRIPT), str(out)], timeout=420)
    assert result.returncode == 0, result.stderr[-4000:]
    return world, json.loads((out / f"check_{world}.json").read_text())


def test_every_gradient_matches_a_single_process_run(check):
    world, data = check
    cases = data["cases"]
    ran = {(c["model"], c["schedule"], c["recompute"]) for c in cases if "skipped" not in c}
    registered = set(schedule_names())
    for name in REQUIRED + [n for n in ZERO_BUBBLE if n in registered]:
        for model in ("transformer", "cnn"):
            for recompute in (False, True):
                assert (model, name, recompute) in ran, f"{name} ({model}, recompute={recompute}) did not run"
    if "seq1f1b" in registered:  # sequence chunks: the Transformer runs them, the CNN is refused
        assert ("transformer", "seq1f1b", False) in ran and ("cnn", "seq1f1b", False) not in ran
    failures = [c for c in cases if c.get("error") or ("max_abs_diff" in c and not c["max_abs_diff"] <= TOLERANCE)]
    assert not failures, json.dumps(failures, indent=1)[:4000]
    assert all(c["grad_norm"] > 1e-4 for c in cases if "grad_norm" in c)  # the comparison is not vacuous


def test_loss_falls_with_an_optimizer(check):
    world, data = check
    if world != 2:
        pytest.skip("the helper checks training at 2 ranks only (start-up time)")
    curves = data["loss_curves"]
    assert set(curves) >= {"transformer/1f1b", "transformer/zb-h1", "cnn/1f1b", "cnn/zb-h1"}
    for name, losses in curves.items():
        assert all(math.isfinite(x) for x in losses), name
        assert losses[-1] < 0.97 * losses[0], (name, losses)
    # the split backward changes nothing numerically that matters: same losses as 1F1B
    for model in ("transformer", "cnn"):
        a, b = curves[f"{model}/1f1b"], curves[f"{model}/zb-h1"]
        assert all(abs(x - y) <= 1e-4 for x, y in zip(a, b, strict=True))


# --- one real worker run --------------------------------------------------------------------------------------


def start_worker_run(run_dir: Path, config: RunConfig, schedule) -> subprocess.CompletedProcess:
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(config.to_dict(), run_dir / "config.json")
    write_json(schedule_to_dict(schedule), run_dir / "schedule.json")
    return torchrun(
        config.pipeline.num_ranks, ["-m", "pipesim_executor.rank.worker", "--run-dir", str(run_dir)], timeout=300
    )


@pytest.fixture(scope="module")
def worker_run(tmp_path_factory):
    """zbv on 2 ranks: split backward, a local hand-over (stages 1-2) and cross-rank transfers; with profile."""
    model = ModelConfig.of_transformer(
        vocab_size=64, hidden_size=32, num_heads=2, ffn_size=64, num_layers=4, seq_len=16
    )
    config = run_config(
        schedule="zbv",
        num_ranks=2,
        num_microbatches=4,
        model=model,
        batch_size=8,
        steps=3,
        warmup_steps=1,
        profile=True,
        device="cpu",
        optimizer="adam",
        lr=1e-3,
    )
    schedule = build_schedule("zbv", 2, 4)
    run_dir = tmp_path_factory.mktemp("runs") / "zbv"
    result = start_worker_run(run_dir, config, schedule)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return config, schedule, run_dir, result


def test_measured_timeline_holds_every_action_once_per_step(worker_run):
    config, schedule, run_dir, _ = worker_run
    data = read_json(run_dir / "measured.json")
    timeline = timeline_from_dict(data)
    assert timeline.source == "measured" and timeline.num_ranks == 2
    assert sorted({s.step for s in timeline.spans}) == list(range(config.training.steps))
    for step in range(config.training.steps):
        for rank in range(2):
            spans = [s for s in timeline.spans if s.step == step and s.rank == rank]
            assert sorted(str(s.action) for s in spans) == sorted(str(a) for a in schedule.actions[rank])
            assert all(s.end > s.start >= 0 for s in spans)
            ordered = sorted(spans, key=lambda s: s.start)
            assert [str(s.action) for s in ordered] == [str(a) for a in schedule.actions[rank]]  # schedule order
            assert all(a.end <= b.start for a, b in zip(ordered, ordered[1:], strict=False))  # no overlap on a rank


def test_consumers_start_after_their_producers_end(worker_run):
    config, schedule, run_dir, _ = worker_run
    timeline = timeline_from_dict(read_json(run_dir / "measured.json"))
    spans = {(s.step, str(s.action)): s for s in timeline.spans}
    plan = comm_plan(schedule)  # pipesim's lowering says who produces what each action needs
    checked = 0
    for step in range(config.training.steps):
        for actions in schedule.actions:
            for action in actions:
                key = needed_message(action, schedule.num_stages)
                if key is None:
                    continue
                producer = plan.producer[key]
                consumer = spans[(step, str(action))]
                assert consumer.start >= spans[(step, str(producer))].end - CLOCK_TOLERANCE_MS, (step, action, producer)
                checked += 1
    assert checked > 0


def test_measured_summary_and_comm_waits(worker_run):
    config, _, run_dir, _ = worker_run
    data = read_json(run_dir / "measured.json")
    assert len(data["step_times_ms"]) == config.training.steps and all(t > 0 for t in data["step_times_ms"])
    assert len(data["losses"]) == config.training.warmup_steps + config.training.steps
    assert data["loss_phases"] == ["warmup"] * config.training.warmup_steps + ["measure"] * config.training.steps
    assert all(math.isfinite(x) for x in data["losses"])
    assert len(data["peak_memory_bytes"]) == 2 and all(b > 0 for b in data["peak_memory_bytes"])
    assert data["backend"] == "gloo" and data["device"] == "cpu"
    assert abs(data["meta"]["clock_offsets_ms"][1]) < 5.0  # one machine: the estimated offset is ~0
    comm = timeline_from_dict(data).comm
    assert any(c.kind == "recv" for c in comm)
    assert all(c.peer != c.rank and c.end >= c.start and c.kind in ("send", "recv") for c in comm)


def test_profile_writes_a_cost_file_the_simulator_reads(worker_run):
    config, schedule, run_dir, _ = worker_run
    cost = load_cost(run_dir / "cost.json")
    cost.check_fits(schedule)
    assert len(cost.stages) == schedule.num_stages and len(cost.links) == schedule.num_stages - 1
    assert all(s.forward_ms > 0 and s.backward_ms > 0 and s.weight_ms is not None for s in cost.stages)
    assert all(s.activation_bytes > 0 and s.param_bytes > 0 for s in cost.stages)
    assert cost.stages[0].output_bytes == config.microbatch_size * 16 * 32 * 4  # (mb, seq, d_model) fp32
    assert len(cost.step_overhead_ms) == 2
    from pipesim.sim.simulate import simulate

    assert simulate(schedule, cost).spans


def test_progress_lines(worker_run):
    config, _, _, result = worker_run
    events = [
        json.loads(line.split(PROGRESS_PREFIX, 1)[1]) for line in result.stdout.splitlines() if PROGRESS_PREFIX in line
    ]
    for rank in range(2):
        mine = [e for e in events if e.get("rank") == rank]
        assert mine[0]["event"] == "started" and mine[-1]["event"] == "done"
        measure = [e for e in mine if e["event"] == "step" and e["phase"] == "measure"]
        assert [e["step"] for e in measure] == list(range(config.training.steps))
        assert all(e["steps"] == config.training.steps for e in measure)
        assert any(e["event"] == "step" and e["phase"] == "profile" for e in mine)


@pytest.mark.gpu
def test_gpu_run(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    config = run_config(
        schedule="1f1b",
        num_ranks=2,
        num_microbatches=4,
        batch_size=8,
        steps=2,
        warmup_steps=1,
        device="cuda",
        profile=True,
    )
    result = start_worker_run(tmp_path / "gpu", config, build_schedule("1f1b", 2, 4))
    assert result.returncode == 0, result.stderr[-3000:]
    data = read_json(tmp_path / "gpu" / "measured.json")
    assert data["device"] == "cuda" and data["backend"] in ("nccl", "staged")
    assert len(data["step_times_ms"]) == 2 and all(b > 0 for b in data["peak_memory_bytes"])


def test_torchs_compute_comms_order_runs_and_its_pairs_run_back_to_back(tmp_path):
    """torch's own DualPipeV dump (sends, receives, UNSHARD/RESHARD/REDUCE_GRAD, OVERLAP_F_B pairs) runs as is:
    the compute actions in its order, each pair's halves back to back, and the measured meta says so."""
    import csv
    import io
    import logging

    visualizer = pytest.importorskip("torch.distributed.pipelining._schedule_visualizer")
    from pipesim.io.torch_csv import schedule_from_csv

    logging.disable(logging.WARNING)
    try:
        rows = visualizer.get_schedule_ops("DualPipeV", 2, 4, 2, with_comms=True)
    finally:
        logging.disable(logging.NOTSET)
    text = io.StringIO()
    csv.writer(text).writerows(rows)
    schedule = schedule_from_csv(text.getvalue(), name="dualpipev")
    assert schedule.has_transfers
    model = ModelConfig.of_transformer(
        vocab_size=64, hidden_size=32, num_heads=2, ffn_size=64, num_layers=4, seq_len=16
    )
    config = run_config(
        schedule="dualpipev",
        num_ranks=2,
        num_microbatches=4,
        model=model,
        batch_size=8,
        steps=1,
        warmup_steps=0,
        device="cpu",
    )
    result = start_worker_run(tmp_path / "run", config, schedule)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    data = read_json(tmp_path / "run" / "measured.json")
    timeline = timeline_from_dict(data)
    groups = data["meta"]["overlap_groups"]
    assert len(groups) == 6 and "back to back" in data["meta"]["overlap"]
    spans = {str(s.action): s for s in timeline.spans}
    for rank in range(2):
        ordered = sorted((s for s in timeline.spans if s.rank == rank), key=lambda s: s.start)
        assert [s.action for s in ordered] == list(schedule.actions[rank])
    for forward, backward in groups:
        assert spans[forward].end <= spans[backward].start + CLOCK_TOLERANCE_MS
