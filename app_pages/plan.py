"""Plan: which schedule, microbatch size, chunks and recomputation for this model on these devices, under a cap.

The search, the memory model and the balancing are pipesim's (pipesim.plan); a real check of the top candidates
is the executor's (pipesim_executor.host.verify, through app_pages.parts.plan.verify), run as separate processes. Every
setting is in the URL; presets fill the form with a small model that runs here, a 7B-class and a 70B-class one.
"""

import json
import time

import pandas as pd
import streamlit as st

from app_pages.parts import cached, guide, plot, state, widgets
from app_pages.parts.plan import model as plan_model
from app_pages.parts.plan import presets as plan_presets
from app_pages.parts.plan import profile as plan_profile
from app_pages.parts.plan import sensitivity as plan_sensitivity
from app_pages.parts.plan import verify as plan_verify
from app_pages.parts.schedule_knobs import HOST_GBPS
from pipesim.api import balance
from pipesim.charts import plan as charts_plan
from pipesim.cost import OPTIMIZERS, LinkCost, ModelDescription, format_split_points
from pipesim.form_fields import form_fields
from pipesim.io import schedule_to_csv, write_json
from pipesim.plan import (
    OFFLOAD_CHOICES,
    SYNTHESIZED,
    PlanSpace,
    best_candidate,
    interval_of,
    interval_text,
    machine_launch_spread,
    measured_by,
    pareto_front,
    plan_document,
    plan_families,
    ranked,
    summary_lines,
    torchtitan_settings,
)
from pipesim.programs import programs
from pipesim.schedules import names_taking_chunks, planned_schedule_names, schedule_names
from pipesim.sim import rank_memory
from pipesim.units import format_bytes, format_ms, quantity

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
    "m32x1 = 32 microbatches of 1 sample each, then 'recompute' and the W share where they apply, and "
    "'extrapolated' for a microbatch size a profile did not measure (drawn as a cross). A bar is a predicted "
    "step's 90% interval."
)
URL = state.URL


# The form's model when the page opens (a mid-size model on a mid-range device); other fields: the dataclass's.
FORM_DEFAULTS = {
    "num_layers": 8,
    "hidden_size": 1024,
    "ffn_size": 4096,
    "seq_len": 1024,
    "vocab_size": 32000,
    "device_tflops": 200.0,
}


def _kept(key: str) -> str:
    return state.kept(key)


plan_model.restore_preset()  # a link naming a preset opens with its model
with st.sidebar:
    st.selectbox(
        "Preset",
        [plan_presets.CUSTOM, *plan_presets.PRESETS],
        key=_kept("plan-preset"),
        bind=URL,
        on_change=plan_presets.apply_preset,
        help="Fills the form: a small model the executor trains here in seconds (Verify runs it), or the shape "
        "of a 7B-class or 70B-class model on the devices it is usually planned for",
    )
    calibrate_from = plan_model.calibration_picker()
    profile = plan_profile.profile_picker()
