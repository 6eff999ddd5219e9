"""Launch a real run (torchrun), follow it live, then lay the measured timeline over the simulated one.

torch is never imported here: executor.launch starts the ranks as separate processes.
"""

import json

import pandas as pd
import streamlit as st

from app_pages import live_runs, own_model, plot, runs, state, trace_import, widgets
from executor.config import BACKENDS, DEVICES, DTYPES, MODEL_KINDS, ModelConfig, run_config
from executor.host import launch, predict, run_folder
from executor.progress import readable_log
from pipesim.analysis import attribution, overlay
from pipesim.charts import attribution as charts_attribution
from pipesim.charts import gantt as charts
from pipesim.schedules import options_for, schedule_info, schedule_names
from pipesim.units import format_bytes

state.init_state()
st.title("Run a schedule for real")
st.caption(
    "Runs the very same schedule under torchrun (CPU with gloo, or CUDA GPUs) and lays the measured "
    "timeline over the simulated one. A profile run measures each stage first, so the simulation "
    "predicts the step time of this model on this machine."
)

# Widths of the reference models; the number of layers (blocks) is a separate input
# because it must be at least the number of stages.
MODEL_SIZES = {
    "tiny": {
        "d_model": 64,
        "num_heads": 4,
        "ffn_size": 256,
        "seq_len": 32,
        "vocab_size": 512,
        "cnn_channels": 16,
        "cnn_fc_size": 128,
    },
    "small": {
        "d_model": 128,
        "num_heads": 4,
        "ffn_size": 512,
        "seq_len": 64,
        "vocab_size": 1000,
        "cnn_channels": 32,
        "cnn_fc_size": 256,
    },
    "medium": {
        "d_model": 256,
        "num_heads": 8,
        "ffn_size": 1024,
        "seq_len": 128,
        "vocab_size": 4000,
        "cnn_channels": 64,
        "cnn_fc_size": 512,
    },
}
CUSTOM = state.CUSTOM_SCHEDULE_LABEL

if st.session_state["run_handle"] is None:  # a reload (a new session) finds a run still going, from its folder
    st.session_state["run_handle"] = live_runs.running(state.runs_root())
handle = st.session_state["run_handle"]
custom = st.session_state["run_schedule"]
running = handle is not None and not handle.done()

