"""One sleep-mode launch of bench/bench_stragglers.py (the what-if cases, the absorbed ones and the blind
localisation all run through it): `python -m executor run --compute sleep`, each action sleeping its cost (F 10 ms,
B 20 ms of which W 10 ms, per rank), real processes and gloo transfers, read back with the simulator's what-if on the
slept costs alone and what the run measured of its runtime beyond the sleeps.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipesim.io.formats import read_json  # noqa: E402
from pipesim.io.run_record import read_run  # noqa: E402
from pipesim.schedules import options_for  # noqa: E402
from pipesim.sim.steps import simulate_step  # noqa: E402
from pipesim_executor.config import run_config  # noqa: E402
from pipesim_executor.host.launch import run  # noqa: E402

COSTS = {"sleep_f": (10.0,), "sleep_b": (20.0,), "sleep_w": (10.0,)}  # ms: well above a loaded scheduler's wake-up


def microbatches(ranks: int) -> int:
    return 2 * ranks  # dualpipev needs >= 2P - 1; interleaving a multiple of P


def launch(
    root: Path,
    name: str,
    family: str,
    ranks: int,
    inject: tuple[str, ...],
    steps: int,
    costs: dict | None = None,
    alternate: bool = False,
) -> dict:
    """One sleep-mode run (`costs`: the sleep flags, default COSTS; `alternate`: uniform and injected steps
    alternating); its steps, its prediction (the injected steps'), its folder, and with `alternate` which steps
    carried the injection and the prediction of the uniform ones."""
    options = options_for(family, num_virtual_stages=2)
    config = run_config(
        schedule=family,
        num_ranks=ranks,
        num_microbatches=microbatches(ranks),
        compute="sleep",
        steps=steps,
        warmup_steps=1,
        inject=inject,
        inject_steps="alternate" if alternate else "all",
        timeout_s=600,
        **(costs or COSTS),
        **options,
    )
    result = run(config, runs_root=root, name=name)
    if result.status != "ok":
        raise RuntimeError(f"{name}: {result.status}: {result.message}")
    schedule = read_run(result.run_dir).schedule
    slept = config.compute.cost_model(schedule)  # the simulator's what-if on the slept costs alone
    out = {
        "slept_ms": simulate_step(schedule, config.inject.perturbation().apply(slept, schedule.stage_to_rank)).step_ms,
        "slept_uniform_ms": simulate_step(schedule, slept).step_ms,
        "measured_ms": result.measured_step_ms,
        "predicted_ms": result.predicted_step_ms,
        "steps_ms": result.step_times_ms,
        "dir": str(result.run_dir),
        "calibration": runtime_measured(result.run_dir),
    }
    if alternate:
        out["injected"] = read_json(result.run_dir / "measured.json")["injected_steps"]
        out["predicted_uniform_ms"] = read_json(result.run_dir / "result.json")["paired"]["predicted_uniform_step_ms"]
    return out


def runtime_measured(run_dir: Path) -> dict | None:
    """What the run measured of its runtime beyond the sleeps (cost.json's sleep_calibration), in short: medians
    over the ranks (us), where the prediction's extra time comes from."""
    calibration = (read_json(run_dir / "cost.json").get("meta") or {}).get("sleep_calibration")
    if not calibration:
        return None
    excess = [ms for kinds in calibration["excess_ms"].values() for ms in kinds.values()]
    transfers = [v for v in calibration["links_ms"].values() if v is not None]
    pinged = [v for v in calibration["links_ping_pong_ms"].values() if v is not None]

    def us(values: list[float]) -> float | None:
        return 1e3 * statistics.median(values) if values else None

    return {
        "sleep_overshoot_us": statistics.median(p["median_us"] for p in calibration["precise_sleep"]),
        "span_excess_us": us(excess),
        "dispatch_us": us(calibration["dispatch_ms"]),
        "tail_us": us(calibration["tail_ms"]),
        "transfer_us": us(transfers),
        "ping_pong_us": us(pinged),
    }
