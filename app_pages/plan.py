"""Plan: which schedule, microbatch size, chunks and recomputation for this model on these devices, under a cap.

The search, the memory model and the balancing are pipesim's (pipesim.plan); a real check of the top candidates
is the executor's (pipesim_executor.host.verify, through app_pages.plan_verify), run as separate processes. Every
setting is in the URL; presets fill the form with a small model that runs here, a 7B-class and a 70B-class one.
"""

import json
import time

import pandas as pd
import streamlit as st

from app_pages import cached, guide, plan_model, plan_presets, plan_verify, plot, state, widgets
from pipesim.charts import plan as charts_plan
from pipesim.cost.balance import balance, format_split_points
from pipesim.cost.description import DTYPE_BYTES, ModelDescription
from pipesim.io import formats
from pipesim.plan.report import best_candidate, pareto_front, plan_document, ranked, summary_lines, torchtitan_settings
from pipesim.plan.search import PlanSpace
from pipesim.schedules import schedule_names
from pipesim.sim.memory import rank_memory
from pipesim.units import format_bytes, format_ms, format_percent, quantity

state.init_state()
st.title("Plan a pipeline")
guide.tour_banner("plan")
st.caption(
    "Searches schedules, microbatch sizes, chunks per rank, recomputation and W shares for one model on "
    "your devices; each candidate is simulated exactly with balanced stages and its full memory "
    "(parameters, gradients, optimizer state, stashed activations). Verify runs the top ones for real."
)
LABELS = (
    "A candidate's name reads: schedule, P = pipeline ranks (devices in the pipeline), v = chunks per rank, "
    "m32x1 = 32 microbatches of 1 sample each, then 'recompute' and the W share where they apply."
)
URL = state.URL