with st.sidebar:
    with st.form("run-form"):
        names = [*schedule_names(), *([CUSTOM] if custom is not None else [])]
        name = st.selectbox(
            "Schedule",
            names,
            index=len(names) - 1 if custom is not None else names.index("1f1b"),
            key=state.kept("run-schedule"),
        )
        left, right = st.columns(2)
        ranks = left.number_input("Ranks", 1, 64, 2, key=state.kept("run-ranks"))
        microbatches = right.number_input("Microbatches", 1, 256, 8, key=state.kept("run-microbatches"))
        chunks = left.number_input(
            "Chunks per rank",
            1,
            8,
            2,
            key=state.kept("run-chunks"),
            help="For the schedules that let you choose it: "
            + ", ".join(n for n in schedule_names() if schedule_info(n).takes_chunks),
        )
        if custom is not None:
            st.caption(f"The custom schedule sets its own ranks and microbatches: {custom.describe()}")
        kind = right.selectbox("Model", MODEL_KINDS, key=state.kept("run-model"))
        size = left.selectbox(
            "Size",
            list(MODEL_SIZES),
            index=1,
            key=state.kept("run-size"),
            help="tiny runs are dominated by Python overhead per action; small and up "
            "are what the profile-then-predict figures in docs/benchmarks.md use",
        )
        layers = right.number_input(
            "Layers / blocks",
            1,
            256,
            4,
            key=state.kept("run-layers"),
            help="Transformer blocks (CNN: conv blocks). Stages share out these plus the "
            "embedding and output layer (CNN: 3 FC layers): at least one per stage",
        )
        own = st.text_input(
            "Your own model (optional)",
            key=state.kept("run-model-spec"),
            placeholder="examples.gpt_small:build",
            help=own_model.field_help(),
        )
        replicas = left.number_input(
            "Data parallel",
            1,
            16,
            1,
            key=state.kept("run-data-parallel"),
            help="Replicas of the pipeline: ranks x this many processes",
        )
        dtype = right.selectbox(
            "Precision", DTYPES, key=state.kept("run-dtype"), help="bf16: autocast, fp32 master weights"
        )
        batch = left.number_input(
            "Batch size", 1, 4096, 32, key=state.kept("run-batch"), help="Per step; split into the microbatches"
        )
        steps = right.number_input("Steps", 1, 1000, 5, key=state.kept("run-steps"), help="Measured steps")
        warmup = left.number_input("Warm-up steps", 0, 100, 1, key=state.kept("run-warmup"))
        timeout = right.number_input("Timeout (s)", 10, 7200, 600, key=state.kept("run-timeout"))
        device = left.selectbox(
            "Device", DEVICES, key=state.kept("run-device"), help="auto: CUDA when torch sees GPUs, otherwise CPU"
        )
        backend = right.selectbox(
            "Backend",
            BACKENDS,
            key=state.kept("run-backend"),
            help="auto: gloo on CPU; nccl with one GPU per rank, else staged",
        )
        profile = st.toggle(
            "Profile first, then predict",
            value=True,
            key=state.kept("run-profile"),
            help="Measure per-stage costs, write cost.json and simulate the step with them",
        )
        reference = st.toggle(
            "Also run torch.distributed.pipelining",
            key=state.kept("run-reference"),
            help="The same model on torch's own schedule, for comparison",
        )
        recompute = st.toggle("Activation recomputation", key=state.kept("run-recompute"))
        submitted = st.form_submit_button("Launch run", type="primary", disabled=running, width="stretch")

if submitted and not running:
    use_custom = name == CUSTOM
    try:
        model = (
            own_model.custom_model_config(own.strip())
            if own.strip()
            else ModelConfig(kind=kind, num_layers=int(layers), cnn_blocks=int(layers), **MODEL_SIZES[size])
        )
        config = run_config(
            schedule=custom.name if use_custom else name,
            num_ranks=custom.num_ranks if use_custom else int(ranks),
            num_microbatches=custom.num_microbatches if use_custom else int(microbatches),
            num_virtual_stages=None
            if use_custom
            else options_for(name, num_virtual_stages=int(chunks)).get("num_virtual_stages"),
            model=model,
            data_parallel=int(replicas),
            dtype=dtype,
            batch_size=int(batch),
            steps=int(steps),
            warmup_steps=int(warmup),
            recompute=recompute,
            device=device,
            backend=backend,
            profile=profile,
            reference=reference,
            timeout_s=float(timeout),
        )
        with st.spinner("Checking the run and starting torchrun…"):
            handle = launch.start_run(config, state.runs_root(), schedule=custom if use_custom else None)
    except ValueError as error:  # refused before anything started: nothing is lost
        widgets.show_error(error, "Cannot start the run")
    else:
        st.session_state["run_handle"] = handle
        st.session_state["selected_run"] = None
        live_runs.remember(handle)
        st.rerun()  # redraw with the launch button disabled and the live view polling


