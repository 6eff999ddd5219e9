"""Gradient and training checks of the executor runtime, many schedules in ONE torchrun launch.

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc-per-node N \
        tests/helpers/pipeline_check.py OUT_DIR

For every registered schedule that builds for N ranks, both reference models,
with and without recomputation: one pipelined step on CPU/gloo, then rank 0
compares every parameter gradient with a single-process run of the full model
on the same weights and batch. A few steps with Adam check that the loss falls (at 2 ranks).
Rank 0 writes OUT_DIR/check_N.json; tests/test_executor_runtime.py asserts on it.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pipesim.ir import Schedule  # noqa: E402
from pipesim.schedules import build_schedule, options_for, schedule_names  # noqa: E402
from pipesim_executor.config import ModelConfig  # noqa: E402
from pipesim_executor.rank.model import build_model, loss_fn, make_batch, split_stages  # noqa: E402
from pipesim_executor.rank.runtime import PipelineRuntime, build_rank_model, microbatches  # noqa: E402
from pipesim_executor.rank.teardown import finish  # noqa: E402
from pipesim_executor.rank.timing import HostClock  # noqa: E402
from pipesim_executor.rank.transport import BackendChoice, Transport  # noqa: E402
from pipesim_executor.seq_cut import data_microbatches, token_bounds  # noqa: E402

SEED = 3
CPU = torch.device("cpu")


def models(world: int) -> dict[str, ModelConfig]:
    """Tiny models with enough layers for 2 stages per rank (8 layers at 4 ranks)."""
    layers = max(2, 2 * world - 2)
    return {
        "transformer": ModelConfig.of_transformer(
            vocab_size=40, hidden_size=16, num_heads=2, ffn_size=32, num_layers=layers, seq_len=8
        ),
        "cnn": ModelConfig.of_cnn(channels=4, blocks=max(2, 2 * world - 3), fc_size=16),
    }


def schedules(world: int, microbatches_: int) -> dict[str, Schedule | str]:
    """Every registered schedule for `world` ranks; a string says why one does not build."""
    built: dict[str, Schedule | str] = {}
    for name in schedule_names():
        options = options_for(name, num_virtual_stages=2)
        try:
            built[name] = build_schedule(name, world, microbatches_, **options)
        except ValueError as error:
            built[name] = str(error)
    return built


def reference_grads(
    config: ModelConfig, num_stages: int, batch_size: int, microbatch_size: int = 1, recompute: bool = False
) -> list[list[torch.Tensor]]:
    """Single process, full model, full batch: the gradients every pipeline must reproduce, per stage (cut where a
    run of `microbatch_size` cuts it, `ModelConfig.stage_split`)."""
    split = config.stage_split(num_stages, microbatch_size, recompute)
    stages = split_stages(build_model(config, SEED), num_stages, split)
    inputs, targets = make_batch(config, batch_size, SEED, step=0)
    out = inputs
    for stage in stages:
        out = stage(out)
    loss_fn(config)(out, targets).backward()
    return [[p.grad.clone() for p in stage.parameters()] for stage in stages]


def run_case(
    rank: int,
    transport: Transport,
    schedule: Schedule,
    config: ModelConfig,
    recompute: bool,
    batch_size: int,
    steps: int = 1,
    lr: float = 0.0,
) -> tuple[dict, list[float]]:
    """`steps` pipelined steps on the batch of step 0; this rank's gradients after step 0 (per stage), and losses."""
    m = data_microbatches(schedule)  # DualPipe: each direction its own microbatches; Seq1F1B: chunks of each
    model = build_rank_model(
        schedule, config, seed=SEED, microbatch_size=batch_size // m, rank=rank, device=CPU, recompute=recompute
    )
    runtime = PipelineRuntime(
        schedule,
        rank,
        model.runners,
        model.shapes,
        transport,
        HostClock(),
        lookahead=2,
        stash_bytes=model.stash_bytes,
        seq_bounds=model.seq_bounds,
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=lr) if lr else None
    grads, losses = {}, []
    first = any(r.is_first for r in model.runners.values())  # a chain's first or last stage (two with DualPipe)
    last = any(r.is_last for r in model.runners.values())
    inputs, targets = make_batch(config, batch_size, SEED, step=0)  # one batch: the loss must fall on it
    for step in range(steps):
        record = runtime.run_step(
            microbatches(inputs, m, CPU) if first else None,
            microbatches(targets, m, CPU) if last else None,
        )
        losses.append(None if record.loss is None else float(record.loss))
        if step == 0:
            grads = {s: [p.grad.clone() for p in r.parameters()] for s, r in model.runners.items()}
        if optimizer is not None:
            optimizer.step()
        for p in model.parameters():
            p.grad = None
    return grads, losses


