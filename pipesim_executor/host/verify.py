"""Verify a plan for real: run its top K candidates with the executor, compare predicted with measured step times
and peak memory.

    python -m executor verify-plan plan.json --top 3 [--steps 30 --warmup-steps 3 --device cpu --json OUT]

Each candidate runs on the model the plan was made for: the executor's model section a unit profile recorded
(`executor profile`: the built-in Transformer or CNN, or your own factory, checked in its sandbox before it runs),
or the model description mapped onto the executor's Transformer (hidden_size -> d_model, the same layers, heads,
ffn, sequence and vocabulary). Split points, microbatch size, chunks, recomputation, the optimizer and the dtype
are the plan's, unchanged; an optimizer or dtype the executor cannot run is refused, never replaced. Candidates run
one after another (they would share the machine's cores otherwise), in the plan's order: fitting candidates
fastest first.

What is reported, per candidate: the predicted step and the measured one (the median of `steps` steps, after
`warmup_steps` unmeasured ones) with the coefficient of variation of the measured steps (`measured_cv`: how far
the machine's noise lets the comparison go), and the predicted peak memory per rank against the measured one
(tracked tensor bytes on the CPU: parameters, gradients, optimizer state and the stashed activations;
`torch.cuda.max_memory_allocated` on a GPU). Over the candidates: the Spearman rank correlation between predicted
and measured order, and how far the recommended candidate (the plan's first) is from the measured best. When the
predictions differ by no more than their own uncertainty (the plan's `calibration.uncertainty`), the candidates are
indistinguishable to the model: no rank correlation is reported (it would rank noise).

The comparison is pure arithmetic (`compare`), and no torch is imported here: the app imports this module and calls
`verify_plan` (or `start_verify`, in the background) with progress and cancel (docs/design.md).
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from pipesim.cost.shape import TransformerShape
from pipesim.io.formats import read_json, write_json
from pipesim.schedules import schedule_info
from pipesim_executor.config import OPTIMIZERS, ModelConfig, RunConfig, run_config
from pipesim_executor.host.verify_compare import (
    DEFAULT_UNCERTAINTY,
    Verification,
    VerifyRow,
    compare,
    indistinguishable,
    ranks_of,
    spearman,
    summary_lines,
)
from pipesim_executor.run_files import MEASURED_FILE, PLAN_PREDICTION_FILE

DEFAULT_STEPS = 30  # measured steps per candidate: on a busy 2-core machine the median of 30 holds to 1-2%
DEFAULT_WARMUP = 3
__all__ = [  # the comparison lives in verify_compare; callers (the app, the CLI, tests) find it here too
    "Verification", "VerifyRow", "compare", "indistinguishable", "ranks_of", "spearman", "summary_lines",
    "VerifyProgress", "VerifyHandle", "start_verify", "verify_plan", "plan_candidates", "candidate_config",
]  # fmt: skip
RUN_DTYPES = {"fp32": "fp32", "float32": "fp32", "bf16": "bf16", "bfloat16": "bf16"}


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
    # ordered as the plan ranks them (pipesim.plan.report.ranked: step times to the nanosecond, less memory first)
    built.sort(key=lambda c: (not c.get("fits"), round(predicted_step_ms(c), 6), c.get("peak_memory_bytes") or 0))
    return built[:top]


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
            "profile (executor profile --out D; pipesim plan --cost D/cost.json) to verify it with the executor"
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
    optimizer, dtype, _ = run_settings(plan)
    chunks = c["virtual_stages"] if schedule_info(c["schedule"]).takes_chunks else None
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
        device=device,
        timeout_s=timeout_s,
    )


def label(c: dict[str, Any]) -> str:
    chunks = f" v{c['virtual_stages']}" if c.get("virtual_stages", 1) > 1 else ""
    return (
        f"{c['schedule']} P{c['ranks']}{chunks} m{c['microbatches']}x{c.get('microbatch_size', '?')}"
        f"{' recompute' if c.get('recompute') else ''}"
    )


def measured_memory(run_dir: Path, device: str) -> tuple[list[float], str]:
    """Per rank, the measured peak memory the plan's prediction is compared with, and what it is."""
    measured = read_json(run_dir / MEASURED_FILE)
    if device == "cuda":
        return [float(x) for x in measured.get("peak_memory_bytes", [])], "cuda max_memory_allocated"
    return [float(x) for x in measured.get("tracked_peak_bytes", [])], "tracked tensor bytes"


def _record_prediction(run_dir: Path, plan: dict[str, Any], plan_path: Path, row: VerifyRow) -> None:
    """The plan's prediction for this candidate, in its run folder: the Run page shows the same figure (and error)
    as the Plan page, with what it rests on (a profile, or an assumed device rate)."""
    calibration = plan.get("calibration") if isinstance(plan.get("calibration"), dict) else {}
    model = (plan.get("inputs") or {}).get("model") or {}
    document = {
        "predicted_step_ms": row.predicted_ms,
        "candidate": row.label,
        "plan": str(plan_path),
        "calibrated": calibration.get("calibrated"),
        "calibration_note": calibration.get("note"),
        "device_tflops": model.get("device_tflops") if isinstance(model, dict) else None,
    }
    try:
        write_json(document, run_dir / PLAN_PREDICTION_FILE)
    except (OSError, ValueError):  # the run goes on; its page shows no prediction
        pass


