"""The Run page's view of a finished (or failed) run: status, the overlay of measured on simulated with the lost
time marked, the numbers, the per-action differences, the traces to download, the logs."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from app_pages.parts import plot, state, widgets
from app_pages.parts.run import reference, stragglers
from pipesim.analysis import align, attribute_step, pick_step, steps_of
from pipesim.charts import attribution as charts_attribution
from pipesim.charts import gantt as charts
from pipesim.charts import overlay as charts_overlay
from pipesim.io import read_tail
from pipesim.programs import programs
from pipesim.units import format_bytes, format_ms, format_percent
from pipesim_executor.host import predict, run_folder


def show(result) -> None:
    """A finished (or failed) run: status, overlay, numbers, per-action differences, reference."""
    st.subheader(f"Run {result.run_dir.name}")
    if result.schedule is not None:
        st.caption(result.schedule.describe())
    # one sentence (pipesim_executor.progress.outcome_sentence): what happened, what was measured, what to do;
    # torchrun's log tail is behind "Logs", never in the banner
    if result.status == "partial":  # the run went well; a part asked for (the torch reference) did not
        st.warning(result.headline or "Run partial.", icon=":material/warning:")
    elif result.status == "cancelled":
        st.info(result.headline or "Run cancelled.", icon=":material/cancel:")
        if result.measured is None:
            _log_files(result)
            return
    elif result.status == "running":  # it started between the listing and this look: nothing is wrong
        st.info("This run is still going: open it again to follow it live.", icon=":material/hourglass_top:")
        return
    elif result.status != "ok":
        st.error(result.headline or f"Run {result.status}.", icon=":material/error:")
        if result.measured is None:
            _log_files(result)
            return
    elif result.message:
        st.info(result.message)
    measured = result.measured
    if measured is None:
        st.warning("The run left no measured timeline (measured.json).")
        _log_files(result)
        return
    cards = st.columns(4)
    widgets.card(cards[0], "predicted_step", format_ms(result.predicted_step_ms))
    widgets.card(cards[1], "measured_step", format_ms(result.measured_step_ms))
    noise = (result.analysis or {}).get("spread") or {}
    noisy = noise.get("reliable") is False
    error_text = format_percent(result.prediction_error, signed=True)
    if noisy and result.prediction_error is not None:
        error_text += " (noisy)"
    widgets.card(cards[2], "prediction_error", error_text)
    if noisy:
        st.warning(
            f"This run was too noisy to judge the prediction: its step times vary {format_percent(noise['step_cv'])} "
            f"(more than {format_percent(noise['threshold_step_cv'])}). Other work shared the machine; run again on "
            "a quiet one before trusting the error.",
            icon=":material/warning:",
        )
    if result.peak_memory_bytes:
        widgets.card(cards[3], "peak_memory", format_bytes(max(result.peak_memory_bytes)))
    if result.prediction_source:  # a Plan page verification's run: the plan's figure, as the Plan page shows it
        st.caption(f"Predicted step time: {result.prediction_source}.")

    steps = steps_of(measured)
    step = steps[-1] if steps else None
    if len(steps) > 1:
        # One step per screen: the overlay, its lost-time marks, the attribution bars and the per-action table all
        # show the step picked here, by default the median one (the attribution's summary step).
        median = (result.analysis or {}).get("median_step")
        if st.session_state.get("run-step-of") != result.run_dir.name:  # another run: its own median step again
            st.session_state.pop("run-step", None)
            st.session_state["run-step-of"] = result.run_dir.name
        step = st.columns(4)[0].selectbox(
            "Step drawn (overlay, bars and table)",
            steps,
            index=steps.index(median) if median in steps else len(steps) - 1,
            key="run-step",
            bind=state.URL,
            help="The median step by default; the first step usually pays warm-up costs",
        )
    sig = state.signature(str(result.run_dir), step)
    if result.simulated is not None:
        figure = charts_attribution.overlay_with_lost_time(
            result.simulated, measured, _lost_time(result, step), step=step
        )
        found = (result.analysis or {}).get("stragglers")
        if found:  # the slow ranks found in the run, named on their measured lanes
            charts_overlay.mark_stragglers(figure, found)
    else:
        profiled = result.config is not None and result.config.profile
        st.info(
            f"No simulation to compare with: this run was profiled, but it ended ({result.status}) before its "
            "prediction was made; its measured steps are drawn alone."
            if profiled
            else "No simulation to compare with: launch with 'Profile first, then predict' to get one.",
            icon=":material/info:",
        )
        figure = charts.gantt_figure(pick_step(measured, step), title=result.run_dir.name)
    plot.show(figure, "run-overlay")
    widgets.figure_downloads(figure, f"{result.run_dir.name}-overlay", "run-overlay-export", sig)
    widgets.data_downloads(
        pick_step(measured, step),
        result.schedule,
        None,
        result.run_dir.name,
        "run-data",
        timeline_label="measured",
    )
    _trace_downloads(result, step)
    if result.analysis is not None:
        plot.show(charts.attribution_figure(result.analysis, step), "run-attribution")
        st.caption(
            "Each rank's step = compute + schedule idle (what the schedule imposes with this step's own "
            "action times) + communication wait + overhead (optimizer, gaps, skew). The thin marks under "
            "each measured lane of the overlay show where each kind of lost time sits in the same step."
        )
    stragglers.show(result)

    left, right = st.columns(2)
    with left:
        if result.simulated is not None:
            _action_table(result, measured, step)
    with right:
        reference.show(result)
    _log_files(result)


def _action_table(result, measured, step: int | None) -> None:
    """Each action of the drawn step, simulated against measured, with the run's one sign convention: predicted -
    measured, positive where the simulation is slower (as the prediction error on the cards)."""
    st.markdown(f"**Per action, step {step}**: predicted - measured")
    diffs = align(result.simulated, measured, step)
    median_error = ((result.analysis or {}).get("prediction") or {}).get("action_error_median")
    if median_error is not None:
        st.caption(
            f"Median action error, |predicted - measured| / measured over every action and every measured step "
            f"(each action's median): {format_percent(median_error)}. The table shows step {step}."
        )
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "rank": d.rank,
                    "action": str(d.action),
                    "simulated": d.simulated_ms,
                    "measured": d.measured_ms,
                    "difference": d.simulated_ms - d.measured_ms,
                    "error": 100 * d.error if d.measured_ms > 0 else None,
                }
                for d in diffs
            ]
        ),
        hide_index=True,
        width="stretch",
        height=320,
        column_config={
            "simulated": widgets.time_column("predicted_step", "simulated (ms)"),
            "measured": widgets.time_column("measured_step", "measured (ms)"),
            "difference": widgets.time_column("action_difference"),
            "error": widgets.percent_column("prediction_error", signed=True),
        },
    )


def _lost_time(result, shown: int | None) -> list:
    """Where the drawn step lost its time (pipesim.analysis.attribution); none when the run cannot say."""
    times = result.step_times_ms or []
    if shown is None or not 0 <= shown < len(times):
        return []
    try:
        return list(attribute_step(result.schedule, result.measured, shown, times[shown]).lost)
    except ValueError:  # a timeline that is not this schedule's: the overlay still shows, without marks
        return []


def _trace_downloads(result, step: int | None) -> None:
    """The one-file Perfetto view (simulated and measured, flows between ranks) and the torch profiler traces."""
    traces = run_folder.profiler_traces(result.run_dir)
    columns = st.columns(2)
    if result.schedule is not None:
        views = "simulated + measured" if result.simulated is not None else "measured"  # what the file holds
        columns[0].download_button(
            f"Perfetto trace: {views}",
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
                f"Open in Perfetto, or import with `{programs().pipesim} import-trace`."
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


LOG_TAIL_BYTES = 16_384  # the end of each log: its last 40 lines, however long it grew


def _log_files(result) -> None:
    """Each log's last lines, read from its end (pipesim.io.bounded.read_tail): a huge log is not read whole, and a
    FIFO or a device named like a log is refused at once, never waited on."""
    logs = sorted((result.run_dir / "logs").glob("*.log")) if (result.run_dir / "logs").is_dir() else []
    detail = result.message if result.message and result.message != result.headline else ""
    if not logs and not detail:
        return
    with st.expander("Logs"):
        if detail:  # the launcher's own account: the failed rank's last lines
            st.markdown("`result.json` message")
            st.code(detail, language=None)
        for path in logs:
            st.markdown(f"`{path.name}`")
            try:
                lines = read_tail(path, LOG_TAIL_BYTES).splitlines()[-40:]
            except ValueError as error:
                st.caption(str(error))
                continue
            st.code("\n".join(lines) or "(empty)", language=None)
