"""What a verification runs: a plan's candidates, fastest first, each mapped onto an executor run of the plan's own
model, optimizer and dtype (refused, never replaced, when the executor cannot run them).

The model is the executor's model section a unit profile recorded (`executor profile`: the built-in Transformer or
CNN, or your own factory), or the model description mapped onto the executor's Transformer (hidden_size ->
d_model, the same layers, heads, ffn, sequence and vocabulary). Split points, microbatch size, chunks and
recomputation are the candidate's, unchanged. No torch is imported here (the app imports it through verify).
"""

from __future__ import annotations

import math
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from pipesim.cost.shape import TransformerShape
from pipesim.flags import one_line
from pipesim.io.formats import read_json, schedule_from_dict
from pipesim.ir import Schedule
from pipesim.limits import MAX_MICROBATCHES, MAX_PLAN_CANDIDATES, MAX_STAGES
from pipesim.numbers import check_number, shown
from pipesim.programs import programs
from pipesim.schedules import build_schedule, schedule_info
from pipesim_executor.config import CUSTOM, OPTIMIZERS, ModelConfig, RunConfig, check_split_points, run_config
from pipesim_executor.run_files import MEASURED_FILE

RUN_DTYPES = {"fp32": "fp32", "float32": "fp32", "bf16": "bf16", "bfloat16": "bf16"}


def predicted_step_ms(c: dict[str, Any]) -> Any:
    """A plan entry's predicted step time: `step_ms`, or `makespan_ms` in plans written before it was renamed."""
    return c.get("step_ms", c.get("makespan_ms"))


def plan_candidates(plan: dict[str, Any], top: int) -> list[dict[str, Any]]:
    """The plan's top `top` buildable candidates: those that fit, fastest first, then the others."""
    candidates = plan.get("candidates", [])
    if not isinstance(candidates, list):
        raise ValueError(f"the plan's candidates must be a list, got {shown(candidates)}")
    if len(candidates) > MAX_PLAN_CANDIDATES:
        raise ValueError(
            f"the plan has {len(candidates):,} candidates; verify-plan reads at most {MAX_PLAN_CANDIDATES:,} "
            "(pipesim/limits.py): plan a smaller space"
        )
    built = [c for c in candidates if isinstance(c, dict) and c.get("error") is None and _finite(predicted_step_ms(c))]
    # ordered as the plan ranks them (pipesim.plan.report.ranked: step times to the nanosecond, less memory first)
    built.sort(key=lambda c: (c.get("fits") is not True, round(predicted_step_ms(c), 6), _memory(c)))
    return built[:top]


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _memory(c: dict[str, Any]) -> float:
    value = c.get("peak_memory_bytes")
    return value if _finite(value) else 0.0


def check_candidate(plan: dict[str, Any], c: dict[str, Any], number: int) -> None:
    """Refuse a candidate the executor could never run as the plan describes it (a null schedule, a size that is
    no count, split points that do not cut the model into the schedule's stages): ValueError naming the
    candidate and the field, before any candidate runs. What only the run can tell (data parallelism, a machine
    too small) stays the candidate's own row."""
    where = f"the plan's candidate {number}"
    if not isinstance(c.get("schedule"), str):
        raise ValueError(f"{where}: schedule must be a schedule name, got {shown(c.get('schedule'))}")
    for key in ("ranks", "microbatches", "microbatch_size"):
        check_number(c.get(key), f"{where}: {key}", minimum=1, maximum=MAX_MICROBATCHES, whole=True)
    check_number(c.get("virtual_stages", 1), f"{where}: virtual_stages", minimum=1, maximum=MAX_STAGES, whole=True)
    if not isinstance(c.get("recompute"), bool):
        raise ValueError(f"{where}: recompute must be true or false, got {shown(c.get('recompute'))}")
    split = c.get("split")
    if not isinstance(split, list) or not all(_finite(i) and isinstance(i, int) for i in split):
        raise ValueError(f"{where}: split must be a list of unit indices, got {shown(split)}")
    if c.get("data_parallel", 1) != 1:
        return
    try:
        schedule = candidate_schedule(c, where)
        if schedule is None:
            chunks = c.get("virtual_stages", 1) if schedule_info(c["schedule"]).takes_chunks else None
            schedule = build_schedule(c["schedule"], c["ranks"], c["microbatches"], num_virtual_stages=chunks)
        if split:
            model = model_config(plan)
            # a custom model's units are counted by running its factory, which the run's own checks do (in a child
            # process, bounded): here its points need only cut the schedule's stages, strictly increasing
            units = max(split) + 1 if model.kind == CUSTOM else model.num_units
            check_split_points(split, units, schedule.num_stages)
    except ValueError as error:
        raise ValueError(f"{where} ({label(c)}): {one_line(error)}") from None


def candidate_schedule(c: dict[str, Any], where: str) -> Schedule | None:
    """The schedule a candidate carries (a synthesized order's `schedule_document`, which its family name cannot
    rebuild), read strictly and checked against the candidate's ranks and microbatches; None for a registry
    family's candidate, which the run builds from its name."""
    document = c.get("schedule_document")
    if document is None:
        return None
    try:
        schedule = schedule_from_dict(document)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: its schedule_document cannot be read: {one_line(error)}") from None
    if (schedule.num_ranks, schedule.num_microbatches) != (c["ranks"], c["microbatches"]):
        raise ValueError(
            f"{where}: its schedule_document holds {schedule.num_ranks} ranks x {schedule.num_microbatches} "
            f"microbatches, the candidate {c['ranks']} x {c['microbatches']}"
        )
    return schedule


