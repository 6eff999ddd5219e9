"""Transparent huge pages for the ranks' tensors, on and off, in interleaved launches of the zoo's models.

Usage:
    OMP_NUM_THREADS=1 python bench/bench_hugepages.py --rounds 8 --json out/hugepages.json

PyTorch backs a CPU tensor of 2 MiB or more with transparent huge pages when THP_MEM_ALLOC_ENABLE=1 (2 MiB
aligned, madvise(MADV_HUGEPAGE)); the executor sets it for every rank (pipesim_executor.allocator). This bench
measures what that buys: each round launches every configuration once with the variable 0 and once with 1 (the
order alternating between rounds, so neither side always runs first), each launch a fresh `executor run` of
--steps steps. A launch's figure is its median step; a configuration's figure is the geometric mean over the
rounds of on / off, with its 95% t-interval over the rounds (the machine drifts by the minute, and the pair of one
round shares its minute). The spread of the launches' medians (their coefficient of variation) is printed per side.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pipesim.analysis.stats import t_quantile  # noqa: E402

VARIABLE = "THP_MEM_ALLOC_ENABLE"
# name -> the model and the pipeline (2 ranks, a global batch of 16 at the planner's default sizes)
CONFIGS = {
    "mlp_uneven zb-h1 m8x2": ["--model", "examples.zoo_mlp_uneven:build", "--schedule", "zb-h1",
                              "--microbatches", "8", "--split-points", "3"],
    "mlp_uneven 1f1b m4x4": ["--model", "examples.zoo_mlp_uneven:build", "--schedule", "1f1b",
                             "--microbatches", "4", "--split-points", "3"],
    "embed_heavy 1f1b m8x2": ["--model", "examples.zoo_embed_heavy:build", "--schedule", "1f1b", "--microbatches", "8"],
    "transformer zb-h1 m4x4": ["--model", "examples.zoo_transformer:build", "--schedule", "zb-h1",
                               "--microbatches", "4"],
    "cnn gpipe m4x4": ["--model", "examples.zoo_cnn:build", "--schedule", "gpipe", "--microbatches", "4"],
    "tiny_layers 1f1b m8x2": ["--model", "examples.zoo_tiny_layers:build", "--schedule", "1f1b", "--microbatches", "8"],
}  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6, help="launches of each configuration per side")
    parser.add_argument("--steps", type=int, default=18, help="measured steps per launch")
    parser.add_argument("--configs", nargs="+", choices=sorted(CONFIGS), default=sorted(CONFIGS))
    parser.add_argument("--json", type=Path, help="write the launches and the figures here")
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (a ratio's interval needs two rounds)")
    return args


def launch(config: list[str], value: str, steps: int, folder: Path) -> float:
    """One fresh run with the variable set to `value`: its median step (ms)."""
    env = dict(os.environ, **{VARIABLE: value})
    env.setdefault("OMP_NUM_THREADS", "1")
    command = [sys.executable, "-m", "pipesim_executor", "run", *config, "--ranks", "2", "--batch-size", "16",
               "--steps", str(steps), "--warmup-steps", "3", "--optimizer", "sgd", "--out", str(folder)]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"run failed ({' '.join(config)}, {VARIABLE}={value}): {done.stderr.strip()[-600:]}")
    measured = json.loads((folder / "measured.json").read_text())
    return statistics.median(measured["step_times_ms"])


def ratio_interval(offs: list[float], ons: list[float]) -> tuple[float, float, float]:
    """The geometric mean of on / off over the rounds and its 95% t-interval."""
    logs = [math.log(b / a) for a, b in zip(offs, ons, strict=True)]
    centre = statistics.mean(logs)
    half = t_quantile(0.95, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    medians: dict[str, dict[str, list[float]]] = {name: {"0": [], "1": []} for name in args.configs}
    with tempfile.TemporaryDirectory(prefix="bench-hugepages-") as scratch:
        for round_index in range(args.rounds):
            order = ("0", "1") if round_index % 2 == 0 else ("1", "0")
            for name in args.configs:
                for value in order:
                    folder = Path(scratch) / f"{round_index}-{len(os.listdir(scratch))}"
                    medians[name][value].append(launch(CONFIGS[name], value, args.steps, folder))
            print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    figures = {}
    print(f"{'configuration':26s} {'off ms':>8s} {'on ms':>8s} {'on/off [95% CI]':>24s} {'CV off':>7s} {'CV on':>6s}")
    all_logs = []
    for name in args.configs:
        offs, ons = medians[name]["0"], medians[name]["1"]
        ratio, low, high = ratio_interval(offs, ons)
        all_logs += [math.log(b / a) for a, b in zip(offs, ons, strict=True)]
        cv = {v: statistics.stdev(m) / statistics.mean(m) for v, m in medians[name].items()}
        figures[name] = {"off_ms": statistics.median(offs), "on_ms": statistics.median(ons), "ratio": ratio,
                         "ratio_ci": [low, high], "cv_off": cv["0"], "cv_on": cv["1"]}  # fmt: skip
        print(f"{name:26s} {statistics.median(offs):8.2f} {statistics.median(ons):8.2f} "
              f"{ratio:8.3f} [{low:.3f}, {high:.3f}] {cv['0']:7.1%} {cv['1']:6.1%}")  # fmt: skip
    centre = statistics.mean(all_logs)
    half = t_quantile(0.95, len(all_logs) - 1) * statistics.stdev(all_logs) / math.sqrt(len(all_logs))
    overall = [math.exp(centre), math.exp(centre - half), math.exp(centre + half)]
    print(f"{'every launch pair':26s} {'':8s} {'':8s} {overall[0]:8.3f} [{overall[1]:.3f}, {overall[2]:.3f}]")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"medians_ms": medians, "figures": figures, "overall": overall,
                                         "rounds": args.rounds, "steps": args.steps}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