@dataclass(frozen=True)
class VerifyProgress:
    """Where a verification is: `fraction` of it done, the candidate running (`index` of `total`), in words."""

    fraction: float
    index: int
    total: int
    text: str


def verify_plan(
    plan_path: Path,
    top: int,
    *,
    runs_root: Path = Path("runs"),
    steps: int = DEFAULT_STEPS,
    warmup_steps: int = DEFAULT_WARMUP,
    device: str | None = None,
    timeout_s: float = 300.0,
    on_row: Callable[[VerifyRow], None] | None = None,
    on_progress: Callable[[VerifyProgress], None] | None = None,
    cancel: threading.Event | None = None,
    json_out: Path | None = None,
) -> Verification:
    """Run the plan's top `top` candidates one after another and compare; writes PLAN-verify.json beside the plan
    (and `json_out`). `device` None: the device the plan was profiled on, else the CPU. `cancel` set: the running
    candidate is cancelled and the rest are not started (their rows say so). ValueError before anything runs
    for a plan that cannot be verified."""
    from pipesim_executor.host.launch import start_run

    if top < 1:
        raise ValueError(f"--top must be at least 1, got {top}")
    plan = read_json(plan_path)
    if not isinstance(plan, dict):
        raise ValueError(f"{plan_path}: not a plan (expected a JSON object from python -m pipesim plan --json)")
    model_config(plan)  # refuse a plan without a model, or with settings the executor cannot run, before any run
    device = device or run_settings(plan)[2] or "cpu"
    uncertainty = (plan.get("calibration") or {}).get("uncertainty", DEFAULT_UNCERTAINTY)
    chosen = plan_candidates(plan, top)
    rows = []
    for index, c in enumerate(chosen):
        row = VerifyRow(label(c), c, float(predicted_step_ms(c)), predicted_memory_bytes=c.get("rank_memory_bytes", []))
        rows.append(row)
        if cancel is not None and cancel.is_set():
            row.error = "cancelled before it ran"
            continue
        if on_progress is not None:
            on_progress(VerifyProgress(index / len(chosen), index, len(chosen), f"running {row.label}"))
        try:
            config = candidate_config(
                plan, c, steps=steps, warmup_steps=warmup_steps, device=device, timeout_s=timeout_s
            )
            handle = start_run(config, runs_root=runs_root, name=f"verify-{plan_path.stem}-{index}")
            _record_prediction(handle.run_dir, plan, plan_path, row)
            while not handle.done():
                if cancel is not None and cancel.is_set():
                    handle.cancel()
                    break
                if on_progress is not None:
                    fraction = (index + handle.progress) / len(chosen)
                    on_progress(VerifyProgress(fraction, index, len(chosen), f"running {row.label}"))
                try:
                    handle.wait(0.25)
                except TimeoutError:
                    pass
            result = handle.wait()
            row.run_dir = str(result.run_dir)
            if result.status == "ok" and result.measured_step_ms is not None:
                row.measured_ms = result.measured_step_ms
                times = result.step_times_ms
                row.measured_cv = statistics.pstdev(times) / statistics.mean(times) if len(times) > 1 else None
                row.measured_memory_bytes, row.memory_kind = measured_memory(result.run_dir, config.devices.device)
            else:
                row.error = result.headline or f"run {result.status}"
        except ValueError as error:
            row.error = str(error).splitlines()[0]
        if on_row is not None:
            on_row(row)
    verification = compare(rows, uncertainty)
    write_json(verification.to_dict(), plan_path.with_name(plan_path.stem + "-verify.json"))
    if json_out is not None:
        write_json(verification.to_dict(), json_out)
    if on_progress is not None:
        on_progress(VerifyProgress(1.0, len(chosen), len(chosen), "done"))
    return verification


class VerifyHandle:
    """A verification in the background (for the app): `progress`, `rows` so far, `cancel()`, `wait()`."""

    def __init__(self, plan_path: Path, top: int, **kwargs: Any) -> None:
        self._cancel = threading.Event()
        self._done = threading.Event()
        self.progress = VerifyProgress(0.0, 0, top, "starting")
        self.rows: list[VerifyRow] = []
        self.result: Verification | None = None
        self.error: Exception | None = None

        def work() -> None:
            try:
                self.result = verify_plan(
                    plan_path, top, on_row=self.rows.append, on_progress=self._set, cancel=self._cancel, **kwargs
                )
            except Exception as error:  # noqa: BLE001 - handed to the caller through `wait`
                self.error = error
            finally:
                self._done.set()

        self._thread = threading.Thread(target=work, name=f"verify {plan_path.name}", daemon=True)
        self._thread.start()

    def _set(self, progress: VerifyProgress) -> None:
        self.progress = progress

    def done(self) -> bool:
        return self._done.is_set()

    def cancel(self) -> None:
        """Cancel the running candidate (every process of its run ends) and skip the rest; returns at once."""
        self._cancel.set()

    def wait(self, timeout: float | None = None) -> Verification:
        """The verification; re-raises what stopped it before any run (a plan that cannot be verified)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"the verification is still running after {timeout} s")
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def start_verify(plan_path: Path, top: int, **kwargs: Any) -> VerifyHandle:
    """`verify_plan` in a background thread (keyword arguments as verify_plan's, but on_row, on_progress and
    cancel, which the handle holds)."""
    return VerifyHandle(plan_path, top, **kwargs)
