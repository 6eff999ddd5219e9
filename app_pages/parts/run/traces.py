"""Import a real run: torch.profiler (Kineto) traces uploaded, their actions laid over the simulation of the
schedule they ran (pipesim.io.kineto does the reading; this is UI only)."""

from __future__ import annotations

import json
from pathlib import Path

import streamlit as st

from app_pages.parts import cached, plot, widgets
from app_pages.parts.run import stragglers
from pipesim.analysis import pick_step
from pipesim.charts import gantt as charts
from pipesim.charts import mark_stragglers
from pipesim.io import read_bytes, run_trace
from pipesim.limits import MAX_TRACE_BYTES

UPLOAD = "uploaded files"


def show_import(run_traces: dict[str, list[Path]]) -> None:
    """`run_traces`: the open run's profiler traces by side ("executor", "torch"), offered besides an upload."""
    with st.expander("Import a real run: torch.profiler traces", icon=":material/upload_file:"):
        st.caption(
            "Kineto traces whose actions carry torch's `PP:<action>` labels: torch.distributed.pipelining's "
            "runs, or a run here with `--torch-profile` (traces/). One file per rank, or one merged. The "
            "schedule is recovered from each rank's order and simulated with the traces' own median action "
            "times."
        )
        sides = {f"this run's {side} traces": side for side in run_traces}
        source = st.radio("Traces", [UPLOAD, *sides], horizontal=True, key="import-source")
        if source == UPLOAD:
            uploads = st.file_uploader("Trace files", type=["json"], accept_multiple_files=True, key="import-traces")
            files = tuple((u.name, u.getvalue()) for u in uploads or ())
            if not files:
                return
        try:
            if source != UPLOAD:  # bounded: a regular file within the trace limit, never a wait on a FIFO
                files = tuple((p.name, read_bytes(p, MAX_TRACE_BYTES, "trace file")) for p in run_traces[sides[source]])
            run, simulated, analysis = cached.imported_run(files)
        except ValueError as error:
            widgets.show_error(error, "Cannot import the traces")
            return
        st.caption(f"{run.schedule.describe()}; {len(run.step_times_ms)} steps recorded, the last shown")
        try:
            found = cached.imported_stragglers(files)
        except ValueError:  # no action to judge: the overlay says as much
            found = None
        figure = charts.overlay_figure(simulated, run.timeline)
        plot.show(figure if found is None else mark_stragglers(figure, found), "import-overlay")
        if analysis is not None:
            plot.show(charts.attribution_figure(analysis), "import-attribution")
        if found is not None:
            stragglers.show_found(found, "the imported traces")
        views = {"simulated": simulated, "imported": pick_step(run.timeline, None)}
        st.download_button(
            "Perfetto trace: simulated + imported",
            file_name="imported-perfetto.json",
            data=lambda: json.dumps(run_trace(run.schedule, views)),
            mime="application/json",
            on_click="ignore",
            key="import-perfetto",
            icon=":material/timeline:",
        )
