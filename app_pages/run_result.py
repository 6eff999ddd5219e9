"""The Run page's view of a finished (or failed) run: status, the overlay of measured on simulated with the lost
time marked, the numbers, the per-action differences, the traces to download, the logs."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from app_pages import plot, run_reference, state, widgets
from executor.host import predict, run_folder
from pipesim.analysis import attribution, overlay
from pipesim.charts import attribution as charts_attribution
from pipesim.charts import gantt as charts
from pipesim.units import format_bytes


def show(result) -> None:
    """A finished (or failed) run: status, overlay, numbers, per-action differences, reference."""
    st.subheader(f"Run {result.run_dir.name}")
    if result.schedule is not None:
        st.caption(result.schedule.describe())
    if result.status == "partial":  # the run went well; a part asked for (the torch reference) did not
        st.warning(f"Run partial: {result.message or 'no message'}", icon=":material/warning:")
    elif result.status == "cancelled":
        st.info(f"Run cancelled: {result.message or 'by you'}", icon=":material/cancel:")
        if result.measured is None:
            return
    elif result.status == "running":  # it started between the listing and this look: nothing is wrong
        st.info("This run is still going: open it again to follow it live.", icon=":material/hourglass_top:")
        return
    elif result.status != "ok":
        st.error(f"Run {result.status}: {result.message or 'no message'}", icon=":material/error:")
        _log_files(result)
        if result.measured is None:
            return
    elif result.message:
        st.info(result.message)
    measured = result.measured
    if measured is None:
        st.warning("The run left no measured timeline (measured.json).")
        _log_files(result)
        return
    cards = st.columns(4)
    predicted = result.predicted_step_ms
    cards[0].metric("Predicted step", "n/a" if predicted is None else f"{predicted:,.2f} ms")
    cards[1].metric(
        "Measured step",
        "n/a" if result.measured_step_ms is None else f"{result.measured_step_ms:,.2f} ms",
        help="Median over the measured steps",
    )
    noise = (result.analysis or {}).get("spread") or {}
    noisy = noise.get("reliable") is False
    error_text = "n/a" if result.prediction_error is None else f"{result.prediction_error:+.1%}"
    if noisy and result.prediction_error is not None:
        error_text += " (noisy)"
    cards[2].metric(
        "Prediction error", error_text, help="(predicted - measured) / measured, against the median measured step"
    )
    if noisy:
        st.warning(
            f"This run was too noisy to judge the prediction: its step times vary {noise['step_cv']:.1%} "
            f"(more than {noise['threshold_step_cv']:.0%}). Other work shared the machine; run again on a "
            "quiet one before trusting the error.",
            icon=":material/warning:",
        )
    if result.peak_memory_bytes:
        cards[3].metric("Peak memory (max rank)", format_bytes(max(result.peak_memory_bytes)))

    steps = overlay.steps_of(measured)
    step = None
    if len(steps) > 1:
        step = st.columns(4)[0].selectbox(
            "Step drawn in the chart",
            steps,
            index=len(steps) - 1,
            key=f"run-step-{result.run_dir.name}",
            help="The first step usually pays warm-up costs",
        )
    sig = state.signature(str(result.run_dir), step)
    if result.simulated is not None:
        figure = charts_attribution.overlay_with_lost_time(
            result.simulated, measured, _lost_time(result, steps, step), step=step
        )
    else:
        st.info("No simulation to compare with: launch with 'Profile first, then predict' to get one.")
        figure = charts.gantt_figure(overlay.pick_step(measured, step), title=f"{result.run_dir.name} (measured)")
    plot.show(figure, "run-overlay")
    widgets.figure_downloads(figure, f"{result.run_dir.name}-overlay", "run-overlay-export", sig)
    widgets.data_downloads(
        overlay.pick_step(measured, step),
        result.schedule,
        None,
        result.run_dir.name,
        "run-data",
        timeline_label="measured",
    )
    _trace_downloads(result, step)
    if result.analysis is not None:
        plot.show(charts.attribution_figure(result.analysis), "run-attribution")
        st.caption(
            "Each rank's step = compute + schedule idle (what the schedule imposes with this step's own "
            "action times) + communication wait + overhead (optimizer, gaps, skew). The thin marks under "
            "each measured lane of the overlay show where each kind of lost time sits in the drawn step."
        )

    left, right = st.columns(2)
    with left:
        if result.simulated is not None:
            st.markdown("**Per-action differences** (measured - simulated)")
            diffs = overlay.align(result.simulated, measured, step)
            figure_of_merit = ((result.analysis or {}).get("prediction") or {}).get("action_error_median")
            if figure_of_merit is not None:
                st.caption(
                    f"Median |error| over the actions, against each action's median over all measured "
                    f"steps: {figure_of_merit:.1%}. The table shows the drawn step."
                )
            st.dataframe(
                pd.DataFrame(
                    [
                        {
                            "rank": d.rank,
                            "action": str(d.action),
                            "simulated ms": d.simulated_ms,
                            "measured ms": d.measured_ms,
                            "delta ms": d.delta_ms,
                            "error %": 100 * d.error if d.measured_ms > 0 else None,
                        }
                        for d in diffs
                    ]
                ),
                hide_index=True,
                width="stretch",
                height=320,
                column_config={"error %": st.column_config.NumberColumn(format="%+.1f%%")},
            )
    with right:
        run_reference.show(result)
    _log_files(result)


def _lost_time(result, steps: list[int], step: int | None) -> list:
    """Where the drawn step lost its time (pipesim.attribution); none when the run cannot say."""
    shown = steps[-1] if step is None and steps else step
    times = result.step_times_ms or []
    if shown is None or not 0 <= shown < len(times):
        return []
    try:
        return list(attribution.attribute_step(result.schedule, result.measured, shown, times[shown]).lost)
    except ValueError:  # a timeline that is not this schedule's: the overlay still shows, without marks
        return []


def _trace_downloads(result, step: int | None) -> None:
    """The one-file Perfetto view (simulated and measured, flows between ranks) and the torch profiler traces."""
    traces = run_folder.profiler_traces(result.run_dir)
    columns = st.columns(2)
    if result.schedule is not None:
        columns[0].download_button(
            "Perfetto trace: simulated + measured",
            file_name=f"{result.run_dir.name}-perfetto.json",
            data=lambda: json.dumps(predict.combined_trace(result.schedule, result.simulated, result.measured, step)),
            mime="application/json",
            on_click="ignore",
            key="run-perfetto",
            icon=":material/timeline:",
            help="One Chrome trace: each view a process, compute / send / recv tracks per rank, arrows per message",
        )
    if traces:
        with columns[1].popover(f"torch profiler traces ({len(traces)})", icon=":material/speed:"):
            st.caption(
                "Kineto traces of the measured steps (--torch-profile); actions labelled PP:<action>. "
                "Open in Perfetto, or import with `python -m pipesim import-trace`."
            )
            for path in traces:
                st.download_button(
                    path.name,
                    data=path.read_bytes,
                    file_name=f"{result.run_dir.name}-{path.name}",
                    mime="application/json",
                    on_click="ignore",
                    key=f"run-kineto-{path.name}",
                    width="stretch",
                )


def _log_files(result) -> None:
    logs = sorted((result.run_dir / "logs").glob("*.log")) if (result.run_dir / "logs").is_dir() else []
    if not logs:
        return
    with st.expander("Logs"):
        for path in logs:
            lines = path.read_text(errors="replace").splitlines()[-40:]
            st.markdown(f"`{path.name}`")
            st.code("\n".join(lines) or "(empty)", language=None)