def model_config(plan: dict[str, Any]) -> ModelConfig:
    """The model the plan was made for: a unit profile's own model section, or the description's Transformer."""
    inputs = plan.get("inputs") or {}
    if inputs.get("executor_model") is not None:
        try:
            return ModelConfig.from_dict(inputs["executor_model"])
        except (TypeError, ValueError) as error:
            raise ValueError(f"the plan's model (inputs.executor_model) cannot be read: {error}") from None
    model = inputs.get("model")
    if not isinstance(model, dict):
        raise ValueError(
            "the plan has no model (inputs.model or inputs.executor_model): plan from model flags or from a unit "
            f"profile ({programs().executor} profile --out D; {programs().pipesim} plan --cost D/cost.json) to "
            "verify it with the executor"
        )
    try:  # the plan's description and the executor's Transformer share their shape's fields (TransformerShape)
        return ModelConfig(transformer=TransformerShape(**{f.name: model[f.name] for f in fields(TransformerShape)}))
    except KeyError as missing:
        raise ValueError(f"the plan's model description has no {missing}") from None


def run_settings(plan: dict[str, Any]) -> tuple[str, str, str | None]:
    """(optimizer, dtype, device or None) the plan was priced for; ValueError for one the executor cannot run."""
    inputs = plan.get("inputs") or {}
    optimizer = inputs.get("optimizer", "adam")
    if optimizer not in OPTIMIZERS:
        raise ValueError(
            f"the plan was priced for optimizer {optimizer!r:.40}, which the executor does not run (it runs "
            f"{', '.join(OPTIMIZERS)}); a run with another optimizer would not verify this plan"
        )
    run = inputs.get("run") if isinstance(inputs.get("run"), dict) else {}
    dtype = run.get("dtype") or (inputs.get("model") or {}).get("dtype") or "fp32"
    if dtype not in RUN_DTYPES:
        raise ValueError(
            f"the plan was priced for dtype {dtype!r:.20}, which the executor does not run (fp32 or bf16); plan with "
            "--dtype fp32 or bf16 to verify it"
        )
    device = run.get("device")
    return optimizer, RUN_DTYPES[dtype], device if device in ("cpu", "cuda") else None


def candidate_config(
    plan: dict[str, Any], c: dict[str, Any], *, steps: int, warmup_steps: int, device: str, timeout_s: float
) -> RunConfig:
    """The executor run of one candidate (ValueError when the executor cannot run it, e.g. data parallelism)."""
    if c.get("data_parallel", 1) != 1:
        raise ValueError(f"{c['data_parallel']} data-parallel replicas: verify-plan runs one pipeline per candidate")
    offload = c.get("offload", "none")
    if offload not in ("none", "full"):  # run any other way, the measurement would be of another candidate
        raise ValueError(
            f"offload {offload!r:.20}: verify-plan runs a candidate with full offload or none (a selective "
            "placement weighs each wait against the plan's priced copies, which a model run does not know)"
        )
    optimizer, dtype, _ = run_settings(plan)
    carried = c.get("schedule_document") is not None  # the run takes the carried schedule (candidate_schedule)
    chunks = c["virtual_stages"] if not carried and schedule_info(c["schedule"]).takes_chunks else None
    model = replace(model_config(plan), split_points=tuple(c["split"]) or None)
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
        dtype=dtype,
        recompute=c["recompute"],
        offload=offload,  # full: the same placement the planner priced (pipesim.sim.offload), copies on a thread
        device=device,
        timeout_s=timeout_s,
    )


def label(c: dict[str, Any]) -> str:
    chunks = f" v{c['virtual_stages']}" if c.get("virtual_stages", 1) > 1 else ""
    return (
        f"{c['schedule']} P{c['ranks']}{chunks} m{c['microbatches']}x{c.get('microbatch_size', '?')}"
        f"{' recompute' if c.get('recompute') else ''}"
        f"{'' if c.get('offload', 'none') == 'none' else ' offload ' + str(c['offload'])}"
    )


def measured_memory(run_dir: Path, device: str) -> tuple[list[float], str]:
    """Per rank, the measured peak memory the plan's prediction is compared with, and what it is."""
    measured = read_json(run_dir / MEASURED_FILE)
    if device == "cuda":
        return [float(x) for x in measured.get("peak_memory_bytes", [])], "cuda max_memory_allocated"
    return [float(x) for x in measured.get("tracked_peak_bytes", [])], "tracked tensor bytes"


def predicted_interval(c: dict[str, Any]) -> tuple[float, float, bool]:
    """(p05, p95, whether the plan gave them) of a candidate's predicted step: the plan's 90% interval
    (`step_ms_p05`, `step_ms_p95`; the point need not lie inside: it is the median of the jittered steps, the ends
    their percentiles), or the point prediction twice for plans written without one."""
    point = float(predicted_step_ms(c))
    low, high = c.get("step_ms_p05"), c.get("step_ms_p95")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (low, high))
    if numbers and 0 <= low <= high:
        return float(low), float(high), True
    return point, point, False