with st.sidebar, st.form("plan-form"):
    st.markdown(
        "**Model** (decoder-only Transformer; the fields are `pipesim plan`'s flags)"
        + ("; not used: the profile is the model" if profile is not None else "")
    )
    columns = st.columns(2)
    model_values = {}
    for i, spec in enumerate(form_fields(ModelDescription)):  # generated from the dataclass, as the CLI's flags
        default = FORM_DEFAULTS.get(spec.name, spec.default)
        where, key = columns[i % 2], _kept(f"plan-{spec.flag}")
        if spec.choices:
            index = spec.choices.index(default)
            value = where.selectbox(
                spec.flag, spec.choices, index=index, key=key, bind=URL, help=spec.help, disabled=profile is not None
            )
        else:
            value = where.number_input(
                spec.flag, value=default, key=key, bind=URL, help=spec.help, disabled=profile is not None
            )
        model_values[spec.name] = spec.kind(value)
    st.markdown("**Devices and batch**")
    left, right = st.columns(2)
    devices = left.number_input("Devices", 1, state.MAX_RANKS, 4, key=_kept("plan-devices"), bind=URL)
    batch = right.number_input("Global batch", 1, 4096, 32, key=_kept("plan-batch"), bind=URL)
    cap_gib = left.number_input(
        "Memory cap (GiB)", 0.0, 4096.0, 40.0, key=_kept("plan-cap"), bind=URL, help="Per device; 0: no cap"
    )
    optimizer = right.selectbox(
        "Optimizer", OPTIMIZERS, index=OPTIMIZERS.index("adam"), key=_kept("plan-optimizer"), bind=URL
    )
    offload = left.selectbox(
        "Activation offload",
        OFFLOAD_CHOICES,
        key=_kept("plan-offload"),
        bind=URL,
        help="auto: tried on a candidate over the memory cap, where Host GB/s prices it; selective or full: tried on "
        "every candidate; none: never (`pipesim plan --offload`)",
    )
    host_gbps = right.number_input(
        "Host GB/s",
        0.0,
        1e5,
        0.0,
        key=_kept(HOST_GBPS),
        bind=URL,
        help="Bandwidth to host memory that prices each OFFLOAD and RELOAD (0: free, and auto then tries no offload; "
        "the same field as Simulate's knob)",
    )
    st.markdown("**Search**")
    names = st.multiselect(
        "Schedules",
        [*schedule_names(), SYNTHESIZED],
        default=list(planned_schedule_names()),
        key=_kept("plan-schedules"),
        bind=URL,
        help=f"{SYNTHESIZED}: an order synthesized for each shape from its own costs, within the budget below",
    )
    synth_budget = st.number_input(
        "Synthesis budget (s)", 0.5, 600.0, 10.0, key=_kept("plan-synth-budget"), bind=URL, help=f"with {SYNTHESIZED}"
    )
    sizes_text = st.text_input("Microbatch sizes", "1,2,4", key=_kept("plan-mbs"), bind=URL)
    extrapolate = st.checkbox(
        "Extrapolate (--extrapolate)",
        key=_kept("plan-extrapolate"),
        bind=URL,
        disabled=profile is None,
        help="with a profile: also plan microbatch sizes it did not measure, off its fit, each marked "
        "'extrapolated' with a wider interval and recommended only when no measured size fits",
    )
    chunks_text = st.text_input(
        "Chunks per rank", "2", key=_kept("plan-chunks"), bind=URL, help=f"for {', '.join(names_taking_chunks())}"
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
    jitter_pct = st.number_input(
        "Action time spread (CV %)",
        0.0,
        100.0,
        10.0,
        key=_kept("plan-jitter"),
        bind=URL,
        help="how much each action's time varies from step to step; each candidate that can win is sampled 200 "
        "times: its step is the median of the samples and its bar the 90% interval (0: no interval). A profile "
        "brings its own measured spread",
        disabled=profile is not None,
    )
    st.form_submit_button("Plan", type="primary", width="stretch")

try:
    description = ModelDescription(**model_values)
    cap = float(cap_gib) * 2**30 or None
    host_link = LinkCost(bandwidth_gbps=float(host_gbps)) if host_gbps else LinkCost()
    common = dict(
        devices=int(devices), global_batch=int(batch), memory_cap_bytes=cap, optimizer=optimizer, host_link=host_link
    )
    if profile is not None:  # measured already: a calibration run is not used
        inputs, calibrated_from = plan_profile.plan_inputs(profile, **common)
    else:
        inputs, calibrated_from = plan_model.plan_inputs(description, calibrate_from, **common)
    shares = plan_model.number_list(shares_text, float, "W shares") if shares_text.strip() else (None,)
    families, with_synthesized = plan_families(tuple(names))
    space = PlanSpace(
        schedules=families,
        microbatch_sizes=plan_model.number_list(sizes_text, int, "Microbatch sizes"),
        extrapolate=bool(extrapolate) and profile is not None,
        chunks=plan_model.number_list(chunks_text, int, "Chunks per rank"),
        recompute={"off": (False,), "on": (True,)}.get(recompute or "both", (False, True)),
        w_shares=shares,
        offload=str(offload),
    )
    budget = float(synth_budget) if with_synthesized else None
    launches, launches_line = machine_launch_spread(inputs.profile)  # read afresh: a verification may have added
    measurement = measured_by("auto", launches)
    candidates, synthesized = cached.plan(inputs, space, float(jitter_pct) / 100 or None, budget, launches)
except ValueError as error:
    widgets.show_error(error, "Cannot plan")
    st.stop()

front, best = pareto_front(candidates), best_candidate(candidates)
order = ranked(candidates)
lines = summary_lines(candidates, cap, interval_of=interval_of(measurement))
if launches_line:
    lines.insert(1, launches_line)
if offload == "auto" and cap is not None and not host_gbps and any(c.built and not c.fits for c in candidates):
    lines.insert(1, "offload not tried: no host bandwidth priced (set Host GB/s, or pick selective or full)")
st.markdown("\n".join(f"- {line.strip()}" for line in lines))
if profile is not None:
    plan_profile.describe(profile, inputs.calibration())
else:
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
            "90% interval": interval_text(c) if c.step_ms_p05 is not None else "",
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

schedule, cost = cached.plan_candidate(inputs, selected, synthesized.get(selected.label))
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
settings = torchtitan_settings(selected, csv_name, None if profile is not None else description.num_layers)
columns = st.columns(3)
columns[0].download_button(
    "Schedule CSV (torch compute_only)",
    data=schedule_to_csv(schedule),
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
    **({} if profile is not None else {"model": vars(description)}),
    **calibrated_from,
    "interval_of": interval_of(measurement),
    **({} if launches is None else {"launch_spread": {**launches.to_dict(), "between": launches.between}}),
}
document = plan_document(candidates, recorded, cap)
document["calibration"] = inputs.calibration()  # what verify's tie rule and each run's prediction rest on
verdict = None if profile is None else plan_profile.disturbance(profile)
if verdict is not None:  # as `plan --cost` marks it: Verify then says the plan rests on a disturbed profile
    document["calibration"]["disturbance"] = verdict
columns[2].download_button(
    "Plan JSON",
    data=lambda: json.dumps(document, indent=1),
    file_name="plan.json",
    mime="application/json",
    on_click="ignore",
    key="plan-json",
)

plan_sensitivity.show(inputs, candidates, synthesized)  # each family's growth with one slower device

with st.expander("Balance stages on their own"):
    st.caption(
        "Each layer's (unit's) forward + backward time in ms, comma-separated (with recomputation, its forward "
        "twice: the planner's weighting); the split that makes the slowest stage fastest, as "
        f"`{programs().executor} run --split-points` takes it."
    )
    left, right = st.columns([3, 1])
    layer_text = left.text_input("Layer times (ms)", "1,4,4,4,4,6", key=_kept("plan-balance-layers"), bind=URL)
    stage_count = right.number_input("Stages", 1, 512, 2, key=_kept("plan-balance-stages"), bind=URL)
    try:
        balanced = balance(plan_model.number_list(layer_text, float, "Layer times"), int(stage_count))
        st.code(f"--split-points {format_split_points(balanced.split_points)}", language=None)
        st.caption(
            f"Per-stage times {', '.join(format_ms(c) for c in balanced.stage_costs)}; slowest "
            f"{format_ms(balanced.bottleneck)}, {balanced.imbalance:.2f}x the mean."
        )
    except ValueError as error:
        widgets.show_error(error, "Cannot balance")

st.subheader("Verify for real")
st.caption(
    "Runs the top K candidates with the executor on this machine (CPU here, a GPU where there is one) in "
    "interleaved rounds (A B C, A B C, ...: the machine's drift hits all alike), and compares predicted with "
    "measured step times. Use a small model (the 'small' preset): every run trains it. Each verification runs "
    "afresh, in new run folders (Run page, earlier runs)."
)
sig = state.signature(cached.inputs_key(inputs), hash(space))
job = plan_verify.job_for(sig)
going = job is not None and not job.done()
left, middle, right = st.columns(3)
top = left.number_input("Top K", 1, 10, 2, key=_kept("plan-top"), bind=URL, disabled=going)
steps = middle.number_input("Steps per run", 1, 50, 3, key=_kept("plan-steps"), bind=URL, disabled=going)
rounds = right.number_input("Rounds", 1, 10, 3, key=_kept("plan-rounds"), bind=URL, disabled=going)
if st.button("Verify the top candidates", key="plan-verify", icon=":material/play_circle:", disabled=going):
    # A file of its own for each verification: its run folders (named after it) are new every time.
    path = state.plans_root() / f"plan-{sig}-{time.strftime('%Y%m%d-%H%M%S')}-{time.time_ns() % 10**6:06d}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(document, path)
    except (ValueError, OSError) as error:
        widgets.show_error(error, "Cannot verify")
    else:
        job = plan_verify.start(path, sig, int(top), int(steps), state.runs_root(), int(rounds))
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
        ran = f"{len(result.rows)} of {job.settings.top}"
        st.info(f"Verification cancelled after {ran} candidates.", icon=":material/cancel:")
    plan_model.notice(inputs.calibration(), description, verifying=True)
    plan_verify.show_result(result)


verification(job)