@st.fragment(run_every=1.0 if running else None)
def live_run() -> None:
    """Polls the RunHandle kept in session state; on completion the whole page reruns to show the result."""
    current = st.session_state["run_handle"]
    if current is None:
        return
    if current.done():
        st.session_state["run_handle"] = None
        st.session_state["selected_run"] = str(current.run_dir)
        st.rerun()
    events = current.events()
    steps_seen = [e for e in events if e.get("event") == "step"]
    last = steps_seen[-1] if steps_seen else (events[-1] if events else {})
    text = f"{current.run_dir.name}: {last.get('event', 'starting')}"
    if last.get("event") == "step":
        text += f" {last.get('step', 0) + 1}/{last.get('steps', '?')} ({last.get('phase', 'run')})"
    st.progress(float(current.progress), text=text)
    st.code(readable_log(current.log_tail(200), 30) or "(waiting for the first output)", language=None, height=300)
    st.download_button(
        "Raw log",
        data=lambda: current.log_tail(2000),
        file_name=f"{current.run_dir.name}-log.txt",
        mime="text/plain",
        key="run-raw-log",
        icon=":material/download:",
        on_click="ignore",
    )
    if st.button("Cancel run", icon=":material/stop_circle:", key="run-cancel", type="secondary"):
        with st.spinner("Ending every process of the run…"):
            current.cancel()
        st.rerun()


if st.session_state["run_handle"] is not None:
    st.subheader("Running")
    live_run()


def show_result(result) -> None:
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
        _reference(result)
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


def _reference(result) -> None:
    ref = result.reference
    losses = {"pipesim executor": result.losses}
    if ref is None:
        if result.config is not None and result.config.reference:
            st.info("No torch.distributed.pipelining reference was written.")
    elif ref.get("error"):
        st.warning(f"torch.distributed.pipelining reference unavailable: {ref['error']}")
    else:
        st.markdown(f"**torch.distributed.pipelining reference** ({ref.get('torch_schedule') or 'its schedule'})")
        times = ref.get("step_times_ms") or []
        ours = result.step_times_ms
        table = pd.DataFrame(
            {
                "": ["median step (ms)", "steps"],
                "pipesim executor": [float(pd.Series(ours).median()) if ours else None, len(ours)],
                "torch reference": [float(pd.Series(times).median()) if times else None, len(times)],
            }
        )
        st.dataframe(table, hide_index=True, width="stretch")
        losses["torch reference"] = ref.get("losses") or []
    if any(losses.values()):
        width = max(len(v) for v in losses.values())
        frame = pd.DataFrame({k: list(v) + [None] * (width - len(v)) for k, v in losses.items() if v})
        st.markdown("**Loss per step**")
        st.line_chart(frame, height=220)


def _log_files(result) -> None:
    logs = sorted((result.run_dir / "logs").glob("*.log")) if (result.run_dir / "logs").is_dir() else []
    if not logs:
        return
    with st.expander("Logs"):
        for path in logs:
            lines = path.read_text(errors="replace").splitlines()[-40:]
            st.markdown(f"`{path.name}`")
            st.code("\n".join(lines) or "(empty)", language=None)


if st.session_state["selected_run"]:
    try:
        show_result(run_folder.load_run(st.session_state["selected_run"]))
    except ValueError as error:
        widgets.show_error(error, "Cannot open the run")

trace_import.show_import(
    run_folder.profiler_trace_sets(st.session_state["selected_run"]) if st.session_state["selected_run"] else {}
)
st.divider()
st.subheader("Earlier runs")
runs = runs.run_list(str(state.runs_root()))
if not runs:
    st.caption(f"No runs yet under {state.runs_root()}/.")
else:
    st.dataframe(
        pd.DataFrame(runs),
        hide_index=True,
        width="stretch",
        column_config={
            "started": st.column_config.DatetimeColumn("started", format="YYYY-MM-DD HH:mm:ss"),
            "error": st.column_config.NumberColumn("prediction error", format="percent"),
        },
    )
    with st.form("run-open"):
        chosen = st.selectbox("Open a run", [r["folder"] for r in runs], key="run-open-pick")
        if st.form_submit_button("Open"):
            live = live_runs.running(state.runs_root(), str(state.runs_root() / chosen))
            if live is not None:  # still going: follow it live, with Cancel, rather than a half-written folder
                st.session_state["run_handle"] = live
            else:
                st.session_state["selected_run"] = str(state.runs_root() / chosen)
            st.rerun()