def _numbers(text: str, kind: type, label: str) -> tuple:
    try:
        values = tuple(kind(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise ValueError(f"{label}: expected comma-separated numbers, got {text!r}") from None
    if not values:
        raise ValueError(f"{label}: give at least one value")
    return values


def _apply_preset() -> None:
    """The preset's values into the form's fields (a callback: before the form is drawn)."""
    values = plan_presets.PRESETS.get(st.session_state.get("plan-preset"))
    if values is not None:
        for key, value in values.items():
            st.session_state[key] = value


def _kept(key: str) -> str:
    return state.kept(key)


plan_model.restore_preset()  # a link naming a preset opens with its model (issue 33 item 6)
with st.sidebar:
    st.selectbox(
        "Preset",
        [plan_presets.CUSTOM, *plan_presets.PRESETS],
        key=_kept("plan-preset"),
        bind=URL,
        on_change=_apply_preset,
        help="Fills the form: a small model the executor trains here in seconds (Verify runs it), or the shape "
        "of a 7B-class or 70B-class model on the devices it is usually planned for",
    )
    calibrate_from = plan_model.calibration_picker()
with st.sidebar, st.form("plan-form"):
    st.markdown("**Model** (decoder-only Transformer)")
    left, right = st.columns(2)
    layers = left.number_input("Layers", 1, 512, 8, key=_kept("plan-layers"), bind=URL)
    hidden = right.number_input("Hidden size", 8, 65536, 1024, step=64, key=_kept("plan-hidden"), bind=URL)
    ffn = left.number_input("FFN size", 8, 262144, 4096, step=64, key=_kept("plan-ffn"), bind=URL)
    heads = right.number_input("Heads", 1, 512, 16, key=_kept("plan-heads"), bind=URL)
    seq_len = left.number_input("Sequence length", 1, 1 << 20, 1024, key=_kept("plan-seq"), bind=URL)
    vocab = right.number_input("Vocabulary", 1, 1 << 22, 32000, key=_kept("plan-vocab"), bind=URL)
    dtype = left.selectbox(
        "dtype", list(DTYPE_BYTES), index=list(DTYPE_BYTES).index("bf16"), key=_kept("plan-dtype"), bind=URL
    )
    tflops = right.number_input("Achieved TFLOP/s", 0.001, 10000.0, 200.0, key=_kept("plan-tflops"), bind=URL)
    st.markdown("**Devices and batch**")
    left, right = st.columns(2)
    devices = left.number_input("Devices", 1, state.MAX_RANKS, 4, key=_kept("plan-devices"), bind=URL)
    batch = right.number_input("Global batch", 1, 4096, 32, key=_kept("plan-batch"), bind=URL)
    cap_gib = left.number_input(
        "Memory cap (GiB)", 0.0, 4096.0, 40.0, key=_kept("plan-cap"), bind=URL, help="Per device; 0: no cap"
    )
    optimizer = right.selectbox("Optimizer", ["adam", "sgd-momentum", "sgd"], key=_kept("plan-optimizer"), bind=URL)
    st.markdown("**Search**")
    names = st.multiselect(
        "Schedules",
        schedule_names(),
        default=["1f1b", "interleaved-1f1b", "zb-h1", "zbv"],
        key=_kept("plan-schedules"),
        bind=URL,
    )
    sizes_text = st.text_input("Microbatch sizes", "1,2,4", key=_kept("plan-mbs"), bind=URL)
    chunks_text = st.text_input(
        "Chunks per rank", "2", key=_kept("plan-chunks"), bind=URL, help="for interleaved-1f1b, looped-bfs"
    )
    recompute = st.segmented_control(
        "Recompute", ["off", "on", "both"], default="both", key=_kept("plan-recompute"), bind=URL
    )
    shares_text = st.text_input(
        "W shares (fractions of B)",
        "",
        key=_kept("plan-shares"),
        bind=URL,
        help="The weight part of the backward as a fraction of B (no unit), e.g. 0.4,0.5; empty: the model's own "
        "(half). The Simulate page's W field is the same part in ms",
    )
    st.form_submit_button("Plan", type="primary", width="stretch")

try:
    description = ModelDescription(
        num_layers=int(layers),
        hidden_size=int(hidden),
        ffn_size=int(ffn),
        num_heads=int(heads),
        seq_len=int(seq_len),
        vocab_size=int(vocab),
        dtype=dtype,
        device_tflops=float(tflops),
    )
    cap = float(cap_gib) * 2**30 or None
    inputs, calibrated_from = plan_model.plan_inputs(
        description,
        calibrate_from,
        devices=int(devices),
        global_batch=int(batch),
        memory_cap_bytes=cap,
        optimizer=optimizer,
    )
    shares = _numbers(shares_text, float, "W shares") if shares_text.strip() else (None,)
    space = PlanSpace(
        schedules=tuple(names),
        microbatch_sizes=_numbers(sizes_text, int, "Microbatch sizes"),
        chunks=_numbers(chunks_text, int, "Chunks per rank"),
        recompute={"off": (False,), "on": (True,)}.get(recompute or "both", (False, True)),
        w_shares=shares,
    )
    candidates = cached.plan(inputs, space)
except ValueError as error:
    widgets.show_error(error, "Cannot plan")
    st.stop()

front, best = pareto_front(candidates), best_candidate(candidates)
order = ranked(candidates)
lines = summary_lines(candidates, cap)
st.markdown("\n".join(f"- {line.strip()}" for line in lines))
plan_model.notice(inputs.calibration(), description)
st.caption(LABELS)
failed = [c for c in candidates if c.error is not None]
if failed:
    with st.expander(f"{len(failed)} candidates cannot be built"):
        st.dataframe(pd.DataFrame([{"candidate": c.label, "why": c.error} for c in failed]), hide_index=True)
if not order:
    st.stop()

labels = [c.label for c in order]
selected_label = st.selectbox(
    "Candidate",
    labels,
    index=0,
    key=_kept("plan-selected"),
    bind=URL,
    help="Fitting candidates fastest first; the first is the recommendation. " + LABELS,
)
selected = order[labels.index(selected_label)]
figure = charts_plan.pareto_figure(candidates, front, best, cap, selected)
plot.show(figure, "plan-pareto")

on_front = {id(c) for c in front}
table = pd.DataFrame(
    [
        {
            "candidate": c.label,
            "step": c.step_ms,
            "samples/s": c.throughput,
            "peak memory": format_bytes(c.peak_memory_bytes),
            "fits": c.fits,
            "Pareto": id(c) in on_front,
            "bubble": 100 * c.bubble_fraction,
            "imbalance": c.imbalance,
            "split": ",".join(map(str, c.split)),
        }
        for c in order
    ]
)
st.dataframe(
    table,
    hide_index=True,
    key="plan-table",
    height=260,
    column_config={
        "step": widgets.time_column("step_time"),
        "samples/s": st.column_config.NumberColumn(
            quantity("throughput").heading, format="%.1f", help=quantity("throughput").meaning
        ),
        "bubble": widgets.percent_column("bubble_fraction"),
        "imbalance": widgets.ratio_column("imbalance"),
        "peak memory": st.column_config.TextColumn(quantity("peak_memory").name, help=quantity("peak_memory").meaning),
    },
)

schedule, cost = cached.plan_candidate(inputs, selected)
st.subheader(selected.label)
st.caption(
    f"Split points (executor --split-points): {','.join(map(str, selected.split)) or '-'}; fullest device "
    f"{format_bytes(selected.peak_memory_bytes)} (parameters, gradients and {optimizer} state included)."
)
plot.show(cached.gantt_chart(schedule, cost), "plan-gantt")
plot.show(cached.memory_chart(schedule, cost), "plan-memory")
parts = charts_plan.memory_parts_figure(
    rank_memory(schedule, cost, optimizer), cap, f"{selected.label}: memory per rank at its peak"
)
plot.show(parts, "plan-memory-parts")

csv_name = f"{schedule.name}-p{selected.ranks}-m{selected.microbatches}.csv"
settings = torchtitan_settings(selected, csv_name, description.num_layers)
columns = st.columns(3)
columns[0].download_button(
    "Schedule CSV (torch compute_only)",
    data=formats.schedule_to_csv(schedule),
    file_name=csv_name,
    mime="text/csv",
    on_click="ignore",
    key="plan-csv",
)
columns[1].download_button(
    "torchtitan settings (JSON)",
    data=json.dumps(settings, indent=1),
    file_name="torchtitan-pipeline.json",
    mime="application/json",
    on_click="ignore",
    key="plan-titan",
)
recorded = {
    "devices": int(devices),
    "global_batch": int(batch),
    "memory_cap_bytes": cap,
    "optimizer": optimizer,
    "model": vars(description),
    **calibrated_from,
}
document = plan_document(candidates, recorded, cap)
document["calibration"] = inputs.calibration()  # what verify's tie rule and each run's prediction rest on
columns[2].download_button(
    "Plan JSON",
    data=lambda: json.dumps(document, indent=1),
    file_name="plan.json",
    mime="application/json",
    on_click="ignore",
    key="plan-json",
)

with st.expander("Balance stages on their own"):
    st.caption(
        "Per-layer (unit) times in ms, comma-separated; the split that makes the slowest stage fastest, as "
        "`executor run --split-points` takes it."
    )
    left, right = st.columns([3, 1])
    layer_text = left.text_input("Layer times (ms)", "1,4,4,4,4,6", key=_kept("plan-balance-layers"), bind=URL)
    stage_count = right.number_input("Stages", 1, 512, 2, key=_kept("plan-balance-stages"), bind=URL)
    try:
        balanced = balance(_numbers(layer_text, float, "Layer times"), int(stage_count))
        st.code(f"--split-points {format_split_points(balanced.split_points)}", language=None)
        st.caption(
            f"Per-stage times {', '.join(format_ms(c) for c in balanced.stage_costs)}; slowest "
            f"{format_ms(balanced.bottleneck)}, {balanced.imbalance:.2f}x the mean."
        )
    except ValueError as error:
        widgets.show_error(error, "Cannot balance")

st.subheader("Verify for real")
st.caption(
    "Runs the top K candidates one after another with the executor on this machine (CPU here, a GPU where "
    "there is one), and compares predicted with measured step times. Use a small model (the 'small' preset): "
    "every run trains it. Each verification runs afresh, in new run folders (Run page, earlier runs)."
)
sig = state.signature(hash(inputs), hash(space))
job = plan_verify.job_for(sig)
going = job is not None and not job.done()
left, right = st.columns(2)
top = left.number_input("Top K", 1, 10, 2, key=_kept("plan-top"), bind=URL, disabled=going)
steps = right.number_input("Steps per run", 1, 50, 3, key=_kept("plan-steps"), bind=URL, disabled=going)
if st.button("Verify the top candidates", key="plan-verify", icon=":material/play_circle:", disabled=going):
    # A file of its own for each verification: its run folders (named after it) are new every time.
    path = state.plans_root() / f"plan-{sig}-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10**6:06d}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        formats.write_json(document, path)
    except (ValueError, OSError) as error:
        widgets.show_error(error, "Cannot verify")
    else:
        job = plan_verify.start(path, sig, int(top), int(steps), state.runs_root())
        st.rerun()


@st.fragment(run_every=1.0 if going else None)
def verification(job: plan_verify.VerifyJob | None) -> None:
    """Progress and Cancel while the candidates run (redrawn every second, this part only), then the comparison."""
    if job is None:
        return
    if not job.done():
        share, text = job.progress()
        st.progress(share, text=f"Verifying: {text}" + (" (cancelling)" if job.cancelled.is_set() else ""))
        if st.button("Cancel verification", key="plan-verify-cancel", icon=":material/stop_circle:"):
            with st.spinner("Cancelling the run going now…"):
                job.cancel()
        return
    if st.session_state.get("plan-verify-shown") != id(job):  # it just ended: the whole page again (buttons)
        st.session_state["plan-verify-shown"] = id(job)
        st.rerun()
    if job.error is not None:
        widgets.show_error(ValueError(job.error), "Cannot verify")
        return
    result = job.result
    if job.cancelled.is_set():
        st.info(f"Verification cancelled after {len(result.rows)} of {job.top} candidates.", icon=":material/cancel:")
    plan_model.notice(inputs.calibration(), description, verifying=True)
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "candidate": r.label,
                    "predicted": r.predicted_ms,
                    "measured": r.measured_ms,
                    "error": None if r.measured_ms is None else 100 * (r.predicted_ms / r.measured_ms - 1),
                    # the Run page's flag for the same run: step times' CV above pipesim's NOISY_STEP_CV
                    "noise": plan_verify.noise_flag(r.measured_cv),
                    "run": (r.run_dir or "").rsplit("/", 1)[-1],
                    "why not measured": r.error or "",
                }
                for r in result.rows
            ]
        ),
        hide_index=True,
        column_config={
            "predicted": widgets.time_column("predicted_step"),
            "measured": widgets.time_column("measured_step"),
            "error": widgets.percent_column("prediction_error", signed=True),
        },
    )
    cards = st.columns(2)
    if plan_verify.predictions_tie(result):
        cards[0].metric(
            "Planner's order",
            "indistinguishable",
            help="The planner predicts these candidates within "
            f"{format_percent(plan_verify.PREDICTION_TIE)} of each other: they are a tie, so no rank correlation "
            "is computed on their noise.",
        )
    else:
        cards[0].metric(
            "Rank correlation (Spearman)",
            "n/a" if result.spearman is None else f"{result.spearman:+.2f}",
            help="Whether the planner orders the candidates as the machine does: +1.00 the same order",
        )
    cards[1].metric(
        "Recommended vs measured best",
        format_percent(result.recommended_gap, signed=True),
        help=f"How much slower the recommended candidate measured than the fastest measured one "
        f"({result.measured_best or 'none measured'})",
    )
    for note in result.notes:
        st.caption(note)


verification(job)
