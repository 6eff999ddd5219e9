"""The memory model against a real run: pipesim.sim.memory fed the run's profiled sizes (cost.json) against the bytes
each rank tracked tensor by tensor (measured.json: parameters, gradients, optimizer state, activation peak).

Usage:
    python -m executor run ... --profile --optimizer adam --device cpu --out runs/mem
    python bench/bench_memory.py runs/mem
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipesim.sim.memory import rank_memory  # noqa: E402
from pipesim.units import format_bytes  # noqa: E402
from pipesim_executor.host.run_folder import load_run  # noqa: E402


def main(run_dir: str) -> None:
    result = load_run(run_dir)
    measured = json.loads((Path(run_dir) / "measured.json").read_text())
    model = rank_memory(result.schedule, result.cost, result.config.training.optimizer)
    print(f"{result.schedule.describe()}, optimizer {result.config.training.optimizer}")
    print("| rank | params | grads | optimizer | activations (peak) | model total | measured total | error |")
    print("|---|---|---|---|---|---|---|---|")
    for m, static, tracked in zip(model, measured["static_memory_bytes"], measured["tracked_peak_bytes"], strict=True):
        print(
            f"| {m.rank} | {format_bytes(static['param_bytes'])} | {format_bytes(static['grad_bytes'])} | "
            f"{format_bytes(static['optimizer_bytes'])} (model {format_bytes(m.optimizer_bytes)}) | "
            f"{format_bytes(tracked - sum(static.values()))} | {format_bytes(m.peak_bytes)} | "
            f"{format_bytes(tracked)} | {m.peak_bytes / tracked - 1:+.2%} |"
        )


if __name__ == "__main__":
    main(sys.argv[1])
