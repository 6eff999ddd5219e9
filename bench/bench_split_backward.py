"""I + W against B: what splitting the backward costs on the reference models.

Usage:
    OMP_NUM_THREADS=1 python bench/bench_split_backward.py                 # default model sizes, 2 stages
    OMP_NUM_THREADS=1 python bench/bench_split_backward.py --d-model 512 --ffn 2048 --repeats 40

Zero-bubble schedules run I (input gradient, sent on at once) and W (weight
gradients, deferred) as separate actions. W must not redo I's work, so I + W
should cost about one full backward B (issue target: at most 1.1x). Each
stage of a 2-stage split runs B, then I and W, on the same microbatch and the
medians are compared. W runs right after I here; in a real schedule it runs
later, when its inputs may have left the cache.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from pipesim_executor.config import SMALL_TRANSFORMER, ModelConfig  # noqa: E402
from pipesim_executor.rank.model import build_model, loss_fn, make_batch, split_stages, stage_io_shapes  # noqa: E402
from pipesim_executor.rank.stage import StageRunner  # noqa: E402


def measure(config: ModelConfig, microbatch_size: int, repeats: int) -> list[tuple[int, float, float, float]]:
    """Per stage: median B, I and W in ms."""
    stages = split_stages(build_model(config, 0), 2)
    shapes = stage_io_shapes(stages, config, microbatch_size)
    inputs, targets = make_batch(config, microbatch_size, 0, 0)
    rows = []
    for index, module in enumerate(stages):
        is_last = index == len(stages) - 1
        runner = StageRunner(index, module, index == 0, is_last, loss_fn(config), 1.0)
        x = inputs if index == 0 else torch.randn(shapes[index][0])
        grad = None if is_last else torch.randn(shapes[index][1]) * 1e-3
        full, first, weight = [], [], []
        for rep in range(repeats + 2):  # two warm-up repetitions
            _, stash = runner.forward(x, targets)
            start = time.perf_counter()
            runner.backward(stash, grad)
            b = time.perf_counter() - start
            _, stash = runner.forward(x, targets, split=True)
            start = time.perf_counter()
            _, work = runner.backward_input(stash, grad)
            i = time.perf_counter() - start
            start = time.perf_counter()
            runner.backward_weight(work)
            w = time.perf_counter() - start
            if rep >= 2:
                full.append(b)
                first.append(i)
                weight.append(w)
        rows.append((index, *(statistics.median(v) * 1e3 for v in (full, first, weight))))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--microbatch-size", type=int, default=4)
    parser.add_argument("--d-model", type=int, default=SMALL_TRANSFORMER.hidden_size)
    parser.add_argument("--ffn", type=int, default=SMALL_TRANSFORMER.ffn_size)
    parser.add_argument("--repeats", type=int, default=25)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), microbatch {args.microbatch_size}")
    for kind in ("transformer", "cnn"):
        config = (
            ModelConfig.of_transformer(hidden_size=args.d_model, ffn_size=args.ffn)
            if kind == "transformer"
            else ModelConfig.of_cnn()
        )
        for stage, b, i, w in measure(config, args.microbatch_size, args.repeats):
            print(f"{kind:11s} stage {stage}: B {b:8.2f} ms   I {i:8.2f}   W {w:8.2f}   (I+W)/B = {(i + w) / b:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
