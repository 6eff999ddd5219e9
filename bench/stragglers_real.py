"""Real compute for bench/bench_stragglers.py (issue 30: "the prediction for a slowed run lies within 5%, or within
the measured CI"): zoo models on 2 CPU ranks, profiled, one rank slowed by --inject, 1F1B.

A pair is ONE launch whose steps alternate uniform and injected (`--inject-steps alternate`: U I U I, each injected
step right after its uniform twin, so a shared machine's drift hits both halves alike). Per pair, two predictions
of the injected steps' median:
* own: the run's own (result.json's predicted_step_ms: its profile, with the injection priced in by
  pipesim.cost.perturb);
* paired: the uniform steps' own measured actions (pipesim.analysis.overlay.replay_cost over the run's cost.json)
  with the injection applied, simulated by the run's own prediction (pipesim_executor.host.predict.predict_step):
  what the what-if claims, the same machine with that rank slower, free of the profile's own error;
* anchored: the uniform steps' measured median times the paired prediction's growth (slowed over uniform replay):
  the what-if's growth alone, free of what the replay misses of a step (a loaded machine's waits between actions).
Each is scored against the injected steps' median and its 95% CI (stragglers_stats.real_row); each case is also
pooled over its pairs (the CI then widened to the pairs' disagreement), and the verdict is over every pair.
The cases cover the model the check was built with (the executor's Transformer, rank 1 at 1.3x) and others it was
not (a second factor, the uneven MLP and the CNN of examples/, the first rank slowed).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import stragglers_stats as stats  # noqa: E402

from pipesim.analysis.overlay import replay_cost  # noqa: E402
from pipesim.io.cost_file import load_cost  # noqa: E402
from pipesim.io.formats import read_json  # noqa: E402
from pipesim.io.run_record import read_run  # noqa: E402
from pipesim.records import keep_steps  # noqa: E402
from pipesim_executor.config import run_config  # noqa: E402
from pipesim_executor.host.launch import run  # noqa: E402
from pipesim_executor.host.predict import predict_step  # noqa: E402

# label: (the model's factory, None for the executor's Transformer; the injection)
REAL_CASES = {
    "transformer-r1x1.3": (None, "slow-rank=1:1.3"),
    "transformer-r1x1.5": (None, "slow-rank=1:1.5"),
    "mlp_uneven-r1x1.3": ("examples.zoo_mlp_uneven:build", "slow-rank=1:1.3"),
    "cnn-r0x1.5": ("examples.zoo_cnn:build", "slow-rank=0:1.5"),
}
PREDICTIONS = ("own", "paired", "anchored")


def real_launch(root: Path, name: str, spec: str | None, inject: str, steps: int) -> dict:
    """One profiled 2-rank 1F1B launch alternating uniform and injected steps: the step times of each half, the
    run's own predictions (uniform and injected), and the paired prediction."""
    config = run_config(
        model=None if spec is None else {"kind": "custom", "spec": spec},
        schedule="1f1b", num_ranks=2, num_microbatches=4, steps=steps, profile=True, device="cpu",
        inject=(inject,), inject_steps="alternate", timeout_s=600,
    )  # fmt: skip
    result = run(config, runs_root=root, name=name)
    if result.status != "ok":
        raise RuntimeError(f"{name}: {result.status}: {result.message}")
    record = read_run(result.run_dir)
    schedule, measured = record.schedule, record.outputs.measured
    flags = measured.meta["injected_steps"]
    times = read_json(result.run_dir / "measured.json")["step_times_ms"]
    uniform_steps = [step for step, on in enumerate(flags) if not on]
    # the run's own cost.json, read as its own prediction reads it (pipesim_executor.host.predict.analyse_run)
    own = load_cost(result.run_dir / "cost.json").for_pipeline(schedule.num_stages, schedule.num_ranks)
    replayed = replay_cost(keep_steps(measured, uniform_steps), own)
    slowed = config.inject.perturbation().apply(replayed, schedule.stage_to_rank)
    paired = read_json(result.run_dir / "result.json")["paired"]
    uniform_times = [t for t, on in zip(times, flags, strict=True) if not on]
    replay_uniform_ms = predict_step(schedule, replayed).predicted_step_ms
    replay_slowed_ms = predict_step(schedule, slowed).predicted_step_ms
    uniform_ms = statistics.median(uniform_times)
    return {
        "uniform_steps_ms": uniform_times,
        "injected_steps_ms": [t for t, on in zip(times, flags, strict=True) if on],
        "own_uniform_ms": paired["predicted_uniform_step_ms"],
        "own_ms": result.predicted_step_ms,
        "paired_uniform_ms": replay_uniform_ms,
        "paired_ms": replay_slowed_ms,
        "anchored_uniform_ms": uniform_ms,
        "anchored_ms": uniform_ms * replay_slowed_ms / replay_uniform_ms,
        "dir": str(result.run_dir),
    }


def real_compute(root: Path, pairs: int, steps: int, labels: tuple[str, ...] | None = None) -> dict:
    """`pairs` launches of each case (`labels`: only those of REAL_CASES), pair-major so that every case sees the
    machine's drift alike: a row per pair, each case's summary over its pairs, and the verdict over every pair.
    The pairs are not pooled into one interval: a shared machine's speed differs from launch to launch, and the
    t-interval over a few launches' medians (pipesim.analysis.stats) then spans the whole range, which any
    prediction would pass."""
    unknown = sorted(set(labels or ()) - set(REAL_CASES))
    if unknown:
        raise SystemExit(f"--real-cases: unknown {', '.join(unknown)}; valid: {', '.join(REAL_CASES)}")
    cases = {label: REAL_CASES[label] for label in (labels or REAL_CASES)}
    rows = []
    for k in range(pairs):
        for label, (spec, inject) in cases.items():
            load = os.getloadavg()[0]
            out = real_launch(root, f"real-{label}-{k}", spec, inject, steps)
            row = {"case": label, "pair": k, "inject": inject, "model": spec or "transformer"}
            row.update(pair_figures(out), load=(load + os.getloadavg()[0]) / 2, dir=out["dir"])
            rows.append(row)
            print(json.dumps(row), flush=True)
    return {
        "rows": rows,
        "cases": stats.real_summary(rows, PREDICTIONS),
        "verdict": stats.real_verdict(rows, PREDICTIONS),
    }


def pair_figures(out: dict) -> dict:
    """real_row of one launch (its injected steps against each prediction), with the uniform half's median, the
    growth measured (with its CI) and predicted, which tell the profile's error from the what-if's."""
    row = stats.real_row([out["injected_steps_ms"]], {name: out[f"{name}_ms"] for name in PREDICTIONS})
    row["uniform_ms"] = statistics.median(out["uniform_steps_ms"])
    for name in PREDICTIONS:
        row[name]["uniform_ms"] = out[f"{name}_uniform_ms"]
        row[name]["growth"] = out[f"{name}_ms"] / out[f"{name}_uniform_ms"] - 1
    row["measured_growth"] = row["measured_ms"] / row["uniform_ms"] - 1
    row["measured_growth_ci"] = list(stats.ratio_ci([out["injected_steps_ms"]], [out["uniform_steps_ms"]]))
    return row
