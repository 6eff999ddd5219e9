"""Verify a plan for real: run its top K candidates with the executor, compare predicted with measured step times.

    python -m executor verify-plan plan.json --top 3 [--steps 3 --warmup-steps 1 --device cpu --runs-root runs]

The plan (`python -m pipesim plan --json`) must come from a model description: it maps onto the executor's
Transformer (hidden_size -> d_model, the same layers, heads, ffn, sequence and vocabulary), and each candidate's
split points are unit indices of that very model (embedding, blocks, head), so they pass to `--split-points`
unchanged. Candidates run one after another (they would share the machine's cores otherwise), in the plan's
order: fitting candidates fastest first.

What is reported: per candidate the predicted and the measured (median) step time; the Spearman rank
correlation between the two orders (does the planner rank them as the machine does?); and how far the
recommended candidate (the plan's first) is from the measured best. The comparison is pure arithmetic
(`compare`), so the app and the tests use it on results from anywhere. No torch import: the app imports this.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from executor.config import ModelConfig, RunConfig, run_config
from pipesim.io.formats import read_json, write_json
from pipesim.schedules import schedule_info

EXECUTOR_OPTIMIZERS = {"sgd": "sgd", "adam": "adam"}


@dataclass
class VerifyRow:
    """One candidate: what the plan predicted and what the run measured (None when it failed: `error` says why)."""

    label: str
    candidate: dict[str, Any]
    predicted_ms: float
    measured_ms: float | None = None
    run_dir: str | None = None
    error: str | None = None


@dataclass
class Verification:
    rows: list[VerifyRow]
    spearman: float | None  # None with fewer than 2 measured rows
    recommended_gap: float | None  # measured(recommended) / measured best - 1
    measured_best: str | None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": [vars(r) for r in self.rows],
            "spearman": self.spearman,
            "recommended_gap": self.recommended_gap,
            "measured_best": self.measured_best,
            "notes": self.notes,
        }


def ranks_of(values: list[float]) -> list[float]:
    """Ranks 1..n, ties sharing their mean rank (Spearman's convention)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation: Pearson's on the ranks; None with < 2 values or when one side is all ties."""
    if len(xs) != len(ys) or len(xs) < 2:
        return None
    rx, ry = ranks_of(xs), ranks_of(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    return None if vx == 0 or vy == 0 else cov / (vx * vy) ** 0.5


def compare(rows: list[VerifyRow]) -> Verification:
    """Rank correlation over the measured rows and the gap of the recommended (first) row to the measured best."""
    done = [r for r in rows if r.measured_ms is not None]
    rho = spearman([r.predicted_ms for r in done], [r.measured_ms for r in done])
    notes = [f"{r.label}: {r.error}" for r in rows if r.error]
    if not done:
        return Verification(rows, rho, None, None, notes + ["no candidate was measured"])
    best = min(done, key=lambda r: r.measured_ms)
    gap = None
    if rows[0].measured_ms is not None:
        gap = rows[0].measured_ms / best.measured_ms - 1
    else:
        notes.append("the recommended candidate did not run: no gap to the measured best")
    return Verification(rows, rho, gap, best.label, notes)


def predicted_step_ms(c: dict[str, Any]) -> Any:
    """A plan entry's predicted step time: `step_ms`, or `makespan_ms` in plans written before issue 19."""
    return c.get("step_ms", c.get("makespan_ms"))


def plan_candidates(plan: dict[str, Any], top: int) -> list[dict[str, Any]]:
    """The plan's top `top` buildable candidates: those that fit, fastest first, then the others."""
    built = [
        c
        for c in plan.get("candidates", [])
        if isinstance(c, dict) and c.get("error") is None and isinstance(predicted_step_ms(c), (int, float))
    ]
    built.sort(key=lambda c: (not c.get("fits"), predicted_step_ms(c), c.get("peak_memory_bytes") or 0))
    return built[:top]


def model_config(plan: dict[str, Any]) -> ModelConfig:
    model = (plan.get("inputs") or {}).get("model")
    if not isinstance(model, dict):
        raise ValueError(
            "the plan has no model description (inputs.model): plan from model flags, not a cost file, "
            "to verify it with the executor's Transformer"
        )
    return ModelConfig(
        kind="transformer",
        vocab_size=model["vocab_size"],
        d_model=model["hidden_size"],
        num_heads=model["num_heads"],
        ffn_size=model["ffn_size"],
        num_layers=model["num_layers"],
        seq_len=model["seq_len"],
    )


def candidate_config(
    plan: dict[str, Any], c: dict[str, Any], *, steps: int, warmup_steps: int, device: str, timeout_s: float
) -> RunConfig:
    """The executor run of one candidate (ValueError when the executor cannot run it, e.g. data parallelism)."""
    if c.get("data_parallel", 1) != 1:
        raise ValueError(f"{c['data_parallel']} data-parallel replicas: the executor runs one pipeline")
    inputs = plan.get("inputs") or {}
    optimizer = EXECUTOR_OPTIMIZERS.get(inputs.get("optimizer", "sgd"), "sgd")
    chunks = c["virtual_stages"] if schedule_info(c["schedule"]).takes_chunks else None
    model = model_config(plan)
    model = ModelConfig(**{**vars(model), "split_points": tuple(c["split"]) or None})
    return run_config(
        schedule=c["schedule"],
        num_ranks=c["ranks"],
        num_microbatches=c["microbatches"],
        num_virtual_stages=chunks,
        model=model,
        batch_size=c["microbatches"] * c["microbatch_size"],
        steps=steps,
        warmup_steps=warmup_steps,
        optimizer=optimizer,
        recompute=c["recompute"],
        device=device,
        timeout_s=timeout_s,
    )


def label(c: dict[str, Any]) -> str:
    chunks = f" v{c['virtual_stages']}" if c.get("virtual_stages", 1) > 1 else ""
    return (
        f"{c['schedule']} P{c['ranks']}{chunks} m{c['microbatches']}x{c.get('microbatch_size', '?')}"
        f"{' recompute' if c.get('recompute') else ''}"
    )


def verify_plan(
    plan_path: Path,
    top: int,
    *,
    runs_root: Path = Path("runs"),
    steps: int = 3,
    warmup_steps: int = 1,
    device: str = "cpu",
    timeout_s: float = 300.0,
    on_row: Callable[[VerifyRow], None] | None = None,
) -> Verification:
    """Run the plan's top `top` candidates one after another and compare; writes verify.json beside the plan."""
    from executor.host.launch import start_run

    if top < 1:
        raise ValueError(f"--top must be at least 1, got {top}")
    plan = read_json(plan_path)
    if not isinstance(plan, dict):
        raise ValueError(f"{plan_path}: not a plan (expected a JSON object from python -m pipesim plan --json)")
    model_config(plan)  # refuse a plan without a model before anything runs
    rows = []
    for index, c in enumerate(plan_candidates(plan, top)):
        row = VerifyRow(label(c), c, float(predicted_step_ms(c)))
        try:
            config = candidate_config(
                plan, c, steps=steps, warmup_steps=warmup_steps, device=device, timeout_s=timeout_s
            )
            result = start_run(config, runs_root=runs_root, name=f"verify-{plan_path.stem}-{index}").wait()
            row.run_dir = str(result.run_dir)
            if result.status == "ok" and result.measured_step_ms is not None:
                row.measured_ms = result.measured_step_ms
            else:
                row.error = f"run {result.status}: {result.message}".splitlines()[0]
        except ValueError as error:
            row.error = str(error).splitlines()[0]
        rows.append(row)
        if on_row is not None:
            on_row(row)
    verification = compare(rows)
    write_json(verification.to_dict(), plan_path.with_name(plan_path.stem + "-verify.json"))
    return verification


def summary_lines(v: Verification) -> list[str]:
    lines = [f"{'candidate':44} {'predicted ms':>12} {'measured ms':>12}"]
    for r in v.rows:
        measured = "-" if r.measured_ms is None else f"{r.measured_ms:12.2f}"
        lines.append(f"{r.label[:44]:44} {r.predicted_ms:12.2f} {measured:>12}" + (f"  ({r.error})" if r.error else ""))
    rho = "-" if v.spearman is None else f"{v.spearman:+.2f}"
    gap = "-" if v.recommended_gap is None else f"{v.recommended_gap:+.1%}"
    lines.append(f"Spearman rank correlation (predicted vs measured order): {rho}")
    lines.append(f"recommended candidate vs the measured best ({v.measured_best}): {gap}")
    return lines + [f"note: {n}" for n in v.notes]
