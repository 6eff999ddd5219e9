"""Data parallel x pipeline under torchrun: gradients after one step against one process on the global batch.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc-per-node 4 \
        tests/helpers/data_parallel_check.py OUT_DIR

2 pipeline ranks x 2 replicas. For a few schedules (1F1B; ZB-H1, whose gradients are complete after a W;
interleaved 1F1B, two stages per rank whose all-reduces overlap the other stage's backward) on the tiny GPT
example: one step through the runtime with the gradient all-reduce (pipesim_executor.rank.grad_sync), each replica on
its own rows of the global batch; process 0 compares every replica's every gradient with one process running the full
model on the whole global batch. Writes OUT_DIR/data_parallel.json; tests/test_data_parallel.py asserts on it.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pipesim.schedules import build_schedule  # noqa: E402
from pipesim_executor.config import ModelConfig, run_config  # noqa: E402
from pipesim_executor.rank.grad_sync import GradSync  # noqa: E402
from pipesim_executor.rank.model import build_model, loss_fn, make_batch, split_stages  # noqa: E402
from pipesim_executor.rank.runtime import PipelineRuntime, build_rank_model, microbatches  # noqa: E402
from pipesim_executor.rank.setup import data_parallel_groups  # noqa: E402
from pipesim_executor.rank.teardown import finish  # noqa: E402
from pipesim_executor.rank.timing import HostClock  # noqa: E402
from pipesim_executor.rank.transport import BackendChoice, Transport  # noqa: E402

RANKS, REPLICAS, MICROBATCHES, BATCH, SEED = 2, 2, 4, 8, 5  # BATCH rows per replica
CPU = torch.device("cpu")
MODEL = ModelConfig(kind="custom", spec="examples.gpt_small:build_tiny")
SCHEDULES = {"1f1b": {}, "zb-h1": {}, "interleaved-1f1b": {"num_virtual_stages": 2}}


def reference(num_stages: int) -> list[list[torch.Tensor]]:
    """One process, the full model, the global batch (BATCH x REPLICAS rows), mean loss."""
    stages = split_stages(build_model(MODEL, SEED), num_stages)
    inputs, targets = make_batch(MODEL, BATCH * REPLICAS, SEED, 0)
    out = inputs
    for stage in stages:
        out = stage(out)
    loss_fn(MODEL)(out, targets).backward()
    return [[p.grad.clone() for p in stage.parameters()] for stage in stages]


def run_case(name: str, options: dict, process: int, transport: Transport, groups: list) -> dict:
    rank, replica = process % RANKS, process // RANKS
    schedule = build_schedule(name, RANKS, MICROBATCHES, **options)
    model = build_rank_model(schedule, MODEL, seed=SEED, microbatch_size=BATCH // MICROBATCHES, rank=rank, device=CPU)
    sync = GradSync(schedule, rank, model.runners, groups[rank], REPLICAS)
    runtime = PipelineRuntime(
        schedule,
        rank,
        model.runners,
        model.shapes,
        transport,
        HostClock(),
        lookahead=2,
        stash_bytes=model.stash_bytes,
        grad_sync=sync,
    )
    inputs, targets = make_batch(MODEL, BATCH * REPLICAS, SEED, 0)  # the global batch; this replica's rows
    rows = slice(replica * BATCH, (replica + 1) * BATCH)
    last = schedule.num_stages - 1
    record = runtime.run_step(
        microbatches(inputs[rows], MICROBATCHES, CPU) if 0 in model.runners else None,
        microbatches(targets[rows], MICROBATCHES, CPU) if last in model.runners else None,
    )
    allreduces = [c for c in record.comm if c[0] == "allreduce"]
    return {
        "grads": {s: [p.grad.clone() for p in r.parameters()] for s, r in model.runners.items()},
        "allreduces": len(allreduces),
        "stages": len(model.runners),
        "num_stages": schedule.num_stages,
    }


def main(out_dir: Path) -> int:
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    process, world = dist.get_rank(), dist.get_world_size()
    assert world == RANKS * REPLICAS, world
    links = [(a, b) for a in range(RANKS) for b in range(RANKS) if a != b]
    transport = Transport(
        BackendChoice("gloo", CPU),
        process % RANKS,
        links,
        120,
        replicas=REPLICAS,
        replica=process // RANKS,
        ranks=RANKS,
    )
    transport.warm_up()
    config = run_config(num_ranks=RANKS, data_parallel=REPLICAS, num_microbatches=MICROBATCHES, batch_size=BATCH)
    groups = data_parallel_groups(config, 120)
    results = []
    for name, options in SCHEDULES.items():
        try:
            mine, error = run_case(name, options, process, transport, groups), None
        except Exception:  # noqa: BLE001 - reported per case
            mine, error = {}, traceback.format_exc()
        gathered = [None] * world if process == 0 else None
        dist.gather_object({"result": mine, "error": error}, gathered, dst=0)
        if process == 0:
            results.append({"schedule": name, **compare(gathered)})
    if process == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "data_parallel.json").write_text(json.dumps({"cases": results}, indent=1))
    return 0


def compare(gathered: list[dict]) -> dict:
    errors = [g["error"] for g in gathered if g["error"]]
    if errors:
        return {"error": errors[0]}
    num_stages = gathered[0]["result"]["num_stages"]
    expected = reference(num_stages)
    worst, checked = 0.0, 0
    for g in gathered:
        for stage, grads in g["result"]["grads"].items():
            for got, want in zip(grads, expected[stage], strict=True):
                worst = max(worst, float((got - want).abs().max()))
                checked += 1
    return {
        "max_abs_diff": worst,
        "tensors_checked": checked,
        "expected_tensors": REPLICAS * sum(len(s) for s in expected),
        "grad_norm": max(float(g.abs().max()) for s in expected for g in s),
        "allreduces": [g["result"]["allreduces"] for g in gathered],
        "stages_per_rank": [g["result"]["stages"] for g in gathered],
    }


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    finish(lambda: main(Path(sys.argv[1])))