def check_gradients(rank: int, world: int, transport: Transport) -> list[dict]:
    num_mb = 2 * world
    batch_size = 2 * num_mb
    results = []
    for model_name, config in models(world).items():
        for name, schedule in schedules(world, num_mb).items():
            for recompute in (False, True):
                case = {"model": model_name, "schedule": name, "recompute": recompute, "world": world}
                if isinstance(schedule, str):
                    results.append({**case, "skipped": schedule})
                    continue
                try:  # sequence chunks run on the built-in Transformer only: the executor refuses the rest
                    if schedule.seq_chunks > 1:
                        token_bounds(config, schedule)
                except ValueError as refused:
                    results.append({**case, "skipped": str(refused)})
                    continue
                started = time.perf_counter()
                try:
                    grads, losses = run_case(rank, transport, schedule, config, recompute, batch_size)
                    error = None
                except Exception:  # noqa: BLE001 - reported per case, the loop goes on
                    grads, losses, error = {}, [], traceback.format_exc()
                gathered = [None] * world if rank == 0 else None
                dist.gather_object({"grads": grads, "losses": losses, "error": error}, gathered, dst=0)
                if rank == 0:
                    results.append(
                        {
                            **case,
                            **compare(gathered, config, schedule, batch_size, recompute),
                            "seconds": time.perf_counter() - started,
                        }
                    )
    return results


def compare(
    gathered: list[dict], config: ModelConfig, schedule: Schedule, batch_size: int, recompute: bool = False
) -> dict:
    errors = [g["error"] for g in gathered if g["error"]]
    if errors:
        return {"error": errors[0]}
    chain = schedule.pipeline_stages
    size = batch_size // data_microbatches(schedule)  # each run's microbatch, as run_case's
    reference = reference_grads(config, chain, batch_size, size, recompute)
    got: dict[int, list[torch.Tensor]] = {}  # per piece of the model, summed over its copies (one per direction)
    for g in gathered:
        for s, grads in g["grads"].items():
            got[s % chain] = [a + b for a, b in zip(got[s % chain], grads, strict=True)] if s % chain in got else grads
    worst = 0.0
    for stage, expected in enumerate(reference):
        if stage not in got or len(got[stage]) != len(expected):
            return {"error": f"stage {stage}: gradients missing"}
        for a, b in zip(got[stage], expected, strict=True):
            worst = max(worst, float((a - b).abs().max()))
    losses = [l for g in gathered for l in g["losses"] if l is not None]
    return {
        "max_abs_diff": worst,
        "grad_norm": max(float(g.abs().max()) for s in reference for g in s),
        "loss": losses[0] if losses else None,
    }


def check_training(rank: int, world: int, transport: Transport) -> dict:
    """Loss over a few Adam steps on one batch, for a plain and a split-backward schedule, both models."""
    curves = {}
    for model_name, config in models(world).items():
        for name in ("1f1b", "zb-h1"):
            schedule = build_schedule(name, world, 2 * world)
            _, losses = run_case(rank, transport, schedule, config, False, 4 * world, steps=6, lr=1e-2)
            gathered = [None] * world if rank == 0 else None
            dist.gather_object(losses, gathered, dst=0)
            if rank == 0:
                curves[f"{model_name}/{name}"] = next(ls for ls in gathered if ls and ls[0] is not None)
    return curves


def main(out_dir: Path) -> int:
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    links = [(a, b) for a in range(world) for b in range(world) if a != b]
    transport = Transport(BackendChoice("gloo", CPU), rank, links, timeout_s=120)
    transport.warm_up()
    results = check_gradients(rank, world, transport)
    curves = check_training(rank, world, transport) if world <= 2 else {}  # training is checked once
    if rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"check_{world}.json").write_text(json.dumps({"cases": results, "loss_curves": curves}, indent=1))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    finish(lambda: main(Path(sys.argv[1])))  # the executor's own teardown: groups released, no finalisation
