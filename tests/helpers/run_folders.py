"""Run folders as the launcher and rank 0 leave them, written for the Run page's tests (AppTest and browser)."""

from __future__ import annotations

import time
from pathlib import Path

from pipesim.analysis.attribution import attribute_run
from pipesim.analysis.overlay import prediction_error
from pipesim.cost.model import CostModel
from pipesim.io.cost_file import save_cost
from pipesim.io.formats import schedule_to_dict, timeline_to_dict, write_json
from pipesim.records import COPY_KINDS, Span, Timeline
from pipesim.schedules import build_schedule
from pipesim.sim.metrics import makespan
from pipesim.sim.offload import with_offload
from pipesim.sim.simulate import simulate
from pipesim_executor.config import run_config


def write_run(
    root: Path,
    name: str,
    status: str = "ok",
    message: str = "",
    measured: bool = True,
    reference: dict | None = None,
    step_factors: tuple[float, ...] = (1.5, 1.0),
    predicted: bool = True,
    offload: str = "none",
) -> Path:
    """A run folder as the launcher and rank 0 leave it (see pipesim_executor/config.py): 1f1b on 2 ranks,
    profiled; each
    measured step is the simulated one stretched by 1.25, and step k's time is `step_factors[k]` times that
    (the attribution's median step is the median of those); `predicted` False leaves no simulation (a profiled
    run that ended before its prediction); `offload` places OFFLOADs and RELOADs, whose copies are measured on the
    copy engine's lane as the executor writes them (comm spans of kind offload / reload)."""
    folder = root / name
    (folder / "logs").mkdir(parents=True)
    config = run_config(
        schedule="1f1b",
        num_ranks=2,
        num_microbatches=4,
        steps=2,
        device="cpu",
        profile=True,
        reference=reference is not None,
        offload=offload,
    )
    cost = CostModel.uniform(2.0, 4.0)
    schedule = with_offload(build_schedule("1f1b", 2, 4), offload, cost)
    write_json(config.to_dict(), folder / "config.json")
    write_json(schedule_to_dict(schedule), folder / "schedule.json")
    simulated = simulate(schedule, cost)
    summary: dict = {"status": status, "message": message, "started_at": time.time()}
    if measured:
        spans = tuple(
            Span(s.rank, s.action, 1.25 * s.start, 1.25 * s.end, step)
            for step in range(len(step_factors))
            for s in simulated.spans
        )  # step-relative times
        copies = tuple(
            c._replace(start=1.25 * c.start, end=1.25 * c.end, step=step)
            for step in range(len(step_factors))
            for c in simulated.comm
            if c.kind in COPY_KINDS
        )
        timeline = Timeline(2, spans, source="measured", schedule_name="1f1b", comm=copies)
        step_ms = 1.25 * makespan(simulated)
        times = [step_ms * factor for factor in step_factors]
        write_json(
            {
                **timeline_to_dict(timeline),
                "step_times_ms": times,
                "losses": [2.5 - 0.25 * k for k in range(len(times))],
                "peak_memory_bytes": [4096, 2048],
            },
            folder / "measured.json",
        )
        save_cost(cost, folder / "cost.json")
        write_json(attribute_run(schedule, timeline, times), folder / "analysis.json")
        summary.update(measured_step_ms=step_ms)
        if predicted:
            write_json(timeline_to_dict(simulated), folder / "simulated.json")
            summary.update(
                predicted_step_ms=makespan(simulated), prediction_error=prediction_error(makespan(simulated), step_ms)
            )
    if reference is not None:
        write_json(reference, folder / "reference.json")
    (folder / "logs" / "rank0.log").write_text("rank 0 says hello\n")
    write_json(summary, folder / "result.json")
    return folder
